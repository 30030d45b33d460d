"""Private conversation helpers shared by the rule and parser tiers.

Who said what: the speaker of a message is its metadata ``name`` or ``speaker`` (a
non-blank string), else its role. The speaker is a person entity of the episode; first-
person pronouns (I, me, my, we, us, our) resolve to the speaker, second-person pronouns
(you, your) to the addressee when one is known: the other speaker of a two-party episode.
Every sentence keeps the id of the message it came from (:class:`Turn`), so facts can be
grounded in their message.

Work caps (documented in the README): a message is read up to
:data:`MAX_MESSAGE_CHARS` characters (the rest is not analysed), and the rule tier cuts a
sentence longer than :data:`MAX_SENTENCE_WORDS` words into pieces of that size (the parser
tier analyses the first :data:`MAX_SENTENCE_WORDS` tokens of a parsed sentence). The caps
keep extraction linear in the input size: a pasted 16,000-word log costs a bounded amount
of work per piece. A whitespace-free run longer than :data:`MAX_TOKEN_CHARS` (a base64
blob, a minified line, a message with no spaces) is cut to that length before analysis, so
no token can grow an entity name past ``MAX_NAME_LENGTH``.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from cycgraph_memory.records import Episode

__all__ = [
    "FIRST_PERSON",
    "MAX_MESSAGE_CHARS",
    "MAX_SENTENCE_WORDS",
    "MAX_TOKEN_CHARS",
    "SECOND_PERSON",
    "Turn",
    "bounded_text",
    "chunk_sentence",
    "speaker_name",
    "fact_text",
    "turns_of",
    "without_labels",
]

MAX_MESSAGE_CHARS = 20_000
"""Characters of one message that are analysed; the rest of the message is ignored."""

MAX_SENTENCE_WORDS = 120
"""Words of one sentence that are analysed; a longer "sentence" (a pasted log, a minified
file) is cut to its first words before entity and relation matching."""

MAX_TOKEN_CHARS = 512
"""Longest whitespace-free run analysed; longer runs are cut to their first characters."""

FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself", "we", "us", "our", "ours"})
"""Pronouns that resolve to the speaker."""

SECOND_PERSON = frozenset({"you", "your", "yours", "yourself"})
"""Pronouns that resolve to the addressee (when known)."""

_WORDS = re.compile(r"\S+")
_LONG_TOKEN = re.compile(r"\S{" + str(MAX_TOKEN_CHARS + 1) + ",}")


# A discourse label before a message, a line or a sentence ("Update: ...", "Note - ...",
# "Quick update: ...", "P.S. ...", "Re: ...", "Heads up: ..."): it frames the message, it
# is no part of what the sentence says.
_LABEL = re.compile(
    r"(?:^|(?<=[.!?] ))[ \t]*"
    r"(?:(?:(?:quick|small|big|short|status|important|general|minor|major|brief|side|"
    r"final|latest|another|team|job|work|career|personal)\s+)?"
    r"(?:updates?|news|notes?|edit(?:ed)?|corrections?|reminder|announcement|fyi|"
    r"heads[ -]?up|re|fwd?|btw|nb|n\.b\.|tl;?\s?dr|psa|p\.?p\.?s\.?|p\.?s\.?)"
    r"(?:\s*\d{1,2})?(?:\s*:|\s+(?:--?|\u2013|\u2014))"
    r"|p\.\s?(?:p\.\s?)?s\.)[ \t]+(?=\S)",
    re.IGNORECASE | re.MULTILINE,
)


def without_labels(text: str) -> str:
    """``text`` without the discourse labels that open it, its lines or its sentences.

    "Update: Alice left Acme." reads "Alice left Acme."; both free tiers (and the LLM
    tier's check) read the text without them, so a fact never starts with the label.
    """
    return _LABEL.sub("", text)


def bounded_text(text: str) -> str:
    """``text`` cut to :data:`MAX_MESSAGE_CHARS`, every run to :data:`MAX_TOKEN_CHARS`."""
    text = text[:MAX_MESSAGE_CHARS]
    return _LONG_TOKEN.sub(lambda m: m.group()[:MAX_TOKEN_CHARS], text)


@dataclass(frozen=True, slots=True)
class Turn:
    """One message as the extractors read it."""

    message_id: uuid.UUID
    text: str
    speaker: str
    addressee: str | None
    named: bool
    """True when the speaker came from metadata (a real name), not from the role."""
    timestamp: datetime | None = None
    """When the message was sent (relations it states are valid from then)."""


MAX_SPEAKER_CHARS = 200
"""Longest speaker name used (a longer metadata name is cut to its first characters)."""


def _speaker(metadata: Mapping[str, object], role: str) -> tuple[str, bool]:
    for key in ("name", "speaker"):
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())[:MAX_SPEAKER_CHARS], True
    return role, False


def speaker_name(metadata: Mapping[str, object], role: str) -> str:
    """The speaker of a message: metadata ``name``, else ``speaker``, else ``role``.

    A name has its runs of whitespace collapsed to one space and is cut to
    :data:`MAX_SPEAKER_CHARS` characters. The extractors' ``"Speaker: ..."`` facts and the
    pipeline's grounding prefix both use this spelling, so they always agree.
    """
    return _speaker(metadata, role)[0]


def turns_of(episode: Episode, roles: Sequence[str]) -> list[Turn]:
    """The messages of ``episode`` with one of ``roles``, with speaker and addressee.

    Args:
        episode: The episode.
        roles: Message roles to read.

    Returns:
        One ``Turn`` per message read, text capped at :data:`MAX_MESSAGE_CHARS`.
    """
    chosen = [m for m in episode.messages if m.role in roles]
    speakers = [_speaker(m.metadata, m.role) for m in chosen]
    distinct = list(dict.fromkeys(name for name, _ in speakers))
    turns: list[Turn] = []
    for message, (name, named) in zip(chosen, speakers, strict=True):
        addressee = None
        if len(distinct) == 2:
            addressee = distinct[1] if name == distinct[0] else distinct[0]
        turns.append(
            Turn(
                message.id,
                without_labels(bounded_text(message.content)),
                name,
                addressee,
                named,
                message.timestamp,
            )
        )
    return turns


def chunk_sentence(sentence: str) -> list[str]:
    """Cut a sentence into pieces of at most :data:`MAX_SENTENCE_WORDS` words.

    A normal sentence comes back whole; a 16,000-word "sentence" becomes ~134 pieces, each
    analysed on its own, so the work per piece is bounded and the total stays linear.
    """
    if len(sentence) < MAX_SENTENCE_WORDS or sentence.count(" ") < MAX_SENTENCE_WORDS:
        return [sentence]  # fast path: fewer separators than the cap allows words
    starts = [m.start() for m in _WORDS.finditer(sentence)]
    if len(starts) <= MAX_SENTENCE_WORDS:
        return [sentence]
    cuts = [*starts[::MAX_SENTENCE_WORDS], len(sentence)]
    pieces = (sentence[a:b].strip() for a, b in itertools.pairwise(cuts))
    return [p for p in pieces if p]


def fact_text(turn: Turn | None, sentence: str) -> str:
    """Fact content for a sentence: ``"Speaker: sentence"`` when the speaker is named."""
    if turn is None or not turn.named:
        return sentence
    return f"{turn.speaker}: {sentence}"
