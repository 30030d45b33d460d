"""Private polarity of a claim in text: asserted, negated (or not asserted) or ended.

Shared by every tier. A claim is read in the stretch of its sentence that links its two
endpoints (the words between the mentions plus a few words before the first one):

* **negated** ("did not sign", "is not joining", "never used", "denied", "refused",
  "was not caused by", "might move", "if ... will", "I wish I worked at"): the relation
  is not asserted, no edge is stored;
* **ended** ("no longer works at", "not ... anymore", "former", "formerly of", "left",
  "quit", "sacked", "stepped down", "stopped using"): the relation held and has
  stopped; the extractor closes an open edge of the same triple in the episode
  (``valid_until`` = the time of the message that said so), or emits an *ended marker*
  (``attributes["ended"] = True``, an empty window ``[t, t]``, or ``[stop, t]`` for a
  past claim with an "until" date, see ``_until``) that
  :func:`~cycgraph_memory.hierarchy.extractors.closing.close_ended_relationships` turns
  into the closing of a stored edge, never a new one;
* otherwise **asserted**.

Besides the polarity, an ending is read from a move ("moved from Initech to Globex": the
Initech job, ``_frames``) and from an "until" date after a past claim (``_until``); the
tiers read both on their own matches, the LLM tier's post-check with :func:`claim_stop`.
"""

from __future__ import annotations

import re
from typing import Literal

from cycgraph_memory.hierarchy.extractors._frames import departed_from, switched_product
from cycgraph_memory.hierarchy.extractors._questions import asks
from cycgraph_memory.hierarchy.extractors._until import (
    claim_dates,
    ended_since_of,
    lead_date_of,
    simple_past,
    since_of,
    until_of,
)

__all__ = [
    "ENDED_ATTRIBUTE",
    "STATIVE_RELATIONS",
    "Polarity",
    "claim_clause",
    "claim_dates_of",
    "ended_in",
    "claim_polarity",
    "claim_since",
    "claim_stop",
    "is_ended_marker",
    "locate_claim",
    "negated_in",
    "quotations",
    "quoted_claim",
    "stopped_since",
    "stopped_since_of",
    "stretch_of",
    "switched_product_of",
]

Polarity = Literal["asserted", "negated", "ended"]

ENDED_ATTRIBUTE = "ended"
"""Attribute key set to ``True`` on an ended marker relationship."""

STATIVE_RELATIONS = frozenset(
    [
        "work_at",
        "manage",
        "lead",
        "use",
        "depend_on",
        "own",
        "live_in",
        "locate_in",
        "part_of",
        "maintain",
        "report_to",
        "study_at",
        "teach_at",
        "partner_with",
        "customer_of",
        "invest_in",
        "integrate_with",
        "collaborate_with",
        "work_on",
        "mentor",
        "sibling_of",
        "spouse_of",
        "partner_of",
        "friend_of",
        "colleague_of",
        "neighbor_of",
        "live_with",
        "member_of",
    ]
)
"""Relations that hold over a period, so a text can say they have ENDED ("no longer
works at"); an event relation ("retired from", "acquired") cannot end."""

