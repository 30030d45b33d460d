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
from collections.abc import Iterable

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

    Args:
        k1: Term-frequency saturation (default 1.2).
        b: Length normalisation (default 0.75).
    """

    def __init__(self, k1: float = BM25_K1, b: float = BM25_B) -> None:
        self.k1 = k1
        self.b = b
        self._docs: dict[uuid.UUID, Counter[str]] = {}
        self._lengths: dict[uuid.UUID, int] = {}
        self._postings: dict[str, set[uuid.UUID]] = {}
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
        self._docs[doc_id] = counts
        length = sum(counts.values())
        self._lengths[doc_id] = length
        self._total_length += length
        for term in counts:
            self._postings.setdefault(term, set()).add(doc_id)

    def remove(self, doc_id: uuid.UUID) -> bool:
        """Drop one document; True when it was indexed."""
        counts = self._docs.pop(doc_id, None)
        if counts is None:
            return False
        self._total_length -= self._lengths.pop(doc_id)
        for term in counts:
            docs = self._postings.get(term)
            if docs is not None:
                docs.discard(doc_id)
                if not docs:
                    del self._postings[term]
        return True

    def clear(self) -> None:
        """Drop every document."""
        self._docs.clear()
        self._lengths.clear()
        self._postings.clear()
        self._total_length = 0

    def scores(self, text: str) -> dict[uuid.UUID, float]:
        """BM25 score of every document sharing at least one token with ``text``."""
        n = len(self._docs)
        if n == 0:
            return {}
        avg = self._total_length / n if self._total_length else 1.0
        out: dict[uuid.UUID, float] = {}
        for term in query_terms(text):
            docs = self._postings.get(term)
            if not docs:
                continue
            idf = math.log(1.0 + (n - len(docs) + 0.5) / (len(docs) + 0.5))
            for doc_id in docs:
                tf = self._docs[doc_id][term]
                norm = self.k1 * (1.0 - self.b + self.b * self._lengths[doc_id] / avg)
                out[doc_id] = out.get(doc_id, 0.0) + idf * tf * (self.k1 + 1.0) / (tf + norm)
        return out

    def search(
        self, text: str, limit: int, allowed: Iterable[uuid.UUID] | None = None
    ) -> list[tuple[uuid.UUID, float]]:
        """The ``limit`` best documents for ``text``: score descending, ties by id.

        Args:
            text: The query.
            limit: Most results.
            allowed: When given, only these document ids may be returned.
        """
        scored = self.scores(text)
        if allowed is not None:
            keep = set(allowed)
            scored = {k: v for k, v in scored.items() if k in keep}
        ranked = sorted(scored.items(), key=lambda kv: (-kv[1], str(kv[0])))
        return ranked[:limit]
