"""Rule-based extraction: sentence-level pattern matching, no LLM.

:class:`RuleBasedExtractor` turns one episode into facts, entities and relationships:

* **Input.** Messages with role ``user`` or ``assistant`` (configurable with ``roles``);
  system prompts and tool output are instructions and raw data, not conversational
  claims. Each message is split into sentences (abbreviations, decimals, URLs and e-mail
  addresses do not split; line breaks and bullets do).
* **Entities.** Capitalised names, @handles, camelCase / PascalCase identifiers, ACRONYMS,
  lowercase names of well-known software and matches of ``entity_patterns``. Types
  (person, organization, tool, location, concept) come from summed cues: titles and
  role nouns ("Dr.", "my sister"), organisation suffixes ("Corp", "Labs", "University"),
  modest gazetteers, identifier shape, prepositions ("at X", "in X"), "a startup called X",
  and the relations an entity takes part in (the object of ``work_at`` is an organization,
  the subject of ``live_in`` a person, the object of ``use`` a tool, ...). Mentions are
  merged per episode by :func:`~cycgraph_memory.normalize.normalize_entity_name`; a
  one-word person mention ("Dana") also merges into the episode's only multi-word person
  starting or ending with that word ("Dana Whitfield"). Entity matching is word-bounded
  ("Smith" never inside "Blacksmith").
* **Relationships.** About thirty canonical relations (``work_at``, ``manage``,
  ``depend_on``, ``use``, ``found``, ...) with inflected verb forms, passive voice, verb-
  phrase and name coordination, relative clauses and pronoun resolution (he/she/him/her
  -> the most recent person; it/they/them -> the most recent organization, tool or
  concept). Negated claims and genuine questions yield no edge.
* **Facts.** One fact per informative sentence (at least ``min_sentence_length``
  characters, not a question), at most ``max_facts`` per episode, preferring sentences with
  relationships, then with entities, and kept in conversation order.
* **Speakers.** The speaker of each message (metadata ``name`` or ``speaker``, else the
  role) is a person; I/me/we resolve to the speaker, you to the addressee of a two-party
  episode; facts from a named speaker read ``"Speaker: sentence"``; relationships record
  ``message_id`` and ``speaker``. A role ("user") becomes an entity only when a claim
  names it.
* **Work caps.** A message is read up to 20,000 characters; a sentence longer than 120
  words is analysed in 120-word pieces, and context cues look at a bounded window, so the
  cost is linear in the input. Episodes with more than ``OFFLOAD_CHARS`` characters run
  in a worker thread (``asyncio.to_thread``).
* **Ids.** Deterministic: ``uuid5`` of the episode id plus the sentence index (facts), the
  normalised name (entities) or ``source|relation|target`` (relationships), so
  re-extracting an episode yields the same ids and re-ingest is an idempotent upsert.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cycgraph_memory._validate import check_callable, instance_of, keyword_options, string_list
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.hierarchy.extractors._chat_graph import chat_edges
from cycgraph_memory.hierarchy.extractors._conversation import (
    FIRST_PERSON,
    SECOND_PERSON,
    Turn,
    chunk_sentence,
    fact_text,
    turns_of,
)
from cycgraph_memory.hierarchy.extractors._edges import relationships_of
from cycgraph_memory.hierarchy.extractors._entities import (
    CustomPattern,
    Mention,
    capitalized_tokens,
    detect_mentions,
    masked_tokens,
)
from cycgraph_memory.hierarchy.extractors._episode_cues import episode_type_cues
from cycgraph_memory.hierarchy.extractors._frames import (
    BE_AT,
    ENDED_FRAMES,
    FRAME_RELATIONS,
    MOVE_FRAMES,
    PLACE_FRAMES,
    place_relation,
)
from cycgraph_memory.hierarchy.extractors._lexicon import product_name
from cycgraph_memory.hierarchy.extractors._polarity import (
    STATIVE_RELATIONS,
    claim_clause,
    claim_polarity,
)
from cycgraph_memory.hierarchy.extractors._relations import (
    PRONOUNS,
    Arg,
    asks,
    find_pronouns,
    frame_relations,
    is_question,
    match_relations,
    trigger_index,
)
from cycgraph_memory.hierarchy.extractors._roles import role_relations
from cycgraph_memory.hierarchy.extractors._sentences import split_sentences
from cycgraph_memory.hierarchy.extractors._until import claim_dates, coarse_since
from cycgraph_memory.hierarchy.extractors._verbs import (
    BUILTIN_RELATIONS,
    RelationPattern,
    build_patterns,
    canonical_relation,
    inflect,
)
from cycgraph_memory.hierarchy.extractors.simple import derived_provenance, fact_id_for
from cycgraph_memory.normalize import normalize_entity_name
from cycgraph_memory.records import (
    MAX_NAME_LENGTH,
    Entity,
    Episode,
    ExtractedEntity,
    ExtractionResult,
    SemanticFact,
    utc_now,
)


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


__all__ = ["ENTITY_TYPES", "OFFLOAD_CHARS", "RELATION_TYPES", "RuleBasedExtractor"]

OFFLOAD_CHARS = 4_000
"""Episodes with more text than this (characters read) are analysed in a worker thread."""

ENTITY_TYPES = ("person", "organization", "tool", "location", "concept", "animal", "event")
"""Entity types the rule-based extractor assigns (custom patterns may add others)."""

RELATION_TYPES = tuple(BUILTIN_RELATIONS)
"""Canonical names of the built-in relations."""

# "Kevin left Initech", "quit", "resigned from" (work_at phrases of ``_verbs``): a departure
# only ever ends a job, at an organisation, and only once it has happened.
DEPARTURE_VERBS = re.compile(r"\b(?:left|quit|quits|resigned)\b", re.IGNORECASE)
_NOT_EMPLOYERS = frozenset({"person", "location", "tool", "animal", "event"})
"""Entity types that are never an employer (of a departure or an employment frame)."""
_FUTURE = re.compile(r"\b(?:will|shall|gonna|going\s+to)\b|['\u2019]ll\b", re.IGNORECASE)

# Relation-argument type cues: relation -> ((subject type, score), (object type, score)).
_ROLE_CUES: dict[str, tuple[tuple[str, int] | None, tuple[str, int] | None]] = {
    "work_at": (("person", 60), ("organization", 60)),
    "join": (("person", 30), ("organization", 60)),
    "study_at": (("person", 60), ("organization", 60)),
    "teach_at": (("person", 60), ("organization", 60)),
    "report_to": (("person", 60), ("person", 60)),
    "mentor": (("person", 60), ("person", 60)),
    "hire": (("organization", 30), ("person", 60)),
    "live_in": (("person", 60), ("location", 60)),
    "move_to": (None, ("location", 60)),
    "locate_in": (("organization", 60), ("location", 60)),
    "acquire": (("organization", 60), ("organization", 60)),
    "invest_in": (("organization", 40), ("organization", 60)),
    "fund": (("organization", 40), ("organization", 40)),
    "found": (("person", 60), ("organization", 60)),
    "lead": (("person", 60), ("organization", 50)),
    "manage": (("person", 60), ("organization", 30)),
    "use": (None, ("tool", 60)),
    "depend_on": (("tool", 30), ("tool", 60)),
    "maintain": (("person", 40), ("tool", 50)),
    "develop": (None, ("tool", 40)),
    "build": (None, ("tool", 40)),
    "create": (None, ("tool", 30)),
    "part_of": (("organization", 30), ("organization", 40)),
    "own": (None, None),
    "partner_with": (("organization", 40), ("organization", 40)),
    "collaborate_with": (None, None),
}
_TYPE_ORDER = {t: i for i, t in enumerate(("person", "organization", "location", "tool"))}
_AUX_HINTS = _wordset(
    """
    is are was were has have had will would can could should does did said says told
    thinks wants needs got gets went goes makes made spent keeps
    """
)
_PRONOUN_TYPES = {"person": {"person"}, "thing": {"organization", "tool", "concept"}}
_STRIP_QUOTES = re.compile(r"^[\"'\u201c\u2018]+|[\"'\u201d\u2019]+$")


class _RuleOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min_sentence_length: int = Field(default=20, ge=0, strict=True)
    max_facts: int = Field(default=10, ge=1, le=1000, strict=True)
    roles: tuple[Literal["user", "assistant", "system", "tool"], ...] = ("user", "assistant")


@dataclass(slots=True)
class _Acc:
    """An entity accumulated over an episode."""

    key: str
    name: str
    order: int
    cues: dict[str, int] = field(default_factory=dict)
    aliases: list[str] = field(default_factory=list)
    words: int = 1

    def add(self, cues: dict[str, int]) -> None:
        for entity_type, score in cues.items():
            self.cues[entity_type] = self.cues.get(entity_type, 0) + score

    @property
    def type(self) -> str:
        if not self.cues:
            return "concept"
        return max(self.cues, key=lambda t: (self.cues[t], -_TYPE_ORDER.get(t, 9)))


@dataclass(frozen=True, slots=True)
class _Edge:
    source: str
    relation: str
    target: str
    confidence: float
    sentence: int
    ended: bool = False
    until: str | None = None
    """The "until" phrase of an ended claim ("March" of "worked at X until March")."""
    since: str | None = None
    """The "since" phrase of an open claim ("2021" of "has worked at X since 2021")."""


@dataclass(slots=True)
class _Analysis:
    sentences: list[str] = field(default_factory=list)
    turn_of: list[int] = field(default_factory=list)
    speakers: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)
    role_speakers: set[str] = field(default_factory=set)
    questions: list[bool] = field(default_factory=list)
    sentence_keys: list[list[str]] = field(default_factory=list)
    entities: dict[str, _Acc] = field(default_factory=dict)
    edges: list[_Edge] = field(default_factory=list)


def _compile_custom(
    patterns: Sequence[str | re.Pattern[str] | tuple[str | re.Pattern[str], str]] | None,
) -> list[CustomPattern]:
    out: list[CustomPattern] = []
    if isinstance(patterns, re.Pattern):
        patterns = [patterns]
    for item in string_list(patterns or (), "entity_patterns"):
        entity_type: object = "concept"
        if isinstance(item, tuple):
            if len(item) != 2:
                raise InvalidTypeError(
                    f"an entity pattern tuple is (pattern, entity_type), got {item!r}"
                )
            item, entity_type = item
        if not isinstance(entity_type, str) or not entity_type.strip():
            raise InvalidTypeError(f"entity_type must be a non-empty string, got {entity_type!r}")
        if isinstance(item, re.Pattern):
            compiled = item
        elif isinstance(item, str):
            try:
                compiled = re.compile(item)
            except re.error as exc:
                raise InvalidInputError(f"invalid entity pattern {item!r}: {exc}") from None
        else:
            raise InvalidTypeError(
                f"an entity pattern is a string, a compiled pattern or a (pattern, type) "
                f"tuple, got {type(item).__name__}"
            )
        if not isinstance(compiled.pattern, str):
            raise InvalidTypeError(
                f"entity pattern {compiled.pattern!r} must match text, not bytes"
            )
        if compiled.match("") is not None:
            raise InvalidInputError(
                f"entity pattern {compiled.pattern!r} matches the empty string"
            )
        out.append((compiled, entity_type))
    return out


class RuleBasedExtractor:
    """Sentence-level pattern matching for multiple facts, entities and relationships.

    Implements the ``SemanticExtractor`` contract. See the module docstring for the rules.

    The options may also come as one mapping in the first place (the spec's
    ``new RuleBasedExtractor({ minSentenceLength: 20 })``):
    ``RuleBasedExtractor({"min_sentence_length": 20})``, with the names below; an unknown
    name is an ``InvalidTypeError``, a mapping together with other arguments an
    ``InvalidInputError``.

    Args:
        min_sentence_length: Sentences shorter than this (characters) yield no fact
            (default 20). Or the options mapping.
        entity_patterns: Extra entity regexes. Each item is a pattern (string or compiled)
            or a ``(pattern, entity_type)`` tuple; the default type is ``"concept"``. When a
            pattern has a group named ``name``, that group is the entity name, otherwise
            the whole match. Custom matches win over built-in detection.
        relationship_verbs: Extra relation verbs, e.g. ``["sponsor", "contribute to"]``:
            a base verb with an optional particle. The relation name is the phrase joined
            by ``_`` (``contribute_to``). Regular inflection only; irregular or
            consonant-doubling verbs ("stop" -> "stopped") need their inflected forms
            listed as separate entries (each then maps to its own name unless given as
            ``"stopped=stop"``, i.e. ``form=canonical``).
        max_facts: Most facts per episode (default 10).
        roles: Message roles to read (default user and assistant).
        clock: Returns "now" for provenance and entity timestamps.

    Raises:
        pydantic.ValidationError: For invalid option values.
        InvalidInputError: For an entity pattern that does not compile or matches the
            empty string, a relationship verb with no words, or an options mapping
            together with other arguments.
        InvalidTypeError: For an entity pattern, entity type or verb of the wrong type,
            a ``clock`` that is not callable, or an options mapping with an unknown name.
    """

    def __init__(
        self,
        min_sentence_length: int | Mapping[str, Any] = 20,
        entity_patterns: Sequence[str | re.Pattern[str] | tuple[str | re.Pattern[str], str]]
        | None = None,
        relationship_verbs: Sequence[str] | None = None,
        *,
        max_facts: int = 10,
        roles: Sequence[Literal["user", "assistant", "system", "tool"]] = ("user", "assistant"),
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if isinstance(min_sentence_length, Mapping):
            given = keyword_options(
                RuleBasedExtractor.__init__,
                min_sentence_length,
                locals(),
                "RuleBasedExtractor",
                slot="min_sentence_length",
            )
            RuleBasedExtractor.__init__(self, **given)
            return
        self._options = _RuleOptions(
            min_sentence_length=min_sentence_length, max_facts=max_facts, roles=tuple(roles)
        )
        self._custom = _compile_custom(entity_patterns)
        custom_relations: dict[str, tuple[str, ...]] = {}
        for verb in string_list(relationship_verbs or (), "relationship_verbs"):
            if not isinstance(verb, str):
                raise InvalidTypeError(
                    f"a relationship verb is a string, got {type(verb).__name__}"
                )
            phrase, _, name = verb.partition("=")
            canonical = canonical_relation(name or phrase)
            if not phrase.strip() or not canonical:
                raise InvalidInputError(f"invalid relationship verb {verb!r}")
            custom_relations.setdefault(canonical, ())
            custom_relations[canonical] += (phrase.strip(),)
        self._patterns: list[RelationPattern] = build_patterns(
            custom_relations, custom=True
        ) + build_patterns(BUILTIN_RELATIONS)
        hints = set(_AUX_HINTS)
        for phrases in (*BUILTIN_RELATIONS.values(), *custom_relations.values()):
            for phrase in phrases:
                head = phrase.lstrip("=").split()[0].lower()
                hints.update(inflect(head).all_forms() if not phrase.startswith("=") else {head})
        self._verb_hints = frozenset(hints)
        self._triggers = trigger_index(self._patterns)
        self._clock = check_callable(clock, "clock")

    @property
    def min_sentence_length(self) -> int:
        """Sentences shorter than this yield no fact."""
        return self._options.min_sentence_length

    # ------------------------------------------------------------------ analysis

    def _analyze(self, turns: Sequence[Turn], *, speakers: bool = True) -> _Analysis:
        result = _Analysis()
        speaker_keys: dict[str, str] = {}  # each distinct speaker is registered once
        for turn_index, turn in enumerate(turns):
            slots: list[str | None] = [None, None]
            if speakers:
                for slot, name in enumerate((turn.speaker, turn.addressee)):
                    if not name:
                        continue
                    key = speaker_keys.get(name)
                    if key is None:
                        mention = Mention(0, 0, name, normalize_entity_name(name), words=99)
                        mention.cue("person", 100)
                        self._register(result.entities, mention)
                        key = speaker_keys[name] = mention.key
                    slots[slot] = key
                    if not turn.named:
                        result.role_speakers.add(key)
            result.speakers[turn_index] = (slots[0], slots[1])
            for line in split_sentences(turn.text):
                for piece in chunk_sentence(_STRIP_QUOTES.sub("", line)):
                    result.sentences.append(piece)
                    result.turn_of.append(turn_index)
        caps: set[str] = set()
        tokenized = [masked_tokens(sentence) for sentence in result.sentences]
        for sentence, tokens in zip(result.sentences, tokenized, strict=True):
            caps |= capitalized_tokens(sentence, tokens)
        lower = frozenset(t.text for tokens in tokenized for t in tokens if t.text.islower())
        history: list[str] = []  # entity keys in mention order, for pronoun resolution
        for index, sentence in enumerate(result.sentences):
            mentions = detect_mentions(
                sentence,
                episode_caps=caps,
                verb_hints=self._verb_hints,
                custom=self._custom,
                tokens=tokenized[index],
                episode_lower=lower,
            )
            result.questions.append(is_question(sentence))
            keys: list[str] = []
            for mention in mentions:
                self._register(result.entities, mention)
                keys.append(mention.key)
            positions = sorted(
                [(m.start, m.key) for m in mentions]
                + [(p.start, f"\0{p.pronoun}") for p in find_pronouns(sentence)]
            )
            speaker, addressee = result.speakers[result.turn_of[index]]
            named = speaker is not None and turns[result.turn_of[index]].named
            found = match_relations(sentence, mentions, self._patterns, self._triggers, chat=named)
            if not asks(sentence):
                found += role_relations(sentence, mentions)

                def employer(arg: Arg) -> bool:
                    acc = result.entities.get(arg.key) if arg.key is not None else None
                    return acc is not None and acc.type not in _NOT_EMPLOYERS

                def place(arg: Arg) -> bool:
                    acc = result.entities.get(arg.key) if arg.key is not None else None
                    return acc is not None and acc.type == "location"

                def product(arg: Arg) -> bool:
                    acc = result.entities.get(arg.key) if arg.key is not None else None
                    return acc is not None and (acc.type == "tool" or product_name(acc.name))

                framed = frame_relations(sentence, mentions, employer, place, product)
                # A move frame reads both ends: the pattern's own "moved to" edge of the
                # same object would store the move's goal as a bare ``move_to``.
                moved = {raw.object.start for raw in framed if raw.relation in MOVE_FRAMES}
                found = [
                    raw for raw in found
                    if not (raw.relation == "move_to" and raw.object.start in moved)
                ]
                found += framed
            for raw in found:
                source = self._resolve(
                    raw.subject, positions, history, result, None, speaker, addressee
                )
                target = self._resolve(
                    raw.object, positions, history, result, source, speaker, addressee
                )
                if source is None or target is None or source == target:
                    continue
                frame = raw.relation if raw.relation in FRAME_RELATIONS else None
                if frame in PLACE_FRAMES:
                    # "moved from Boston to Denver": a person's home, an organisation's site.
                    placed = place_relation(result.entities[source].type)
                    if placed is None:
                        continue
                    relation = placed
                elif frame is not None:
                    relation = FRAME_RELATIONS[frame]
                else:
                    relation = _refine(raw.relation, result.entities[target])
                if (
                    relation == "join"
                    and _STARTED_AT.search(sentence, 0, raw.object.start) is not None
                    and _SCHOOL.search(result.entities[target].name) is not None
                ):
                    continue  # "Lily starts at Greenfield Elementary": a pupil, no job
                confidence = raw.confidence
                if raw.subject.pronoun or raw.object.pronoun:
                    confidence -= 0.1
                polarity = claim_polarity(
                    sentence,
                    (raw.subject.start, raw.subject.end),
                    (raw.object.start, raw.object.end),
                    relation,
                )
                if polarity == "negated":
                    continue  # denied, doubted or conditioned: not a relationship
                ended = polarity == "ended" or frame in ENDED_FRAMES
                until = since = None
                if raw.subject.end <= raw.object.start:
                    # "worked at Hooli until March" (held, and stopped then), "has worked
                    # at Acme since 2021" / "for three years" (held from then), "last year
                    # Dan left Hooli", "in 2019 Carla moved to Berlin".
                    ended, until, since = claim_dates(
                        sentence,
                        raw.subject.start,
                        raw.object.end,
                        claim_clause(sentence[raw.subject.end : raw.object.start]),
                        stative=relation in STATIVE_RELATIONS,
                        ended=ended,
                        moved=frame in MOVE_FRAMES,
                    )
                if frame == BE_AT and (
                    not (ended or (since is not None and coarse_since(since)))
                    or result.entities[target].type in _NOT_EMPLOYERS
                ):
                    continue  # "is at Acme (until 5pm)", "isn't with Sam anymore": no job
                if relation == "work_at":
                    # Only the object's own clause: "left Acme and now works at Globex".
                    link = claim_clause(sentence[raw.subject.end : raw.object.start])
                    if DEPARTURE_VERBS.search(link) and (
                        not ended
                        or _FUTURE.search(link)
                        or result.entities[target].type in _NOT_EMPLOYERS
                    ):
                        continue  # "will quit X", "left Berlin", "left Ana a note"
                result.edges.append(
                    _Edge(source, relation, target, confidence, index, ended, until, since)
                )
                keys.extend(k for k in (source, target) if k not in keys)
                # Type cues from the relation apply at once, so later pronouns see them.
                subject_cue, object_cue = _ROLE_CUES.get(relation, (None, None))
                if subject_cue is not None:
                    result.entities[source].add({subject_cue[0]: subject_cue[1]})
                if object_cue is not None:
                    result.entities[target].add({object_cue[0]: object_cue[1]})
            history.extend(m.key for m in mentions)
            if speaker is not None and turns[result.turn_of[index]].named:
                keys.append(speaker)
            result.sentence_keys.append(list(dict.fromkeys(keys)))
        if speakers:
            for chat in chat_edges(turns, result.sentences, result.turn_of):
                pair = []
                for name, entity_type, words in (
                    (chat.source, chat.source_type, 99),
                    (chat.target, chat.target_type, len(chat.target.split())),
                ):
                    key = normalize_entity_name(name)
                    acc = result.entities.get(key)
                    if acc is None:
                        acc = result.entities[key] = _Acc(
                            key, name, len(result.entities), words=words
                        )
                    acc.add({entity_type: 150})
                    pair.append(key)
                result.edges.append(_Edge(pair[0], chat.relation, pair[1], 0.7, chat.sentence))
                keys = result.sentence_keys[chat.sentence]
                keys.extend(k for k in pair if k not in keys)
        episode_type_cues(result.entities, result.sentences)
        # A role ("user") is an entity only when a first/second-person claim names it.
        used = {k for e in result.edges for k in (e.source, e.target)}
        for key in result.role_speakers - used:
            if result.entities.get(key) is not None and result.entities[key].words == 99:
                del result.entities[key]
        self._merge_aliases(result)
        return result

    @staticmethod
    def _register(entities: dict[str, _Acc], mention: Mention) -> None:
        acc = entities.get(mention.key)
        if acc is None:
            acc = entities[mention.key] = _Acc(
                mention.key, mention.name, len(entities), words=mention.words
            )
        elif len(mention.name) > len(acc.name):
            acc.aliases.append(acc.name)
            acc.name, acc.words = mention.name, mention.words
        elif mention.name != acc.name and mention.name not in acc.aliases:
            acc.aliases.append(mention.name)
        acc.add(mention.cues)

    @staticmethod
    def _resolve(
        arg: Arg,
        positions: list[tuple[int, str]],
        history: list[str],
        result: _Analysis,
        exclude: str | None,
        speaker: str | None = None,
        addressee: str | None = None,
    ) -> str | None:
        if arg.key is not None:
            return arg.key
        if arg.pronoun in FIRST_PERSON:
            return speaker
        if arg.pronoun in SECOND_PERSON:
            return addressee
        wanted = _PRONOUN_TYPES.get(PRONOUNS.get(arg.pronoun or "", ""), set())
        if not wanted:
            return None
        earlier = [key for start, key in positions if start < arg.start and key[0] != "\0"]
        for key in reversed(history + earlier):
            if key != exclude and result.entities[key].type in wanted:
                return key
        return None

    @staticmethod
    def _merge_aliases(result: _Analysis) -> None:
        people = [a for a in result.entities.values() if 2 <= a.words < 99 and a.type == "person"]
        remap: dict[str, str] = {}
        others = [a for a in result.entities.values() if 2 <= a.words < 99 and a.type != "person"]
        for acc in list(result.entities.values()):
            if acc.words != 1:
                continue
            if acc.type in {"person", "concept"}:
                hosts = [p for p in people if acc.key in (p.key.split()[0], p.key.split()[-1])]
            else:
                hosts = []
            if not hosts:
                # "Harborline" -> "Harborline Grocers", "Northgate" -> "Northgate United".
                hosts = [
                    o for o in others if acc.key == o.key.split()[0] and acc.type != "location"
                ]
            if len(hosts) == 1:
                host = hosts[0]
                host.aliases.append(acc.name)
                host.add(acc.cues)
                host.order = min(host.order, acc.order)
                remap[acc.key] = host.key
                del result.entities[acc.key]
        if not remap:
            return
        result.edges = [
            replace(e, source=remap.get(e.source, e.source), target=remap.get(e.target, e.target))
            for e in result.edges
        ]
        result.sentence_keys = [
            list(dict.fromkeys(remap.get(k, k) for k in keys)) for keys in result.sentence_keys
        ]

    # ------------------------------------------------------------------ public API

    def extract_entities(self, text: str) -> list[ExtractedEntity]:
        """Detect and type the entities of a text.

        Args:
            text: Free text (one or more sentences).

        Returns:
            One ``ExtractedEntity`` per merged entity, in order of first mention.

        Raises:
            InvalidTypeError: ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise InvalidTypeError(f"text must be a string, got {type(text).__name__}")
        analysis = self._analyze([Turn(uuid.UUID(int=0), text, "", None, False)], speakers=False)
        ordered = sorted(analysis.entities.values(), key=lambda a: a.order)
        return [ExtractedEntity(name=a.name, type=a.type) for a in ordered]

    async def extract(self, episode: Episode) -> ExtractionResult:
        """Extract facts, entities and relationships from one episode.

        Args:
            episode: The episode; its ``fact_ids`` is replaced by the new facts' ids.

        Returns:
            The extracted records, all with derived provenance and deterministic ids.
        """
        episode = instance_of(episode, Episode, "episode")
        turns = turns_of(episode, self._options.roles)
        if sum(len(t.text) for t in turns) > OFFLOAD_CHARS:
            # A long episode (a pasted log) is analysed in a worker thread so one ingest
            # cannot stall the event loop; short ones are cheaper inline than a thread hop.
            analysis = await asyncio.to_thread(self._analyze, turns)
        else:
            analysis = self._analyze(turns)
        now = self._clock()

        entity_ids = {
            key: fact_id_for(episode.id, "rules-entity", key) for key in analysis.entities
        }
        entities = [
            Entity(
                id=entity_ids[acc.key],
                name=acc.name[:MAX_NAME_LENGTH],
                entity_type=acc.type,
                attributes={"aliases": sorted(set(acc.aliases))} if acc.aliases else {},
                provenance=derived_provenance(
                    episode, confidence=_entity_confidence(acc), created_at=now
                ),
                created_at=now,
                updated_at=now,
            )
            for acc in sorted(analysis.entities.values(), key=lambda a: a.order)
        ]

        relationships = relationships_of(
            episode,
            turns,
            analysis.turn_of,
            analysis.sentences,
            analysis.edges,
            entity_ids,
            "rules-relationship",
            now,
        )

        facts = self._facts(episode, analysis, entity_ids, now, turns)
        episode.fact_ids = [f.id for f in facts]
        return ExtractionResult(facts=facts, entities=entities, relationships=relationships)

    def _facts(
        self,
        episode: Episode,
        analysis: _Analysis,
        entity_ids: dict[str, uuid.UUID],
        now: datetime,
        turns: Sequence[Turn] = (),
    ) -> list[SemanticFact]:
        edge_count: dict[int, int] = {}
        for edge in analysis.edges:
            edge_count[edge.sentence] = edge_count.get(edge.sentence, 0) + 1
        candidates: list[tuple[int, int]] = []  # (score, sentence index)
        for index, sentence in enumerate(analysis.sentences):
            if analysis.questions[index] or len(sentence) < self._options.min_sentence_length:
                continue
            score = 3 * edge_count.get(index, 0) + len(analysis.sentence_keys[index])
            candidates.append((score, index))
        chosen = sorted(candidates, key=lambda c: (-c[0], c[1]))[: self._options.max_facts]
        facts: list[SemanticFact] = []
        for _, index in sorted(chosen, key=lambda c: c[1]):
            keys = analysis.sentence_keys[index]
            confidence = 0.7 if edge_count.get(index) else (0.6 if keys else 0.5)
            facts.append(
                SemanticFact(
                    id=fact_id_for(episode.id, "rules-fact", str(index)),
                    content=fact_text(
                        turns[analysis.turn_of[index]] if turns else None,
                        analysis.sentences[index],
                    ),
                    source_episode_ids=[episode.id],
                    entity_ids=[entity_ids[k] for k in keys if k in entity_ids],
                    provenance=derived_provenance(episode, confidence=confidence, created_at=now),
                    valid_from=episode.started_at,
                )
            )
        return facts


# "start at X" is a join ("I start at Monzo on monday"), except at a school, where the
# one who starts is as often a pupil ("my daughter Lily starts at Greenfield Elementary").
_STARTED_AT = re.compile(r"\bstart(?:s|ed|ing)?\s+at\s+(?:the\s+)?$", re.IGNORECASE)
_SCHOOL = re.compile(
    r"\b(?:elementary|primary|school|high|academy|kindergarten|nursery|preschool|college|"
    r"university)\b",
    re.IGNORECASE,
)


def _refine(relation: str, target: _Acc) -> str:
    """Relation refinements by a lowercase noun-phrase object's type."""
    if target.name.islower():
        if relation == "acquire" and target.type == "tool":
            return "maintain"  # "took over the deploy tooling"
        if relation == "move_to" and target.type == "organization":
            return "join"  # "moved to the billing team"
    return relation


def _entity_confidence(acc: _Acc) -> float:
    best = acc.cues.get(acc.type, 0)
    if best >= 70:
        return 0.8
    if best >= 40:
        return 0.65
    return 0.5
