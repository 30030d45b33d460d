"""Private relationship matching for the rule-based extractor.

For every relation-verb match in a sentence the subject is the entity (or pronoun) right
before the verb, allowing only auxiliaries, adverbs, negation, commas and relative
pronouns in between; the object is the first entity after the verb phrase with only
determiners and lowercase modifiers in between (no punctuation, preposition or clause
word). Passive voice ("was founded by") swaps the arguments. Coordinated verb phrases
("lives in X and works at Y", "worked at X before joining Y") reuse the previous subject;
coordinated names ("X and Y use Z") expand to one edge per name; a relative clause with no
object ("Y, which X leads") takes the relative pronoun's antecedent as object. Negated
claims ("does not work at") and genuine questions produce no edge.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from cycgraph_memory.hierarchy.extractors._entities import Mention
from cycgraph_memory.hierarchy.extractors._frames import frames
from cycgraph_memory.hierarchy.extractors._polarity import STATIVE_RELATIONS
from cycgraph_memory.hierarchy.extractors._questions import asks, is_question
from cycgraph_memory.hierarchy.extractors._verbs import RelationPattern


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


__all__ = [
    "PRONOUNS",
    "Arg",
    "RawRelation",
    "asks",
    "find_pronouns",
    "frame_relations",
    "is_question",
    "match_relations",
    "trigger_index",
]

PRONOUNS = {
    "he": "person",
    "she": "person",
    "him": "person",
    "her": "person",
    "it": "thing",
    "they": "thing",
    "them": "thing",
    "i": "speaker",
    "we": "speaker",
    "you": "speaker",
    "me": "speaker",
    "us": "speaker",
}
# A pronoun may carry a contraction ("I'm", "we've", "she'll").
_PRONOUN_RE = re.compile(
    r"(?<![\w'\u2019-])(" + "|".join(PRONOUNS) + r")(?![\w-])(?!['\u2019]s\w)", re.IGNORECASE
)

_AUX = _wordset(
    """
    is are was were be been being am has have had will would shall should can could
    may might must do does did 's 're 've 'd 'll 'm going to got gets who which that
    also still just now both currently previously recently already then really
    actually originally eventually once later soon finally not never no longer n't
    ever even all too
    """
)
# Collective head nouns that may follow a name acting as subject ("the Atlas team").
_HEAD_NOUNS = _wordset(
    """
    team group project service app library division department unit lab org squad
    """
)
_BE = frozenset({"is", "are", "was", "were", "be", "been", "being", "am", "got", "get", "gets"})
_DETERMINERS_OK = _wordset(
    """
    the a an this that these those their its his her our my your some another called
    named both new old former current
    """
)
_STOP_OBJECT = _wordset(
    """
    at in on for from to with without by of into onto over under about after before
    since during through via across against among between near like as than per
    around and or but so because which who whom when while if until unless whereas
    not never
    """
)
_CONNECT_PREV = re.compile(
    r"(?:\band|\bor|\bbut|\bthen|\bbefore|\bafter|\bwhile|\bsince|\bwithout|,)\s+"
    r"(?:(?:also|then|later|eventually|still|now|\w+ly)\s+)?$",
    re.IGNORECASE,
)
_COORD = re.compile(r"^(?:\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or|&)\s+)$", re.IGNORECASE)
_BARE_COMMA = re.compile(r"^\s*,\s*$")
_RELATIVE = re.compile(
    r"^\s*,?\s*(?:which|that|who|whom)\s+(?:(?:the|our|their|his|her|its|my)\s+)?$",
    re.IGNORECASE,
)
_BY = re.compile(r"\s+by\b", re.IGNORECASE)
_WORD = re.compile(r"[\w'\u2019-]+|[^\w\s]")


@dataclass(frozen=True, slots=True)
class Arg:
    """A relation argument: an entity mention, or a pronoun to resolve."""

    start: int
    end: int
    key: str | None
    pronoun: str | None = None


@dataclass(frozen=True, slots=True)
class RawRelation:
    """A matched relation before pronoun resolution."""

    subject: Arg
    relation: str
    object: Arg
    confidence: float




def find_pronouns(sentence: str) -> list[Arg]:
    """Pronoun arguments in a sentence."""
    return [
        Arg(m.start(), m.end(), None, m.group(1).lower()) for m in _PRONOUN_RE.finditer(sentence)
    ]


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _no_longer(text: str) -> bool:
    """True for "no longer" as a stop ("no longer works at"), not "no longer than"."""
    return re.search(r"\bno longer\b(?! than\b)", text) is not None


def _negated(words: list[str]) -> bool:
    return any(w in {"not", "never"} or w.endswith(("n't", "n\u2019t")) for w in words) or (
        _no_longer(" ".join(words))
    )


def _ended_only(words: list[str], relation: str) -> bool:
    """True for "no longer" (or "used to") alone on a stative relation: ended, not denied."""
    rest = [w for w in words if w not in {"no", "longer", "used", "to"}]
    text = " ".join(words)
    return (
        relation in STATIVE_RELATIONS
        and (_no_longer(text) or text.find("used to") >= 0)
        and not _negated(rest)
    )


# "doesn't work at Acme anymore": the negation says a stative relation stopped (read by
# ``claim_polarity``, which ends it, or drops it when "anymore" is not after the object).
_ANYMORE = re.compile(r"[^,;:.!?]*\b(?:anymore|any\s+more)\b", re.IGNORECASE)


# Only a present or past negation: "won't / can't work there anymore" has not stopped yet.
_STOP_NEGATIONS = _wordset(
    "not dont doesnt didnt isnt arent wasnt werent aint don't doesn't didn't isn't aren't "
    "wasn't weren't ain't hasnt havent hasn't haven't"
)
# "hasn't worked at Acme since 2022": a negated present perfect with "since" after it (or
# opening the sentence) says when the relation stopped (``claim_polarity`` needs a date).
_PERFECT_WORDS = _wordset("has have hasnt havent hasn't haven't 's 've")
_SINCE_AFTER = re.compile(r"[^,;:.!?]*\bsince\b", re.IGNORECASE)
_SINCE_FIRST = re.compile(r"\W*(?:ever\s+)?since\b", re.IGNORECASE)
_MODAL_WORDS = _wordset("will would shall should can could may might must 'd 'll going to")


def _negation_word(word: str) -> bool:
    return word.replace("\u2019", "'") in _STOP_NEGATIONS


def _stopped_after(sentence: str, end: int, pattern: RelationPattern, gap: list[str]) -> bool:
    negations = [w for w in gap if _negation_word(w)]
    if (
        pattern.relation not in STATIVE_RELATIONS
        or not negations
        or any(w in _MODAL_WORDS for w in gap)
    ):
        return False
    if _ANYMORE.match(sentence, end) is not None:
        return True
    return any(w.replace("\u2019", "'") in _PERFECT_WORDS for w in gap) and (
        _SINCE_AFTER.match(sentence, end) is not None or _SINCE_FIRST.match(sentence) is not None
    )


def _subject_gap_ok(words: list[str]) -> bool:
    if words and words[0] in _HEAD_NOUNS:
        words = words[1:]  # "the Atlas team is part of ..."
    # "." only after an abbreviated suffix inside the sentence ("Brightwave Inc. acquired").
    return all(
        w in _AUX or w.endswith("ly") or w in {",", "-", "(", ")"} or (w == "." and i == 0)
        for i, w in enumerate(words)
    )


def _object_gap_ok(words: list[str]) -> bool:
    if len(words) > 5:
        return False
    for w in words:
        if w in _STOP_OBJECT or not re.match(r"[\w'\u2019-]+$", w):
            return False
        if w not in _DETERMINERS_OK and not w.islower() and not w.isdigit():
            return False
    return True


# What may precede a subjectless chat claim: nothing, or discourse words ("yeah", "so").
_CHAT_OPENER = re.compile(
    r"\W*(?:(?:yeah|yep|yes|so|and|just|finally|also|then|lol|haha|ok|okay|oh|btw|well|"
    r"recently|actually|anyway|update)\W+)*$",
    re.IGNORECASE,
)


# Fixed phrases that are past events a subjectless chat claim may open with: a job got or
# a promotion ("got a job at", "got promoted at") and a departure ("yeah quit Shopify in
# december", "left Acme last week"; "quit" has one form, read as the past there).
_CHAT_PAST_FIXED = frozenset({"got a job at", "got promoted at", "left", "quit", "resigned from"})


_CLAUSE_OPEN = re.compile(r",\s*(?:who|which)\b[^,]*$", re.IGNORECASE)


def _skip_relative_clause(args: list[Arg], subject: Arg, sentence: str) -> Arg:
    """The antecedent when ``subject`` closes a relative clause.

    "Webb, who spent years at Riverside, replaces Souza": the name before the verb sits in
    the clause "who ... Riverside,"; the subject is the name before ", who".
    """
    after = sentence[subject.end : subject.end + 3]
    if not after.lstrip().startswith(","):
        return subject
    window = sentence[max(0, subject.start - 200) : subject.start]
    opened = _CLAUSE_OPEN.search(window)
    if opened is None:
        return subject
    clause_start = subject.start - len(window) + opened.start()
    antecedent = _nearest_before(args, clause_start + 1)
    if antecedent is not None and not sentence[antecedent.end : clause_start].strip():
        return antecedent
    return subject


def _nearest_before(args: list[Arg], pos: int) -> Arg | None:
    best = None
    for arg in args:
        if arg.end <= pos and (best is None or arg.end > best.end):
            best = arg
    return best


def _first_after(args: list[Arg], pos: int) -> Arg | None:
    best = None
    for arg in args:
        if arg.start >= pos and (best is None or arg.start < best.start):
            best = arg
    return best


def _coordinated(args: list[Arg], anchor: Arg, sentence: str, *, forward: bool) -> list[Arg]:
    """Names coordinated with ``anchor`` ("X, Y and Z")."""
    found: list[Arg] = []
    current = anchor
    names = [a for a in args if a.key is not None]
    while True:
        if forward:
            nxt = _first_after(names, current.end)
            if nxt is None or not _COORD.match(sentence[current.end : nxt.start]):
                return found
        else:
            nxt = _nearest_before(names, current.start)
            if nxt is None or not _COORD.match(sentence[nxt.end : current.start]):
                return found
            if current is anchor and _BARE_COMMA.match(sentence[nxt.end : current.start]):
                # A list of subjects ends with "and" / "or": "Zoe stopped using Slack, she
                # uses Discord" and "Alice, Bob works at Acme" list nothing.
                return found
        found.append(nxt)
        current = nxt


_TRIGGER_WORD = re.compile(r"[\w'-]+")  # keeps "co-founded" whole
_PLAIN_WORD = re.compile(r"\w+")


def trigger_index(patterns: list[RelationPattern]) -> dict[str, tuple[int, ...]]:
    """Trigger word -> indexes of the patterns it can fire (``""``: always try)."""
    index: dict[str, list[int]] = {}
    for i, pattern in enumerate(patterns):
        for word in pattern.triggers or {""}:
            index.setdefault(word, []).append(i)
    return {word: tuple(ids) for word, ids in index.items()}


def _verb_spans(
    sentence: str,
    patterns: list[RelationPattern],
    mentions: list[Mention],
    index: dict[str, tuple[int, ...]] | None = None,
) -> list[tuple[re.Match[str], RelationPattern]]:
    chosen: list[tuple[re.Match[str], RelationPattern]] = []
    lowered = sentence.lower()
    words = set(_TRIGGER_WORD.findall(lowered)) | set(_PLAIN_WORD.findall(lowered))
    if index is None:
        index = trigger_index(patterns)
    # Only the patterns one of whose verb forms occurs can match (in pattern order).
    candidates = sorted({i for w in (*words, "") for i in index.get(w, ())})
    for pattern in (patterns[i] for i in candidates):
        for m in pattern.regex.finditer(sentence):
            if any(m.start() < c.end() and c.start() < m.end() for c, _ in chosen):
                continue
            vs, ve = m.span("verb")
            if any(vs < x.end and x.start < ve for x in mentions):
                continue
            chosen.append((m, pattern))
    chosen.sort(key=lambda item: item[0].start())
    return chosen



def _arguments(sentence: str, mentions: list[Mention]) -> list[Arg]:
    """The sentence's possible arguments: its named mentions, then the pronouns outside them."""
    names = [Arg(m.start, m.end, m.key) for m in mentions]
    return names + [
        p
        for p in find_pronouns(sentence)
        if all(p.end <= n.start or p.start >= n.end for n in names)
    ]

