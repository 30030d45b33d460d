"""Store and index contract: the key lookups ``MemoryPipeline.ingest`` relies on.

``find_relationships_between`` and the tenant settings on both stores,
``search_themes_many`` on both indexes; all of them read only what they are asked for.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from cycgraph_memory.errors import InvalidInputError

from .factories import at, make_entity, make_relationship, make_theme, unit, vec


async def test_find_relationships_between(store: Any) -> None:
    ents = [make_entity(name=f"e{i}") for i in range(3)]
    await store.put_entities(ents)
    a, b, c = (e.id for e in ents)
    ab = make_relationship(a, b, valid_from=at(2))
    ab_other = make_relationship(a, b, relation_type="knows", valid_from=at(1))
    ba = make_relationship(b, a, valid_from=at(0))
    ac_gone = make_relationship(a, c, invalidated_by="x")
    await store.put_relationships([ab, ab_other, ba, ac_gone])
    assert await store.find_relationships_between([(a, b, "works_at")]) == [ab]
    both = await store.find_relationships_between(
        [(a, b, "works_at"), (str(b), str(a), "works_at"), (a, b, "knows")]
    )
    assert both == [ba, ab_other, ab]  # (valid_from, id) order
    assert await store.find_relationships_between([(a, c, "works_at")]) == []  # invalidated
    assert await store.find_relationships_between([(c, a, "works_at")]) == []
    assert await store.find_relationships_between([]) == []


async def test_tenant_settings_round_trip_and_roll_back(store: Any) -> None:
    assert await store.get_tenant_setting("theme_calibration") is None
    await store.put_tenant_setting("theme_calibration", {"a": 1.5, "b": [1, 2], "c": None})
    got = await store.get_tenant_setting("theme_calibration")
    assert got == {"a": 1.5, "b": [1, 2], "c": None}
    got["a"] = 99  # a copy
    assert (await store.get_tenant_setting("theme_calibration"))["a"] == 1.5
    await store.put_tenant_setting("theme_calibration", {"a": 2})
    assert await store.get_tenant_setting("theme_calibration") == {"a": 2}

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with store.transaction():
            await store.put_tenant_setting("theme_calibration", {"a": 3})
            raise Boom
    assert await store.get_tenant_setting("theme_calibration") == {"a": 2}

    for bad_key in ("", "k" * 129, 7):
        with pytest.raises(InvalidInputError):
            await store.get_tenant_setting(bad_key)
    for bad_value in ([1, 2], {"x": float("nan")}, {"x": object()}, {"x": "y" * 70_000}):
        with pytest.raises(InvalidInputError):
            await store.put_tenant_setting("theme_calibration", bad_value)
    assert await store.get_tenant_setting("theme_calibration") == {"a": 2}
    await store.clear()
    assert await store.get_tenant_setting("theme_calibration") is None


async def test_search_themes_many(store: Any, index: Any) -> None:
    themes = [make_theme(embedding=unit(i)) for i in range(3)]
    gone = make_theme(embedding=unit(0), invalidated_at=at(5))
    await store.put_themes([*themes, gone])
    upsert = getattr(index, "upsert_many", None)
    if upsert is not None:
        upsert([*themes, gone])
    near0 = vec(1.0, 0.2)
    out = await index.search_themes_many([near0, unit(2), unit(5)], limit=2)
    assert [[tid for tid, _ in hits] for hits in out[:2]] == [
        [themes[0].id, themes[1].id],
        [themes[2].id, *sorted((themes[0].id, themes[1].id), key=str)[:1]],
    ]
    assert out[0][0][1] == pytest.approx(1 / (1 + 0.04) ** 0.5, abs=1e-5)
    assert len(out[2]) == 2 and all(score == pytest.approx(0.0) for _, score in out[2])
    floored = await index.search_themes_many([near0], limit=3, min_similarity=0.5)
    assert [tid for tid, _ in floored[0]] == [themes[0].id]
    assert await index.search_themes_many([], limit=3) == []
    # the single-query search agrees
    single = await index.search_themes(near0, limit=2)
    assert [(h.item.id, pytest.approx(h.score, abs=1e-5)) for h in single] == out[0]
    assert uuid.UUID(str(out[0][0][0])) == themes[0].id
