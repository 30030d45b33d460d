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
  "I'm", ... -> "Maya", "Maya's", "Maya is", ...), a common present-tense verb right
  after "I" agreeing with it ("I prefer" -> "Maya prefers"); words inside double
  quotation marks are someone else's and stay as written. The speaker is the message
  metadata's ``name`` (else ``speaker``, whitespace collapsed), else the role.
* :func:`informativeness` ranks sentences when a cap is applied: the number of distinct
  content words (stop and filler words removed).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

from cycgraph_memory.hierarchy.extractors._conversation import speaker_name
from cycgraph_memory.hierarchy.extractors._polarity import quotations
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
    "third_person",
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

_IRREGULAR_THIRD_PERSON = {
    "have": "has", "do": "does", "go": "goes", "don't": "doesn't", "dont": "doesn't",
    "haven't": "hasn't", "havent": "hasn't",
}
_PRESENT_VERBS_TEXT = """
    like love adore hate dislike prefer want need live work think know feel enjoy play use
    eat drink own believe mean guess hope wish plan teach study speak miss get make take
    see watch write cook visit drive ride walk run swim travel try remember forget
    understand agree care mind suppose bake paint draw sing dance volunteer collect
    support manage lead rent commute train practice practise attend struggle suffer stay
    keep spend move go have do don't dont haven't havent
"""
_PRESENT_VERBS = frozenset(_PRESENT_VERBS_TEXT.split())
"""Verbs that, right after the subject "I", are in the present tense (so "I prefer" ->
"Maya prefers"): common chat verbs whose base form is never also their past ("quit",
"read", "put" are left out, and any verb not listed stays as written)."""
_ADVERBS_TEXT = """
    really also just still never ever always usually often sometimes actually totally
    definitely kinda sorta mostly only even currently honestly absolutely seriously
    genuinely rarely mainly probably literally truly generally normally
"""
_ADVERBS = frozenset(_ADVERBS_TEXT.split())
_AUXILIARIES_TEXT = """
    do does did can could will would should shall may might must am was were have has had
    don't didn't can't cannot won't wouldn't shouldn't couldn't
"""
_AUXILIARIES = frozenset(_AUXILIARIES_TEXT.split())
"""A subject "I" right after one of these is inverted ("do I need"): its verb is bare."""


def _alternation(words: frozenset[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


_FIRST_PERSON = re.compile(
    r"\b(?P<is>I'm|I am|im)\b|\b(?P<has>I've|ive)\b|\b(?P<will>I'll)\b|\b(?P<would>I'd)\b"
    r"|\b(?P<pos>my|mine)\b|\b(?P<obj>me|myself)\b|(?<![\w'])(?P<subj>[Ii])(?![\w'])"
    rf"(?P<pred>(?P<adverbs>(?:\s+(?:{_alternation(_ADVERBS)})){{0,2}})"
    rf"\s+(?P<verb>{_alternation(_PRESENT_VERBS)})(?![\w']))?",
    re.IGNORECASE,
)
_LAST_WORD = re.compile(r"([\w']+)\W*$")


def third_person(verb: str) -> str:
    """``verb`` (present tense, as said after "I") as said after "she": "prefer" -> "prefers".

    Irregular forms from a table ("have" -> "has", "don't" -> "doesn't"); otherwise "-es"
    after a sibilant or "o", "-ies" after a consonant and "y", else "-s". An all-capitals
    verb stays in capitals.
    """
    lower = verb.lower()
    out = _IRREGULAR_THIRD_PERSON.get(lower)
    if out is None:
        if lower.endswith(("s", "sh", "ch", "x", "z", "o")):
            out = lower + "es"
        elif lower.endswith("y") and len(lower) > 1 and lower[-2] not in "aeiou":
            out = lower[:-1] + "ies"
        else:
            out = lower + "s"
    if verb.isupper() and len(verb) > 1:
        return out.upper()
    return verb[0] + out[1:] if verb[:1].isupper() else out
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


def _inverted(match: re.Match[str]) -> bool:
    """Whether the subject "I" of ``match`` follows an auxiliary ("do I need", "can I")."""
    before = _LAST_WORD.search(match.string, 0, match.start())
    return before is not None and before.group(1).lower() in _AUXILIARIES


def resolve_first_person(text: str, speaker: str) -> str:
    """Replace first-person pronouns in ``text`` by ``speaker`` ("my" -> "Maya's").

    A present-tense verb right after the subject "I" (one of a list of common verbs,
    after at most two adverbs) agrees with the speaker: "I really prefer tea" -> "Maya
    really prefers tea", "I don't" -> "Maya doesn't"; not in a question ("do I need"), and
    a verb not in the list (or in the past) stays as written. Inside double quotation
    marks the words are quoted, not the speaker's, and stay as written: 'she said "I quit
    my job"' is not about the speaker.
    """
    quoted = quotations(text)

    def replace(match: re.Match[str]) -> str:
        if any(start <= match.start() < end for start, end in quoted):
            return match.group(0)  # someone else's "I": 'she said "I quit my job"'
        if match.group("subj") is not None:
            pred, adverbs, verb = match.group("pred", "adverbs", "verb")
            if verb is None or _inverted(match):
                return speaker + (pred or "")
            gap = pred[len(adverbs):len(pred) - len(verb)]  # the space before the verb
            return f"{speaker}{adverbs}{gap}{third_person(verb)}"
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
