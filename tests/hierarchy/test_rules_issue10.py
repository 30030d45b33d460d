"""Rule tier: chat speakers, linear work caps, fixed defects, new verbs and typing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cycgraph_memory.hierarchy.extractors import _conversation, rules
from cycgraph_memory.hierarchy.extractors._conversation import (
    MAX_MESSAGE_CHARS,
    MAX_SENTENCE_WORDS,
    chunk_sentence,
    turns_of,
)
from cycgraph_memory.hierarchy.extractors._sentences import split_sentences
from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor
from cycgraph_memory.records import Episode, Message, Provenance

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def episode(*turns: tuple[str, str] | tuple[str, str, str]) -> Episode:
    messages = []
    for i, turn in enumerate(turns):
        metadata = {"speaker": turn[2]} if len(turn) == 3 else {}
        messages.append(
            Message(
                role=turn[0],  # type: ignore[arg-type]
                content=turn[1],
                timestamp=T0 + timedelta(seconds=i),
                metadata=metadata,
            )
        )
    return Episode(
        topic="t",
        messages=messages,
        started_at=T0,
        ended_at=T0 + timedelta(seconds=len(turns)),
        provenance=Provenance(source="system"),
    )


async def triples(*turns: Any) -> list[tuple[str, str, str]]:
    result = await RuleBasedExtractor().extract(episode(*turns))
    names = {e.id: e.name for e in result.entities}
    return [(names[r.source_id], r.relation_type, names[r.target_id]) for r in result.relationships]


# ---------------------------------------------------------------- speakers


def test_speaker_comes_from_name_then_speaker_then_role() -> None:
    ep = episode(("user", "hi", "Ana"), ("assistant", "hello"))
    ep.messages[0].metadata = {"name": "Ana B", "speaker": "ignored"}
    turns = turns_of(ep, ("user", "assistant"))
    assert [(t.speaker, t.named, t.addressee) for t in turns] == [
        ("Ana B", True, "assistant"),
        ("assistant", False, "Ana B"),
    ]
    three = episode(("user", "a", "A"), ("user", "b", "B"), ("user", "c", "C"))
    assert {t.addressee for t in turns_of(three, ("user",))} == {None}


async def test_first_person_resolves_to_the_speaker() -> None:
    got = await triples(("user", "I work at Stripe and I live in Lisbon.", "Dana"))
    assert got == [("Dana", "work_at", "Stripe"), ("Dana", "live_in", "Lisbon")]


async def test_second_person_resolves_to_the_addressee() -> None:
    got = await triples(
        ("user", "So you work at Shopify now, right?", "Eli"),
        ("user", "yep, since March", "Priya"),
    )
    assert got == [("Priya", "work_at", "Shopify")]


async def test_contractions_resolve_and_are_never_entities() -> None:
    result = await RuleBasedExtractor().extract(
        episode(
            (
                "user",
                "I'm working on the invoice generator. I've used Redis. I'll call Bob.",
                "Lena",
            )
        )
    )
    names = {e.name for e in result.entities}
    assert not names & {"I'm", "I've", "I'll", "I"}
    rel = {(r.relation_type) for r in result.relationships}
    assert "work_on" in rel


async def test_facts_say_who_said_what() -> None:
    result = await RuleBasedExtractor().extract(
        episode(("user", "I adopted a dog called Biscuit last week.", "Jess"))
    )
    assert result.facts[0].content == "Jess: I adopted a dog called Biscuit last week."
    jess = next(e for e in result.entities if e.name == "Jess")
    assert jess.entity_type == "person"
    assert jess.id in result.facts[0].entity_ids


@pytest.mark.parametrize(
    "text", ["Sounds good to me", "Definitely worth it", "Congrats on the launch", "Haha yes"]
)
async def test_fillers_are_never_entities(text: str) -> None:
    assert RuleBasedExtractor().extract_entities(text) == []


# ---------------------------------------------------------------- defects


def test_company_suffix_then_a_name_splits_sentences() -> None:
    assert split_sentences(
        "The deal was announced by Brightwave Inc. Marta Lind confirmed it."
    ) == [
        "The deal was announced by Brightwave Inc.",
        "Marta Lind confirmed it.",
    ]
    assert split_sentences("Brightwave Inc. acquired Tally Systems.") == [
        "Brightwave Inc. acquired Tally Systems."
    ]


async def test_initial_words_ending_in_ing_or_ed_are_kept() -> None:
    assert await triples(("user", "Billing Service depends on Postgres.")) == [
        ("Billing Service", "depend_on", "Postgres")
    ]
    assert await triples(("user", "Red Hat acquired CoreOS in 2018.")) == [
        ("Red Hat", "acquire", "CoreOS")
    ]
    names = [e.name for e in RuleBasedExtractor().extract_entities("Apparently Dana left.")]
    assert names == ["Dana"]


async def test_lowercase_noun_phrase_endpoints() -> None:
    got = await triples(
        (
            "user",
            "The checkout service depends on the payments gateway, "
            "which the platform team maintains.",
        )
    )
    assert ("checkout service", "depend_on", "payments gateway") in got
    assert ("platform team", "maintain", "payments gateway") in got


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Harborline Grocers", "organization"),
        ("Northgate United", "organization"),
        ("Ostrava FC", "organization"),
        ("Alwyn Medical Center", "organization"),
        ("Copper Kitchen", "organization"),
    ],
)
def test_organisation_suffixes(name: str, expected: str) -> None:
    entities = RuleBasedExtractor().extract_entities(f"We visited {name} yesterday.")
    assert [(e.name, e.type) for e in entities] == [(name, expected)]


@pytest.mark.parametrize(
    ("text", "triple"),
    [
        ("Mayor Dana Okafor appointed Felix Grant.", ("Dana Okafor", "appoint", "Felix Grant")),
        ("Anya Koval replaces Sam Whitfield.", ("Anya Koval", "replace", "Sam Whitfield")),
        (
            "Grace Mbeki retired from Oakfield Academy.",
            ("Grace Mbeki", "retire_from", "Oakfield Academy"),
        ),
        ("Northgate United signed Teodor Vasquez.", ("Northgate United", "sign", "Teodor Vasquez")),
        (
            "Ingrid Sol chairs the Nordic Climate Panel.",
            ("Ingrid Sol", "lead", "Nordic Climate Panel"),
        ),
        ("Harper Lowe published The Salt Road.", ("Harper Lowe", "publish", "Salt Road")),
    ],
)
async def test_new_verbs(text: str, triple: tuple[str, str, str]) -> None:
    assert triple in await triples(("user", text))


# ---------------------------------------------------------------- linear work


def test_chunk_sentence_bounds_every_piece() -> None:
    words = [f"w{i}" for i in range(1000)]
    pieces = chunk_sentence(" ".join(words))
    assert all(len(p.split()) <= MAX_SENTENCE_WORDS for p in pieces)
    assert " ".join(pieces).split() == words
    assert chunk_sentence("short one") == ["short one"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["Alice", "works", "at", "Acme", "and", ",", "x"]), max_size=400))
def test_chunking_keeps_every_word(words: list[str]) -> None:
    text = " ".join(words)
    assert " ".join(chunk_sentence(text)).split() == text.split()


def _words_examined(monkeypatch: pytest.MonkeyPatch, text: str) -> list[int]:
    """Word counts of the sentences the entity and relation stages were given."""
    seen: list[int] = []
    real_detect, real_match = rules.detect_mentions, rules.match_relations

    def detect(sentence: str, **kwargs: Any) -> Any:
        seen.append(len(sentence.split()))
        return real_detect(sentence, **kwargs)

    def match(sentence: str, *args: Any, **kwargs: Any) -> Any:
        assert len(sentence.split()) <= MAX_SENTENCE_WORDS
        return real_match(sentence, *args, **kwargs)

    monkeypatch.setattr(rules, "detect_mentions", detect)
    monkeypatch.setattr(rules, "match_relations", match)
    RuleBasedExtractor().extract_entities(text)
    return seen


def test_one_huge_sentence_is_analysed_in_bounded_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    # A pasted 16,000-word "sentence" (no punctuation): each stage sees pieces of at most
    # MAX_SENTENCE_WORDS words, so the work per piece is bounded and the total is linear.
    vocab = ["Alice", "works", "at", "Acme", "with", "Redis", "while", "Bob", "manages", "Kafka"]
    text = " ".join(vocab[i % len(vocab)] for i in range(16_000))[: MAX_MESSAGE_CHARS - 1]
    seen = _words_examined(monkeypatch, text)
    assert max(seen) <= MAX_SENTENCE_WORDS
    assert sum(seen) == len(text.split())  # every word examined once, none twice


def test_message_cap_truncates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_conversation, "MAX_MESSAGE_CHARS", 40)
    ep = episode(("user", "Alice Smith works at Acme Corp. " + "x " * 50 + "Bob Jones is here."))
    turns = turns_of(ep, ("user",))
    assert len(turns[0].text) == 40
    assert "Bob" not in turns[0].text


def test_context_cues_look_at_a_bounded_window(monkeypatch: pytest.MonkeyPatch) -> None:
    from cycgraph_memory.hierarchy.extractors import _entities

    lengths: list[int] = []
    real = _entities._TITLE_BEFORE

    class Spy:
        def search(self, text: str) -> Any:
            lengths.append(len(text))
            return real.search(text)

    monkeypatch.setattr(_entities, "_TITLE_BEFORE", Spy())
    sentence = " ".join(f"Name{i} Person{i} and" for i in range(40))
    _entities.detect_mentions(sentence, episode_caps=set(), verb_hints=frozenset())
    assert lengths and max(lengths) <= _entities._CONTEXT_WINDOW


def test_uuid_zero_turn_for_extract_entities() -> None:
    # extract_entities has no message: no speaker entity is invented.
    assert RuleBasedExtractor().extract_entities("I work at Acme.") == [
        *RuleBasedExtractor().extract_entities("I work at Acme.")
    ]
    assert [e.name for e in RuleBasedExtractor().extract_entities("I work at Acme.")] == ["Acme"]
    assert uuid.UUID(int=0)


async def test_long_episodes_run_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    calls: list[Any] = []
    real = asyncio.to_thread

    async def spy(func: Any, /, *args: Any, **kwargs: Any) -> Any:
        calls.append(func)
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", spy)
    extractor = RuleBasedExtractor()
    await extractor.extract(episode(("user", "Alice works at Acme.")))
    assert calls == []  # short: inline
    long_text = "Alice works at Acme. " * (rules.OFFLOAD_CHARS // 10)
    result = await extractor.extract(episode(("user", long_text)))
    assert len(calls) == 1
    assert {e.name for e in result.entities} >= {"Alice", "Acme"}


_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(alphabet=_CHARS, max_size=120),
            st.one_of(st.none(), st.text(alphabet=_CHARS, min_size=1, max_size=12)),
        ),
        min_size=1,
        max_size=4,
    )
)
async def test_speakers_never_break_extraction(turns: list[tuple[str, str | None]]) -> None:
    messages = [
        Message(
            role="user",
            content=text or "x",
            timestamp=T0 + timedelta(seconds=i),
            metadata={"name": name} if name is not None else {},
        )
        for i, (text, name) in enumerate(turns)
    ]
    ep = Episode(
        topic="t",
        messages=messages,
        started_at=T0,
        ended_at=T0 + timedelta(seconds=len(turns)),
        provenance=Provenance(source="system"),
    )
    result = await RuleBasedExtractor().extract(ep)
    ids = {e.id for e in result.entities}
    assert all(r.source_id in ids and r.target_id in ids for r in result.relationships)
    assert all(r.source_id != r.target_id for r in result.relationships)
    assert len({e.id for e in result.entities}) == len(result.entities)


@pytest.mark.parametrize(
    ("text", "triple"),
    [
        (
            "The club said Northgate manager Ian Carver praised him.",
            ("Ian Carver", "manage", "Northgate"),
        ),
        (
            "The engine is led by former Oracle engineer Tomasz Wolski.",
            ("Tomasz Wolski", "work_at", "Oracle"),
        ),
        (
            "Chef Rosa Delgado, formerly of Copper Kettle, cooked.",
            ("Rosa Delgado", "work_at", "Copper Kettle"),
        ),
        (
            "Fieldnote said its co-founder Sam Whitfield will leave.",
            ("Sam Whitfield", "found", "Fieldnote"),
        ),
    ],
)
async def test_role_noun_relations(text: str, triple: tuple[str, str, str]) -> None:
    assert triple in await triples(("user", text))


async def test_role_nouns_in_a_question_are_not_asserted() -> None:
    assert await triples(("user", "Is Northgate manager Ian Carver leaving?")) == []
