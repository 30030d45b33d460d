"""Entity-name normalisation shared by extractors and the entity resolver."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from cycgraph_memory.errors import InvalidTypeError
from cycgraph_memory.textsearch import name_candidates

__all__ = ["name_candidate_keys", "normalize_entity_name"]

_LEADING_ARTICLE = re.compile(r"^(?:the|a|an)\s+")
_PUNCT = re.compile(r"[^\w\s]|_", re.UNICODE)
_SPACE = re.compile(r"\s+")


_PLAIN = re.compile(r"[a-z0-9]+(?: [a-z0-9]+)*")
_ARTICLES = ("the ", "a ", "an ")


@lru_cache(maxsize=65_536)
def _normalized(name: str) -> str:
    text = unicodedata.normalize("NFKC", name).casefold()
    if _PLAIN.fullmatch(text) and not text.startswith(_ARTICLES):
        # Lowercase ASCII words single-spaced, no leading article: every step below
        # leaves it as it is (the common case of a question's word n-grams).
        return text
    while True:
        before = text
        text = _SPACE.sub(" ", text).strip()
        text = _LEADING_ARTICLE.sub("", text)
        text = _PUNCT.sub("", text)
        text = _SPACE.sub(" ", text).strip()
        if text == before:
            return text


def normalize_entity_name(name: str) -> str:
    """Return the identity key of an entity name.

    In the spec's order: lowercase (Unicode case-folding after NFKC), strip a leading
    article (the, a, an), strip punctuation, collapse whitespace; repeated until nothing
    changes, so the function is idempotent. ``"The Acme, Corp."`` -> ``"acme corp"``,
    ``"A.I. Labs"`` -> ``"ai labs"``, ``"The A-Team"`` and ``"A-Team"`` -> ``"ateam"``.
    The answers for the most recent 65,536 distinct short names are remembered
    (extraction asks for the same names many times per episode).

    Raises:
        InvalidTypeError: ``name`` is not a string.
    """
    if type(name) is str and len(name) <= 256:
        return _normalized(name)
    if not isinstance(name, str):
        raise InvalidTypeError(f"an entity name is a string, got {type(name).__name__}")
    return _normalized.__wrapped__(name)


def name_candidate_keys(text: str) -> list[str]:
    """Identity keys of the word n-grams of ``text`` that could name an entity.

    :func:`~cycgraph_memory.textsearch.name_candidates` (1-4 words, in order of first
    appearance) through :func:`normalize_entity_name`, each key once, at its first
    candidate's place: what an entity-name match of a question compares with the stored
    entities' keys, on both backends.
    """
    return list(dict.fromkeys(normalize_entity_name(c) for c in name_candidates(text)))
