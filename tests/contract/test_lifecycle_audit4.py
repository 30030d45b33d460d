"""Lifecycle audit 4 (both backends).

* ``purge`` left the id of an erased fact (relationship) in the ``invalidated_by`` of a
  surviving soft-deleted fact (relationship) that a merge or a conflict resolution had
  invalidated in its favour: a table row still named erased data, and the reference
  dangled. The survivor now stays invalidated with ``invalidated_by = ERASED_BY``.
* ``reembed``'s final checkpoint carried ``done=0``: resuming from it (a crash after the
  last batch, in the index rebuild) re-embedded the whole last type again.
* ``import_(atomic=None)`` (or ``0``) silently committed batch by batch, so a file
  refused at its end was left half-written; ``export(embeddings=None)`` wrote
  ``"embeddings":null`` and dropped the vectors. The flags must be real bools now, as
  ``purge``'s ``dry_run`` (``defer_vector_indexes``: a bool or ``None``).
* ``Memory.open(dsn, migrate="no")`` migrated the database: ``migrate`` must be a bool.
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from cycgraph_memory.embeddings import HashingEmbeddingProvider
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.lifecycle import (
    ERASED_BY,
    ReembedProgress,
    export,
    export_lines,
    import_,
    purge,
    reembed,
)

from .factories import (
    EMBED_DIM,
    make_entity,
    make_episode,
    make_fact,
    make_message,
    make_relationship,
    unit,
)
from .test_lifecycle_purge import _raw_sql_dump


async def _dump_all(store: Any, entity_ids: list[Any]) -> str:
    parts = [f.model_dump_json() for f in await store.find_facts(include_invalidated=True)]
    parts += [
        r.model_dump_json()
        for r in await store.get_relationships_for_entities(entity_ids, include_invalidated=True)
    ]
    return "\n".join(parts)


async def test_purge_leaves_no_erased_id_in_invalidated_by(
    store: Any, index: Any, backend: str, request: Any
) -> None:
    kept_msg = make_message(content="Ada writes Python")
    dup_msg = make_message(content="Ada writes Python, again")
    other_msg = make_message(content="Ada is an engineer")
    await store.put_episodes([make_episode(messages=[kept_msg, dup_msg, other_msg])])
    keeper = make_fact(content="Ada writes Python", source_message_ids=[kept_msg.id],
                       embedding=unit(0))
    # Merged into the keeper (as MemoryConsolidator does), then the keeper's source goes.
    loser = make_fact(content="Ada writes Python", source_message_ids=[dup_msg.id],
                      embedding=unit(0), invalidated_by=str(keeper.id))
    bystander = make_fact(content="Ada is an engineer", source_message_ids=[other_msg.id],
                          invalidated_by="forgotten")
    await store.put_facts([keeper, loser, bystander])
    a, b = make_entity(name="Ada"), make_entity(name="Python")
    await store.put_entities([a, b])
    kept_edge = make_relationship(a.id, b.id, relation_type="uses",
                                  attributes={"message_id": str(kept_msg.id)})
    dropped_edge = make_relationship(a.id, b.id, relation_type="uses",
                                     invalidated_by=str(kept_edge.id))
    await store.put_relationships([kept_edge, dropped_edge])
    if hasattr(index, "upsert_many"):
        await index.rebuild(store)
    erased = [str(keeper.id), str(kept_edge.id)]
    before = await _dump_all(store, [a.id, b.id])
    assert all(needle in before for needle in erased)

    dry = await purge(store, message_ids=[kept_msg.id], index=index, dry_run=True)
    assert await _dump_all(store, [a.id, b.id]) == before
    report = await purge(store, message_ids=[kept_msg.id], index=index)
    assert report.model_dump(exclude={"dry_run"}) == dry.model_dump(exclude={"dry_run"})
    assert (report.facts, report.relationships) == (1, 1)
    assert report.facts_updated == 1 and report.relationships_updated == 1

    after = await _dump_all(store, [a.id, b.id])
    for needle in erased:
        assert needle not in after
        assert needle not in await _raw_sql_dump(backend, request)
    survivor = await store.get_fact(loser.id)
    assert survivor is not None and survivor.invalidated_by == ERASED_BY
    assert survivor.content == loser.content and survivor.source_message_ids == [dup_msg.id]
    edge = await store.get_relationship(dropped_edge.id)
    assert edge is not None and edge.invalidated_by == ERASED_BY
    untouched = await store.get_fact(bystander.id)
    assert untouched is not None and untouched.invalidated_by == "forgotten"
    assert [f.id for f in await store.find_facts()] == []  # nothing resurfaced
    again = await purge(store, message_ids=[kept_msg.id], index=index, dry_run=True)
    assert again.counts() == {k: 0 for k in again.counts()}


async def test_the_final_reembed_checkpoint_repeats_nothing(store: Any) -> None:
    """The last checkpoint said ``done=0``: resuming from it re-embedded the whole type."""
    facts = [make_fact(content=f"fact {i}", embedding=unit(i)) for i in range(5)]
    await store.put_facts(facts)
    provider = HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=1)
    seen: list[ReembedProgress] = []
    await reembed(store, provider, record_types=["fact"], batch_size=2, progress=seen.append)
    last = seen[-1]
    assert last.finished and (last.record_type, last.done, last.written) == ("fact", 5, 5)
    calls: list[int] = []

    class Counting:
        dimensions = EMBED_DIM

        async def embed(self, texts: list[str]) -> list[list[float]]:
            calls.append(len(texts))
            return await provider.embed(texts)

    again: list[ReembedProgress] = []
    await reembed(store, Counting(), record_types=["fact"], batch_size=2, resume_from=last,
                  progress=again.append)
    assert sum(calls) == 0
    assert again[-1].finished and again[-1].done == 5


def _truncated_export(n: int) -> str:
    """An export of ``n`` facts whose end line is missing (refused at the end)."""
    lines = ['{"embeddings":true,"format":"cycgraph-memory","version":1}']
    lines += [
        '{"type":"fact","record":' + make_fact(content=f"fact {i}").model_dump_json() + "}"
        for i in range(n)
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("flag", [None, 0, "no", "yes"])
async def test_import_atomic_must_be_a_real_bool(store: Any, flag: Any) -> None:
    """``atomic=None`` (or ``0``) committed batch by batch: a refused file half-written."""
    with pytest.raises(InvalidTypeError):
        await import_(store, io.StringIO(_truncated_export(5)), batch_size=2, atomic=flag)
    assert await store.find_facts(include_invalidated=True) == []


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"defer_vector_indexes": "no"}, InvalidTypeError),
     ({"defer_vector_indexes": 0}, InvalidTypeError),
     ({"batch_size": True}, InvalidInputError)],
)
async def test_import_flags_are_checked_before_anything_is_read(
    store: Any, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    source = io.StringIO(_truncated_export(3))
    with pytest.raises(error):
        await import_(store, source, **kwargs)
    assert source.tell() == 0
    assert await store.find_facts(include_invalidated=True) == []


@pytest.mark.parametrize("flag", [None, 1, "false"])
async def test_export_embeddings_must_be_a_real_bool(store: Any, flag: Any) -> None:
    """``embeddings=None`` wrote ``"embeddings":null`` in the header and dropped vectors."""
    await store.put_facts([make_fact(content="x", embedding=unit(0))])
    out = io.StringIO()
    with pytest.raises(InvalidTypeError):
        await export(store, out, embeddings=flag)
    assert out.getvalue() == ""
    with pytest.raises(InvalidTypeError):
        async for _ in export_lines(store, embeddings=flag):
            pass


@pytest.mark.postgres
@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("flag", ["no", 0, None])
async def test_memory_open_migrate_must_be_a_real_bool(pg_databases: Any, flag: Any) -> None:
    """``Memory.open(dsn, migrate="no")`` migrated the database (``"no"`` is truthy)."""
    from cycgraph_memory import Memory
    from cycgraph_memory.postgres.migrate import schema_status

    dsn = str(await pg_databases.create("audit4_migrate"))
    with pytest.raises(InvalidTypeError):
        await Memory.open(dsn, migrate=flag)
    with pytest.raises(InvalidTypeError):
        await Memory.open("memory://", migrate=flag)
    current, _head, _dim = await schema_status(dsn)
    assert current is None  # no migration ran
