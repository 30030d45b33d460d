"""Lexical search helpers: one tokenisation and an incremental BM25 index (pure Python).

:func:`tokenize` approximates Postgres' ``english`` text-search configuration: lowercase,
split on anything that is not a letter or digit, drop English stop words and one-character
tokens, then strip common English suffixes (a light stemmer: ``dogs`` -> ``dog``,
``running`` -> ``run``, ``married`` -> ``marry``, the same stem for the same word
everywhere). It is the ONE tokenization of the library: the in-memory index ranks with
:class:`BM25Index` (Okapi BM25, ``k1=1.2``, ``b=0.75``, IDF ``ln(1 + (N - df + 0.5) / (df +
0.5))`` over the tenant's documents), and the Postgres backend stores the same tokens
(``search_terms``) and computes the same BM25 in SQL (:mod:`cycgraph_memory.postgres.bm25`),
so both backends rank alike. A query uses its first :data:`MAX_QUERY_TERMS` distinct tokens.
"""

from __future__ import annotations

import functools
import math
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np
from numpy.typing import NDArray

from cycgraph_memory._validate import check_number
from cycgraph_memory.errors import InvalidInputError

__all__ = [
    "BM25Index",
    "BM25_B",
    "BM25_K1",
    "MAX_QUERY_TERMS",
    "STOP_WORDS",
    "name_candidates",
    "query_terms",
    "tokenize",
]

BM25_K1 = 1.2
"""BM25 term-frequency saturation (both backends)."""
BM25_B = 0.75
"""BM25 length normalisation (both backends)."""
MAX_QUERY_TERMS = 32
"""Distinct tokens of a query used by a text search (the first ones, in order)."""

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

_STOP_TEXT = """a about above after again against all am an and any are as at be because been before
    being below between both but by can did do does doing don down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is
    it its itself just me more most my myself no nor not now of off on once only or other our
    ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we
    were what when where which while who whom why will with would you your yours yourself
    yourselves s t ll re ve d m im ive dont didnt doesnt isnt wasnt u ur"""

STOP_WORDS = frozenset(_STOP_TEXT.split())
"""English stop words (Postgres' ``english`` list plus common chat contractions)."""

_SUFFIXES = ("ingly", "edly", "ing", "ed", "ly", "es", "s")


def _stem(word: str) -> str:
    if word.isdigit() or len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) >= 5:
        return word[:-3] + "y"  # "parties" -> "party"
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)]
            if suffix in ("ing", "ed", "edly", "ingly") and len(stem) >= 4 and stem[-1] == stem[-2]:
                stem = stem[:-1]  # running -> run, stopped -> stop
            if suffix == "es" and not stem.endswith(("s", "x", "z", "ch", "sh")):
                stem = word[:-1]  # "notes" -> "note", but "boxes" -> "box"
            if stem.endswith("i") and suffix == "ed":
                stem = stem[:-1] + "y"  # "married" -> "marry"
            return stem
    return word


@functools.lru_cache(maxsize=1 << 16)
def _term(word: str) -> str | None:
    """The index term of one lowercased word (``None`` for a stop word or a single letter).

    Cached: the same words recur in every text, and stemming was most of tokenizing.
    """
    if len(word) < 2 or word in STOP_WORDS:
        return None
    return _stem(word)


def tokenize(text: str) -> list[str]:
    """Lowercased, stemmed content words of ``text`` (stop words removed), in order."""
    terms = map(_term, _WORD.findall(text.lower().replace("'", "")))
    return [t for t in terms if t is not None]


def query_terms(text: str) -> list[str]:
    """Distinct tokens of ``text`` in first-seen order, at most :data:`MAX_QUERY_TERMS`."""
    return list(dict.fromkeys(tokenize(text)))[:MAX_QUERY_TERMS]


