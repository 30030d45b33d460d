"""Private entity-mention detection for the rule-based extractor.

Detects, per sentence: capitalised name groups ("Alice Smith", "University of Porto"),
@handles, camelCase / PascalCase identifiers, ACRONYMS, lowercase names of well-known
software, and matches of user patterns. Each mention carries *type cues*: scores per entity
type from titles, organisation suffixes, gazetteers, identifier shape and the words around
the mention. The extractor adds relation-argument cues later and picks the best-scoring
type per merged entity.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from cycgraph_memory.hierarchy.extractors import _lexicon as lex
from cycgraph_memory.normalize import normalize_entity_name

__all__ = [
    "CustomPattern",
    "Mention",
    "Token",
    "capitalized_tokens",
    "detect_mentions",
    "is_filler",
    "mask_urls",
    "masked_tokens",
    "tokenize",
]

# Cue strengths (summed per type; the highest total wins).
CUSTOM = 100
HANDLE = 90
SUFFIX = 80
TITLE = 80
KNOWN = 70
FIRST_NAME = 65
ROLE_NOUN = 60
CALLED = 60
TOOL_HEAD = 60
SHAPE = 50
PLACE_PREFIX = 45
AT_PREP = 40
IN_PREP = 30
TWO_WORDS = 20
ACRONYM = 15
FALLBACK = 10

CustomPattern = tuple[re.Pattern[str], str]

_TOKEN = re.compile(r"@?[^\W_](?:[\w'\u2019&\-]|\.(?=[^\W_]))*")
_URL = re.compile(r"\b(?:https?://|ftp://|www\.)\S+|\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_CONNECTORS = frozenset({"of", "de", "da", "del", "der", "van", "von", "la", "le", "&", "du"})
_INTERNAL_CAP = re.compile(r"[a-z][A-Z]|[A-Z]{2,}[a-z]")
_CAMEL = re.compile(r"^[a-z]+[A-Z][A-Za-z0-9]*$")
_TITLE_BEFORE = re.compile(
    r"\b(?:" + "|".join(sorted(lex.PERSON_TITLES)) + r")\.?\s+$", re.IGNORECASE
)
_PREV_WORD = re.compile(r"([A-Za-z][\w-]*)[,]?\s+$")
_CALLED_BEFORE = re.compile(r"([a-z][\w-]*)\s+(?:called|named)\s+$")
_AT_BEFORE = re.compile(r"\bat\s+(?:the\s+)?$")
# Sentence-initial participles and fillers that are not part of a following name
# ("Following Acme's lead", but "Billing Service" and "Red Hat" keep their first word).
_OPENER_WORDS = lex.word_set(
    """
    following regarding including according speaking assuming considering given based
    excited thrilled pleased proud welcoming meeting meet during despite
    """
)
_CONTEXT_WINDOW = 80  # characters before a mention that its context cues look at
_IN_BEFORE = re.compile(r"\b(?:in|near)\s+(?:the\s+)?$")
_PLACE_OF_BEFORE = re.compile(r"\b(?:city|town|village|county|state|region) of\s+$", re.I)
_PLACE_SUFFIXES = lex.word_set(
    """
    street st road rd avenue ave boulevard blvd lane square plaza park bridge river lake
    mountain mountains island islands county valley bay beach heights hill hills
    """
)


_NP_TOOL_HEADS = lex.word_set(
    """
    service services api gateway module pipeline app tool library framework database
    system job jobs model flow generator engine platform server cluster queue cache sdk
    script bot dashboard exporter replica tooling repo website
    """
)
_NP_ORG_HEADS = lex.word_set(
    """
    team group division department unit committee panel squad crew office board
    """
)
_NP_STOP = lex.word_set(
    """
    new old former current other same whole own main big small great good bad nice last
    next first second this that these those some any all every each and or of to in on
    at for with by is are was were be been has have had will would can could should
    """
)
# A determiner, one or two lowercase modifiers, then a known head noun.
_NOUN_PHRASE = re.compile(
    r"\b(?:[Tt]he|[Oo]ur|[Tt]heir|[Ii]ts|[Hh]is|[Hh]er|[Mm]y|[Yy]our)\s+"
    r"(?P<np>(?:[a-z][a-z0-9-]*\s+){1,2}(?:"
    + "|".join(sorted(_NP_TOOL_HEADS | _NP_ORG_HEADS))
    + r"))\b"
)


@dataclass(frozen=True, slots=True)
class Token:
    """A word token with its character span in the sentence."""

    start: int
    end: int
    text: str


@dataclass(slots=True)
class Mention:
    """One entity mention in a sentence."""

    start: int
    end: int
    name: str
    key: str
    cues: dict[str, int] = field(default_factory=dict)
    words: int = 1

    def cue(self, entity_type: str, score: int) -> None:
        """Add ``score`` to the cue total of ``entity_type``."""
        self.cues[entity_type] = self.cues.get(entity_type, 0) + score


def mask_urls(text: str) -> str:
    """Replace URLs and e-mail addresses by spaces (offsets are preserved)."""
    return _URL.sub(lambda m: " " * len(m.group(0)), text)


def tokenize(text: str) -> list[Token]:
    """Split text into word tokens; a trailing possessive ``'s`` is not part of the token."""
    tokens: list[Token] = []
    for m in _TOKEN.finditer(text):
        word, end = m.group(0), m.end()
        if word.endswith(("'s", "\u2019s")) and len(word) > 2:
            word, end = word[:-2], end - 2
        word = word.rstrip("'\u2019-")
        end = m.start() + len(word)
        if word:
            tokens.append(Token(m.start(), end, word))
    return tokens


