"""Private relation lexicon and verb inflection for the rule-based extractor.

Each relation is a canonical name plus verb phrases. A phrase is a base verb with an
optional particle ("work at", "depend on"); the inflection engine expands the verb into
base, third person (-s / -es / -ies), past and past participle (-ed / -d / -ied), and
gerund (-ing) forms. Regular verbs only: irregular and consonant-doubling forms of the
built-in verbs are listed in ``_IRREGULAR``; custom verbs with such forms must be supplied
pre-inflected. Fixed phrases ("based in", "part of") are matched literally, never
inflected, and never treated as passive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "BUILTIN_RELATIONS",
    "RelationPattern",
    "VerbForms",
    "build_patterns",
    "canonical_relation",
    "inflect",
]


@dataclass(frozen=True, slots=True)
class VerbForms:
    """The inflected forms of one verb."""

    base: str
    third: str
    past: tuple[str, ...]
    participle: tuple[str, ...]
    gerund: str

    def all_forms(self) -> tuple[str, ...]:
        """Every form, without duplicates, longest first (ambiguous forms dropped)."""
        forms = {self.base, self.third, self.gerund, *self.past, *self.participle}
        forms -= _AMBIGUOUS_FORMS
        return tuple(sorted(forms, key=lambda f: (-len(f), f)))


_IRREGULAR: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    # base: (past forms, participle forms, gerund)
    "lead": (("led",), ("led",), "leading"),
    "build": (("built",), ("built",), "building"),
    "run": (("ran",), ("run",), "running"),
    "write": (("wrote",), ("written",), "writing"),
    "make": (("made",), ("made",), "making"),
    "buy": (("bought",), ("bought",), "buying"),
    "grow": (("grew",), ("grown",), "growing"),
    "take": (("took",), ("taken",), "taking"),
    "begin": (("began",), ("begun",), "beginning"),
    "teach": (("taught",), ("taught",), "teaching"),
    "sell": (("sold",), ("sold",), "selling"),
    "hold": (("held",), ("held",), "holding"),
    "set": (("set",), ("set",), "setting"),
    "head": (("headed",), ("headed",), "heading"),
    "plan": (("planned",), ("planned",), "planning"),
    "found": (("founded",), ("founded",), "founding"),
    "co-found": (("co-founded",), ("co-founded",), "co-founding"),
    "cofound": (("cofounded",), ("cofounded",), "cofounding"),
    "study": (("studied",), ("studied",), "studying"),
    "rely": (("relied",), ("relied",), "relying"),
    "join": (("joined",), ("joined",), "joining"),
    "admit": (("admitted",), ("admitted",), "admitting"),
    "commit": (("committed",), ("committed",), "committing"),
    "ship": (("shipped",), ("shipped",), "shipping"),
}

_VOWELS = set("aeiou")

# Forms that are far more often another word: "found" is usually the past of "find".
_AMBIGUOUS_FORMS = frozenset({"found", "founds"})


def _third_person(verb: str) -> str:
    if verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if verb.endswith("y") and len(verb) > 1 and verb[-2] not in _VOWELS:
        return verb[:-1] + "ies"
    return verb + "s"


def _past(verb: str) -> str:
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and len(verb) > 1 and verb[-2] not in _VOWELS:
        return verb[:-1] + "ied"
    return verb + "ed"


def _gerund(verb: str) -> str:
    if verb.endswith("ie"):
        return verb[:-2] + "ying"
    if verb.endswith("e") and not verb.endswith(("ee", "ye", "oe")) and len(verb) > 2:
        return verb[:-1] + "ing"
    return verb + "ing"


def inflect(verb: str) -> VerbForms:
    """Inflect a verb (regular rules plus the built-in irregular table).

    Args:
        verb: Base form, lowercase, e.g. ``"manage"``.

    Returns:
        ``VerbForms``, e.g. manage -> manages / managed / managed / managing.
    """
    verb = verb.lower()
    third = _third_person(verb)
    if verb in _IRREGULAR:
        past, participle, gerund = _IRREGULAR[verb]
        return VerbForms(verb, third, past, participle, gerund)
    past_form = _past(verb)
    return VerbForms(verb, third, (past_form,), (past_form,), _gerund(verb))


def canonical_relation(phrase: str) -> str:
    """Canonical relation name of a custom verb phrase: words joined by ``_``."""
    words = re.findall(r"[a-z0-9]+", phrase.lower().replace("-", ""))
    return "_".join(words)


# canonical -> verb phrases ("verb particle"); "=" marks a fixed phrase (no inflection).
BUILTIN_RELATIONS: dict[str, tuple[str, ...]] = {
    "work_at": (
        "work at",
        "work for",
        "=employed at",
        "=employed by",
        # A past event that says the job: "got a job at Qantas", "got promoted at Airbnb"
        # (only the past: "might get a job at", "didn't get promoted at" match nothing).
        "=got a job at",
        "=got promoted at",
        "=was promoted at",
        # Departures: the polarity reads "left" / "quit" / "resigned" as ENDED, so these
        # only ever close a job ("Kevin left Initech"); see rules.DEPARTURE_VERBS.
        "=left",
        "=quit",
        "=quits",
        "=resigned from",
    ),
    "manage": ("manage", "supervise", "oversee"),
    "depend_on": ("depend on", "rely on"),
    "use": ("use", "utilize", "build on", "build with", "=powered by", "=running on"),
    "found": ("found", "co-found", "cofound"),
    "own": ("own",),
    "lead": ("lead", "run", "head", "chair"),
    "report_to": ("report to",),
    "live_in": ("live in", "reside in"),
    "locate_in": ("=located in", "=based in", "=headquartered in", "=situated in"),
    "part_of": ("=part of", "=a subsidiary of", "=a division of", "belong to"),
    "create": ("create", "invent"),
    "acquire": ("acquire", "buy", "purchase", "take over"),
    "join": ("join", "start at"),
    "build": ("build",),
    "maintain": ("maintain",),
    "develop": ("develop",),
    "partner_with": ("partner with", "team up with"),
    "invest_in": ("invest in",),
    "hire": ("hire", "recruit"),
    "write": ("write", "author"),
    "design": ("design",),
    "study_at": ("study at", "graduate from"),
    "move_to": ("move to", "relocate to"),
    "collaborate_with": ("collaborate with", "work with"),
    "mentor": ("mentor", "coach"),
    "fund": ("fund", "sponsor"),
    "launch": ("launch", "release"),
    "teach_at": ("teach at",),
    "contribute_to": ("contribute to",),
    "integrate_with": ("integrate with",),
    "sell": ("sell",),
    "marry": ("marry",),
    "appoint": ("appoint",),
    "replace": ("replace", "succeed"),
    "retire_from": ("retire from",),
    "sign": ("sign",),
    "open": ("open",),
    "publish": ("publish",),
    "adopt": ("adopt",),
    "work_on": ("work on",),
    "customer_of": ("=a customer of", "=a client of"),
}

# Relations whose arguments are reversed ("Acme employs Bob" would go here).
_PARTICLE_WORDS = ("at", "for", "on", "in", "to", "with", "of", "from", "by", "over", "up")


@dataclass(frozen=True, slots=True)
class RelationPattern:
    """A compiled matcher for one relation."""

    relation: str
    regex: re.Pattern[str]
    participles: frozenset[str]
    fixed: bool
    has_particle: bool
    confidence: float
    triggers: frozenset[str] = frozenset()
    """Lowercase words of which one must occur in a sentence for the regex to match
    (a cheap pre-filter; empty = always try the regex)."""


_SPACE_JOIN = r"\s+"
_ADVERB = r"(?:\s+(?:\w+ly|also|still|just|now|together|heavily|closely|directly))?"


def _phrase_regex(forms: tuple[str, ...], particle: str) -> str:
    alternatives = "|".join(re.escape(f) for f in forms)
    head = rf"(?<![\w-])(?P<verb>{alternatives})(?![\w-])"
    if not particle:
        return head
    words = r"\s+".join(re.escape(w) for w in particle.split())
    return rf"{head}{_ADVERB}\s+{words}(?![\w-])"


def build_patterns(
    relations: dict[str, tuple[str, ...]], *, custom: bool = False
) -> list[RelationPattern]:
    """Compile relation phrases into matchers (phrases with particles first).

    Args:
        relations: Canonical name -> verb phrases (``"=..."`` marks a fixed phrase).
        custom: Mark the patterns as user supplied (lower confidence).

    Returns:
        Matchers, longer phrases first so "build on" wins over "build".
    """
    patterns: list[RelationPattern] = []
    for relation, phrases in relations.items():
        for phrase in phrases:
            fixed = phrase.startswith("=")
            text = phrase.lstrip("=").strip().lower()
            if not text:
                continue
            if fixed:
                body = _SPACE_JOIN.join(map(re.escape, text.split()))
                regex = rf"(?<![\w-])(?P<verb>{body})(?![\w-])"
                patterns.append(
                    RelationPattern(
                        relation,
                        re.compile(regex, re.IGNORECASE),
                        frozenset(),
                        True,
                        True,
                        0.75,
                        frozenset({text.split()[0]}),
                    )
                )
                continue
            verb, _, particle = text.partition(" ")
            forms = inflect(verb)
            confidence = 0.6 if custom else (0.75 if particle else 0.7)
            patterns.append(
                RelationPattern(
                    relation,
                    re.compile(_phrase_regex(forms.all_forms(), particle), re.IGNORECASE),
                    frozenset(forms.participle),
                    False,
                    bool(particle),
                    confidence,
                    frozenset(f.split()[0] for f in forms.all_forms()),
                )
            )
    patterns.sort(key=lambda p: (not p.has_particle, p.relation))
    return patterns


PARTICLES = frozenset(_PARTICLE_WORDS)
