"""Message-fusion variants replayed offline on the frozen conversation sets (in memory).

Each set is ingested as in ``bench/retrieval_quality.py`` and every question is asked in
the three modes, once. While it runs, the lists that ``message_signals`` fuses (every
signal's turns, their scores and weights) and the fact lists behind the projected ones
are recorded. Each variant below is then a different function of those recorded lists,
so all of them are scored on exactly the same candidates, without re-running retrieval.
The first row, ``current``, reproduces the library's ranking (the script checks that it
returns the same turns as ``retrieve_memory`` for every question and mode).

Printed: recall@10 of hybrid mode and, in brackets, its margin over the better of vector
and text mode under the same variant (a variant that changes the fusion changes those modes
too), per set and embedder, then the smallest margin on the two tuning sets and on the
held-out ``dm_threads``.

    python bench/fusion_variants.py [--embedder hashing|local|e5|all] [--set ...|all]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import retrieval_quality as rq
from cycgraph_memory.records import MemoryQuery
from cycgraph_memory.retrieval import hybrid, retrieve
from cycgraph_memory.retrieval.fusion import rrf_fuse

Ranked = list[tuple[uuid.UUID, float]]
Variant = Callable[[str, dict[str, Any], dict[str, Any]], list[uuid.UUID]]


class Recorder:
    """Wraps ``rrf_fuse`` and ``message_signals`` of the hybrid module to record inputs."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self._fuse = hybrid.rrf_fuse
        self._signals = hybrid.message_signals

    def install(self) -> None:
        """Route the library's calls through the recorder."""

        def fuse(signals: Mapping[str, Sequence[tuple[uuid.UUID, float]]], *, k: int = 60,
                 weights: Mapping[str, float] | None = None) -> Any:
            self.calls.append(("fuse", ({n: list(v) for n, v in signals.items()},
                                        dict(weights or {}), k)))
            return self._fuse(signals, k=k, weights=weights)

        async def signals(store: Any, index: Any, q: Any, opts: Any, fact_lists: Any,
                          fact_weights: Any = None, **kw: Any) -> Any:
            self.calls.append(("facts", {n: [(f.id, list(f.source_message_ids)) for f in fs]
                                         for n, fs in fact_lists.items()}))
            return await self._signals(store, index, q, opts, fact_lists, fact_weights, **kw)

        hybrid.rrf_fuse = fuse  # type: ignore[assignment]
        hybrid.message_signals = signals  # type: ignore[assignment]
        retrieve.message_signals = signals  # type: ignore[assignment]


async def capture(set_name: str, embedder_name: str, rec: Recorder) -> list[dict[str, Any]]:
    """Every question of a set, with the recorded fusion inputs of each mode."""
    data = json.loads(rq.DATA[set_name].read_text(encoding="utf-8"))
    embedder = rq.make_embedder(embedder_name)
    out = []
    for conv in data["conversations"]:
        store, index = rq.Backend().open(conv["id"], embedder.dimensions)
        pipeline = rq.MemoryPipeline(store, embedder=embedder, index=index)
        for session in conv["sessions"]:
            await pipeline.ingest(rq.session_messages(session))
        turns = {rq.turn_uuid(t["id"]): t["id"] for s in conv["sessions"] for t in s["turns"]}
        for q in conv["questions"]:
            modes = {}
            for mode in ("vector", "text", "hybrid"):
                rec.calls.clear()
                result = await rq.retrieve_memory(
                    store, index, MemoryQuery(text=q["question"], limit=20, min_similarity=0.0),
                    embedder=embedder, mode=mode)  # type: ignore[arg-type]
                fuses = [c[1] for c in rec.calls if c[0] == "fuse"]
                modes[mode] = {
                    "messages": fuses[-1],  # the message-level fusion is the last one
                    # the fact-level fusion (text and hybrid modes): each list's scores
                    "fact_signals": fuses[0][0] if len(fuses) == 2 else {},
                    "facts": next(c[1] for c in rec.calls if c[0] == "facts"),
                    "served": [m.id for m in result.messages],
                }
            out.append({"q": q, "turns": turns, "modes": modes})
    return out


def rrf(signals: Mapping[str, Ranked], weights: Mapping[str, float], k: int,
        ranks: Mapping[str, Mapping[uuid.UUID, float]] | None = None,
        bonus: float = 0.0) -> list[uuid.UUID]:
    """Weighted RRF; ``ranks`` overrides a list's ranks; ``bonus`` rewards agreeing families."""
    fused: dict[uuid.UUID, float] = defaultdict(float)
    best: dict[uuid.UUID, float] = defaultdict(float)
    families: dict[uuid.UUID, set[str]] = defaultdict(set)
    for name, ranked in signals.items():
        own = (ranks or {}).get(name) or {
            i: r for r, i in enumerate(dict.fromkeys(i for i, _ in ranked), 1)}
        for item, rank in own.items():
            fused[item] += weights.get(name, 1.0) / (k + rank)
            families[item].add("vector" if "vector" in name else "text")
        for item, score in ranked:
            best[item] = max(best[item], score)
    if bonus:
        for item in fused:
            fused[item] *= 1.0 + bonus * (len(families[item]) - 1)
    return sorted(fused, key=lambda i: (-fused[i], -best[i], str(i)))


