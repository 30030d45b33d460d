"""The one-statement candidates of a fused retrieval give what the separate calls give.

``PostgresMemoryIndex.prefetch_signals`` answers the index and store calls of a
hybrid / text retrieval from one statement. Each query below runs twice on the same data:
through an index without that capability (every signal its own statement) and through
the index itself; the results must be the same (the served facts' access counters aside,
since each retrieval touches them).
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, text

from cycgraph_memory import QUARANTINE_TAG, MemoryQuery, RetrievalOptions, retrieve_memory

from .factories import (
    at,
    blend,
    make_entity,
    make_episode,
    make_fact,
    make_message,
    make_relationship,
    make_theme,
    unit,
    vec,
)

pytestmark = pytest.mark.postgres


class _WithoutPrefetch:
    """The index without ``prefetch_signals``: each signal runs on its own."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        if name == "prefetch_signals":
            raise AttributeError(name)
        return getattr(self._real, name)


async def _world(store: Any, index: Any) -> dict[str, Any]:
    ada = make_entity(name="Ada Lovelace", entity_type="person")
    bob = make_entity(name="Bob", entity_type="person")
    engine = make_entity(name="analytical engine", entity_type="thing")
    gone = make_entity(name="old name", entity_type="thing", invalidated_at=at(5))
    await store.put_entities([ada, bob, engine, gone])
    await store.put_relationships([
        make_relationship(ada.id, engine.id, relation_type="built"),
        make_relationship(bob.id, ada.id, relation_type="knows"),
    ])
    ma = make_message(content="Ada talked about the analytical engine", embedding=unit(0),
                      timestamp=at(10))
    mb = make_message(role="assistant", content="Bob likes greyhound racing",
                      embedding=unit(1), timestamp=at(20))
    mc = make_message(content="engine notes for Ada", embedding=blend(0, 2, 2, 1),
                      timestamp=at(30))
    episode = make_episode(messages=[ma, mb, mc], started_at=at(10), ended_at=at(30),
                           topic="Ada and Bob", embedding=vec(1.0, 0.4, 0.2))
    # More episodes for the episode lists: one near the query, one about dogs, one
    # invalidated, one without a vector.
    workshop = make_episode(
        topic="analytical engine workshop", embedding=vec(1.0, 0.5, 0.3, 0.1),
        messages=[make_message(content="the engine has a mill and a store", timestamp=at(40)),
                  make_message(role="assistant", content="Ada wrote the notes",
                               timestamp=at(41))],
        started_at=at(40), ended_at=at(41),
    )
    dogs = make_episode(
        topic="greyhound racing", embedding=vec(0.1, 1.0, 0.9),
        messages=[make_message(content="Bob bets on greyhound racing", timestamp=at(50))],
        started_at=at(50), ended_at=at(50),
    )
    old = make_episode(
        topic="old engine notes", embedding=vec(1.0, 0.5, 0.2, 0.1),
        messages=[make_message(content="Ada engine notes, superseded", timestamp=at(60))],
        started_at=at(60), ended_at=at(60), invalidated_at=at(70),
    )
    plain = make_episode(
        topic="Ada engine without vector",
        messages=[make_message(content="Ada engine chat", timestamp=at(65))],
        started_at=at(65), ended_at=at(65),
    )
    await store.put_episodes([episode, workshop, dogs, old, plain])
    facts = []
    for i in range(40):
        who = [ada.id] if i % 3 == 0 else [bob.id] if i % 3 == 1 else [engine.id]
        facts.append(make_fact(
            content=f"fact {i} about {'Ada engine' if i % 2 else 'Bob greyhound'} notes",
            embedding=vec(*(1.0, 0.05 * i, 0.3 * (i % 4), 0.1 * (i % 7))),
            entity_ids=who,
            tags=["lesson"] if i % 5 == 0 else ["dogs"] if i % 5 == 1 else [],
            source_message_ids=[ma.id] if i % 4 == 0 else [mb.id] if i % 4 == 1 else [],
            source_episode_ids=[episode.id] if i % 4 < 2 else [],
            valid_from=at(10 * i),
            valid_until=at(10 * i + 200) if i % 6 == 0 else None,
            invalidated_by="gate" if i == 7 else None,
        ))
    facts.append(make_fact(content="Ada quarantined engine lesson", embedding=unit(0),
                           tags=[QUARANTINE_TAG], entity_ids=[ada.id]))
    facts.append(make_fact(content="a fact with no vector about Ada", embedding=None,
                           entity_ids=[ada.id]))
    await store.put_facts(facts)
    themes = [
        make_theme(label="ada", fact_ids=[f.id for f in facts[0:20:2]],
                   embedding=vec(1.0, 0.2, 0.1)),
        make_theme(label="bob", fact_ids=[f.id for f in facts[1:30:3]],
                   embedding=vec(1.0, 0.9, 0.4)),
        make_theme(label="engine", fact_ids=[f.id for f in facts[20:]],
                   embedding=vec(0.2, 1.0, 0.5)),
    ]
    await store.put_themes(themes)
    return {"ada": ada, "facts": facts}


