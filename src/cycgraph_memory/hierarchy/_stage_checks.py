"""Private checks of what the pluggable stages hand back to :class:`MemoryPipeline`.

A segmenter, an extractor or a clusterer may be the user's own code. What it returns is
checked before anything is written, so a stage that returns the wrong objects, loses or
invents messages, cites records that are not there or leaves facts without a theme is
refused with a typed error (:class:`~cycgraph_memory.errors.InvalidTypeError` for the wrong
kind of object, :class:`~cycgraph_memory.errors.InvalidInputError` for records that break
the hierarchy) and the ingest writes nothing. The checks are linear in the batch and look
at ids only; the store validates every record's fields when it is written.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import TypeVar

from pydantic import BaseModel

from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.records import (
    Entity,
    Episode,
    ExtractionResult,
    Message,
    Relationship,
    SemanticFact,
    Theme,
)

__all__ = [
    "check_batch_ids",
    "check_episodes",
    "check_extraction",
    "check_themes",
]

R = TypeVar("R", bound=BaseModel)


def _records(value: object, kind: type[R], what: str) -> list[R]:
    """``value`` as a list of ``kind`` records, or :class:`InvalidTypeError`."""
    if isinstance(value, str | bytes | BaseModel) or not isinstance(value, Iterable):
        raise InvalidTypeError(
            f"{what} must return a list of {kind.__name__} records, got {type(value).__name__}"
        )
    out = list(value)
    for item in out:
        if not isinstance(item, kind):
            raise InvalidTypeError(
                f"{what} returned a {type(item).__name__} where a {kind.__name__} was expected"
            )
    return out


def check_episodes(episodes: object, messages: Sequence[Message]) -> list[Episode]:
    """The segmenter's episodes: a partition of exactly the ``messages`` it was given.

    Raises:
        InvalidTypeError: Not a list of ``Episode`` records.
        InvalidInputError: An episode without messages, two episodes with one id, a
            message left out, placed twice, or not among those given.
    """
    out = _records(episodes, Episode, "the segmenter")
    given = {m.id for m in messages}
    placed: set[uuid.UUID] = set()
    episode_ids: set[uuid.UUID] = set()
    for episode in out:
        if episode.id in episode_ids:
            raise InvalidInputError(f"the segmenter returned episode {episode.id} twice")
        episode_ids.add(episode.id)
        if not episode.messages:
            raise InvalidInputError(f"the segmenter returned episode {episode.id} with no message")
        for message in episode.messages:
            if not isinstance(message, Message):
                raise InvalidTypeError(
                    f"episode {episode.id} holds a {type(message).__name__}, not a Message"
                )
            if message.id not in given:
                raise InvalidInputError(
                    f"the segmenter put message {message.id} in episode {episode.id}, "
                    "but it was not among the messages to segment"
                )
            if message.id in placed:
                raise InvalidInputError(
                    f"the segmenter put message {message.id} in more than one episode"
                )
            placed.add(message.id)
    missing = given - placed
    if missing:
        raise InvalidInputError(
            f"the segmenter left {len(missing)} message(s) out of every episode "
            f"(e.g. {min(missing)}): every message must be in exactly one episode"
        )
    return out


def check_extraction(result: object, episode: Episode) -> ExtractionResult:
    """The extractor's result for ``episode``: records of the right kinds, citing it.

    Every fact must cite ``episode`` among its ``source_episode_ids`` and only messages of
    ``episode`` in its ``source_message_ids`` (the provenance of a fact).

    Raises:
        InvalidTypeError: Not an ``ExtractionResult``, or a record of the wrong kind in it.
        InvalidInputError: A fact that does not cite ``episode`` or cites a message that
            is not in it.
    """
    if not isinstance(result, ExtractionResult):
        raise InvalidTypeError(
            f"the extractor must return an ExtractionResult, got {type(result).__name__}"
        )
    _records(result.facts, SemanticFact, "the extractor (facts)")
    _records(result.entities, Entity, "the extractor (entities)")
    _records(result.relationships, Relationship, "the extractor (relationships)")
    message_ids = {m.id for m in episode.messages}
    for fact in result.facts:
        if episode.id not in fact.source_episode_ids:
            raise InvalidInputError(
                f"the extractor returned fact {fact.id} that does not cite the episode "
                f"{episode.id} it was extracted from (source_episode_ids)"
            )
        foreign = [i for i in fact.source_message_ids if i not in message_ids]
        if foreign:
            raise InvalidInputError(
                f"the extractor returned fact {fact.id} citing message {foreign[0]}, "
                f"which is not in episode {episode.id}"
            )
    return result


def check_batch_ids(
    facts: Sequence[SemanticFact],
    entities: Sequence[Entity],
    relationships: Sequence[Relationship],
) -> None:
    """No two records of one kind in one ingest share an id (one would overwrite the other).

    Raises:
        InvalidInputError: Two facts, entities or relationships with the same id.
    """
    for kind, records in (
        ("fact", facts),
        ("entity", entities),
        ("relationship", relationships),
    ):
        seen: set[uuid.UUID] = set()
        for record in records:
            if record.id in seen:
                raise InvalidInputError(
                    f"the extractor returned two {kind} records with id {record.id}"
                )
            seen.add(record.id)


def check_themes(
    themes: object, facts: Sequence[SemanticFact], existing: Sequence[Theme]
) -> list[Theme]:
    """The clusterer's themes: every fact, new or already in a theme, in exactly one.

    Each fact of the batch must name a returned theme in ``theme_id`` that lists it; each
    fact an existing theme lists must stay listed by exactly one returned theme (its
    theme, or the one that absorbed it); a returned theme lists no other fact.

    Raises:
        InvalidTypeError: Not a list of ``Theme`` records.
        InvalidInputError: Two themes with one id, a fact in no theme or in two, a fact
            whose ``theme_id`` is not the theme listing it, or a theme listing an
            unknown fact.
    """
    out = _records(themes, Theme, "the clusterer")
    owner: dict[uuid.UUID, uuid.UUID] = {}
    theme_ids: set[uuid.UUID] = set()
    for theme in out:
        if theme.id in theme_ids:
            raise InvalidInputError(f"the clusterer returned theme {theme.id} twice")
        theme_ids.add(theme.id)
        for fact_id in theme.fact_ids:
            if owner.setdefault(fact_id, theme.id) != theme.id:
                raise InvalidInputError(
                    f"the clusterer put fact {fact_id} in two themes "
                    f"({owner[fact_id]} and {theme.id})"
                )
    known: set[uuid.UUID] = {f.id for f in facts}
    for theme in existing:
        known.update(theme.fact_ids)
    unknown = [i for i in owner if i not in known]
    if unknown:
        raise InvalidInputError(
            f"the clusterer returned a theme listing fact {unknown[0]}, which is neither "
            "in the batch nor in an existing theme"
        )
    for fact in facts:
        if fact.theme_id is None or owner.get(fact.id) != fact.theme_id:
            raise InvalidInputError(
                f"the clusterer left fact {fact.id} with theme_id {fact.theme_id}, but "
                f"it is listed by {owner.get(fact.id)}: every fact must be in exactly "
                "the one theme its theme_id names"
            )
    for theme in existing:
        for fact_id in theme.fact_ids:
            if fact_id not in owner:
                raise InvalidInputError(
                    f"the clusterer dropped fact {fact_id} of existing theme {theme.id}: "
                    "a merged-away theme's facts must move to the theme that absorbs it"
                )
    return out