def name_candidates(text: str, max_words: int = 4) -> list[str]:
    """Lowercased word n-grams (1 to ``max_words`` words) of ``text``, possessives removed.

    The candidates an entity-name lookup tries, in order of first appearance; n-grams
    made only of stop words are skipped.
    """
    raw = re.findall(r"\w[\w'.&-]*", text.replace("\u2019", "'").lower())
    words = [w[:-2] if w.endswith("'s") else w for w in raw]
    words = [w.strip(".-'&") for w in words if w.strip(".-'&")]
    out: dict[str, None] = {}
    for start in range(len(words)):
        for size in range(1, max_words + 1):
            gram = words[start : start + size]
            if len(gram) < size or all(w in STOP_WORDS for w in gram):
                continue
            out.setdefault(" ".join(gram), None)
    return list(out)


class BM25Index:
    """Incremental Okapi BM25 over documents keyed by UUID.

    Each document holds a slot (a small int); a term's postings map slots to term
    frequencies, and are read as two numpy arrays (cached until the term's postings
    change). A query scores every document of its terms' postings with array arithmetic
    (the same float64 operations, in the same order, as the formula written per
    document) and ranks lazily: the best few are sorted first and the rest only when a
    caller reads past them. A frequent term of a 100,000-document index costs
    milliseconds, not the hundreds of a loop over its postings in Python.

    Args:
        k1: Term-frequency saturation (default 1.2), a finite number >= 0.
        b: Length normalisation (default 0.75), a number in ``[0, 1]``.

    Raises:
        InvalidTypeError: ``k1`` or ``b`` is not a number (a bool or a string).
        InvalidInputError: ``k1`` or ``b`` is out of range.
    """

    _FIRST_CHUNK = 32
    """Documents sorted first by :meth:`ranked` (then four times as many each time)."""

    def __init__(self, k1: float = BM25_K1, b: float = BM25_B) -> None:
        k1, b = check_number(k1, "k1"), check_number(b, "b")
        if not (math.isfinite(k1) and k1 >= 0.0):
            raise InvalidInputError(f"k1 must be a finite number >= 0, got {k1!r}")
        if not 0.0 <= b <= 1.0:
            raise InvalidInputError(f"b must be in [0, 1], got {b!r}")
        self.k1 = k1
        self.b = b
        self._docs: dict[uuid.UUID, Counter[str]] = {}
        self._slots: dict[uuid.UUID, int] = {}
        self._ids: list[uuid.UUID | None] = []
        self._keys: list[str] = []  # str(id): the tie order
        self._free: list[int] = []
        self._lengths = np.zeros(0, dtype=np.float64)
        self._postings: dict[str, dict[int, int]] = {}
        self._arrays: dict[str, tuple[NDArray[np.intp], NDArray[np.float64]]] = {}
        self._total_length = 0

    def __len__(self) -> int:
        """Number of indexed documents."""
        return len(self._docs)

    def __contains__(self, doc_id: object) -> bool:
        """Whether ``doc_id`` is indexed."""
        return doc_id in self._docs

    def add(self, doc_id: uuid.UUID, text: str) -> Counter[str]:
        """Index (or re-index) one document; returns its token counts."""
        counts = Counter(tokenize(text))
        self.add_counts(doc_id, counts)
        return counts

    def add_counts(self, doc_id: uuid.UUID, counts: Counter[str]) -> None:
        """Index (or re-index) one document given its token counts (see :func:`tokenize`)."""
        self.remove(doc_id)
        if self._free:
            slot = self._free.pop()
            self._ids[slot] = doc_id
            self._keys[slot] = str(doc_id)
        else:
            slot = len(self._ids)
            self._ids.append(doc_id)
            self._keys.append(str(doc_id))
            if slot >= len(self._lengths):
                grown = np.zeros(max(64, 2 * len(self._lengths)), dtype=np.float64)
                grown[: len(self._lengths)] = self._lengths
                self._lengths = grown
        self._slots[doc_id] = slot
        self._docs[doc_id] = counts
        length = sum(counts.values())
        self._lengths[slot] = length
        self._total_length += length
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[slot] = tf
            self._arrays.pop(term, None)

    def remove(self, doc_id: uuid.UUID) -> bool:
        """Drop one document; True when it was indexed."""
        counts = self._docs.pop(doc_id, None)
        if counts is None:
            return False
        slot = self._slots.pop(doc_id)
        self._total_length -= int(self._lengths[slot])
        self._lengths[slot] = 0.0
        self._ids[slot] = None
        self._keys[slot] = ""  # nothing of a removed document stays (erasure)
        self._free.append(slot)
        for term in counts:
            docs = self._postings.get(term)
            if docs is not None:
                docs.pop(slot, None)
                self._arrays.pop(term, None)
                if not docs:
                    del self._postings[term]
        return True

    def clear(self) -> None:
        """Drop every document."""
        self._docs.clear()
        self._slots.clear()
        self._ids.clear()
        self._keys.clear()
        self._free.clear()
        self._lengths = np.zeros(0, dtype=np.float64)
        self._postings.clear()
        self._arrays.clear()
        self._total_length = 0

    def _postings_arrays(self, term: str) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
        found = self._arrays.get(term)
        if found is None:
            docs = self._postings[term]
            found = (
                np.fromiter(docs.keys(), dtype=np.intp, count=len(docs)),
                np.fromiter(docs.values(), dtype=np.float64, count=len(docs)),
            )
            self._arrays[term] = found
        return found

    def _score_array(self, text: str) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
        """Scores by slot, and the slots scored (every one > 0), for ``text``."""
        n = len(self._docs)
        scores = np.zeros(len(self._lengths), dtype=np.float64)
        if n == 0:
            return scores, np.zeros(0, dtype=np.intp)
        avg = self._total_length / n if self._total_length else 1.0
        k1, b = self.k1, self.b
        for term in query_terms(text):
            docs = self._postings.get(term)
            if not docs:
                continue
            slots, tf = self._postings_arrays(term)
            df = len(docs)
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            # As per document: k1 * (1 - b + b * length / avg), idf * tf * (k1 + 1) / (tf + norm).
            norm = k1 * (1.0 - b + b * self._lengths[slots] / avg)
            scores[slots] += idf * tf * (k1 + 1.0) / (tf + norm)
        # Every term scores > 0 (idf > 0, tf >= 1): the scored slots are the non-zero ones.
        return scores, np.flatnonzero(scores)

    def scores(self, text: str) -> dict[uuid.UUID, float]:
        """BM25 score of every document sharing at least one token with ``text``."""
        scores, slots = self._score_array(text)
        ids = self._ids
        return {ids[s]: v for s, v in zip(slots.tolist(), scores[slots].tolist(), strict=True)}

    def ranked(self, text: str) -> Iterator[tuple[uuid.UUID, float]]:
        """Every document sharing a token with ``text``: score descending, ties by id.

        Lazy: the best :attr:`_FIRST_CHUNK` (and their ties) are sorted first, the next
        chunk (four times larger) only when the caller reads past them, and so on. The
        scores are taken when iteration starts; do not change the index while iterating
        (a removed document's slot may be reused).
        """
        scores, slots = self._score_array(text)
        values = scores[slots]
        ids, keys = self._ids, self._keys
        chunk = self._FIRST_CHUNK
        while slots.size:
            if slots.size > chunk:
                cut = float(np.partition(values, slots.size - chunk)[slots.size - chunk])
                take = values >= cut  # the chunk best, and every tie of the last of them
            else:
                take = np.ones(slots.size, dtype=bool)
            best = sorted(
                zip(values[take].tolist(), slots[take].tolist(), strict=True),
                key=lambda vs: (-vs[0], keys[vs[1]]),
            )
            for value, slot in best:
                yield ids[slot], value
            rest = ~take
            slots, values = slots[rest], values[rest]
            chunk *= 4

    def search(
        self, text: str, limit: int, allowed: Iterable[uuid.UUID] | None = None
    ) -> list[tuple[uuid.UUID, float]]:
        """The ``limit`` best documents for ``text``: score descending, ties by id.

        Args:
            text: The query.
            limit: Most results.
            allowed: When given, only these document ids may be returned.
        """
        keep = None if allowed is None else set(allowed)
        out: list[tuple[uuid.UUID, float]] = []
        if limit <= 0:
            return out
        for doc_id, score in self.ranked(text):
            if keep is None or doc_id in keep:
                out.append((doc_id, score))
                if len(out) == limit:
                    break
        return out