def _plain(result: Any) -> dict[str, Any]:
    out = result.model_dump(mode="json")
    for fact in out["facts"]:
        fact.pop("access_count")
        fact.pop("last_accessed_at")
    return out


QUERY = vec(1.0, 0.5, 0.2, 0.1)
CASES: list[tuple[dict[str, Any], str | None, dict[str, Any]]] = [
    ({"text": "Ada and the analytical engine"}, "hybrid", {}),
    ({"text": "Bob greyhound notes"}, "hybrid", {}),
    ({"text": "Bob greyhound notes", "limit": 3}, "text", {}),
    ({"text": "Ada engine", "tags": ["lesson"]}, "hybrid", {}),
    ({"text": "Ada engine", "tags": [QUARANTINE_TAG]}, "hybrid", {}),
    ({"text": "Ada engine", "include_invalidated": True}, "hybrid", {}),
    ({"text": "Ada engine", "valid_at": at(150)}, "hybrid", {}),
    ({"text": "Ada engine", "changed_since": at(200)}, "hybrid", {}),
    ({"text": "Ada engine", "min_similarity": 0.9}, "hybrid", {}),
    ({"text": "Ada engine", "entity_types": ["thing"]}, "hybrid", {}),
    ({"text": "Ada engine", "limit": 4}, "hybrid", {"theme_limit": 0}),
    ({"text": "Ada engine"}, "hybrid", {"max_facts_per_theme": None, "message_limit": 0}),
    ({"text": "Ada engine"}, "hybrid", {"entity_match_limit": 0, "text_candidates": 5}),
    ({"text": "old name Ada"}, "hybrid", {"message_candidates": 1, "rrf_k": 5}),
    ({"text": "zzz unknown words"}, "hybrid", {}),
    ({"text": "the"}, "text", {}),
    ({}, "vector", {}),
    ({"text": "Ada engine", "limit": 2}, "vector", {"max_facts_per_theme": 3}),
    ({"tags": ["lesson"]}, "vector", {}),
    ({"valid_at": at(150)}, "vector", {}),
    ({"min_similarity": 0.95}, "vector", {}),
    ({"include_invalidated": True, "changed_since": at(100)}, "vector", {}),
    ({"limit": 3}, "vector", {"theme_limit": 0, "message_candidates": 2}),
    # The episode lists of the message fusion (found by vector and by text).
    ({"text": "Ada and the analytical engine"}, "hybrid", {"episode_weight": 0}),
    ({"text": "Bob greyhound notes"}, "text", {"episode_weight": 0}),
    ({}, "vector", {"episode_weight": 0}),
    ({"text": "Ada engine"}, "hybrid", {"episode_candidates": 1, "episode_weight": 2.0}),
    ({"text": "Ada engine", "include_invalidated": True}, "text", {"episode_candidates": 3}),
    ({"text": "greyhound", "min_similarity": 0.9}, "hybrid", {"message_limit": 5}),
]