def masked_tokens(sentence: str) -> list[Token]:
    """Tokens of a sentence with URLs masked (what both detection stages read)."""
    return tokenize(mask_urls(sentence))


def _is_cap(word: str) -> bool:
    return word[:1].isupper()


def _is_acronym(word: str) -> bool:
    letters = [c for c in word if c.isalpha()]
    return len(letters) >= 2 and all(c.isupper() for c in letters)


def capitalized_tokens(sentence: str, tokens: list[Token] | None = None) -> set[str]:
    """Lowercased capitalised tokens that are not the sentence's first word."""
    if tokens is None:
        tokens = masked_tokens(sentence)
    return {t.text.lower() for t in tokens[1:] if _is_cap(t.text)}


def _known_type(key: str) -> str | None:
    if key in lex.KNOWN_PLACES:
        return "location"
    if key in lex.KNOWN_ORGS:
        return "organization"
    if key in lex.KNOWN_TOOLS:
        return "tool"
    return None


def _shape_cues(mention: Mention, words: list[str]) -> None:
    key = mention.key
    lowered = [w.lower().rstrip(".") for w in words]
    known = _known_type(key)
    if known is not None:
        mention.cue(known, KNOWN)
    if len(words) >= 2 and lowered[-1] in lex.ORG_SUFFIXES:
        mention.cue("organization", SUFFIX)
    if len(words) >= 2 and lowered[-1] in _PLACE_SUFFIXES:
        mention.cue("location", SUFFIX)  # "Pine Street", "Argyle Street"
    if "&" in words:
        mention.cue("organization", SUFFIX)  # "Salt & Ember", "Harper & Lowe"
    if len(words) >= 3 and lowered[0] in lex.ORG_PREFIXES and lowered[1] == "of":
        mention.cue("organization", SUFFIX)
    if len(words) >= 2 and lowered[-1] in lex.TOOL_HEADS:
        mention.cue("tool", TOOL_HEAD)
    if len(words) >= 2 and lowered[0] in lex.KNOWN_PLACES and known != "location":
        mention.cue("organization", PLACE_PREFIX)
    if lowered[0] in lex.FIRST_NAMES and len(words) <= 3 and known is None:
        mention.cue("person", FIRST_NAME)
    if any(_INTERNAL_CAP.search(w) for w in words) and not all(map(_is_acronym, words)):
        mention.cue("tool", SHAPE)
    if len(words) == 1 and _is_acronym(words[0]):
        acronym_type = lex.ACRONYM_TYPES.get(lowered[0])
        if acronym_type is not None:
            mention.cue(acronym_type, KNOWN)
        else:
            mention.cue("organization", ACRONYM)
    if (
        2 <= len(words) <= 3
        and all(w.isalpha() and w.istitle() for w in words)
        and not mention.cues
    ):
        mention.cue("person", TWO_WORDS)
    if len(words) == 1:
        mention.cue("concept", FALLBACK)


def _context_cues(mention: Mention, sentence: str) -> None:
    # A bounded window: the cues are a few words long, and a whole-prefix search would
    # make a long sentence quadratic.
    before = sentence[max(0, mention.start - _CONTEXT_WINDOW) : mention.start]
    if _TITLE_BEFORE.search(before):
        mention.cue("person", TITLE)
    prev = _PREV_WORD.search(before)
    if prev is not None and prev.group(1).lower() in lex.PERSON_ROLE_NOUNS:
        mention.cue("person", ROLE_NOUN)
    called = _CALLED_BEFORE.search(before)
    if called is not None:
        noun = called.group(1).lower()
        if noun in lex.ORG_NOUNS:
            mention.cue("organization", CALLED)
        elif noun in lex.TOOL_NOUNS:
            mention.cue("tool", CALLED)
    if _AT_BEFORE.search(before):
        mention.cue("organization", AT_PREP)
    elif _IN_BEFORE.search(before):
        mention.cue("location", IN_PREP)
    if _PLACE_OF_BEFORE.search(before):
        mention.cue("location", SUFFIX)


