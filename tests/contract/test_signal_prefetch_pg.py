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
from sqlalchemy import event

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
    episode = make_episode(messages=[ma, mb, mc], started_at=at(10), ended_at=at(30))
    await store.put_episodes([episode])
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
    """Settings, the candidates, the grounding messages, the expansion (+ episodes, touch)."""
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
    # settings; every signal's candidates; the episodes found by vector and by text (two
    # statements, not yet folded into the candidates); the expansion
    # (entities, relationships, episodes) with the touch
    assert len(statements) == 5, statements
    assert "set_config" in statements[0] and "UNION ALL" in statements[1]
    assert "UPDATE facts" in statements[-1] and "episode_messages" in statements[-1]