@pytest.mark.parametrize("case", range(len(CASES)))
async def test_prefetched_signals_give_the_same_result(
    pg_store: Any, pg_index: Any, case: int
) -> None:
    await _world(pg_store, pg_index)
    fields, mode, options = CASES[case]
    query = MemoryQuery(**{"embedding": QUERY, "min_similarity": 0.0, **fields})
    opts = RetrievalOptions(**options)
    expected = await retrieve_memory(
        pg_store, _WithoutPrefetch(pg_index), query, mode=mode, options=opts  # type: ignore[arg-type]
    )
    got = await retrieve_memory(pg_store, pg_index, query, mode=mode, options=opts)  # type: ignore[arg-type]
    assert _plain(got) == _plain(expected)
    assert got.facts or fields.get("text") in ("zzz unknown words", "the") or fields.get("tags")


async def test_hybrid_statements(pg_store: Any, pg_index: Any, pg_sessionmaker: Any) -> None:
    """Settings, the candidates, the expansion (+ episodes, touch)."""
    await _world(pg_store, pg_index)
    statements: list[str] = []
    query = MemoryQuery(embedding=QUERY, text="Ada and the analytical engine",
                        min_similarity=0.0)
    await retrieve_memory(pg_store, pg_index, query)
    async with pg_sessionmaker() as session:
        bind = (await session.connection()).engine.sync_engine

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "SAVEPOINT" not in statement:  # the test's own transaction
            statements.append(statement)

    event.listen(bind, "before_cursor_execute", count)
    try:
        result = await retrieve_memory(pg_store, pg_index, query)
    finally:
        event.remove(bind, "before_cursor_execute", count)
    assert result.facts and result.messages and result.episodes and result.entities
    # settings; every signal's candidates (the episodes found by vector and by text, with
    # their messages, included); the expansion (entities, relationships, episodes) with the
    # touch. The served facts cite only messages already read (a fourth statement else).
    assert len(statements) == 3, statements
    assert "set_config" in statements[0] and "UNION ALL" in statements[1]
    assert "UPDATE facts" in statements[-1] and "episode_messages" in statements[-1]


async def test_prefetched_episode_lists(
    pg_store: Any, pg_index: Any, pg_sessionmaker: Any
) -> None:
    """The episode lists are answered from the one statement, as the real searches give."""
    await _world(pg_store, pg_index)
    async with pg_sessionmaker() as session:
        bind = (await session.connection()).engine.sync_engine
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "SAVEPOINT" not in statement:
            statements.append(statement)

    for inc in (False, True):
        for limit in (1, 2, 10):
            knn = {"limit": limit, "min_similarity": 0.0, "include_invalidated": inc}
            text = {"limit": limit, "include_invalidated": inc}
            words = "Ada engine notes greyhound"
            _, view = await pg_index.prefetch_signals(
                pg_store, episodes_knn=(QUERY, knn), episodes_text=(words, text)
            )
            event.listen(bind, "before_cursor_execute", count)
            try:
                by_vector = await view.search_episodes(QUERY, **knn)
                by_text = await view.text_search_episodes(words, **text)
            finally:
                event.remove(bind, "before_cursor_execute", count)
            assert statements == [], (inc, limit, statements)
            expected_vector = await pg_index.search_episodes(QUERY, **knn)
            expected_text = await pg_index.text_search_episodes(words, **text)
            assert [h.model_dump() for h in by_vector] == [
                h.model_dump() for h in expected_vector
            ]
            assert [h.model_dump() for h in by_text] == [h.model_dump() for h in expected_text]
            assert by_vector and by_text and all(h.item.messages for h in by_text)
            assert len(by_vector) == min(limit, 4 if inc else 3)


async def _plan_counts(pg_sessionmaker: Any) -> dict[str, tuple[bool, int, int]]:
    """Per prepared candidates statement: whether it has a kNN, generic and custom plans."""
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        rows = (await conn.execute(text(
            "SELECT name, statement LIKE '%<=>%', generic_plans, custom_plans "
            "FROM pg_prepared_statements "
            "WHERE statement LIKE 'WITH %' AND statement LIKE '%AS eid%'"
        ))).all()
    return {name: (bool(knn), int(g), int(c)) for name, knn, g, c in rows}