def reweighted(k: int | None = None, scale: Mapping[str, float] | None = None,
               family_norm: bool = False, bonus: float = 0.0,
               episode_depth: int | None = None) -> Variant:
    """RRF with another k, list weights scaled, weights normalised per family, a bonus."""
    def run(mode: str, rec: dict[str, Any], q: dict[str, Any]) -> list[uuid.UUID]:
        signals, weights, k0 = rec["modes"][mode]["messages"]
        weights = {n: weights.get(n, 1.0) * (scale or {}).get(n, 1.0) for n in signals}
        if family_norm:
            total: dict[str, float] = defaultdict(float)
            for n, w in weights.items():
                total["vector" in n] += w
            weights = {n: w / total["vector" in n] for n, w in weights.items()}
        if episode_depth:  # each episode list keeps its first turns
            signals = {n: (_first(v, episode_depth) if n.startswith("episodes") else v)
                       for n, v in signals.items()}
        return rrf(signals, weights, k or k0, bonus=bonus)
    return run


def _first(ranked: Ranked, depth: int) -> Ranked:
    """The entries of the first ``depth`` distinct items of a list."""
    keep = set(list(dict.fromkeys(i for i, _ in ranked))[:depth])
    return [(i, s) for i, s in ranked if i in keep]


def tied_ranks(episode_policy: str) -> Variant:
    """A fact's turns share the fact's rank; an episode's turns their mean position
    (``"mean"``) or the episode's rank (``"episode"``)."""
    def run(mode: str, rec: dict[str, Any], q: dict[str, Any]) -> list[uuid.UUID]:
        signals, weights, k = rec["modes"][mode]["messages"]
        facts = rec["modes"][mode]["facts"]
        ranks: dict[str, dict[uuid.UUID, float]] = {}
        for name, ranked in signals.items():
            own: dict[uuid.UUID, float] = {}
            if name.startswith("facts:"):
                for r, (_, grounding) in enumerate(facts[name[6:]][:40], 1):
                    for m in grounding:
                        own.setdefault(m, r)
                own = {m: r for m, r in own.items() if m in {i for i, _ in ranked}}
            elif name.startswith("episodes"):
                groups: list[list[uuid.UUID]] = []
                last = None
                for m, s in ranked:  # one episode = one run of equal scores
                    if not groups or s != last:
                        groups.append([])
                        last = s
                    groups[-1].append(m)
                start = 0
                for number, group in enumerate(groups, 1):
                    for m in group:
                        if m not in own:
                            own[m] = (number if episode_policy == "episode"
                                      else start + (len(group) + 1) / 2)
                    start += len(group)
            ranks[name] = own
        return rrf(signals, weights, k, ranks)
    return run


def score_sum(minmax: bool, mnz: bool) -> Variant:
    """CombSUM / CombMNZ of per-list normalised scores (projected facts: the fact's score)."""
    def run(mode: str, rec: dict[str, Any], q: dict[str, Any]) -> list[uuid.UUID]:
        if mode != "hybrid":
            return current(mode, rec, q)
        signals, weights, _ = rec["modes"][mode]["messages"]
        fact_signals = rec["modes"][mode]["fact_signals"]
        total: dict[uuid.UUID, float] = defaultdict(float)
        count: dict[uuid.UUID, int] = defaultdict(int)
        for name, ranked in signals.items():
            items = list(dict.fromkeys(i for i, _ in ranked))
            if name.startswith("facts:"):  # a turn: the score of its first fact
                of_fact = dict(fact_signals[name[6:]])
                scores = {}
                for fact_id, grounding in rec["modes"][mode]["facts"][name[6:]]:
                    for m in grounding:
                        scores.setdefault(m, of_fact.get(fact_id, 0.0))
            else:
                scores = {}
                for i, s in ranked:
                    scores.setdefault(i, s)
            values = [scores[i] for i in items]
            hi, lo = max(values), min(values)
            for i in items:
                v = ((scores[i] - lo) / (hi - lo) if hi > lo else 1.0) if minmax else (
                    scores[i] / hi if hi > 0 else 0.0)
                total[i] += weights.get(name, 1.0) * v
                count[i] += 1
        if mnz:
            total = defaultdict(float, {i: v * count[i] for i, v in total.items()})
        return sorted(total, key=lambda i: (-total[i], str(i)))
    return run


