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

    Lowercases (Unicode case-folding, NFKC), strips leading articles (the, a, an),
    strips punctuation and collapses whitespace: ``"The  Acme, Corp."`` -> ``"acme corp"``.
    """
    text = unicodedata.normalize("NFKC", name).casefold().strip()
    text = _PUNCT.sub(" ", text)
    text = _SPACE.sub(" ", text).strip()
    # Strip articles until none leads, so the function is idempotent ("the a team").
    while True:
        stripped = _LEADING_ARTICLE.sub("", text)
        if stripped == text:
            return text.strip()
        text = stripped