def _plans_between(before: dict[str, tuple[bool, int, int]],
                   after: dict[str, tuple[bool, int, int]], knn: bool) -> tuple[int, int]:
    """Generic and custom plans made in between (per statement: the driver's statement
    cache may drop an old one meanwhile)."""
    g = c = 0
    for name, (has_knn, generic, custom) in after.items():
        if has_knn is knn:
            _, g0, c0 = before.get(name, (knn, 0, 0))
            g, c = g + generic - g0, c + custom - c0
    return g, c


async def test_text_mode_reuses_a_generic_plan_when_the_guess_fits(
    pg_store: Any, pg_index: Any, pg_sessionmaker: Any
) -> None:
    """A statement without a kNN branch follows the kNN rule: with analyzed tables whose
    guess for an unknown tenant fits this one (it holds them alone), it is planned once."""
    await _world(pg_store, pg_index)
    async with pg_sessionmaker() as session:
        for table in ("facts", "entities", "episodes", "episode_messages", "themes"):
            await session.execute(text(f"ANALYZE {table}"))
        await session.commit()
    text_query = MemoryQuery(text="Ada and the analytical engine", limit=5)
    hybrid_query = MemoryQuery(embedding=QUERY, text="Ada and the analytical engine",
                               min_similarity=0.0, limit=5)
    first = await retrieve_memory(pg_store, pg_index, text_query, mode="text")
    before = await _plan_counts(pg_sessionmaker)
    for _ in range(3):
        again = await retrieve_memory(pg_store, pg_index, text_query, mode="text")
        assert [f.id for f in again.facts] == [f.id for f in first.facts]
        await retrieve_memory(pg_store, pg_index, hybrid_query, mode="hybrid")
    after = await _plan_counts(pg_sessionmaker)

    def delta(knn: bool) -> tuple[int, int]:
        return _plans_between(before, after, knn)

    assert delta(False) == (3, 0)  # the text calls: the generic plan, never replanned
    # The hybrid calls: a generic or a custom plan by the statistics at hand (the test
    # database's; tests/postgres/test_generic_knn_plans.py pins both outcomes).
    assert sum(delta(True)) == 3


async def test_knn_calls_reuse_a_generic_plan_once_statistics_fit_the_tenant(
    pg_store: Any, pg_index: Any, pg_sessionmaker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Analyzed tables where the planner's guess for an unknown tenant fits this one (here
    it holds the tables alone): the hybrid statement is planned once, with the same results
    as the custom plans gave."""
    await _world(pg_store, pg_index)
    query = MemoryQuery(embedding=QUERY, text="Ada and the analytical engine",
                        min_similarity=0.0, limit=5)
    from cycgraph_memory.postgres._base import PostgresBackend

    async def unknown(self: Any, session: Any, table: str) -> None:
        return None  # no estimate: custom plans

    with monkeypatch.context() as patch:
        patch.setattr(PostgresBackend, "_generic_rows", unknown)
        before = await _plan_counts(pg_sessionmaker)
        custom = await retrieve_memory(pg_store, pg_index, query, mode="hybrid")
        assert _plans_between(before, await _plan_counts(pg_sessionmaker), True) == (0, 1)
    async with pg_sessionmaker() as session, session.begin():
        for table in ("facts", "themes", "episodes", "episode_messages", "entities"):
            await session.execute(text(f"ANALYZE {table}"))
    index = type(pg_index)(pg_sessionmaker, tenant_id=pg_index.tenant_id)  # no cached estimate
    before = await _plan_counts(pg_sessionmaker)
    for _ in range(3):
        generic = await retrieve_memory(pg_store, index, query, mode="hybrid")
        assert [(f.id, f.content) for f in generic.facts] == [
            (f.id, f.content) for f in custom.facts
        ]
        for name in ("themes", "episodes", "entities", "relationships", "messages"):
            assert [r.id for r in getattr(generic, name)] == [
                r.id for r in getattr(custom, name)
            ], name
        assert {k: v.model_dump() for k, v in generic.fact_scores.items()} == {
            k: v.model_dump() for k, v in custom.fact_scores.items()
        }
    after = await _plan_counts(pg_sessionmaker)
    assert _plans_between(before, after, True) == (3, 0)
