"""Private role-noun relations for the rule tier (relations carried by nouns).

The shapes, all between entity mentions of one sentence:

* ``ORG [former] ROLE PERSON``: "Northgate manager Ian Carver" -> manage, "former Oracle
  engineer Tomasz Wolski" -> work_at;
* ``PERSON, [formerly|previously] of|at ORG``: "Chef Rosa Delgado, formerly of Copper
  Kettle" -> work_at;
* ``PERSON is [a|the] ... ROLE [of ...] at ORG``: "Aisha Bello is head of data science at
  Monzo" -> work_at;
* ``PERSON is [a|the] ROLE of ORG``: "Tom is CEO of Monzo" -> lead, "Tom is the founder of
  Monzo" -> found (the role's relation, as in an apposition);
* ``its|their ROLE PERSON``: "its co-founder Sam Whitfield" -> found, with "its" resolved
  like the pronoun "it" (the latest organisation, tool or concept).

The role nouns and their relations are the parser tier's table, so both tiers agree.
"""

from __future__ import annotations

import itertools
import re

from cycgraph_memory.hierarchy.extractors._entities import Mention
from cycgraph_memory.hierarchy.extractors._parse_tables import ROLE_RELATIONS
from cycgraph_memory.hierarchy.extractors._relations import Arg, RawRelation

__all__ = ["role_relations"]

_ROLES = "|".join(sorted((re.escape(r) for r in ROLE_RELATIONS if r != "co"), key=len)[::-1])
_ORG_ROLE = re.compile(rf"^\s+(?:former\s+|ex-)?({_ROLES})\s+$", re.IGNORECASE)
_FORMERLY_OF = re.compile(
    r"^\s*,\s*(?:(?:formerly|previously|once|now|currently)\s+)?(?:of|at)\s+$", re.IGNORECASE
)
# "Aisha Bello is head of data science at Monzo", "Tom is a senior engineer at Monzo": a
# role said with a present "is" holds at its "at" organisation (``work_at``, whatever the
# role: she heads a unit, not Monzo). Only "is": "was head of ..." is a past state, and a
# negation or a condition is read by the claim's polarity as for any relation.
_IS_ROLE_AT = re.compile(
    rf"^\s+(?:is|\u2019s|'s)\s+(?:(?:a|an|the)\s+)?(?:[a-z-]+\s+){{0,3}}?(?i:{_ROLES})"
    r"(?:\s+of\s+(?:[a-z&-]+\s+){0,3}?[a-z&-]+)?\s+at\s+$"
)
# "Tom is CEO of Monzo", "Tom is the founder of Monzo": a role said with a present "is"
# right before "of" and the organisation has the role's relation (``lead``, ``found``), as
# the parser tier reads an apposition ("Tom, CEO of Monzo,").
_IS_ROLE_OF = re.compile(
    rf"^\s+(?:is|\u2019s|'s)\s+(?:(?:a|an|the)\s+)?(?:(chief)\s+)?(?i:({_ROLES}))\s+of\s+$"
)
_POSSESSIVE_ROLE = re.compile(rf"\b(its|their)\s+(?:former\s+|new\s+)?({_ROLES})\s+$", re.I)
_CONFIDENCE = 0.6


def role_relations(sentence: str, mentions: list[Mention]) -> list[RawRelation]:
    """Role-noun relations of one sentence (see the module docstring)."""
    out: list[RawRelation] = []
    ordered = sorted(mentions, key=lambda m: m.start)
    for left, right in itertools.pairwise(ordered):
        gap = sentence[left.end : right.start]
        role = _ORG_ROLE.match(gap)
        if role is not None:
            relation = ROLE_RELATIONS[role.group(1).lower()]
            out.append(
                RawRelation(
                    Arg(right.start, right.end, right.key),
                    relation,
                    Arg(left.start, left.end, left.key),
                    _CONFIDENCE,
                )
            )
        elif (role_of := _IS_ROLE_OF.match(gap)) is not None:
            word = role_of.group(2).lower()
            out.append(
                RawRelation(
                    Arg(left.start, left.end, left.key),
                    # "a Visa executive" works there; a chief executive leads.
                    "work_at"
                    if word == "executive" and role_of.group(1) is None
                    else ROLE_RELATIONS[word],
                    Arg(right.start, right.end, right.key),
                    _CONFIDENCE,
                )
            )
        elif _FORMERLY_OF.match(gap) or _IS_ROLE_AT.match(gap):
            out.append(
                RawRelation(
                    Arg(left.start, left.end, left.key),
                    "work_at",
                    Arg(right.start, right.end, right.key),
                    _CONFIDENCE,
                )
            )
    for mention in ordered:
        window = sentence[max(0, mention.start - 40) : mention.start]
        possessive = _POSSESSIVE_ROLE.search(window)
        if possessive is not None:
            start = mention.start - len(window) + possessive.start(1)
            out.append(
                RawRelation(
                    Arg(mention.start, mention.end, mention.key),
                    ROLE_RELATIONS[possessive.group(2).lower()],
                    Arg(start, start + len(possessive.group(1)), None, "it"),
                    _CONFIDENCE,
                )
            )
    return out