def two_level(k: int) -> Variant:
    """RRF of the vector mode's and the text mode's turn rankings."""
    def run(mode: str, rec: dict[str, Any], q: dict[str, Any]) -> list[uuid.UUID]:
        if mode != "hybrid":
            return current(mode, rec, q)
        lists = {m: [(i, 0.0) for i in current(m, rec, q)] for m in ("vector", "text")}
        return [h.id for h in rrf_fuse(lists, k=k)]
    return run


def current(mode: str, rec: dict[str, Any], q: dict[str, Any]) -> list[uuid.UUID]:
    """The library's message fusion."""
    signals, weights, k = rec["modes"][mode]["messages"]
    return [h.id for h in rrf_fuse(signals, k=k, weights=weights)]


TEXT_LISTS = {"facts:text": 2.0, "text": 2.0, "episodes:text": 2.0}
EVERY_LIST_ONE = {"facts:text": 2.0, "text": 2.0, "episodes:text": 2.0, "vector": 2.0,
                  "episodes:vector": 2.0}
VARIANTS: list[tuple[str, Variant]] = [
    ("current: weighted RRF, k=60", current),
    ("RRF k=20", reweighted(k=20)),
    ("RRF k=30", reweighted(k=30)),
    ("RRF k=120", reweighted(k=120)),
    ("text lists x2 (text family = vector family)", reweighted(scale=TEXT_LISTS)),
    ("plain RRF, every list weight 1", reweighted(scale=EVERY_LIST_ONE)),
    ("weights normalised per family", reweighted(family_norm=True)),
    ("two-level: RRF(k=10) of the vector-mode and text-mode rankings", two_level(10)),
    ("CombSUM, scores / list max", score_sum(minmax=False, mnz=False)),
    ("CombSUM, min-max per list", score_sum(minmax=True, mnz=False)),
    ("CombMNZ, min-max per list", score_sum(minmax=True, mnz=True)),
    ("RRF x (1 + 0.25 per extra family agreeing)", reweighted(bonus=0.25)),
    ("RRF x (1 + 1.0 per extra family agreeing)", reweighted(bonus=1.0)),
    ("tied ranks: fact's turns share its rank, episode's turns their mean position",
     tied_ranks("mean")),
    ("tied ranks: fact's turns share its rank, episode's turns the episode's rank",
     tied_ranks("episode")),
    ("episode lists cut at 20 turns", reweighted(episode_depth=20)),
]


def recall10(ranked: Sequence[uuid.UUID], turns: Mapping[uuid.UUID, str],
             evidence: Sequence[str]) -> float:
    """Share of the evidence turns among the first 10."""
    top = {turns[i] for i in ranked[:10] if i in turns}
    return len(top & set(evidence)) / len(set(evidence))


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--embedder", choices=["hashing", "local", "e5", "all"],
                        default="hashing")
    parser.add_argument("--set", choices=[*rq.DATA, "all"], default="all")
    args = parser.parse_args()
    embedders = ["hashing", "local", "e5"] if args.embedder == "all" else [args.embedder]
    sets = list(rq.DATA) if args.set == "all" else [args.set]
    rec = Recorder()
    rec.install()
    captured: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in embedders:
        for s in sets:
            captured[(s, e)] = asyncio.run(capture(s, e, rec))
            for question in captured[(s, e)]:
                for mode, m in question["modes"].items():
                    if current(mode, question, question["q"])[:20] != m["served"]:
                        raise SystemExit(f"replay differs from the library ({s}, {e}, {mode})")
    pairs = list(captured)
    print("| variant | " + " | ".join(f"{e} {s}" for s, e in pairs)
          + " | min, tuning sets | min, dm_threads |")
    print("|---|" + "---|" * (len(pairs) + 2))
    for name, variant in VARIANTS:
        cells, tuning, held_out = [], [], []
        for pair in pairs:
            # every mode under the variant: the margin is over its own vector/text modes
            means = {mode: statistics.fmean(
                recall10(variant(mode, q, q["q"]), q["turns"], q["q"]["evidence"])
                for q in captured[pair]) for mode in ("vector", "text", "hybrid")}
            margin = means["hybrid"] - max(means["vector"], means["text"])
            cells.append(f"{means['hybrid']:.3f} ({margin:+.3f})")
            (held_out if pair[0] == "dm_threads" else tuning).append(margin)
        low = (lambda xs: f"{min(xs):+.3f}" if xs else "-")  # noqa: E731
        print(f"| {name} | " + " | ".join(cells) + f" | {low(tuning)} | {low(held_out)} |",
              flush=True)


if __name__ == "__main__":
    main()
