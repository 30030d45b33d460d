"""The reference retrieval workload (``shared/bench/reference-workload.md``), ported exactly.

One ``mulberry32(12345)`` stream consumed in the documented order. mulberry32's state
after ``k`` draws is ``seed + k * 0x6D2B79F5 (mod 2**32)`` and each output depends only on
that state, so a block of draws (a 384-d Gaussian vector is 768 draws) is computed with
numpy in one go; the sequence is bit-for-bit the scalar algorithm's
(``tests/retrieval/test_reference_workload.py`` checks the port's reference values).
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np

from cycgraph_memory.records import Entity, Provenance, Relationship, SemanticFact, Theme

DIM = 384
SEED = 12345
TAGS = ["lesson", *(f"graph:g{i}" for i in range(19))]
ENTITY_TYPES = ["person", "organization", "project", "tool"]
RELATION_TYPES = ["works_at", "manages", "depends_on", "uses", "collaborates_with"]
BASE = datetime(2025, 1, 1, tzinfo=UTC)
EXPIRED_UNTIL = datetime(2025, 6, 1, tzinfo=UTC)
REL_BASE = datetime(2024, 1, 1, tzinfo=UTC)
_M = 0xFFFFFFFF
_INC = 0x6D2B79F5


def uuid_for(kind: int, i: int) -> uuid.UUID:
    """``f"{kind:08x}-0000-4000-8000-{i:012x}"``."""
    return uuid.UUID(f"{kind:08x}-0000-4000-8000-{i:012x}")


def _mix(a: np.ndarray) -> np.ndarray:
    """mulberry32's output function of the state(s) ``a`` (uint64 holding uint32)."""
    t = ((a ^ (a >> 15)) * (a | 1)) & _M
    t = ((t + (((t ^ (t >> 7)) * (t | 61)) & _M)) & _M) ^ t
    return ((t ^ (t >> 14)) & _M).astype(np.float64) / 4294967296.0


class Mulberry32:
    """mulberry32 with vectorised block draws (same sequence as the scalar algorithm)."""

    def __init__(self, seed: int) -> None:
        self.state = seed & _M

    def __call__(self) -> float:
        """One draw in [0, 1)."""
        self.state = (self.state + _INC) & _M
        return float(_mix(np.array([self.state], dtype=np.uint64))[0])

    def block(self, n: int) -> np.ndarray:
        """The next ``n`` draws."""
        k = np.arange(1, n + 1, dtype=np.uint64)
        states = (np.uint64(self.state) + k * np.uint64(_INC)) & np.uint64(_M)
        self.state = int(states[-1])
        return _mix(states)

    def gaussian(self) -> float:
        """Box-Muller with ``u`` redrawn while 0."""
        u = self()
        while u == 0:
            u = self()
        v = self()
        return math.sqrt(-2 * math.log(u)) * math.cos(2 * math.pi * v)

    def gauss_vec(self, n: int = DIM) -> np.ndarray:
        """``n`` successive gaussians (vectorised unless a ``u == 0`` needs a redraw)."""
        start = self.state
        draws = self.block(2 * n)
        u, v = draws[0::2].tolist(), draws[1::2].tolist()
        if 0.0 in u:  # pragma: no cover - probability ~2e-7 per vector
            self.state = start
            return np.array([self.gaussian() for _ in range(n)])
        # Scalar libm calls, like the reference (numpy's vectorised log/cos differ from
        # them in the last bit for ~0.2% of values).
        log, sqrt, cos, two_pi = math.log, math.sqrt, math.cos, 2 * math.pi
        return np.array([sqrt(-2 * log(a)) * cos(two_pi * b) for a, b in zip(u, v, strict=True)])

    def pick_two(self, n: int) -> tuple[int, int]:
        """Two distinct indices below ``n`` (two draws)."""
        a = math.floor(self() * n)
        b = math.floor(self() * (n - 1))
        if b >= a:
            b += 1
        return a, b


def _normalize(v: np.ndarray) -> np.ndarray:
    # Sequential sum of squares (np.add.accumulate), like the reference's loop; a BLAS
    # dot product would round differently.
    out: np.ndarray = v / math.sqrt(float(np.add.accumulate(v * v)[-1]))
    return out