_ENDED = re.compile(
    r"\bno\s+longer\b(?!\s+than\b)|\bnot\b[^.;]*\b(?:anymore|any\s+more)\b|\bn['\u2019]t\b[^.;]*\b"
    r"(?:anymore|any\s+more)\b|\bformer(?:ly)?\b|\bex-|\bpreviously\b|\bused\s+to\b|"
    r"\b(?:left|quit|quits|sacked|fired|dismissed|ousted|departed|stepped\s+down|"
    r"resigned|retired)\b|\bhad\s+(?:owned|worked|been|lived|led|run|used|managed)\b|"
    r"\bstop(?:s|ped|ping)?\s+\w+ing\b(?=[^;:]*$)",
    re.IGNORECASE,
)
# "may" is the month after a preposition or a date word, or before a day ("moved to Leeds
# in may, started at Arup": no modal); everywhere else it doubts the claim.
_MODAL_MAY = (
    r"(?<!\bin\s)(?<!\bof\s)(?<!\bby\s)(?<!\bsince\s)(?<!\buntil\s)(?<!\blast\s)"
    r"(?<!\bnext\s)(?<!\bearly\s)(?<!\blate\s)(?<!\bmid\s)(?<!\bmid-)may(?!\s+\d)"
)
_NEGATED = re.compile(
    r"\b(?:not|never|no|nobody|neither|nor|without|instead|contrary|rather\s+than|"
    r"den(?:y|ied|ies|ying)|refus(?:e|ed|es|ing)|reject(?:ed|s)?|against|"
    r"might|" + _MODAL_MAY + r"|could|would|should|if|whether|unless|wish(?:es|ed)?|"
    r"hop(?:e|es|ed|ing)\s+to|plan(?:s|ned|ning)?\s+to|consider(?:s|ed|ing)?|"
    r"rumou?r(?:s|ed)?|reportedly|allegedly|supposedly|maybe|perhaps|probably|almost|nearly|"
    r"i\s+bet|betcha|"
    r"linked\s+with|didnt|dont|doesnt|isnt|wasnt|wont|"
    r"cant|havent|hasnt|arent|werent|aint)\b|n['\u2019]t\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"\S+")


def _lead_in(sentence: str, start: int, words: int) -> int:
    """Offset of the ``words``-th word before ``start`` (clause-bounded by ; and :)."""
    head = sentence[:start]
    cut = max(head.rfind(";"), head.rfind(":"))
    spans = [m.start() for m in _WORD.finditer(head) if m.start() > cut]
    return spans[-words] if len(spans) >= words else (spans[0] if spans else start)


def _follow(sentence: str, end: int, words: int) -> str:
    """Up to ``words`` words after ``end``, stopping at punctuation."""
    tail = sentence[end:]
    stop = re.search(r"[,;:.!?()]", tail)
    tail = tail[: stop.start()] if stop else tail
    return " ".join(tail.split()[:words])


_PARENTHETICAL = re.compile(r",[^,]*,")

# A coordination that opens a new finite clause: "left Acme and now works at Globex", "quit
# Acme and joined Globex", "no longer works at Acme, and she's at Globex". The verb after
# "and" / "but" (after an optional pronoun subject and adverbs) is finite: "-ed", "-s", a
# form of "be" / "have" or a common irregular past, written in lowercase (a name such as
# "Siemens" is a coordinated object, not a verb). A bare verb shares the auxiliary of the
# first conjunct ("used to lead the team and manage Bob", "didn't quit and join"): no cut.
_NEW_CLAUSE = re.compile(
    r"(?:,\s*|\s)(?:[Aa]nd|[Bb]ut)\s+(?:"
    r"(?:she|he|they|i|we|you|[Ss]he|[Hh]e|[Tt]hey|I|[Ww]e)(?:['\u2019]\w+)?\s"  # "and she's"
    r"|(?:(?:now|then|later|since|soon|recently|just|currently|also|meanwhile|eventually|"
    r"finally|actually|already|still|today)\s+)*"
    r"(?!(?:its|this|thus|his|hers|ours|yours|theirs|plus|less|across|various|previous|"
    r"always|perhaps|news|series|sometimes)\b)"
    r"(?:is|was|are|were|am|has|had|got|took|went|became|began|left|quit|[a-z]+ed|"
    r"[a-z]+[^\Ws]s)\b)"
)


# A comma splice after a "do" negation: "i don't live in Ottawa anymore, moved to
# Montreal", "didn't move to Leeds, started at Arup". A past form after the comma cannot
# share the "do" of the negated clause (a bare verb can: "didn't quit, sell or move"), so
# it opens a clause of its own.
_DO_NOT = re.compile(
    r"\b(?:do|does|did)(?:n['\u2019]?t\b|\s+not\b)|\b(?:dont|doesnt|didnt)\b", re.IGNORECASE
)
_COMMA_PAST = re.compile(
    r",\s*(?:(?:then|now|just|also|so|and\s+then)\s+)?"
    r"(?:[a-z]+ed|left|got|took|went|became|began|found|made)\b"
)


def _new_clause(gap: str) -> int:
    """Offset in ``gap`` where the clause of the later mention starts (0: the same clause).

    The last coordination of ``gap`` that opens a new finite clause (``_NEW_CLAUSE``), or
    the last comma before a past-tense verb after a "do" negation (``_COMMA_PAST``).
    """
    start = 0
    for match in _NEW_CLAUSE.finditer(gap):
        start = match.start()
    return max(start, _comma_splice(gap))


def _comma_splice(gap: str) -> int:
    """Offset of the last comma in ``gap`` before a past verb after a "do" negation (or 0)."""
    start = 0
    for match in _COMMA_PAST.finditer(gap):
        if _DO_NOT.search(gap, 0, match.start()) is not None:
            start = match.start()
    return start


def claim_clause(gap: str) -> str:
    """The part of ``gap`` (the words between a claim's mentions) in the later mention's clause.

    An ending said in an earlier coordinated clause is not said of this claim: in "Alice
    left Acme and now works at Globex" the gap to Globex is read from "and now works at".
    """
    return gap[_new_clause(gap) :]


def stretch_of(
    sentence: str,
    source: tuple[int, int],
    target: tuple[int, int],
    *,
    lead: int = 3,
) -> str:
    """The text that links a claim's two mentions (character spans of ``sentence``).

    The gap between the mentions, the ``lead`` words before the first one ("former Visa
    executive Carmen Ruiz", "denied that X ..."; back to the previous comma), and when the
    source comes second, the
    verb phrase right after it ("Tidewater said co-founder Helen Marsh no longer works").
    """
    (a_start, a_end), (b_start, _) = sorted([source, target])
    # A parenthetical between commas inside the gap is off the path: "Oren Tal, a former
    # Intel engineer, now works for Nvidia" has not stopped working for Nvidia.
    gap = _PARENTHETICAL.sub(" ", sentence[a_end:b_start])
    # The lead stays in the clause of the first mention: in "Tom left Hooli, he works at
    # Google now" the "left" of the clause before belongs to Hooli, not to Google.
    head = sentence[_lead_in(sentence, a_start, lead) : a_start]
    cut = _new_clause(gap)
    # "Alice left Acme and now works at Globex": the later mention is in a new clause (its
    # lead and the earlier clause frame the first mention's claim, not this one).
    parts = [gap[cut:]] if cut else [head[head.rfind(",") + 1 :], gap]
    if source[0] > target[0]:
        parts.append(_follow(sentence, source[1], 4))
    return " ".join(parts)


def ended_in(stretch: str, relation: str) -> bool:
    """True when ``stretch`` says a stative ``relation`` has ended."""
    return relation in STATIVE_RELATIONS and _ENDED.search(stretch) is not None


def negated_in(stretch: str) -> bool:
    """True when ``stretch`` negates, doubts or conditions the claim."""
    return _NEGATED.search(stretch) is not None


# Before the first mention of a claim, only what frames the whole claim counts ("it is not
# true that", "neither X nor Y", "nobody at X", "X denied that she", "if X ..."): modal
# words there belong to another verb, and "May" there is usually the month.
_LEAD_NEGATED = re.compile(
    r"\b(?:not|never|no|nobody|none|neither|nor|if|whether|unless|false|untrue|"
    r"den(?:y|ied|ies|ying)|doubt(?:s|ed|ing)?|rumou?r(?:s|ed)?|reportedly|allegedly|"
    r"supposedly|maybe|perhaps|probably|i\s+bet|i['\u2019]?d\s+bet|betcha|"
    r"wish(?:es|ed)?|assuming|supposing|suppose|imagine)\b|n['\u2019]t\b",
    re.IGNORECASE,
)
# A sentence that opens with a condition is conditional throughout, antecedent and
# consequent alike: "if I joined Acme I'd have to move to Denver", "assuming Tara joins
# Acme, she'll report to Kevin".
_CONDITIONAL_OPENING = re.compile(
    r"\W*(?:(?:what|only)\s+)?(?:if|unless|assuming|supposing|suppose|provided|"
    r"in\s+case|imagine)\b",
    re.IGNORECASE,
)
# Before an ending in the claim's clause: a modal, a future or an intention ("might quit",
# "will no longer work at", "wants to quit", "is about to leave"). Not "'d" (also "had":
# "she'd left Acme").
_UNREAL = re.compile(
    r"\b(?:will|would|shall|should|can|could|may|might|must|gonna|wanna|wont|cant|"
    r"(?:won|couldn|wouldn|shouldn|mustn)['\u2019]t|"
    r"(?:wants?|wanted|hopes?|hoped|hoping|plans?|planned|planning|about|trying|tries|tried|"
    r"threatens?|threatened|ready|going|decides?|decided|considers?|considered|"
    r"considering|thinking|expects?|expected|likely|set)\s+(?:to|of|about)\b)|['\u2019]ll\b",
    re.IGNORECASE,
)
_INSTEAD = re.compile(r"\binstead\b(?!\s+of\b)", re.IGNORECASE)
# Right after the object: "works at Acme no longer", "... no more", "... anymore".
_AFTER_STOPPED = re.compile(
    r"\W*(?:no\s+(?:longer|more)|any\s*more)\b(?!\s+than\b)", re.IGNORECASE
)


# Quotation marks: straight, curly and low-9 double quotes (single quotes are apostrophes
# too often: "Kai's", "don't").
_QUOTE_MARK = re.compile(r'["\u201c\u201d\u201e]')


def quotations(sentence: str) -> list[tuple[int, int]]:
    """The spans of ``sentence`` inside double quotation marks.

    Marks pair up in order; a curly closing mark with no opening one closes a quote that
    began with the sentence, and an opening mark left unpaired (the quote runs past the
    sentence: "she said "I quit. I'm done."") opens one that runs to its end.
    """
    spans: list[tuple[int, int]] = []
    opened: int | None = None
    for mark in _QUOTE_MARK.finditer(sentence):
        char = mark.group()
        if opened is None:
            if char == "\u201d":
                spans.append((0, mark.start()))
            else:
                opened = mark.end()
        elif char in "\u201c\u201e":
            opened = mark.end()  # a new opening mark: the earlier one was stray
        else:
            spans.append((opened, mark.start()))
            opened = None
    if opened is not None:
        spans.append((opened, len(sentence)))
    return spans


def quoted_claim(sentence: str, source: tuple[int, int], target: tuple[int, int]) -> bool:
    """True when both mentions of a claim are inside one quotation of ``sentence``.

    The words are someone else's ("my sister said "I quit Acme"", "Kai texted me "I'm
    moving to Austin""): their "I" is not the speaker, and what they say is reported, not
    stated. A name in quotes on its own ("works at "the Shed"") is no quotation of a claim.
    """
    (a_start, _), (_, b_end) = sorted([source, target])
    return any(start <= a_start and b_end <= end for start, end in quotations(sentence))


def claim_polarity(
    sentence: str,
    source: tuple[int, int],
    target: tuple[int, int],
    relation: str,
    *,
    lead: int = 3,
) -> Polarity:
    """Polarity of a claim a pattern or a parse found between two mentions of ``sentence``.

    Ended when the stretch linking the mentions says a stative relation stopped ("no
    longer works at", "former", "left") or the words right after the later mention do
    ("works at Acme no longer"); negated when the text between the mentions negates,
    doubts or conditions the claim ("might work at", "plans to join"), the start of its
    clause frames it ("it is not true that", "neither X nor Y", "nobody at X", "X denied
    that she", "if X ..."; back to the previous comma, at most ``lead`` words), the
    sentence opens with a condition ("if I joined Acme I'd move to Denver", "assuming X
    joins Acme, she'll report to Kevin"; not past a ``;``), or the words after the later
    mention stop a relation that cannot end ("no more"), or both mentions are inside one
    quotation (someone else's words: 'Kai texted me "I quit Deloitte"'). A tier whose
    mentions are head words ("Smith" of "Alice Smith") reads a longer lead.

    A stative claim in the simple past in a sentence set in the speaker's childhood or
    school years ("when i was a kid we lived in Manila", "growing up she lived in Lagos",
    "as a kid I owned a parrot") is ended: it held then and no longer does.
    """
    if quoted_claim(sentence, source, target):
        return "negated"  # someone else's words: 'she said "I quit Acme"'
    (a_start, a_end), (b_start, b_end) = sorted([source, target])
    stretch = stretch_of(sentence, source, target)
    after = _follow(sentence, b_end, 4)
    stopped = _AFTER_STOPPED.match(after) is not None
    opening = sentence[:a_start]
    if ";" not in opening and _CONDITIONAL_OPENING.match(opening) is not None:
        return "negated"
    head = sentence[_lead_in(sentence, a_start, lead) : a_start]
    framing = head[head.rfind(",") + 1 :]
    gap = _PARENTHETICAL.sub(" ", sentence[a_end:b_start])
    boundary = max(gap.rfind(";"), gap.rfind(":"))
    if boundary >= 0:
        # The first mention is in an earlier clause (reached through "it" in this one):
        # only this clause frames the claim.
        gap, framing = gap[boundary + 1 :], ""
    cut = _new_clause(gap)
    if ended_in(stretch, relation) or (stopped and relation in STATIVE_RELATIONS):
        # An ending that is doubted, denied or not yet real ends nothing: "I doubt Alice
        # left Acme", "maybe she left Acme", "Alice might quit Acme", "wants to quit Acme",
        # "will no longer work at Acme".
        if _LEAD_NEGATED.search(framing) is not None or _UNREAL.search(gap[cut:]) is not None:
            return "negated"
        return "ended"
    splice = _comma_splice(gap)
    if splice and splice >= cut:
        # "i don't live in Ottawa anymore, moved to Montreal": the negation of the clause
        # before the comma is not said of the move.
        gap = gap[splice:]
    elif cut:
        # "no longer works at Acme and now works at Globex": the ending said in the earlier
        # clause is no denial of the later one (its negations still count: "didn't quit
        # Acme and joined Globex" stays unasserted).
        gap = _ENDED.sub(" ", gap[:cut]) + gap[cut:]
    # "will instead partner with X" asserts the partnership ("instead of X" does not).
    gap = _INSTEAD.sub(" ", gap)
    if stopped or negated_in(gap) or _LEAD_NEGATED.search(framing) is not None:
        if not stopped and stopped_since(sentence, source, target, relation, lead=lead):
            return "ended"  # "she hasn't worked at Acme since 2022": it stopped then
        return "negated"
    if (
        relation in STATIVE_RELATIONS
        and _CHILDHOOD.search(sentence) is not None
        and simple_past(gap[cut:])
    ):
        return "ended"  # "when i was a kid we lived in Manila": a past state, over
    return "asserted"


# A past the speaker has grown out of: what held then, in the simple past, has ended.
_CHILDHOOD = re.compile(
    r"\b(?:when|while)\s+(?:i|we|he|she|they)\s+(?:was|were)\s+(?:a\s+)?(?:kids?|child|"
    r"children|little|young|younger|small|teens?|teenagers?|baby|toddler|in\s+(?:high\s+"
    r"school|school|college|uni|university|grad\s+school))\b|\bas\s+(?:a\s+)?(?:kids?|"
    r"child|children|teens?|teenagers?)\b|\bgrowing\s+up\b",
    re.IGNORECASE,
)


# A negated present perfect: "hasn't worked at", "haven't been at", "'s not been at".
_PERFECT_NOT = re.compile(
    r"\b(?P<aux>has|have|(?<=\w)['\u2019](?:s|ve))(?P<neg>n['\u2019]?t\b|\s+not\b)",
    re.IGNORECASE,
)


def stopped_since(
    sentence: str,
    source: tuple[int, int],
    target: tuple[int, int],
    relation: str,
    *,
    lead: int = 3,
) -> bool:
    """True for a negated present perfect with a "since" date: the relation stopped then.

    "she hasn't worked at Acme since 2022", "since march Bob hasn't been at Globex": a
    stative claim whose only denial is one "hasn't" / "haven't" / "has not" between its
    mentions, that reads as asserted without it (no doubt, condition or second negation:
    "I doubt she hasn't ...", "hasn't ever not ..."), with a "since" phrase that opens
    with a date after the later mention or before the first one (``_until``). "hasn't
    worked at Acme since she left" (no date) stays a denial.
    """
    if relation not in STATIVE_RELATIONS:
        return False
    (a_start, a_end), (b_start, b_end) = sorted([source, target])
    found = list(_PERFECT_NOT.finditer(sentence, a_end, b_start))
    if len(found) != 1:
        return False
    neg = found[0].span("neg")
    blanked = sentence[: neg[0]] + " " * (neg[1] - neg[0]) + sentence[neg[1] :]
    if claim_polarity(blanked, source, target, relation, lead=lead) != "asserted":
        return False
    link = claim_clause(sentence[a_end:b_start])
    if ended_since_of(sentence, b_end, link) is not None:
        return True
    date = lead_date_of(sentence, a_start)
    return date is not None and date[0] == "since"


def _find(sentence_lower: str, names: list[str]) -> tuple[int, int] | None:
    for name in names:
        low = name.lower()
        if not low:
            continue
        match = re.search(r"(?<![\w])" + re.escape(low) + r"(?![\w])", sentence_lower)
        if match is not None:
            return match.start(), match.end()
    return None


def _forms(name: str) -> list[str]:
    words = name.split()
    forms = [name]
    if len(words) > 1:
        forms += [words[-1], words[0]]
    return forms


def _after(sentence: str, a: tuple[int, int], b: tuple[int, int]) -> str:
    """The predicate after the later mention (after an apposition: after its comma).

    "Jorge Alvarez, the co-founder of Pebble Labs, is no longer ..."
    """
    first, second = sorted([a, b])
    rest = sentence[second[1] :]
    if rest.lstrip().startswith(",") and sentence[first[1] : second[0]].lstrip().startswith(","):
        return _follow(sentence, second[1] + rest.index(",") + 1, 4)
    after = _follow(sentence, second[1], 4)
    # An end or start date is read by ``claim_stop`` / ``claim_since``: "until May 3",
    # "since may 2019" hold no modal "may".
    return "" if _UNTIL_AFTER.match(after) else after


_UNTIL_AFTER = re.compile(
    r"(?:up\s+)?(?:until|till|til)\b|(?:ever\s+)?since\b", re.IGNORECASE
)


# "doesn't work at Acme anymore", "isn't at Acme any more": a present or past negation with
# "anymore" says a stative relation stopped; a future or modal one ("won't work there
# anymore", "can't ...") has not stopped yet and asserts nothing. As the free tiers read it.
_NEGATION_ANYMORE = re.compile(
    r"(?:\bnot\b|n['\u2019]t\b|\b(?:dont|doesnt|didnt|isnt|arent|wasnt|werent|aint)\b)"
    r"[^.;]*\b(?:anymore|any\s+more)\b",
    re.IGNORECASE,
)
_MODAL = re.compile(
    r"\b(?:will|would|shall|should|can|could|may|might|must|gonna|going\s+to|wont|cant|"
    r"(?:won|couldn|wouldn|shouldn|mustn)['\u2019]t)\b|['\u2019](?:ll|d)\b",
    re.IGNORECASE,
)


def _stretch_polarity(
    stretch: str,
    relation: str,
    *,
    lead: str = "",
    core: str | None = None,
    named: bool = True,
    gap: str | None = None,
) -> Polarity:
    """Polarity of the text that links a located claim (the LLM tier's post-check).

    ``lead`` is the part of ``stretch`` before the first mention and ``core`` the part
    after it (default: all of ``stretch``). A negation with "anymore" in ``core`` ends a
    stative relation, unless a modal makes it future ("won't work there anymore") or a
    negation in ``lead`` frames the whole claim ("I don't think Alice works at Acme
    anymore"): then it is negated. So is one over a target that is no name (``named``
    false: "we don't use the replica anymore" is a denial, as on the parser tier).
    An ending that is doubted or not yet real ends nothing, as on the free tiers: a
    doubt or a negation in ``lead`` ("I doubt Alice left Acme", "maybe she quit Acme") or
    a modal, a future or a wish in ``gap``, the words between the mentions (default:
    ``core``): "might quit Acme", "wants to quit Acme", "will no longer work at Acme".
    """
    core = stretch if core is None else core
    if relation in STATIVE_RELATIONS and _NEGATION_ANYMORE.search(core) is not None:
        if not named:
            return "negated"
        if _MODAL.search(stretch) is not None or _LEAD_NEGATED.search(lead) is not None:
            return "negated"
        return "ended"
    if ended_in(stretch, relation):
        between = core if gap is None else gap
        # A relative clause is asserted on its own: "X is not related to the Marlow
        # family, which had owned the dairy" (the "not" frames the main clause only).
        framed = _RELATIVE_GAP.match(between) is None and _LEAD_NEGATED.search(lead) is not None
        if framed or _UNREAL.search(between) is not None:
            return "negated"
        return "ended"
    if negated_in(stretch):
        return "negated"
    return "asserted"


_RELATIVE_GAP = re.compile(r"\s*,?\s*(?:which|who|that)\b", re.IGNORECASE)
_THIRD_PERSON = re.compile(r"\b(?:he|she|they|it|his|her|their|its)\b", re.IGNORECASE)


def locate_claim(
    sentences: list[tuple[str, str | None]], source: str, target: str, relation: str
) -> tuple[Polarity, int] | None:
    """Polarity of ``source -> target`` and the index of the sentence that states it.

    ``sentences`` are ``(text, speaker)`` pairs in order. A sentence supports the claim when
    it is not a question (one ending in "?", or a chat question without it: :func:`asks`)
    and names the target and either names the source, is said by the
    source (first person), or holds a third-person pronoun; a target inside a quotation
    (with the source, or with no source named) is someone else's words and supports
    nothing, and a sentence that opens with a condition ("if i ever get a dog i'm naming
    it Waffles") negates the claim, as on the free tiers. Names match whole words,
    case-insensitively, by the full name, else its last or first word ("Ruiz" for "Carmen
    Ruiz"). The stretch read is the gap between the mentions with the eight words before the
    first and the phrase after the second (up to punctuation): "voted against a proposal
    to sell X to Y", "Eklund did not sign".

    Returns:
        ``(polarity, index)`` of the first supporting sentence; ``("negated", i)`` when
        the target is named only in questions or in sentences that do not support the claim
        (asked, or said about someone else); ``None`` when no sentence names the target.
    """
    source_forms, target_forms = _forms(source), _forms(target)
    first_mention: int | None = None
    for index, (sentence, speaker) in enumerate(sentences):
        low = sentence.lower()
        b = _find(low, target_forms)
        if b is None:
            continue
        if first_mention is None:
            first_mention = index
        if sentence.rstrip().endswith("?") or asks(sentence):
            continue  # asked, with or without its "?" ("does alice still work at acme")
        a = _find(low, source_forms)
        quoted = quotations(sentence)
        if any(start <= b[0] and b[1] <= end for start, end in quoted) and (
            a is None or quoted_claim(sentence, a, b)
        ):
            continue  # someone else's words: 'Kai texted me "I quit Deloitte"'
        opening = sentence[: min(b[0], a[0]) if a is not None else b[0]]
        if ";" not in opening and _CONDITIONAL_OPENING.match(opening) is not None:
            # As on the free tiers: "if i ever get a dog i'm naming it Waffles".
            return "negated", index
        if a is not None and not (a[1] <= b[0] or b[1] <= a[0]):
            continue  # "Marlow" of "Marlow Dairy" is not the source "Marlow family"
        core: str | None = None
        lead = ""
        if a is not None:
            first, second = sorted([a, b])
            gap = sentence[first[1] : second[0]]
            core = gap + " " + _after(sentence, a, b)
            head = sentence[_lead_in(sentence, first[0], 8) : first[0]]
            lead = head[head.rfind(",") + 1 :]
            stretch = stretch_of(sentence, a, b, lead=8) + " " + _after(sentence, a, b)
        elif (speaker is not None and speaker.lower() == source.lower()) or _THIRD_PERSON.search(
            sentence[: b[0]]
        ):
            start = _lead_in(sentence, b[0], 8)
            pronoun = _last_pronoun(sentence, b[0])
            if (
                pronoun is not None
                and pronoun.start() < start
                and _CLAUSE_BREAK.search(sentence, pronoun.end(), b[0]) is None
            ):
                # The claim's subject further back in its clause: "I almost moved to Berlin
                # last year for a job at Zalando" reads from "I".
                start = pronoun.start()
            head = sentence[start : b[0]]
            gap = head[head.rfind(",") + 1 :]
            stretch = head + " " + _follow(sentence, b[1], 4)
        else:
            continue
        # A target the model wrote without a capital is a common noun, not a name.
        named = target != target.lower()
        polarity = _stretch_polarity(stretch, relation, lead=lead, core=core, named=named, gap=gap)
        return polarity, index
    if first_mention is not None:
        return "negated", first_mention
    return None


def claim_stop(sentence: str, source: str, target: str, relation: str) -> tuple[bool, str | None]:
    """What a located claim's sentence says of its end, besides its polarity.

    For the LLM tier's post-check, on the sentence :func:`locate_claim` found (names
    matched as there). ``(ended, until)``: ended when the target is the origin of a move
    ("Carol moved from Initech to Globex": the Initech job) or a past claim ends at an
    "until" phrase ("worked at Hooli until March"), which is returned (see ``_until``).
    Only a stative ``relation`` can end.
    """
    if relation not in STATIVE_RELATIONS:
        return False, None
    low = sentence.lower()
    b = _find(low, _forms(target))
    if b is None:
        return False, None
    a = _find(low, _forms(source))
    if a is not None and a[1] <= b[0]:
        link = sentence[a[1] : b[0]]
    else:
        link = sentence[_lead_in(sentence, b[0], 8) : b[0]]
    until = until_of(sentence, b[1], claim_clause(link))
    return departed_from(sentence, *b) or until is not None, until


def claim_since(sentence: str, source: str, target: str, relation: str) -> str | None:
    """The "since" date of a located claim that holds ("has worked at Acme since 2021").

    For the LLM tier's post-check, on the sentence :func:`locate_claim` found (names
    matched as there): the phrase after "since" right after the target, when it opens
    with a date (see ``_until.since_of``); ``None`` otherwise. Only a stative
    ``relation`` has a start to read.
    """
    if relation not in STATIVE_RELATIONS:
        return None
    low = sentence.lower()
    b = _find(low, _forms(target))
    if b is None:
        return None
    a = _find(low, _forms(source))
    if a is not None and a[1] <= b[0]:
        link = sentence[a[1] : b[0]]
    else:
        link = sentence[_lead_in(sentence, b[0], 8) : b[0]]
    return since_of(sentence, b[1], claim_clause(link))


def claim_dates_of(
    sentence: str, source: str, target: str, relation: str, *, ended: bool
) -> tuple[bool, str | None, str | None]:
    """``(ended, until, since)`` of a located claim, read as the free tiers read theirs.

    For the LLM tier's post-check, on the sentence :func:`locate_claim` found (names
    matched as there; a claim said with a pronoun is read from the pronoun):
    the origin of a move ends a stative claim ("moved from Initech to Globex"), and the
    dates are those of ``_until.claim_dates`` ("until March", "since 2021", "for three
    years", "since 2021, ...", "last year Dan left Hooli", "in 2019 she joined Initech").
    """
    low = sentence.lower()
    b = _find(low, _forms(target))
    if b is None:
        return ended, None, None
    a = _find(low, _forms(source))
    if a is not None and a[1] <= b[0]:
        start, link = a[0], sentence[a[1] : b[0]]
    else:
        pronoun = _last_pronoun(sentence, b[0])
        if pronoun is None:  # as claim_stop reads it: the eight words before the target
            start = _lead_in(sentence, b[0], 8)
            link = sentence[start : b[0]]
        else:
            start, link = pronoun.start(), sentence[pronoun.end() : b[0]]
    stative = relation in STATIVE_RELATIONS
    moved = stative and departed_from(sentence, *b)
    return claim_dates(
        sentence, start, b[1], claim_clause(link), stative=stative, ended=ended or moved,
        moved=moved,
    )


def stopped_since_of(sentence: str, source: str, target: str, relation: str) -> bool:
    """:func:`stopped_since` on a located claim (names matched as :func:`locate_claim`).

    For the LLM tier's post-check: "she hasn't worked at Acme since 2022" is an ending
    the post-check read as a denial. Not on a question.
    """
    if sentence.rstrip().endswith("?") or asks(sentence):
        return False
    low = sentence.lower()
    b = _find(low, _forms(target))
    a = _find(low, _forms(source))
    if b is None:
        return False
    if a is None or not a[1] <= b[0]:
        pronoun = _last_pronoun(sentence, b[0])
        if pronoun is None:
            return False
        a = pronoun.span()
    return stopped_since(sentence, a, b, relation, lead=8)


_CLAUSE_BREAK = re.compile(r"[,;:]")
_SUBJECT_PRONOUN = re.compile(r"\b(?:he|she|they|i|we)\b", re.IGNORECASE)


def _last_pronoun(sentence: str, end: int) -> re.Match[str] | None:
    """The subject pronoun nearest before ``end`` (a claim's subject), if any."""
    found = None
    for found in _SUBJECT_PRONOUN.finditer(sentence, 0, end):  # noqa: B007 - the last one
        continue
    return found


def switched_product_of(sentence: str, target: str) -> bool:
    """True when ``target`` is an end of a switch between two products.

    ``target`` is matched as :func:`locate_claim` does; the switch is read by
    ``_frames.switched_product`` ("switched to T-Mobile from Verizon"): the LLM tier's
    post-check drops a job claim about it.
    """
    b = _find(sentence.lower(), _forms(target))
    return b is not None and switched_product(sentence, *b)


def is_ended_marker(attributes: dict[str, object]) -> bool:
    """True for a relationship that only says an edge has ended."""
    return attributes.get(ENDED_ATTRIBUTE) is True
