"""LLM-backed semantic extraction with a timeout, a circuit breaker and a rule-based floor.

:class:`LLMExtractor` asks an injected :class:`~cycgraph_memory.contracts.LLMProvider` to
turn an episode into JSON (facts, typed entities, relationships), validates the reply and
maps it onto records. Whenever the LLM path fails (the provider raises, the call times out,
the reply holds no JSON object or has the wrong shape, or it yields no usable fact) the
episode is handed to the fallback extractor (:class:`ParserExtractor` when the ``parser``
extra is installed, else :class:`RuleBasedExtractor`), so the free tier's quality is
always the floor.

Circuit breaker: provider failures (errors, timeouts, unparseable or ill-shaped replies)
are counted; an empty-but-valid reply is *not* a provider failure. After
``max_consecutive_failures`` failures in a row the breaker **opens** and every episode goes
straight to the fallback without calling the provider. Once ``breaker_cooldown_ms`` has
passed on the injected monotonic clock, one trial call is let through (**half-open**): if it
succeeds the breaker **closes** and the count resets; if it fails the breaker re-opens for
another cooldown. While a trial is in flight, concurrent episodes use the fallback. Only the
trial decides: a call admitted before the breaker opened that fails (or is cancelled) late
is counted but neither restarts the cooldown nor frees the trial's slot.

Mapping rules (worth knowing when reading the graph it produces):

* Entities are merged by :func:`~cycgraph_memory.normalize.normalize_entity_name`; the first
  spelling and type win. Types outside person / organization / tool / concept / location are
  mapped through a small synonym table (``company`` -> organization, ``library`` -> tool,
  ...) and otherwise become ``concept``.
* Relationships are kept only between entities the model *declared* in ``entities``. Edges
  to undeclared names, self-loops and duplicates (same source, relation and target) are
  dropped rather than guessed: a mistyped entity corrupts the graph, a missing edge does not.
  Relation names are snake-cased; weights are clamped to ``[0, 1]`` (default 1.0).
* A fact's ``entities`` are resolved by normalised name against the declared entities;
  unknown names are ignored. Facts are capped at ``max_facts_per_episode``.
* Ids are deterministic (UUIDv5 of the episode id and the record's key), so re-extracting an
  episode yields the same ids and writes become idempotent upserts.
* Provenance: ``source="derived"``, ``confidence`` (0.9 by default), and the episode's
  ``run_id`` / ``node_id`` / ``agent_id``; facts and relationships are valid from the
  episode's ``started_at``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError

from cycgraph_memory._validate import (
    check_callable,
    check_method,
    instance_of,
    keyword_options,
    string_list,
)
from cycgraph_memory.contracts import LLMProvider, SemanticExtractor
from cycgraph_memory.errors import (
    InvalidInputError,
    InvalidTypeError,
    ProviderError,
    ProviderTimeoutError,
)
from cycgraph_memory.hierarchy.extractors._conversation import turns_of
from cycgraph_memory.hierarchy.extractors._llm_parse import (
    LLMPayload,
    ReplyError,
    build_prompt,
    clamp_weight,
    clean_tags,
    clean_text,
    normalize_entity_type,
    normalize_relation,
    parse_reply,
)
from cycgraph_memory.hierarchy.extractors._polarity import (
    ENDED_ATTRIBUTE,
    claim_dates_of,
    locate_claim,
    stopped_since_of,
    switched_product_of,
)
from cycgraph_memory.hierarchy.extractors._sentences import split_sentences
from cycgraph_memory.hierarchy.extractors._until import resolve_since, resolve_until
from cycgraph_memory.normalize import normalize_entity_name
from cycgraph_memory.records import (
    QUARANTINE_TAG,
    Entity,
    Episode,
    ExtractionResult,
    Provenance,
    Relationship,
    SemanticFact,
    utc_now,
)

__all__ = [
    "DEFAULT_MAX_REPLY_CHARS",
    "DEFAULT_RESERVED_TAGS",
    "LLM_EXTRACTOR_NAMESPACE",
    "BreakerState",
    "LLMExtractor",
    "LLMExtractorStats",
]

logger = logging.getLogger(__name__)

LLM_EXTRACTOR_NAMESPACE = uuid.UUID("4f0f6c2e-6a57-5b8e-9d3c-2a1e8b7c9d10")
"""UUIDv5 namespace of the ids minted by :class:`LLMExtractor`."""

DEFAULT_RESERVED_TAGS: tuple[str, ...] = ("verified", "candidate", QUARANTINE_TAG)
"""Lifecycle tags a model's reply may not set (:class:`LLMExtractor` ``reserved_tags``).

