"""Private state and record building of the parser tier (no spaCy import)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime

from cycgraph_memory.hierarchy.extractors._conversation import Turn, fact_text
from cycgraph_memory.hierarchy.extractors._edges import relationships_of
from cycgraph_memory.hierarchy.extractors.rules import _Acc, _Edge
from cycgraph_memory.hierarchy.extractors.simple import derived_provenance, fact_id_for
from cycgraph_memory.records import (
    MAX_NAME_LENGTH,
    Entity,
    Episode,
    ExtractionResult,
    SemanticFact,
)

__all__ = ["ParseState", "build_result", "merge_aliases", "subject_antecedent"]


@dataclass(slots=True)
class ParseState:
    """Everything the parser tier learns about one episode."""

    entities: dict[str, _Acc] = field(default_factory=dict)
    edges: list[_Edge] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)
    turn_of: list[int] = field(default_factory=list)
    questions: list[bool] = field(default_factory=list)
    sentence_keys: list[list[str]] = field(default_factory=list)
    history: list[tuple[tuple[int, int], str]] = field(default_factory=list)
    # ((sentence, token), key) of the mentions that were grammatical subjects, in order
    # (a subject pronoun prefers the latest of them: see ``ParserExtractor._ref``).
    subjects: list[tuple[tuple[int, int], str]] = field(default_factory=list)
    speakers: set[str] = field(default_factory=set)
    role_speakers: set[str] = field(default_factory=set)
    # Names only the parser proposes (kept when an edge uses them), and names backed once.
    weak: set[str] = field(default_factory=set)
    backed: set[str] = field(default_factory=set)


def subject_antecedent(state: ParseState, position: tuple[int, int], types: set[str]) -> str | None:
    """The latest subject of one of ``types`` before ``position`` (same or 2 sentences back).

    Subject pronouns prefer the previous subject over a more recent object (centering):
    "Carla is our new manager, she reports to Victor. ... she ran the cloud team".
    Speakers are left to first-person resolution.
    """
    for seen, key in reversed(state.subjects):
        if seen >= position:
            continue
        if seen[0] < position[0] - 2:
            return None
        acc = state.entities.get(key)
        if acc is not None and acc.type in types and key not in state.speakers:
            return key
    return None


def merge_aliases(state: ParseState) -> None:
    """Merge a one-word mention into the only multi-word entity it starts or ends."""
    multi = [a for a in state.entities.values() if a.words >= 2 and a.words < 99]
    remap: dict[str, str] = {}
    for acc in list(state.entities.values()):
        if acc.words != 1 or acc.key in state.speakers:
            continue
        hosts = [
            m
            for m in multi
            if (acc.key == m.key.split()[0] and (acc.type != "person" or m.type == "person"))
            or (acc.key == m.key.split()[-1] and m.type == "person")
        ]  # "Mr. Alvarez" is not "Alvarez Bakery".
        if len(hosts) == 1:
            host = hosts[0]
            host.aliases.append(acc.name)
            host.add(acc.cues)
            host.order = min(host.order, acc.order)
            remap[acc.key] = host.key
            del state.entities[acc.key]
    if not remap:
        return
    state.edges = [
        replace(e, source=remap.get(e.source, e.source), target=remap.get(e.target, e.target))
        for e in state.edges
    ]
    state.sentence_keys = [
        list(dict.fromkeys(remap.get(k, k) for k in keys)) for keys in state.sentence_keys
    ]


def build_result(
    episode: Episode,
    turns: list[Turn],
    state: ParseState,
    now: datetime,
    min_sentence_length: int,
    max_facts: int,
) -> ExtractionResult:
    """The records of one analysed episode (entities, relationships, facts)."""
    entity_ids = {key: fact_id_for(episode.id, "parser-entity", key) for key in state.entities}
    entities = [
        Entity(
            id=entity_ids[acc.key],
            name=acc.name[:MAX_NAME_LENGTH],
            entity_type=acc.type,
            attributes={"aliases": sorted(set(acc.aliases))} if acc.aliases else {},
            provenance=derived_provenance(episode, confidence=_confidence(acc), created_at=now),
            created_at=now,
            updated_at=now,
        )
        for acc in sorted(state.entities.values(), key=lambda a: a.order)
    ]
    relationships = relationships_of(
        episode,
        turns,
        state.turn_of,
        state.sentences,
        state.edges,
        entity_ids,
        "parser-relationship",
        now,
    )
    facts = _facts(episode, turns, state, entity_ids, now, min_sentence_length, max_facts)
    episode.fact_ids = [f.id for f in facts]
    return ExtractionResult(facts=facts, entities=entities, relationships=relationships)


def _facts(
    episode: Episode,
    turns: list[Turn],
    state: ParseState,
    entity_ids: dict[str, uuid.UUID],
    now: datetime,
    min_sentence_length: int,
    max_facts: int,
) -> list[SemanticFact]:
    edge_count: dict[int, int] = {}
    for edge in state.edges:
        edge_count[edge.sentence] = edge_count.get(edge.sentence, 0) + 1
    candidates: list[tuple[int, int]] = []
    for index, sentence in enumerate(state.sentences):
        if state.questions[index] or len(sentence) < min_sentence_length:
            continue
        score = 3 * edge_count.get(index, 0) + len(state.sentence_keys[index])
        candidates.append((score, index))
    chosen = sorted(candidates, key=lambda c: (-c[0], c[1]))[:max_facts]
    facts: list[SemanticFact] = []
    for _, index in sorted(chosen, key=lambda c: c[1]):
        keys = state.sentence_keys[index]
        confidence = 0.75 if edge_count.get(index) else (0.6 if keys else 0.5)
        facts.append(
            SemanticFact(
                id=fact_id_for(episode.id, "parser-fact", str(index)),
                content=fact_text(turns[state.turn_of[index]], state.sentences[index]),
                source_episode_ids=[episode.id],
                entity_ids=[entity_ids[k] for k in keys if k in entity_ids],
                provenance=derived_provenance(episode, confidence=confidence, created_at=now),
                valid_from=episode.started_at,
            )
        )
    return facts


def _confidence(acc: _Acc) -> float:
    best = acc.cues.get(acc.type, 0)
    if best >= 70:
        return 0.8
    if best >= 40:
        return 0.65
    return 0.5