def match_relations(
    sentence: str,
    mentions: list[Mention],
    patterns: list[RelationPattern],
    index: dict[str, tuple[int, ...]] | None = None,
    *,
    chat: bool = False,
) -> list[RawRelation]:
    """Match relations in one sentence (see the module docstring for the rules).

    ``index`` is ``trigger_index(patterns)``, computed once by the caller. ``chat``: the
    sentence comes from a named speaker, and a past-tense claim that opens it with no
    subject ("moved to Leeds in may", "yeah joined Pixelfern last week") is the speaker's
    (an ``i`` pronoun argument at the verb).
    """
    if asks(sentence):
        return []
    args = _arguments(sentence, mentions)
    names = args[: len(mentions)]  # the named mentions come first
    out: list[RawRelation] = []
    previous: tuple[Arg, int] | None = None  # (subject, end of the previous relation)
    for match, pattern in _verb_spans(sentence, patterns, mentions, index):
        verb = match.group("verb").lower()
        # Only the last few words matter (passive "is/was ... by"): a bounded window.
        before_words = _words(sentence[max(0, match.start() - 60) : match.start()])
        passive = (
            not pattern.fixed
            and verb in pattern.participles
            and any(w in _BE for w in before_words[-3:])
        )
        object_from = match.end()
        if passive:
            by = _BY.match(sentence, match.end())
            if pattern.has_particle and by is None:
                passive = False  # "was built on X" reads actively
            elif by is None:
                continue  # agentless passive: "Quill was acquired for $2M"
            else:
                object_from = by.end()
        confidence = pattern.confidence - (0.05 if passive else 0.0)

        subject = _nearest_before(args, match.start())
        if subject is not None:
            subject = _skip_relative_clause(args, subject, sentence)
            gap = _words(sentence[subject.end : match.start()])
            ended = _ended_only(gap, pattern.relation)
            if _stopped_after(sentence, match.end(), pattern, gap):
                gap = [w for w in gap if not _negation_word(w)]
                ended = True
            ended_words = {"no", "longer", "used", "to"}
            if not _subject_gap_ok([w for w in gap if w not in ended_words] if ended else gap):
                subject = None
            elif (
                gap == [","]
                and previous is not None
                and previous[0].end <= subject.start
                and subject.end <= previous[1]
            ):
                # "Tom moved to Leeds, joined Arup": the previous claim's object before a
                # bare comma is no subject; the clause shares the previous claim's subject.
                subject = None
            elif _negated(gap) and not ended:
                continue
        if subject is None and previous is not None:
            bridge = sentence[previous[1] : match.start()]
            if _CONNECT_PREV.search(bridge) and not _negated(_words(bridge)):
                subject = previous[0]
                confidence -= 0.05
        if (
            subject is None
            and chat
            and previous is None
            and not passive
            and (verb in pattern.participles or (pattern.fixed and verb in _CHAT_PAST_FIXED))
            and _CHAT_OPENER.match(sentence, 0, match.start()) is not None
        ):
            subject = Arg(match.start(), match.start(), None, "i")
            confidence -= 0.1
        if subject is None:
            continue

        obj = _first_after(args, object_from)
        if obj is not None and not _object_gap_ok(_words(sentence[object_from : obj.start])):
            obj = None
        if obj is None and not passive:
            antecedent = _nearest_before(names, subject.start)
            if antecedent is not None and _RELATIVE.match(sentence[antecedent.end : subject.start]):
                obj = antecedent
        if obj is None:
            continue

        subjects = [subject, *_coordinated(args, subject, sentence, forward=False)]
        if previous is not None:
            # "works at Stripe and I live in Lisbon": the previous object is no co-subject.
            subjects = [subject] + [s for s in subjects[1:] if s.start >= previous[1]]
        objects = [obj, *_coordinated(args, obj, sentence, forward=True)]
        if passive:
            subjects, objects = objects, subjects
        for s in subjects:
            for o in objects:
                out.append(RawRelation(s, pattern.relation, o, round(confidence, 2)))
        previous = (subject, max(a.end for a in [*subjects, *objects]))
    return out


def frame_relations(
    sentence: str,
    mentions: list[Mention],
    employer: Callable[[Arg], bool],
    place: Callable[[Arg], bool] | None = None,
    product: Callable[[Arg], bool] | None = None,
) -> list[RawRelation]:
    """The "be at" and move frames of a sentence (:mod:`._frames`) as raw relations.

    Their relation is the frame's (``_frames.BE_AT``, ...); the caller reads each with the
    frame's rule (``_frames.FRAME_RELATIONS``). ``employer`` tells an argument that can be
    an employer (a name not typed as a person, place, tool, ...), ``place`` one that is a
    known place (a move between places), ``product`` one that is a known tool or service
    (a switch between products).
    """
    if asks(sentence):
        return []
    args = _arguments(sentence, mentions)
    return [
        RawRelation(subject, relation, obj, 0.7)
        for subject, relation, obj in frames(
            sentence, [(a.start, a.end, a) for a in args], employer, place, product
        )
    ]
