"""Grounded, self-contained facts: message links, speaker and date, fillers dropped.

Applied by :class:`~cycgraph_memory.hierarchy.pipeline.MemoryPipeline` to whatever the
extractor returns for an episode (pure functions, no I/O):

* :func:`ground_facts` links each fact to the message(s) it came from
  (``SemanticFact.source_message_ids``): the messages whose text contains the fact's text
  (whitespace and case ignored), else the message sharing the most words with it (at
  least half of the fact's content words). Facts that already carry message ids are left
  as they are.
* :func:`is_filler` recognises greetings, thanks, sign-offs and other turns without
  content ("Hey Caroline!", "Thanks, Melanie!", "ok cool, talk later"): fewer than
  :data:`MIN_CONTENT_WORDS` words remain once stop words, filler words and names of
  people addressed are removed.
* :func:`contextualize` prefixes the fact with who said it and when (``"Maya on
  2024-01-08: ..."``) and resolves first-person pronouns to that speaker ("I", "my", "me",
  "I'm", ... -> "Maya", "Maya's", "Maya is", ...). The speaker is the message metadata's
  ``name`` (else ``speaker``, whitespace collapsed), else the role.
* :func:`informativeness` ranks sentences when a cap is applied: the number of distinct
  content words (stop and filler words removed).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

from cycgraph_memory.hierarchy.extractors._conversation import speaker_name
from cycgraph_memory.records import Episode, Message, SemanticFact
from cycgraph_memory.textsearch import STOP_WORDS, tokenize

__all__ = [
    "FILLER_WORDS",
    "MIN_CONTENT_WORDS",
    "contextualize",
    "ground_facts",
    "informativeness",
    "is_filler",
    "resolve_first_person",
    "speaker_of",
    "without_grounding",
]

MIN_CONTENT_WORDS = 2
"""A sentence with fewer content words than this is a filler."""

_FILLER_TEXT = """hi hey heyy hiya hello yo morning evening afternoon night goodnight good
    bye goodbye
    thanks thank thx ty cheers appreciate appreciated welcome ok okay k kk cool yes yeah yep
    yup no nope sure great awesome perfect nice lol haha hah lmao omg wow oh ah um uh hmm
    talk later ttyl soon see care take bye gotta run go sorry anytime problem glad help
    helps helped lot much again quick back there around happy hear thats all sounds right
    alright fine really so well now dear"""

FILLER_WORDS = frozenset(_FILLER_TEXT.split())
"""Words that carry no memory on their own (greetings, thanks, sign-offs, fillers)."""

_SPACES = re.compile(r"\s+")
_FIRST_PERSON = re.compile(
    r"\b(?P<is>I'm|I am|im)\b|\b(?P<has>I've|ive)\b|\b(?P<will>I'll)\b|\b(?P<would>I'd)\b"
    r"|\b(?P<pos>my|mine)\b|\b(?P<obj>me|myself)\b|(?<![\w'])(?P<subj>[Ii])(?![\w'])",
    re.IGNORECASE,
)
_TEMPLATES = {
    "is": "{s} is",
    "has": "{s} has",
    "will": "{s} will",
    "would": "{s} would",
    "pos": "{s}'s",
    "obj": "{s}",
    "subj": "{s}",
}


def speaker_of(message: Message) -> str:
    """The speaker's name: metadata ``name``, else ``speaker``, else the role.

    Spelled as the extractors spell it (whitespace runs collapsed, at most 200
    characters), so the speaker prefix they write is recognised and replaced, not doubled.
    """
    return speaker_name(message.metadata, message.role)


def _norm(text: str) -> str:
    return _SPACES.sub(" ", text).strip().lower()


def _content_words(text: str) -> set[str]:
    return {w for w in tokenize(text) if w not in FILLER_WORDS}


def informativeness(sentence: str) -> int:
    """Distinct content words of ``sentence`` (stop and filler words removed)."""
    return len(_content_words(sentence))


def is_filler(sentence: str, names: Sequence[str] = ()) -> bool:
    """Whether ``sentence`` is a greeting, thanks, sign-off or other content-free turn.

    Args:
        sentence: The candidate fact text.
        names: Names of the people in the conversation; a name alone ("Hey Caroline!")
            does not make a sentence informative.
    """
    drop = {w for name in names for w in tokenize(name)}
    words = [w for w in _content_words(sentence) if w not in drop and w not in STOP_WORDS]
    return len(words) < MIN_CONTENT_WORDS


def resolve_first_person(text: str, speaker: str) -> str:
    """Replace first-person pronouns in ``text`` by ``speaker`` ("my" -> "Maya's")."""
    def replace(match: re.Match[str]) -> str:
        group = match.lastgroup
        assert group is not None
        return _TEMPLATES[group].format(s=speaker)

    return _FIRST_PERSON.sub(replace, text)


_GROUNDING_PREFIX = re.compile(r"[^\n]{1,200}? on \d{4}-\d{2}-\d{2}: ")


def without_grounding(text: str) -> str:
    """``text`` without the ``"<speaker> on <YYYY-MM-DD>: "`` that :func:`contextualize` adds.

    For what people read about a fact rather than search (a theme's label and key terms):
    every fact of a conversation starts with a speaker and a date, which say nothing
    about its topic. Text without that prefix (or with nothing after it) is returned as is.
    """
    match = _GROUNDING_PREFIX.match(text)
    if match is None or match.end() == len(text):
        return text
    return text[match.end():]


def contextualize(fact: SemanticFact, message: Message) -> str:
    """``"<speaker> on <YYYY-MM-DD>: <fact text, first person resolved>"``."""
    speaker = speaker_of(message)
    body = resolve_first_person(fact.content.strip(), speaker)
    return f"{speaker} on {message.timestamp:%Y-%m-%d}: {body}"


def ground_facts(episode: Episode, facts: Sequence[SemanticFact]) -> None:
    """Set ``source_message_ids`` of facts that have none (see the module docstring)."""
    messages = [m for m in episode.messages if m.content.strip()]
    normalized = [_norm(m.content) for m in messages]
    words: list[set[str]] = []  # content words per message, computed on first need
    for fact in facts:
        if fact.source_message_ids:
            continue
        text = _norm(fact.content)
        ids: list[uuid.UUID] = [m.id for m, n in zip(messages, normalized, strict=True)
                                if text and text in n]
        if not ids:
            wanted = _content_words(fact.content)
            if not words:
                words = [_content_words(m.content) for m in messages]
            best, best_overlap = None, 0
            for message, have in zip(messages, words, strict=True):
                overlap = len(wanted & have)
                if overlap > best_overlap:
                    best, best_overlap = message, overlap
            if best is not None and wanted and 2 * best_overlap >= len(wanted):
                ids = [best.id]
        if ids:
            fact.source_message_ids = ids[:1]  # the first message that said it
