"""Entity-name normalisation shared by extractors and the entity resolver."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["normalize_entity_name"]

_LEADING_ARTICLE = re.compile(r"^(?:the|a|an)\s+", re.IGNORECASE)
_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")


def normalize_entity_name(name: str) -> str:
    """Return the identity key of an entity name.

    Lowercases (Unicode case-folding, NFKC), strips one leading article (the, a, an),
    strips punctuation and collapses whitespace: ``"The  Acme, Corp."`` -> ``"acme corp"``.
    """
    text = unicodedata.normalize("NFKC", name).casefold().strip()
    text = _PUNCT.sub(" ", text)
    text = _SPACE.sub(" ", text).strip()
    text = _LEADING_ARTICLE.sub("", text)
    return text.strip()