def _groups(tokens: list[Token], text: str) -> list[list[Token]]:
    """Runs of capitalised tokens joined by single spaces or name connectors."""
    groups: list[list[Token]] = []
    i = 0
    while i < len(tokens):
        if not _is_cap(tokens[i].text) or tokens[i].text.startswith("@"):
            i += 1
            continue
        group = [tokens[i]]
        j = i + 1
        while j < len(tokens):
            gap = text[group[-1].end : tokens[j].start]
            word = tokens[j].text
            if gap == " " and _is_cap(word) and not word.startswith("@"):
                group.append(tokens[j])
                j += 1
                continue
            if (
                gap == " "
                and word.lower() in _CONNECTORS
                and j + 1 < len(tokens)
                and text[tokens[j].end : tokens[j + 1].start] == " "
                and _is_cap(tokens[j + 1].text)
            ):
                group.extend((tokens[j], tokens[j + 1]))
                j += 2
                continue
            if gap == " & " and _is_cap(word):
                group.append(tokens[j])
                j += 1
                continue
            break
        groups.append(group)
        i = j
    return groups


_REPEATS = re.compile(r"(\w)\1{2,}")


def is_filler(word: str) -> bool:
    """True for a filler word, also when stretched in chat ("YESSS", "whaaat", "sooo")."""
    low = word.lower().rstrip(".!?")
    if low in lex.STOPWORDS:
        return True
    if _REPEATS.search(low) is None:
        return False
    once, twice = _REPEATS.sub(r"\1", low), _REPEATS.sub(r"\1\1", low)
    return once in lex.STOPWORDS or twice in lex.STOPWORDS


def _is_stop(word: str) -> bool:
    low = word.lower().rstrip(".")
    base = low.replace("\u2019", "'").split("'")[0]
    return (
        is_filler(low)
        or (base != low and base in lex.STOPWORDS)  # contractions: I'm, I've, We'll
        or low in lex.PERSON_TITLES
        or (_is_acronym(word) and low in lex.ACRONYM_STOP)
    )


def _split_on_stops(group: list[Token]) -> list[tuple[list[Token], bool]]:
    """Split a group at stop words; flag parts that directly follow a person title."""
    parts: list[tuple[list[Token], bool]] = []
    current: list[Token] = []
    titled = False
    for token in group:
        low = token.text.lower().rstrip(".")
        if token.text in _CONNECTORS and current:
            current.append(token)  # "University of Porto": lowercase connector inside a name
            continue
        if _is_stop(token.text):
            if current:
                parts.append((current, titled))
            current = []
            titled = low in lex.PERSON_TITLES or low in lex.ACRONYM_STOP
            continue
        current.append(token)
    if current:
        parts.append((current, titled))
    # Connectors never start or end a name.
    cleaned: list[tuple[list[Token], bool]] = []
    for part, flag in parts:
        while part and part[0].text.lower() in _CONNECTORS:
            part = part[1:]
        while part and part[-1].text.lower() in _CONNECTORS:
            part = part[:-1]
        if part:
            cleaned.append((part, flag))
    return cleaned


def _known_word(word: str) -> bool:
    low = word.lower()
    return (
        _known_type(normalize_entity_name(word)) is not None
        or low in lex.FIRST_NAMES
        or bool(_INTERNAL_CAP.search(word))
        or _is_acronym(word)
    )


_PLURAL_VERBS = frozenset({"are", "were", "have", "do", "don't", "aren't", "weren't"})


def _plural_looking(word: str) -> bool:
    low = word.lower()
    return len(low) >= 4 and low.endswith("s") and not low.endswith(("ss", "us", "is"))


def _lowercase_use(word: str, episode_lower: frozenset[str]) -> bool:
    """True when the episode writes ``word`` (or its singular / plural) in lowercase."""
    low = word.lower()
    forms = {low, low + "s"}
    if low.endswith(("ses", "xes", "zes", "ches", "shes")):
        forms.add(low[:-2])  # "boxes" / "box"
    elif low.endswith("s") and not low.endswith("ss"):
        forms.add(low[:-1])  # "postmortems" / "postmortem"
    return any(len(f) >= 4 and f in episode_lower for f in forms)


