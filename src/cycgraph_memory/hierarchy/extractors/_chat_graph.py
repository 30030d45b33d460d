"""Private: the speaker's own graph in chat (family, friends, pets, events), both free tiers.

People in chat speak of "my sister Ife", "we adopted a greyhound named Biscuit", "I'm
running the Lisbon half marathon", mostly without a proper name on both ends. These
patterns read one named speaker's sentences (a role speaker counts only for ``user``) and
link the speaker to what they name, precision first (a pattern that is unsure yields
nothing):

* **family and social ties**: ``my <tie> [NAME]`` -> sibling_of, child_of, parent_of,
  spouse_of, partner_of, relative_of, friend_of, colleague_of, neighbor_of, live_with,
  report_to. Without a name only a one-of-a-kind tie (mother, father, husband, wife,
  partner) becomes a node, named "<Speaker>'s <tie>"; a lowercase name counts when the
  episode also writes it capitalised ("my coworker dani" ... "Dani sounds nice");
* **a relative's job** (work_at from the relative's node, typed ``organization``): "my
  dad got a job at Qantas", "my mom works at Qantas Airways" (an unnamed one-of-a-kind
  tie, then a capitalised name; never the speaker's job);
* **pets** (own, the pet typed ``animal``): "we adopted a greyhound named Biscuit",
  "our dog Rufus", "... a rabbit. his name is Toast";
* **events** (attend, typed ``event``): "I'm running the Lisbon half marathon", "signed up
  for the riverside 10k", "we're all going to his school play", and a yes to "are you
  going to X?" from the other speaker; a trip "flying to Porto ... for her cousin's
  wedding" also gives visit.

A negated, doubted or asked sentence yields nothing, except a tie: "my girlfriend Tayo"
holds whatever the clause says of her ("I might bring my girlfriend Tayo if ..."), and only
a denial right before it ("not my sister") drops it. Nothing inside a quotation is the
speaker's ('he said "my sister lives in Leeds"'). Every edge is valid from the time of the
message that states it (the tiers build the records).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cycgraph_memory.hierarchy.extractors._conversation import Turn
from cycgraph_memory.hierarchy.extractors._polarity import negated_in, quotations

__all__ = ["ChatEdge", "chat_edges"]


@dataclass(frozen=True, slots=True)
class ChatEdge:
    """One speaker-graph edge: names and types of both ends, and the sentence index."""

    source: str
    source_type: str
    relation: str
    target: str
    target_type: str
    sentence: int


_TIES = {
    **dict.fromkeys(["sister", "brother", "sis", "bro", "twin"], "sibling_of"),
    **dict.fromkeys(["mom", "mum", "mother", "mama", "dad", "father", "papa"], "child_of"),
    **dict.fromkeys(["son", "daughter", "kid", "baby"], "parent_of"),
    **dict.fromkeys(["husband", "wife", "hubby"], "spouse_of"),
    **dict.fromkeys(
        ["partner", "boyfriend", "girlfriend", "fiance", "fiancé", "fiancee", "fiancée"],
        "partner_of",
    ),
    **dict.fromkeys(
        [
            "cousin",
            "aunt",
            "auntie",
            "uncle",
            "grandma",
            "grandmother",
            "granny",
            "nan",
            "grandpa",
            "grandfather",
            "grandson",
            "granddaughter",
            "niece",
            "nephew",
            "stepmom",
            "stepdad",
            "stepson",
            "stepdaughter",
        ],
        "relative_of",
    ),
    **dict.fromkeys(["friend", "bestie", "buddy", "pal"], "friend_of"),
    **dict.fromkeys(["coworker", "co-worker", "colleague", "teammate"], "colleague_of"),
    **dict.fromkeys(["neighbor", "neighbour"], "neighbor_of"),
    **dict.fromkeys(["flatmate", "roommate", "housemate"], "live_with"),
    **dict.fromkeys(["boss", "manager", "supervisor"], "report_to"),
}
_UNIQUE_TIES = frozenset(
    [
        "mom",
        "mum",
        "mother",
        "mama",
        "dad",
        "father",
        "papa",
        "husband",
        "wife",
        "hubby",
        "partner",
        "boyfriend",
        "girlfriend",
    ]
)
_TIE_RE = re.compile(
    r"\bmy\s+(?:(?:little|big|older|younger|baby|twin|best|new|old|oldest|youngest|"
    r"eldest|dear|late)\s+)?(" + "|".join(sorted(map(re.escape, _TIES), key=len)[::-1]) + r")"
    r"\b(?:\s*,?\s+([A-Za-z][a-z'\u2019-]+(?:\s+[A-Z][a-z'\u2019-]+)?))?",
    re.IGNORECASE,
)
# Right after an unnamed "my <tie>": a present job or a past event that starts one, and a
# capitalised organisation ("my dad got a job at Qantas", "my mom works at the NHS" no: a
# lowercase "the" stops it). A modal, negation or past state ("worked at") matches nothing.
_RELATIVE_JOB_RE = re.compile(
    r"\s+(?:just\s+|recently\s+|finally\s+)?"
    r"(?:works\s+at|works\s+for|is\s+working\s+at|got\s+a\s+job\s+at|"
    r"got\s+promoted\s+at|was\s+promoted\s+at)\s+"
    r"([A-Z][\w&'\u2019-]*(?:\s+[A-Z][\w&'\u2019-]*){0,3})"
)
_PETS = [
    "dog",
    "puppy",
    "pup",
    "cat",
    "kitten",
    "kitty",
    "rabbit",
    "bunny",
    "hamster",
    "parrot",
    "budgie",
    "horse",
    "pony",
    "greyhound",
    "beagle",
    "labrador",
    "lab",
    "retriever",
    "terrier",
    "poodle",
    "spaniel",
    "collie",
    "husky",
    "dachshund",
    "pug",
    "corgi",
    "tortoise",
    "turtle",
    "goldfish",
    "gerbil",
    "ferret",
    "lizard",
    "snake",
    "chihuahua",
    "whippet",
]
_PET = "(?:" + "|".join(_PETS) + ")"
_ADOPT_RE = re.compile(
    r"\b(?:we|i|we've|i've|we've|weve|ive)\s+(?:just\s+|finally\s+|recently\s+|also\s+)?"
    r"(?:adopted|got|rescued|bought|have|own|brought\s+home)\s+(?:\w+\s+){0,1}"
    r"(?:a|an|another|our|my|this)\s+(?:[\w-]+\s+){0,3}?(" + _PET + r")s?\b"
    r"(?:\s*,?\s+(?:named|called)\s+([A-Za-z][\w'-]*))?",
    re.IGNORECASE,
)
_OUR_PET_RE = re.compile(r"\b(?:our|my)\s+(?:new\s+)?(" + _PET + r")\s+([A-Z][a-z'-]+)\b")
_PET_NAME_RE = re.compile(
    r"^\s*(?:and\s+)?(?:her|his|their|its)\s+name\s+is\s+([A-Za-z][\w'-]*)", re.I
)
_EVENT_NOUNS = [
    "marathon",
    "half-marathon",
    "10k",
    "5k",
    "15k",
    "race",
    "triathlon",
    "wedding",
    "party",
    "birthday",
    "concert",
    "festival",
    "conference",
    "show",
    "play",
    "game",
    "match",
    "gig",
    "reunion",
    "ceremony",
    "graduation",
    "funeral",
    "recital",
    "tournament",
    "meetup",
    "hackathon",
    "retreat",
    "fair",
    "exhibition",
    "expo",
    "summit",
]
_EVENT = (
    r"((?:[A-Za-z0-9'\u2019-]+\s+){0,3}?(?:" + "|".join(_EVENT_NOUNS) + r")|"
    r"[A-Z][A-Za-z0-9]+(?:\s+[A-Z0-9][A-Za-z0-9]*){0,3})"
)
_ATTEND_RE = re.compile(
    r"\b(?:i'?m|i\s+am|im|we'?re|we\s+are|i'?ll|i\s+will|we'?ll|i|we)\s+(?:all\s+|also\s+)?"
    r"(?:going\s+to|running|doing|attending|coming\s+to|heading\s+to|"
    r"signed\s+up\s+for|signing\s+up\s+for|registered\s+for|entered)\s+"
    r"(?:the|his|her|my|our|their|a)\s+" + _EVENT + r"\b",
    re.IGNORECASE,
)
_SIGNED_RE = re.compile(
    r"^\s*(?:just\s+|finally\s+)?(?:signed\s+up|registered)\s+for\s+(?:the|a)\s+" + _EVENT,
    re.IGNORECASE,
)
_TRIP_RE = re.compile(
    r"\b(?:we'?re|i'?m|we\s+are|i\s+am|im)\s+(?:flying|going|travell?ing|heading|driving)\s+"
    r"to\s+([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)\b(?:[^.?!]*?\bfor\s+(?:the|his|her|my|our|a)\s+"
    r"((?:[\w'\u2019-]+\s+){0,2}?(?:" + "|".join(_EVENT_NOUNS) + r")))?",
)
_ASK_RE = re.compile(
    r"\b(?:are|r)\s+(?:you|u)\s+(?:still\s+)?(?:going|coming|heading)\s+(?:back\s+)?"
    r"(?:to|for)\s+(?:the\s+)?" + _EVENT + r"\b",
    re.IGNORECASE,
)
_YES_RE = re.compile(
    r"^\s*(?:yes|yeah|yep|yup|ya|of\s+course|definitely|absolutely|sure|i\s+am|i'?m\s+going)\b",
    re.IGNORECASE,
)
_NOT_NAMES = frozenset(
    [
        "is",
        "was",
        "has",
        "had",
        "and",
        "just",
        "who",
        "got",
        "said",
        "will",
        "would",
        "keeps",
        "kept",
        "says",
        "told",
        "the",
        "a",
        "an",
        "to",
        "in",
        "at",
        "on",
        "for",
        "with",
        "from",
        "of",
        "that",
        "this",
        "but",
        "so",
        "too",
        "also",
        "really",
        "still",
        "now",
        "then",
        "lol",
        "haha",
        "is's",
    ]
)
_TRAILING = re.compile(
    r"\s+(?:in|on|at|this|next|last|tomorrow|tonight|today|btw|lol|tho|though)$", re.I
)


def _event_name(raw: str) -> str:
    name = raw.strip()
    while True:
        trimmed = _TRAILING.sub("", name)
        if trimmed == name:
            return name
        name = trimmed


def _name_ok(word: str, caps: set[str]) -> bool:
    if word.lower() in _NOT_NAMES or word.lower() in _TIES:
        return False
    return word[:1].isupper() or word.lower() in caps


def _speaks(turn: Turn) -> bool:
    return bool(turn.speaker) and (turn.named or turn.speaker == "user")


def chat_edges(
    turns: Sequence[Turn],
    sentences: Sequence[str],
    turn_of: Sequence[int],
) -> list[ChatEdge]:
    """The speaker-graph edges of an episode's sentences (see the module docstring)."""
    caps = {
        m.group(0).lower() for s in sentences for m in re.finditer(r"(?<=[a-z,;] )[A-Z][a-z]+\b", s)
    }
    out: list[ChatEdge] = []
    pending_pet: dict[int, int] = {}  # turn index -> sentence index of an unnamed pet
    asked: dict[int, tuple[str, str]] = {}  # turn index -> (asker, event) of "are you going to"
    first_of_turn: dict[int, int] = {}
    for index, sentence in enumerate(sentences):
        turn_index = turn_of[index]
        turn = turns[turn_index]
        first_of_turn.setdefault(turn_index, index)
        if not _speaks(turn):
            continue
        speaker = turn.speaker
        question = sentence.rstrip().endswith("?")
        if question:
            ask = _ASK_RE.search(sentence)
            if ask is not None:
                asked[turn_index] = (speaker, _event_name(ask.group(1)))
            continue
        # A yes to the other speaker's "are you going to X?" in the turn just before.
        previous = asked.get(turn_index - 1)
        if (
            previous is not None
            and previous[0] != speaker
            and first_of_turn[turn_index] == index
            and _YES_RE.search(sentence)
        ):
            out.append(ChatEdge(speaker, "person", "attend", previous[1], "event", index))
        quoted = quotations(sentence)
        for match in _TIE_RE.finditer(sentence):
            # "my girlfriend Tayo" holds whatever the clause does with her ("I might bring
            # my girlfriend Tayo if ..."): only a denial of the tie itself counts.
            if _tie_denied(sentence, match) or _inside(quoted, match):
                continue
            tie = match.group(1).lower()
            relation = _TIES[tie]
            name = match.group(2)
            if name is not None:
                first = name.split()[0]
                if not _name_ok(first, caps):
                    name = None
                elif len(name.split()) > 1 and not _name_ok(name.split()[1], set()):
                    name = first
            if name is None:
                if tie not in _UNIQUE_TIES:
                    continue
                name = f"{speaker}'s {tie}"
                out.append(ChatEdge(speaker, "person", relation, name, "person", index))
                # "my dad got a job at Qantas": the relative's job, never the speaker's.
                job = _RELATIVE_JOB_RE.match(sentence, match.end(1))
                if job is not None and not _negated(sentence, job):
                    org = job.group(1)
                    out.append(ChatEdge(name, "person", "work_at", org, "organization", index))
                continue
            if name[:1].islower():
                name = name[:1].upper() + name[1:]
            out.append(ChatEdge(speaker, "person", relation, name, "person", index))
        for match in _ADOPT_RE.finditer(sentence):
            if _negated(sentence, match) or _inside(quoted, match):
                continue
            if match.group(2):
                out.append(
                    ChatEdge(speaker, "person", "own", _cap(match.group(2)), "animal", index)
                )
            else:
                pending_pet[turn_index] = index
        for match in _OUR_PET_RE.finditer(sentence):
            if _inside(quoted, match):
                continue
            out.append(ChatEdge(speaker, "person", "own", match.group(2), "animal", index))
        named = _PET_NAME_RE.search(sentence)
        if named is not None and turn_index in pending_pet:
            out.append(ChatEdge(speaker, "person", "own", _cap(named.group(1)), "animal", index))
            del pending_pet[turn_index]
        for pattern in (_ATTEND_RE, _SIGNED_RE):
            for match in pattern.finditer(sentence):
                if _negated(sentence, match) or _inside(quoted, match):
                    continue
                event = _event_name(match.group(1))
                if event.lower() not in {"it", "that", "this"}:
                    out.append(ChatEdge(speaker, "person", "attend", event, "event", index))
        for match in _TRIP_RE.finditer(sentence):
            if _negated(sentence, match) or _inside(quoted, match):
                continue
            out.append(ChatEdge(speaker, "person", "visit", match.group(1), "location", index))
            if match.group(2):
                event = _event_name(match.group(2))
                out.append(ChatEdge(speaker, "person", "attend", event, "event", index))
    return out


def _negated(sentence: str, match: re.Match[str]) -> bool:
    """Negation, doubt or a condition in the clause of ``match`` up to its end."""
    head = sentence[: match.start()]
    cut = max(head.rfind(ch) for ch in ",.;!:")
    return negated_in(sentence[cut + 1 : match.end()])


_TIE_DENIAL = re.compile(r"(?:\b(?:not|never|no)|n['\u2019]t)\s*$", re.IGNORECASE)


def _tie_denied(sentence: str, match: re.Match[str]) -> bool:
    """A denial of the tie itself, right before "my <tie>": "she's not my sister"."""
    return _TIE_DENIAL.search(sentence, 0, match.start()) is not None


def _inside(quoted: list[tuple[int, int]], match: re.Match[str]) -> bool:
    """True when ``match`` starts inside a quotation: someone else's "my" or "we"."""
    return any(start <= match.start() < end for start, end in quoted)


def _cap(name: str) -> str:
    return name[:1].upper() + name[1:]
