"""The cost of one ingest follows the batch, not the tenant (STYLE.md pattern 7).

The same batch is ingested into a small tenant and into a tenant twenty times larger; the
store and index calls it makes, and the records they return, are counted through a
wrapper (and, on Postgres, the SQL statements on the connection). The large tenant holds
far more themes and facts than the bound, so a call that listed them would fail here.
"""

from __future__ import annotations

import inspect
import itertools
import random
import uuid
from collections import Counter
from collections.abc import Sized
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.calibration import THEME_CALIBRATION_KEY, ThemeCalibration
from cycgraph_memory.hierarchy.clustering import SimpleThemeClusterer
from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor
from cycgraph_memory.hierarchy.pipeline import DEFAULT_THEME_CANDIDATES, MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
from cycgraph_memory.records import Message

DIM = 8  # the test schema's width
NAMES = ["Alice", "Bruno", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana"]
THINGS = ["garden", "bike", "violin", "kitchen", "novel", "camera", "boat", "piano",
          "roof", "laptop", "tent", "oven", "kayak", "drone", "loom", "easel"]
PLACES = ["Lisbon", "Oslo", "Quito", "Nairobi", "Hanoi", "Perth", "Tunis", "Riga"]
READS = ("get_", "find_", "list_", "search_")


def batch(key: int, size: int = 12) -> list[Message]:
    """``size`` varied messages (ids and dates of their own per key)."""
    rng = random.Random(key)
    start = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(days=key)
    out = []
    for i in range(size):
        text = (f"{rng.choice(NAMES)} repaired the {rng.choice(THINGS)} in "
                f"{rng.choice(PLACES)} on day {rng.randint(1, 900)}.")
        out.append(Message(id=uuid.uuid5(uuid.NAMESPACE_OID, f"{key}:{i}"),
                           role="user" if i % 2 == 0 else "assistant", content=text,
                           timestamp=start + timedelta(seconds=30 * i)))
    return out


def _size(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        return sum(len(v) for v in value)  # search_themes_many: hits per query
    if isinstance(value, Sized) and not isinstance(value, str):
        return len(value)
    return 1


class Counting:
    """Counts the read calls made through it and the records they return."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()
        self.records: Counter[str] = Counter()
        self.on = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not (name.startswith(READS) and inspect.iscoroutinefunction(attr)):
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            out = await attr(*args, **kwargs)
            if self.on:
                self.calls[name] += 1
                self.records[name] += _size(out)
            return out

        return counted


async def _grow(store: Any, index: Any, calls: int) -> MemoryPipeline:
    pipeline = _pipeline(store, index)
    for key in range(calls):
        await pipeline.ingest(batch(key))
    return pipeline


def _pipeline(store: Any, index: Any, **kwargs: Any) -> MemoryPipeline:
    kwargs.setdefault("clusterer", SimpleThemeClusterer(0.97))  # nearly one theme per fact
    return MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=DIM), index=index,
                          extractor=RuleBasedExtractor(), **kwargs)


async def _measure(store: Any, index: Any) -> tuple[Counting, Counting, Any]:
    cs, ci = Counting(store), Counting(index)
    pipeline = _pipeline(cs, ci)
    cs.on = ci.on = True
    report = await pipeline.ingest(batch(10_000, size=6))
    cs.on = ci.on = False
    return cs, ci, report


def _bound(report: Any) -> int:
    """Records a call may read: a few per message, fact, entity and edge of the batch."""
    facts = len(report.fact_ids)
    return (2 * report.messages_ingested + 2 * DEFAULT_THEME_CANDIDATES * facts + 1
            + 4 * (len(report.entity_ids) + len(report.relationship_ids) + facts))


def _backends() -> list[Any]:
    return ["memory", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=_backends())
def two_tenants(request: pytest.FixtureRequest) -> list[tuple[Any, Any]]:
    if request.param == "memory":
        return [
            (InMemoryMemoryStore(), InMemoryMemoryIndex(expected_dimensions=DIM))
            for _ in range(2)
        ]
    make = request.getfixturevalue("pg_make_store")
    tenant = request.getfixturevalue("pg_tenant")
    return [(make(f"{tenant}-{n}"), make(f"{tenant}-{n}", index=True)) for n in ("s", "l")]


async def test_one_ingest_reads_the_same_on_a_small_and_a_large_tenant(
    two_tenants: list[tuple[Any, Any]], request: pytest.FixtureRequest
) -> None:
    (small, small_index), (large, large_index) = two_tenants
    await _grow(small, small_index, 2)
    await _grow(large, large_index, 40)
    stored_themes = len(await large.list_themes())
    stored_facts = len(await large.find_facts())

    statements: list[str] = []
    engine = None
    if not isinstance(small, InMemoryMemoryStore):
        from sqlalchemy import event

        engine = request.getfixturevalue("pg_engine").sync_engine

        def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            statements.append(statement)

    seen: list[tuple[Counting, Counting, Any, int]] = []
    for store, index in ((small, small_index), (large, large_index)):
        statements.clear()
        if engine is not None:
            event.listen(engine, "before_cursor_execute", count)
        try:
            cs, ci, report = await _measure(store, index)
        finally:
            if engine is not None:
                event.remove(engine, "before_cursor_execute", count)
        # New episodes have no stored messages to replace: no DELETE (whose statement
        # trigger would scan the tenant's BM25 terms for nothing).
        assert not [s for s in statements if s.lstrip().upper().startswith("DELETE")]
        seen.append((cs, ci, report, len(statements)))

    (s_store, s_index, s_report, s_sql), (l_store, l_index, l_report, l_sql) = seen
    assert len(s_report.fact_ids) == len(l_report.fact_ids) > 0
    bound = _bound(l_report)
    assert stored_themes > 3 * bound and stored_facts > 3 * bound  # listing would fail
    for cs, ci, report, _ in seen:
        assert "list_themes" not in cs.calls
        assert "list_episodes" not in cs.calls and "find_entities" not in cs.calls
        assert "find_facts" not in cs.calls  # no merges with this clusterer
        assert ci.calls == Counter({"search_themes_many": 1})  # every fact's kNN at once
        read = sum(cs.records.values()) + sum(ci.records.values())
        assert read <= _bound(report), (cs.records, ci.records)
    # the same calls on both tenants (what they return differs only within the bound)
    assert s_store.calls == l_store.calls
    assert s_index.calls == l_index.calls
    assert s_sql == l_sql  # Postgres: the same number of statements (0 in memory)


async def test_calibrated_default_refits_at_doublings_with_a_bounded_sample(
    two_tenants: list[tuple[Any, Any]],
) -> None:
    (store, index), _ = two_tenants
    pipeline = MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=DIM),
                              index=index, extractor=RuleBasedExtractor())
    fits: list[int] = []
    for key in range(12):
        await pipeline.ingest(batch(key))
        raw = await store.get_tenant_setting(THEME_CALIBRATION_KEY)
        record = ThemeCalibration.model_validate(raw)
        if not fits or record.fitted_at != fits[-1]:
            fits.append(record.fitted_at)
    assert record.facts == len(await store.find_facts())
    # refitted only when the tenant doubled
    assert all(b >= 2 * a for a, b in itertools.pairwise(fits) if a >= 10)
    assert len(fits) <= 5
    # a refit reads a bounded sample: pages of 32 at doubling offsets
    counting = Counting(store)
    again = MemoryPipeline(counting, embedder=HashingEmbeddingProvider(dimensions=DIM),
                           index=index, extractor=RuleBasedExtractor())
    await store.put_tenant_setting(
        THEME_CALIBRATION_KEY, record.model_copy(update={"fitted_at": 1}).model_dump()
    )
    counting.on = True
    await again.ingest(batch(500))
    assert counting.calls["find_facts"] <= 16
    assert counting.records["find_facts"] <= 16 * 32
    fresh = ThemeCalibration.model_validate(await store.get_tenant_setting(THEME_CALIBRATION_KEY))
    assert fresh.fitted_at == fresh.facts > record.facts


async def test_a_full_theme_stops_growing() -> None:
    store, index = InMemoryMemoryStore(), InMemoryMemoryIndex(expected_dimensions=DIM)
    pipeline = _pipeline(store, index, clusterer=SimpleThemeClusterer(-1.0), max_theme_facts=5)
    first = await pipeline.ingest(batch(1))
    [theme] = await store.list_themes()
    assert len(theme.fact_ids) == len(first.fact_ids) >= 5  # one call may overfill it
    second = await pipeline.ingest(batch(2))
    themes = {t.id: t for t in await store.list_themes()}
    assert themes[theme.id].fact_ids == theme.fact_ids  # full: not a candidate any more
    assert len(themes) == 2
    [sibling] = [t for t in themes.values() if t.id != theme.id]
    assert set(sibling.fact_ids) == set(second.fact_ids)
    with pytest.raises(ValueError):
        _pipeline(store, index, max_theme_facts=0)


async def test_an_ended_marker_reads_only_the_edge_it_names(
    two_tenants: list[tuple[Any, Any]],
) -> None:
    from cycgraph_memory.hierarchy.extractors.closing import close_ended_relationships
    from cycgraph_memory.records import Entity, Provenance, Relationship

    (store, _), _ = two_tenants
    prov = Provenance(source="system")
    start = datetime(2025, 1, 1, tzinfo=UTC)
    hub, *others = [Entity(name=f"E{i}", entity_type="person", provenance=prov)
                    for i in range(81)]
    await store.put_entities([hub, *others])
    edges = [Relationship(source_id=hub.id, target_id=o.id, relation_type="work_at",
                          valid_from=start, provenance=prov) for o in others]
    await store.put_relationships(edges)
    when = start + timedelta(days=3)
    marker = Relationship(source_id=hub.id, target_id=others[7].id, relation_type="work_at",
                          valid_from=when, valid_until=when, attributes={"ended": True},
                          provenance=prov)
    counting = Counting(store)
    counting.on = True
    out = await close_ended_relationships(counting, [marker])
    assert [(r.id, r.valid_until) for r in out] == [(edges[7].id, when)]
    # the hub's 80 edges of that type are not read: only the one the marker names
    assert counting.calls == Counter({"find_relationships_between": 1})
    assert counting.records["find_relationships_between"] == 1


async def test_in_memory_unit_of_work_costs_what_it_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Entering a unit of work copies nothing; it journals only what the block changes."""
    from cycgraph_memory.inmemory._journal import Journal

    tenants = [(InMemoryMemoryStore(), InMemoryMemoryIndex(expected_dimensions=DIM))
               for _ in range(2)]
    await _grow(*tenants[0], 2)
    await _grow(*tenants[1], 40)
    peaks: list[int] = []
    end = Journal.end

    def record(self: Journal, unit: Any) -> None:
        if self.depth == 1:
            peaks.append(len(self.entries))
        end(self, unit)

    monkeypatch.setattr(Journal, "end", record)
    for store, index in tenants:
        await _pipeline(store, index).ingest(batch(10_000, size=6))
    small, large = peaks  # one unit of work per ingest
    assert small == large > 0  # the same batch: the same changes journaled


async def test_in_memory_rollback_undoes_updates_deletes_and_clear() -> None:
    from cycgraph_memory.records import Entity, Provenance

    store = InMemoryMemoryStore()
    prov = Provenance(source="system")
    a, b = (Entity(name=n, entity_type="person", provenance=prov) for n in "AB")
    await store.put_entities([a, b])
    await store.put_tenant_setting("k", {"v": 1})
    before = await store.find_entities()

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with store.transaction():
            await store.put_entities([a.model_copy(update={"name": "A2"})])
            await store.delete_entity(b.id)
            async with store.transaction():
                await store.put_tenant_setting("k", {"v": 2})
            await store.clear()
            await store.put_entities([Entity(name="C", entity_type="person", provenance=prov)])
            raise Boom
    assert await store.find_entities() == before
    assert await store.get_tenant_setting("k") == {"v": 1}
    assert store._journal.depth == 0 and store._journal.entries == []
