"""Two tenants holding the SAME ids never see or touch each other's rows."""

from __future__ import annotations

from typing import Any

from ._records import entity, episode, fact, relationship, theme, ts, unit

pytestmark = __import__("pytest").mark.postgres


async def _fill(store: Any, label: str, ids: dict[str, Any]) -> None:
    await store.put_entity(entity(id=ids["e1"], name=f"{label}-e1", created_at=ts(1)))
    await store.put_entity(entity(id=ids["e2"], name=f"{label}-e2", created_at=ts(2),
                                  embedding=[1.0, 0.5, 0, 0, 0, 0, 0, 0]))
    await store.put_relationship(relationship(ids["e1"], ids["e2"], id=ids["r"],
                                              relation_type=f"{label}-rel"))
    await store.put_episode(episode(id=ids["ep"], topic=f"{label}-topic"))
    await store.put_theme(theme(id=ids["th"], label=f"{label}-theme"))  # facts cite it
    await store.put_fact(fact(id=ids["f"], content=f"{label}-fact", tags=["shared"],
                              entity_ids=[ids["e1"]], theme_id=ids["th"]))


async def test_same_ids_two_tenants(pg_make_store: Any) -> None:
    from cycgraph_memory.records import new_id

    ids = {k: new_id() for k in ("e1", "e2", "r", "ep", "f", "th")}
    a, b = pg_make_store("tenant-a"), pg_make_store("tenant-b")
    ia, ib = pg_make_store("tenant-a", index=True), pg_make_store("tenant-b", index=True)
    await _fill(a, "A", ids)
    await _fill(b, "B", ids)

    # single and batch getters
    assert (await a.get_entity(ids["e1"])).name == "A-e1"
    assert (await b.get_entity(ids["e1"])).name == "B-e1"
    assert {e.name for e in (await a.get_entities([ids["e1"], ids["e2"]])).values()} == {
        "A-e1", "A-e2"}
    assert (await b.get_relationship(ids["r"])).relation_type == "B-rel"
    assert (await a.get_relationships([ids["r"]]))[ids["r"]].relation_type == "A-rel"
    assert (await b.get_episode(ids["ep"])).topic == "B-topic"
    assert (await a.get_episodes([ids["ep"]]))[ids["ep"]].topic == "A-topic"
    assert (await b.get_fact(ids["f"])).content == "B-fact"
    assert (await a.get_facts([ids["f"]]))[ids["f"]].content == "A-fact"
    assert (await b.get_theme(ids["th"])).label == "B-theme"
    assert (await a.get_themes([ids["th"]]))[ids["th"]].label == "A-theme"
    msg_id = (await a.get_episode(ids["ep"])).messages[0].id
    assert list(await b.get_messages([msg_id])) == []
    assert list(await a.get_messages([msg_id])) == [msg_id]

    # listings
    assert [e.name for e in await a.find_entities()] == ["A-e1", "A-e2"]
    assert [r.relation_type for r in await b.get_relationships_for_entity(ids["e1"])] == [
        "B-rel"]
    assert [e.topic for e in await a.list_episodes()] == ["A-topic"]
    assert [f.content for f in await b.find_facts(tags=["shared"])] == ["B-fact"]
    assert [f.content for f in await a.find_facts(entity_id=ids["e1"])] == ["A-fact"]
    assert [f.content for f in await b.find_facts(theme_id=ids["th"])] == ["B-fact"]
    assert [t.label for t in await a.list_themes()] == ["A-theme"]

    # search
    assert [r.item.content for r in await ia.search_facts(unit(2), limit=5)] == ["A-fact"]
    assert [r.item.name for r in await ib.search_entities(unit(0), limit=5)] == [
        "B-e1", "B-e2"]
    assert [r.item.topic for r in await ia.search_episodes(unit(1))] == ["A-topic"]
    assert [r.item.label for r in await ib.search_themes(unit(3))] == ["B-theme"]

    # touch, upsert and delete only affect the caller's tenant
    await a.touch_facts([ids["f"]], at=ts(50))
    assert (await a.get_fact(ids["f"])).access_count == 1
    assert (await b.get_fact(ids["f"])).access_count == 0
    await a.put_fact(fact(id=ids["f"], content="A-fact-v2"))
    assert (await b.get_fact(ids["f"])).content == "B-fact"
    assert await a.delete_relationship(ids["r"]) is True
    assert await b.get_relationship(ids["r"]) is not None
    await a.put_relationship(relationship(ids["e1"], ids["e2"], id=ids["r"]))
    assert await a.delete_entity(ids["e1"]) is True  # cascades to A's edge only
    assert await b.get_entity(ids["e1"]) is not None
    assert await a.get_relationship(ids["r"]) is None
    assert await b.get_relationship(ids["r"]) is not None
    assert await a.delete_episode(ids["ep"]) is True
    assert (await b.get_episode(ids["ep"])).messages
    assert await a.delete_fact(ids["f"]) is True
    assert await b.get_fact(ids["f"]) is not None
    assert await a.delete_theme(ids["th"]) is True
    assert await b.get_theme(ids["th"]) is not None

    # clear() wipes one tenant only
    await _fill(a, "A", ids)
    await a.clear()
    assert await a.find_entities() == [] and await a.find_facts() == []
    assert await a.list_episodes() == [] and await a.list_themes() == []
    assert await a.get_relationship(ids["r"]) is None
    assert await ia.search_facts(unit(2)) == []
    assert len(await b.find_entities()) == 2
    assert len(await b.find_facts()) == 1
    assert len(await ib.search_facts(unit(2))) == 1
    assert (await b.get_episode(ids["ep"])).messages
