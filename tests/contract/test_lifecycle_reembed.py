"""Re-embedding contract (both backends): every vector recomputed, resumable, nothing else."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cycgraph_memory.embeddings import HashingEmbeddingProvider
from cycgraph_memory.errors import InvalidInputError, ProviderError
from cycgraph_memory.lifecycle import ReembedProgress, reembed

from .factories import (
    EMBED_DIM,
    at,
    make_entity,
    make_episode,
    make_fact,
    make_message,
    make_theme,
    unit,
)


async def _fill(store: Any) -> None:
    ents = [make_entity(name=f"Entity {i}", embedding=unit(i), created_at=at(i)) for i in range(5)]
    ents[1] = ents[1].model_copy(update={"invalidated_at": at(99)})
    await store.put_entities(ents)
    facts = [
        make_fact(content=f"fact number {i}", embedding=unit(i), valid_from=at(i),
                  invalidated_by="x" if i == 2 else None, tags=["t"])
        for i in range(7)
    ]
    await store.put_facts(facts)
    await store.put_episodes([
        make_episode(messages=[make_message(content=f"msg {i} {j}", embedding=unit(j))
                               for j in range(2)], started_at=at(i), embedding=unit(5))
        for i in range(3)
    ])
    await store.put_themes([make_theme(fact_ids=[f.id for f in facts[:3]], embedding=unit(7))])


def _close(a: Any, b: Any) -> bool:
    return bool(np.allclose(np.asarray(a), np.asarray(b), atol=1e-6))


async def _state(store: Any) -> dict[str, Any]:
    entities = await store.find_entities(include_invalidated=True)
    facts = await store.find_facts(include_invalidated=True)
    episodes = await store.list_episodes(include_invalidated=True)
    themes = await store.list_themes(include_invalidated=True)
    messages = await store.get_messages([m.id for e in episodes for m in e.messages])
    return {"entities": entities, "facts": facts, "episodes": episodes, "themes": themes,
            "messages": messages}


def _strip(records: list[Any]) -> list[Any]:
    return [r.model_copy(update={"embedding": None}) for r in records]


async def test_reembed_recomputes_every_vector_and_nothing_else(store: Any) -> None:
    await _fill(store)
    before = await _state(store)
    provider = HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=7)
    seen: list[ReembedProgress] = []
    report = await reembed(store, provider, batch_size=2, progress=seen.append)
    assert report.counts == {"message": 6, "episode": 3, "entity": 5, "fact": 7, "theme": 1}
    assert seen[-1].finished and seen[-1].written == 22
    after = await _state(store)
    for kind in ("entities", "facts", "themes", "episodes"):
        assert _strip(after[kind]) == _strip(before[kind])  # only vectors changed
    for e in after["entities"]:  # soft-deleted ones too
        assert _close(e.embedding, (await provider.embed([e.name]))[0])
    for f in after["facts"]:
        assert _close(f.embedding, (await provider.embed([f.content]))[0])
    for m in after["messages"].values():
        assert _close(m.embedding, (await provider.embed([m.content]))[0])
    for ep in after["episodes"]:
        vs = np.asarray([after["messages"][m.id].embedding for m in ep.messages])
        mean = (vs / np.linalg.norm(vs, axis=1, keepdims=True)).mean(axis=0)
        assert _close(ep.embedding, mean / np.linalg.norm(mean))
    (theme,) = after["themes"]
    members = {f.id: f for f in after["facts"]}
    vs = np.asarray([  # its live members (facts[2] is invalidated), as consolidation
        members[i].embedding for i in theme.fact_ids if members[i].invalidated_by is None
    ])
    total = (vs / np.linalg.norm(vs, axis=1, keepdims=True)).sum(axis=0)
    assert _close(theme.embedding, total / np.linalg.norm(total))


class _Crash(Exception):
    pass


async def test_reembed_resumes_after_a_crash(store: Any) -> None:
    await _fill(store)
    provider = HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=3)
    checkpoints: list[ReembedProgress] = []

    def crash_on_facts(p: ReembedProgress) -> None:
        checkpoints.append(p)
        if p.record_type == "fact" and p.done >= 4:
            raise _Crash

    with pytest.raises(_Crash):
        await reembed(store, provider, batch_size=2, progress=crash_on_facts)
    last = checkpoints[-1]
    assert (last.record_type, last.done) == ("fact", 4)
    calls: list[int] = []

    class Counting:
        dimensions = EMBED_DIM

        async def embed(self, texts: list[str]) -> list[list[float]]:
            calls.append(len(texts))
            return await provider.embed(texts)

    await reembed(store, Counting(), batch_size=2, resume_from=last)
    assert sum(calls) == 3  # only the 3 facts left (themes embed nothing)
    resumed = await _state(store)
    fresh_provider = HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=3)
    await reembed(store, fresh_provider, batch_size=50)
    full = await _state(store)
    for kind in ("entities", "facts", "themes", "episodes"):
        for a, b in zip(resumed[kind], full[kind], strict=True):
            assert _close(a.embedding, b.embedding)


async def test_a_failing_provider_writes_nothing_of_its_batch(store: Any) -> None:
    await _fill(store)
    before = await _state(store)

    class Broken:
        dimensions = EMBED_DIM

        async def embed(self, texts: list[str]) -> list[list[float]]:
            raise RuntimeError("model offline")

    with pytest.raises(ProviderError):
        await reembed(store, Broken(), record_types=["fact"])
    assert await _state(store) == before

    class Narrow:
        dimensions = EMBED_DIM

        async def embed(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0] for _ in texts]

    with pytest.raises(Exception, match="2"):
        await reembed(store, Narrow(), record_types=["entity"])
    assert await _state(store) == before
    with pytest.raises(InvalidInputError):
        await reembed(store, HashingEmbeddingProvider(dimensions=EMBED_DIM), record_types=["alien"])


async def test_reembed_refits_the_theme_calibration(store: Any) -> None:
    from cycgraph_memory.hierarchy.calibration import (
        THEME_CALIBRATION_KEY,
        ThemeCalibration,
        fit_theme_calibration,
        sample_fact_vectors,
    )

    facts = [make_fact(content=f"fact {i} about topic {i % 4}", embedding=unit(i % 8),
                       valid_from=at(i)) for i in range(40)]
    await store.put_facts(facts)
    old = fit_theme_calibration([f.embedding for f in facts], 40)
    await store.put_tenant_setting(THEME_CALIBRATION_KEY, old.model_dump())
    await reembed(store, HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=3),
                  record_types=["fact"])
    new = ThemeCalibration.model_validate(
        await store.get_tenant_setting(THEME_CALIBRATION_KEY))
    sample, _ = await sample_fact_vectors(store)
    assert new == fit_theme_calibration(sample, 40)  # fitted on the new vectors
    assert new != old
    # Re-embedding other record types leaves the calibration alone.
    await store.put_tenant_setting(THEME_CALIBRATION_KEY, old.model_dump())
    await reembed(store, HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=4),
                  record_types=["entity"])
    assert await store.get_tenant_setting(THEME_CALIBRATION_KEY) == old.model_dump()