@dataclass
class Workload:
    """Records and queries of one workload size."""

    n: int
    entities: list[Entity] = field(default_factory=list)
    themes: list[Theme] = field(default_factory=list)
    facts: list[SemanticFact] = field(default_factory=list)
    relationships: list[Relationship] = field(default_factory=list)
    embedding_queries: list[tuple[list[float], int]] = field(default_factory=list)
    entity_queries: list[tuple[uuid.UUID, uuid.UUID]] = field(default_factory=list)
    fact_embeddings: np.ndarray | None = None
    raw: list[tuple[int, int, list[str]]] = field(default_factory=list)
    t_count: int = 0
    expired: int = 0


def fact_id(i: int) -> uuid.UUID:
    """Id of fact ``i``."""
    return uuid_for(3, i)


def build_facts(w: Workload, start: int, stop: int) -> list[SemanticFact]:
    """The ``SemanticFact`` records of facts ``start..stop-1`` (built on demand in batches,
    so a large workload never holds every fact as Python objects twice)."""
    assert w.fact_embeddings is not None
    prov = Provenance(source="system", created_at=BASE)
    emb_lists = w.fact_embeddings[start:stop].tolist()
    out = []
    for k, i in enumerate(range(start, stop)):
        ea, eb, tags = w.raw[i]
        t = i % w.t_count
        out.append(SemanticFact(
            id=uuid_for(3, i),
            content=f"Fact {i} in theme {t}: entity-{ea} relates to entity-{eb}.",
            entity_ids=[uuid_for(1, ea), uuid_for(1, eb)],
            theme_id=uuid_for(4, t),
            embedding=emb_lists[k],
            provenance=prov,
            valid_from=BASE + timedelta(minutes=i),
            tags=list(tags),
        ))
    return out


def generate(n: int, *, records: bool = True) -> Workload:
    """Generate the workload for ``N = n`` facts.

    ``records=False`` leaves ``facts`` empty: build them in batches with
    :func:`build_facts` (entities, themes and relationships are always built).
    """
    rng = Mulberry32(SEED)
    t_count = max(1, n // 100)
    e_count = n // 10
    r_count = n // 5
    prov = Provenance(source="system", created_at=BASE)
    w = Workload(n=n)

    centres = [_normalize(rng.gauss_vec()) for _ in range(t_count)]
    w.entities = [
        Entity(id=uuid_for(1, e), name=f"entity-{e}", entity_type=ENTITY_TYPES[e % 4],
               provenance=prov, created_at=BASE, updated_at=BASE)
        for e in range(e_count)
    ]
    scale = 0.6 / math.sqrt(DIM)
    embs = np.empty((n, DIM), dtype=np.float64)
    raw: list[tuple[int, int, list[str]]] = []
    for i in range(n):
        t = i % t_count
        z = rng.gauss_vec()
        embs[i] = _normalize(centres[t] + scale * z)
        ea, eb = rng.pick_two(e_count)
        if rng() < 0.5:
            tags = [TAGS[math.floor(rng() * 20)]]
        else:
            a, b = rng.pick_two(20)
            tags = [TAGS[a], TAGS[b]]
        u = rng()
        if u < 0.1:
            tags.append("candidate")
        elif u < 0.2:
            tags.append("verified")
        raw.append((ea, eb, tags))
    w.fact_embeddings = embs
    w.raw = raw
    w.t_count = t_count
    if records:
        w.facts = build_facts(w, 0, n)
    for t in range(t_count):
        members = list(range(t, n, t_count))
        w.themes.append(Theme(
            id=uuid_for(4, t), label=f"theme-{t}",
            fact_ids=[uuid_for(3, i) for i in members],
            embedding=_normalize(embs[members].mean(axis=0)).tolist(),
            provenance=prov,
        ))
    expired = 0
    for r in range(r_count):
        s, d = rng.pick_two(e_count)
        kind = RELATION_TYPES[math.floor(rng() * 5)]
        is_expired = rng() < 0.1
        expired += is_expired
        w.relationships.append(Relationship(
            id=uuid_for(2, r), source_id=uuid_for(1, s), target_id=uuid_for(1, d),
            relation_type=kind, weight=1.0,
            valid_from=REL_BASE + timedelta(days=r % 365),
            valid_until=EXPIRED_UNTIL if is_expired else None,
            provenance=prov,
        ))
    w.expired = expired
    qscale = 0.3 / math.sqrt(DIM)
    for _ in range(200):
        j = math.floor(rng() * n)
        z = rng.gauss_vec()
        w.embedding_queries.append((_normalize(embs[j] + qscale * z).tolist(), j))
    for _ in range(200):
        a, b = rng.pick_two(e_count)
        w.entity_queries.append((uuid_for(1, a), uuid_for(1, b)))
    return w