A fact the model tagged ``verified`` would skip the retention gate, and one it tagged
``quarantined`` would be hidden: only the library and the gate set these.
"""

DEFAULT_MAX_REPLY_CHARS = 200_000
"""Longest reply :class:`LLMExtractor` parses (``max_reply_chars``); a reply of 20 facts
with their entities and edges is a few thousand characters."""

_FALLBACK_MAX_FACTS = 10
"""Most facts per episode of the default fallback (the free tiers' default)."""

BreakerState = Literal["closed", "open", "half_open"]
"""Circuit-breaker state reported by :attr:`LLMExtractor.breaker_state`."""

CompleteFn = Callable[[str], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class LLMExtractorStats:
    """Counters of one :class:`LLMExtractor` (a snapshot; it does not update itself).

    Attributes:
        episodes: Episodes passed to ``extract``.
        llm_calls: Provider calls started.
        llm_successes: Calls whose reply parsed into a valid payload.
        llm_failures: Calls that raised, timed out or returned an unusable reply.
        timeouts: Failures that were timeouts (included in ``llm_failures``).
        empty_replies: Valid replies without a usable fact (handed to the fallback).
        skipped_by_breaker: Episodes sent to the fallback without calling the provider.
        fallbacks: Episodes whose result came from the fallback extractor.
        breaker_trips: Times the breaker opened (including re-opens after a failed trial).
        negated_dropped: Relationships of valid replies dropped because the text they
            came from negates, doubts or conditions them ("did not sign", "denied").
    """

    episodes: int = 0
    llm_calls: int = 0
    llm_successes: int = 0
    llm_failures: int = 0
    timeouts: int = 0
    empty_replies: int = 0
    skipped_by_breaker: int = 0
    fallbacks: int = 0
    breaker_trips: int = 0
    negated_dropped: int = 0


_STAT_NAMES = tuple(f.name for f in fields(LLMExtractorStats))


def _positive_int(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")
    return value


def _number(name: str, value: float, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if v != v or v == float("inf") or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidInputError(f"{name} must be a finite number {bound}, got {value!r}")
    return v


def _is_options(value: object) -> bool:
    """Whether ``value`` is an options mapping rather than a provider."""
    return (
        isinstance(value, Mapping)
        and not callable(value)
        and not callable(getattr(value, "complete", None))
    )


_JOB_RELATIONS = frozenset({"work_at", "join"})
"""Relations of a job, which a switch between products never is (the post-check drops
them there)."""

class LLMExtractor:
    """LLM extraction with timeout, consecutive-failure circuit breaker and fallback.

    The options may also come as one mapping, ``provider`` included (the spec's
    ``new LLMExtractor({ provider, maxFactsPerEpisode: 20 })``):
    ``LLMExtractor({"provider": provider, "max_facts_per_episode": 20})``, with the names
    below; an unknown name or a mapping without ``provider`` is an ``InvalidTypeError``, a
    mapping together with other arguments an ``InvalidInputError``.

    Args:
        provider: An :class:`~cycgraph_memory.contracts.LLMProvider` (an object with
            ``async complete(prompt) -> str``) or a bare ``async (prompt) -> str`` function.
            Or the options mapping (a mapping with no callable ``complete``).
        max_facts_per_episode: Cap on facts taken from one reply.
        timeout_ms: Timeout of one provider call, in milliseconds.
        max_consecutive_failures: Open the breaker after this many failures in a row.
        breaker_cooldown_ms: How long the breaker stays open before a trial call.
        fallback: Extractor used whenever the LLM path fails; by default
            ``ParserExtractor`` when the ``parser`` extra is installed, else
            ``RuleBasedExtractor``, built with ``max_facts=min(max_facts_per_episode,
            10)`` so the cap holds when the provider is down too (an injected fallback
            keeps its own cap).
        clock: Monotonic clock in seconds used by the breaker (``time.monotonic`` by
            default); inject a fake one in tests.
        now: Wall clock for ``created_at`` / ``updated_at`` stamps (``utc_now`` by default).
        confidence: ``provenance.confidence`` of the records produced by the LLM path.
        reserved_tags: Tags the model may not put on a fact (dropped from its reply):
            by default the retention lifecycle's ``verified``, ``candidate`` and
            ``quarantined``, which only the library and the gate set. Add the gate's own
            tags when it is configured with others.
        max_reply_chars: A longer reply is unusable (a failure: the episode goes to the
            fallback) before it is parsed, so a runaway model cannot stall the event loop
            in the parser or flood the store with thousands of entities and edges.

    Raises:
        InvalidInputError: If an option is out of range, or an options mapping comes
            with other arguments.
        InvalidTypeError: If ``provider`` has no ``complete`` method and is not callable,
            an option has the wrong type (a ``clock`` or ``now`` that is not callable, a
            ``fallback`` without ``extract``), or an options mapping has an unknown name or
            no ``provider``.
    """

    def __init__(
        self,
        provider: LLMProvider | CompleteFn | Mapping[str, Any],
        *,
        max_facts_per_episode: int = 20,
        timeout_ms: float = 30_000,
        max_consecutive_failures: int = 3,
        breaker_cooldown_ms: float = 60_000,
        fallback: SemanticExtractor | None = None,
        clock: Callable[[], float] | None = None,
        now: Callable[[], datetime] | None = None,
        confidence: float = 0.9,
        reserved_tags: Sequence[str] = DEFAULT_RESERVED_TAGS,
        max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS,
    ) -> None:
        if _is_options(provider):
            given = keyword_options(
                LLMExtractor.__init__,
                provider,
                locals(),
                "LLMExtractor",
                slot="provider",
                is_options=_is_options,
            )
            LLMExtractor.__init__(self, **given)
            return
        complete = getattr(provider, "complete", None)
        if callable(complete):
            self._complete: CompleteFn = complete
        elif callable(provider):
            self._complete = provider
        else:
            raise InvalidTypeError("provider must have an async complete(prompt) method")
        self._provider = provider
        self._max_facts = _positive_int("max_facts_per_episode", max_facts_per_episode)
        self._timeout_s = _number("timeout_ms", timeout_ms, allow_zero=False) / 1000.0
        self._max_failures = _positive_int("max_consecutive_failures", max_consecutive_failures)
        self._max_reply_chars = _positive_int("max_reply_chars", max_reply_chars)
        self._cooldown_s = (
            _number("breaker_cooldown_ms", breaker_cooldown_ms, allow_zero=True) / 1000.0
        )
        if isinstance(confidence, bool) or not isinstance(confidence, int | float):
            raise InvalidTypeError(f"confidence must be a number, got {confidence!r}")
        if not 0.0 <= confidence <= 1.0:
            raise InvalidInputError(f"confidence must be in [0, 1], got {confidence!r}")
        self._confidence = float(confidence)
        self._reserved_tags = frozenset(string_list(reserved_tags, "reserved_tags"))
        if clock is not None:
            check_callable(clock, "clock")
        if now is not None:
            check_callable(now, "now")
        if fallback is not None:
            check_method(fallback, "extract", "fallback", "SemanticExtractor")
        if fallback is None:
            from cycgraph_memory.hierarchy.extractors.parser import default_extractor

            # The cap holds on every path: with the provider down, an episode must not
            # yield more facts than max_facts_per_episode (the free tiers' own cap is 10).
            fallback = default_extractor(max_facts=min(self._max_facts, _FALLBACK_MAX_FACTS))
        self._fallback: SemanticExtractor = fallback
        self._clock = clock or time.monotonic
        self._now = now or utc_now

        self._state: BreakerState = "closed"
        self._consecutive_failures = 0
        self._opened_at = 0.0
        self._trial_in_flight = False
        self._counts: dict[str, int] = dict.fromkeys(_STAT_NAMES, 0)

    # ------------------------------------------------------------------ introspection

    @property
    def breaker_state(self) -> BreakerState:
        """``"closed"``, ``"open"`` or ``"half_open"``.

        An open breaker whose cooldown has elapsed reports ``"half_open"``: the next episode
        makes the trial call.
        """
        if self._state == "open" and self._clock() - self._opened_at >= self._cooldown_s:
            return "half_open"
        return self._state

    @property
    def consecutive_failures(self) -> int:
        """Provider failures in a row since the last success."""
        return self._consecutive_failures

    @property
    def stats(self) -> LLMExtractorStats:
        """A snapshot of the counters."""
        return LLMExtractorStats(**self._counts)

    @property
    def fallback(self) -> SemanticExtractor:
        """The extractor used when the LLM path fails."""
        return self._fallback

    def _bump(self, **increments: int) -> None:
        for name, inc in increments.items():
            self._counts[name] += inc

    # ------------------------------------------------------------------ breaker

    def _admit(self) -> bool:
        """Decide whether this episode may call the provider (and claim the trial)."""
        if self._state == "closed":
            return True
        if self._state == "open":
            if self._clock() - self._opened_at < self._cooldown_s:
                return False
            self._state = "half_open"
            self._trial_in_flight = False
        # half-open: exactly one trial at a time
        if self._trial_in_flight:
            return False
        self._trial_in_flight = True
        return True

    def _record_success(self, trial: bool) -> None:
        if self._state != "closed":
            logger.info("LLM provider recovered; circuit breaker closed")
        self._state = "closed"
        if trial:
            self._trial_in_flight = False
        self._consecutive_failures = 0

    def _record_failure(self, trial: bool) -> None:
        # Only the half-open trial's own failure re-opens the breaker: a call admitted
        # before the breaker opened that fails late says nothing new about the provider
        # and must not restart the cooldown or release the trial's slot.
        self._consecutive_failures += 1
        if (trial and self._state == "half_open") or (
            self._state == "closed" and self._consecutive_failures >= self._max_failures
        ):
            self._state = "open"
            self._opened_at = self._clock()
            self._trial_in_flight = False
            self._bump(breaker_trips=1)
            logger.warning(
                "LLM provider failed %d time(s) in a row; circuit breaker open for %.1f s "
                "(using the fallback extractor meanwhile)",
                self._consecutive_failures,
                self._cooldown_s,
            )

    # ------------------------------------------------------------------ extraction

    async def extract(self, episode: Episode) -> ExtractionResult:
        """Extract facts, entities and relationships from one episode.

        Sets ``episode.fact_ids`` (persist the episode afterwards). Never raises because of
        the provider: every LLM-path failure falls back to the fallback extractor, whose
        own errors do propagate.

        Raises:
            InvalidTypeError: ``episode`` is not an episode.
        """
        episode = instance_of(episode, Episode, "episode")
        self._bump(episodes=1)
        if not self._admit():
            self._bump(skipped_by_breaker=1)
            logger.debug("circuit breaker open; episode %s goes to the fallback", episode.id)
            return await self._use_fallback(episode)

        # Admitted while not closed: this call is the half-open trial.
        trial = self._state != "closed"
        self._bump(llm_calls=1)
        try:
            payload = await self._call(episode)
        except ReplyError as exc:
            return await self._fail(episode, f"unusable reply: {exc}", trial)
        except ProviderTimeoutError as exc:
            self._bump(timeouts=1)
            return await self._fail(episode, str(exc), trial)
        except Exception as exc:
            return await self._fail(episode, f"{type(exc).__name__}: {exc}", trial)
        except asyncio.CancelledError:
            # The caller cancelled us: if this was the half-open trial, release it without
            # judging the provider (another call was cancelled: the trial stays claimed),
            # then let the cancellation through.
            if trial:
                self._trial_in_flight = False
                if self._state == "half_open":
                    self._state = "open"
            raise

        try:
            result = self._to_records(episode, payload)
        except (ValidationError, ValueError) as exc:
            # A reply that parsed but breaks a record's limits (a 2,000-character entity
            # name, an over-long fact) is as unusable as one that did not parse.
            return await self._fail(
                episode, f"unusable reply: {type(exc).__name__}: {exc}", trial
            )
        self._bump(llm_successes=1)
        self._record_success(trial)
        if not result.facts:
            self._bump(empty_replies=1)
            logger.info(
                "LLM reply for episode %s had no usable fact; using the fallback", episode.id
            )
            return await self._use_fallback(episode)
        episode.fact_ids = [f.id for f in result.facts]
        return result

    async def _call(self, episode: Episode) -> LLMPayload:
        prompt = build_prompt(episode, self._max_facts)
        try:
            async with asyncio.timeout(self._timeout_s):
                reply = await self._complete(prompt)
        except TimeoutError as exc:
            raise ProviderTimeoutError(
                f"LLM provider did not answer within {self._timeout_s * 1000:.0f} ms"
            ) from exc
        if not isinstance(reply, str):
            raise ProviderError(f"LLM provider returned {type(reply).__name__}, expected str")
        if len(reply) > self._max_reply_chars:
            raise ReplyError(
                f"reply of {len(reply)} characters is longer than max_reply_chars "
                f"({self._max_reply_chars})"
            )
        return parse_reply(reply)

    async def _fail(self, episode: Episode, reason: str, trial: bool) -> ExtractionResult:
        self._bump(llm_failures=1)
        self._record_failure(trial)
        logger.warning(
            "LLM extraction failed for episode %s (%s); using the fallback extractor",
            episode.id,
            reason,
        )
        return await self._use_fallback(episode)

    async def _use_fallback(self, episode: Episode) -> ExtractionResult:
        self._bump(fallbacks=1)
        return await self._fallback.extract(episode)

    # ------------------------------------------------------------------ mapping

    def _to_records(self, episode: Episode, payload: LLMPayload) -> ExtractionResult:
        now = self._now()
        src = episode.provenance
        provenance = Provenance(
            source="derived",
            confidence=self._confidence,
            run_id=src.run_id,
            node_id=src.node_id,
            agent_id=src.agent_id,
            created_at=now,
        )
        base = str(episode.id)

        def mint(*parts: str) -> uuid.UUID:
            return uuid.uuid5(LLM_EXTRACTOR_NAMESPACE, "\x1f".join((base, *parts)))

        entities: dict[str, Entity] = {}
        for raw in payload.entities:
            name = clean_text(raw.name)
            key = normalize_entity_name(name)
            if not key or key in entities:
                continue
            entities[key] = Entity(
                id=mint("entity", key),
                name=name,
                entity_type=normalize_entity_type(raw.type),
                provenance=provenance.model_copy(),
                created_at=now,
                updated_at=now,
            )

        sentences: list[tuple[str, str | None]] = []
        said_at: list[datetime] = []
        for turn in turns_of(episode, ("user", "assistant", "system", "tool")):
            for sentence in split_sentences(turn.text):
                sentences.append((sentence, turn.speaker if turn.named else None))
                said_at.append(turn.timestamp or episode.started_at)

        relationships: dict[tuple[str, str, str], Relationship] = {}
        for raw_rel in payload.relationships:
            source_key = normalize_entity_name(raw_rel.source)
            target_key = normalize_entity_name(raw_rel.target)
            relation = normalize_relation(raw_rel.relation)
            key3 = (source_key, relation, target_key)
            if (
                not relation
                or source_key not in entities
                or target_key not in entities
                or source_key == target_key
                or key3 in relationships
            ):
                logger.debug("dropping relationship %r", raw_rel)
                continue
            # Post-check against the text: the model must not assert what the text denies.
            located = locate_claim(
                sentences, entities[source_key].name, entities[target_key].name, relation
            )
            polarity, when = "asserted", episode.started_at
            if located is not None:
                polarity, when = located[0], said_at[located[1]]
            source_name, target_name = entities[source_key].name, entities[target_key].name
            if (
                polarity == "negated"
                and located is not None
                and stopped_since_of(sentences[located[1]][0], source_name, target_name, relation)
            ):
                polarity = "ended"  # "she hasn't worked at Acme since 2022": it stopped then
            if (
                relation in _JOB_RELATIONS
                and located is not None
                and switched_product_of(sentences[located[1]][0], target_name)
            ):
                # "switched to T-Mobile from Verizon": a customer's switch, not a job move.
                logger.debug("dropping a job claim about a product switch: %r", raw_rel)
                continue
            if polarity == "negated":
                self._bump(negated_dropped=1)
                logger.debug("dropping relationship the text negates: %r", raw_rel)
                continue
            ended, stop = polarity == "ended", when
            if located is not None:
                # "moved from Initech to Globex" ends the Initech job; "worked at Hooli
                # until March" ended then (a date the text cannot place: when it was said);
                # "has worked at Acme since 2021" / "for three years", "in 2019 she
                # joined Initech" held from then (else from `when`).
                ended, until, since = claim_dates_of(
                    sentences[located[1]][0], source_name, target_name, relation, ended=ended
                )
                if ended and until is not None:
                    stop = resolve_until(until, when) or when
                if not ended and since is not None:
                    start = resolve_since(since, when)
                    when = min(start, when) if start is not None else when
            relationships[key3] = Relationship(
                id=mint("relationship", *key3),
                source_id=entities[source_key].id,
                target_id=entities[target_key].id,
                relation_type=relation,
                weight=clamp_weight(raw_rel.weight),
                attributes={ENDED_ATTRIBUTE: True} if ended else {},
                valid_from=stop if ended else when,
                valid_until=when if ended else None,
                provenance=provenance.model_copy(),
            )

        facts: list[SemanticFact] = []
        for raw_fact in payload.facts:
            if len(facts) >= self._max_facts:
                break
            content = clean_text(raw_fact.content)
            if not content:
                continue
            entity_ids: list[uuid.UUID] = []
            for name in raw_fact.entities:
                ent = entities.get(normalize_entity_name(name))
                if ent is not None and ent.id not in entity_ids:
                    entity_ids.append(ent.id)
            facts.append(
                SemanticFact(
                    id=mint("fact", str(len(facts))),
                    content=content,
                    source_episode_ids=[episode.id],
                    entity_ids=entity_ids,
                    provenance=provenance.model_copy(),
                    valid_from=episode.started_at,
                    tags=[t for t in clean_tags(raw_fact.tags) if t not in self._reserved_tags],
                )
            )

        return ExtractionResult(
            facts=facts,
            entities=list(entities.values()),
            relationships=list(relationships.values()),
        )