def _keep_initial(
    part: list[Token],
    tokens: list[Token],
    episode_caps: set[str],
    verb_hints: frozenset[str],
    episode_lower: frozenset[str] = frozenset(),
) -> list[Token]:
    """Decide whether a sentence-initial capitalised run is a name (see module doc)."""
    first = part[0].text
    if len(part) > 1:
        low = first.lower()
        second = part[1].text.lower()
        if not _known_word(first) and low not in episode_caps and (
            (low.endswith("ly") and len(low) > 4)
            or low in _OPENER_WORDS
            or (low.endswith(("ing", "ed")) and second in lex.FIRST_NAMES)
        ):
            return part[1:]  # "Apparently Dana ...", "Following Acme ..."
        return part
    if _known_word(first) or first.lower() in episode_caps:
        return part
    if _lowercase_use(first, episode_lower):
        return []  # "Postmortems are due ..." after "every postmortem": a common noun
    index = tokens.index(part[-1])
    for follower in tokens[index + 1 : index + 4]:
        low = follower.text.lower()
        if low in _PLURAL_VERBS and _plural_looking(first):
            return []  # "Deadlines are tight", "Minutes were sent": a plural common noun
        if low in verb_hints:
            return part
        if not (low.endswith("ly") or low in {"also", "still", "just", "now", "never", "not"}):
            break
    return []


def detect_mentions(
    sentence: str,
    *,
    episode_caps: set[str],
    verb_hints: frozenset[str],
    custom: Sequence[CustomPattern] = (),
    tokens: list[Token] | None = None,
    episode_lower: frozenset[str] = frozenset(),
) -> list[Mention]:
    """Find entity mentions in one sentence, ordered by position.

    Args:
        sentence: The sentence text.
        episode_caps: Lowercased words seen capitalised mid-sentence anywhere in the
            episode (evidence that a sentence-initial word is a name).
        verb_hints: Lowercase verb forms whose presence right after a sentence-initial
            capitalised word marks it as a subject name.
        custom: User patterns and the entity type each assigns.
        tokens: ``masked_tokens(sentence)`` when the caller already has them.
        episode_lower: Words written in lowercase anywhere in the episode (evidence that
            a sentence-initial capitalised word is a common word).

    Returns:
        Non-overlapping mentions.
    """
    text = mask_urls(sentence)
    mentions: list[Mention] = []
    taken = bytearray(len(sentence) + 1)  # 1 where a mention already sits: linear checks

    def free(start: int, end: int) -> bool:
        return not any(taken[start:end])

    def add(start: int, end: int, name: str) -> Mention | None:
        key = normalize_entity_name(name)
        if not key or not free(start, end):
            return None
        mention = Mention(start, end, name, key, words=len(name.split()))
        mentions.append(mention)
        taken[start:end] = b"\x01" * (end - start)
        return mention

    for pattern, entity_type in custom:
        for m in pattern.finditer(sentence):
            span = m.span("name") if "name" in pattern.groupindex else m.span()
            name = sentence[span[0] : span[1]].strip()
            if name:
                found = add(span[0], span[1], name)
                if found is not None:
                    found.cue(entity_type, CUSTOM)

    if tokens is None:
        tokens = masked_tokens(sentence)
    for token in tokens:
        word = token.text
        if word.startswith("@") and len(word) > 1:
            if token.start == 0 or not text[token.start - 1].isalnum():
                found = add(token.start, token.end, word)
                if found is not None:
                    found.cue("person", HANDLE)
        elif _CAMEL.match(word):
            found = add(token.start, token.end, word)
            if found is not None:
                known = _known_type(word.lower())
                found.cue(known or "tool", KNOWN if known else SHAPE)
        elif word.islower() and word in lex.LOWERCASE_TOOLS:
            found = add(token.start, token.end, word)
            if found is not None:
                found.cue("tool", KNOWN)

    for group in _groups(tokens, text):
        initial = group[0] is tokens[0]
        for part, titled in _split_on_stops(group):
            if initial and part[0] is tokens[0]:
                part = _keep_initial(part, tokens, episode_caps, verb_hints, episode_lower)
                if not part:
                    continue
            start, end = part[0].start, part[-1].end
            name = sentence[start:end]
            found = add(start, end, name)
            if found is None:
                continue
            _shape_cues(found, [t.text for t in part])
            _context_cues(found, sentence)
            if titled:
                found.cue("person", TITLE)
    for m in _NOUN_PHRASE.finditer(text):
        # Lowercase noun-phrase endpoints: "the payments gateway", "the data division".
        words = m.group("np").split()
        if any(w in _NP_STOP for w in words[:-1]):
            continue
        found = add(m.start("np"), m.end("np"), m.group("np"))
        if found is not None:
            head = words[-1]
            found.cue("tool" if head in _NP_TOOL_HEADS else "organization", TOOL_HEAD + 30)
    mentions.sort(key=lambda m: m.start)
    return mentions
