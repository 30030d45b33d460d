"""Private: episode-level type evidence for names that no mention could type.

A name typed only by the fallback (``concept``: a single capitalised word with no cue where
it was met) often has evidence elsewhere in the same episode, in a form the mention-level
cues do not read:

* **a person tie before it**, in any case: "my coworker dani" (the mention that was
  typed was "Dani sounds nice", sentence-initial) -> person;
* **a possessive with a kinship or life-event noun**: "Dev's wedding", "Priya's mum" ->
  person (not a role noun: "Acme's CEO" says nothing of Acme);
* **"from" after a motion verb or a person noun**: "I'll commute from Croydon", "that
  girl from Plymouth", "we moved here from Accra" -> location (not a bare "from": "an
  email from Dana", "an offer from Globex").

Only names whose type is still the fallback take these cues, so a name typed by stronger
evidence (a gazetteer entry, a suffix, a first name, NER) never changes type here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from cycgraph_memory.hierarchy.extractors import _lexicon as lex
from cycgraph_memory.normalize import normalize_entity_name

if TYPE_CHECKING:
    from cycgraph_memory.hierarchy.extractors.rules import _Acc

__all__ = ["episode_type_cues"]

PERSON_CUE = 60
"""Weight of an episode-level person cue (that of a role noun before the name)."""

LOCATION_CUE = 30
"""Weight of an episode-level location cue (that of "in" before the name)."""

_KIN_AND_EVENTS = lex.word_set(
    """
    wedding birthday funeral graduation christening engagement retirement baby babies
    kids kid children mum mom mother dad father parents wife husband sister brother son
    daughter girlfriend boyfriend fiance fiancee grandma grandpa granny nan cousin aunt
    uncle niece nephew family
    """
)
_MOTION_OR_PERSON = (
    r"(?:commute|commutes|commuting|commuted|drive|drives|driving|drove|fly|flies|flying|"
    r"flew|move|moves|moving|moved|come|comes|coming|came|travel|travels|travelling|"
    r"traveling|travelled|traveled|girl|guy|boy|man|woman|lad|lass|folks|people|"
    r"family|friend|friends)"
)
_WORD = r"([A-Za-z][\w-]*)"


def _alternation(words: frozenset[str]) -> str:
    return "|".join(sorted(map(re.escape, words), key=len, reverse=True))


# One pass of each over the episode's text; the captured word is compared to the names.
_TIE = re.compile(
    r"\b(?:my|our|his|her|your|their)\s+(?:[a-z]+\s+)?(?:"
    + _alternation(lex.PERSON_ROLE_NOUNS)
    + r")\s*,?\s+"
    + _WORD
    + r"(?![\w'\u2019-])",
    re.IGNORECASE,
)
_POSSESSIVE = re.compile(
    r"(?<![\w-])" + _WORD + r"['\u2019]s\s+(?:" + _alternation(_KIN_AND_EVENTS) + r")\b",
    re.IGNORECASE,
)
_FROM = re.compile(
    r"\b" + _MOTION_OR_PERSON + r"\s+(?:[a-z]+\s+)?from\s+" + _WORD + r"(?![\w-])",
    re.IGNORECASE,
)


def episode_type_cues(entities: Mapping[str, _Acc], sentences: Sequence[str]) -> None:
    """Add the cues above to the fallback-typed one-word entities of an episode (in place)."""
    fallback = [acc for acc in entities.values() if acc.words == 1 and acc.type == "concept"]
    if not fallback:
        return
    text = "\n".join(sentences)
    people = {normalize_entity_name(m.group(1)) for m in _TIE.finditer(text)}
    people |= {normalize_entity_name(m.group(1)) for m in _POSSESSIVE.finditer(text)}
    places = {normalize_entity_name(m.group(1)) for m in _FROM.finditer(text)}
    if not people and not places:
        return
    for acc in fallback:
        names = {acc.key, *(normalize_entity_name(a) for a in acc.aliases)}
        if names & people:
            acc.add({"person": PERSON_CUE})
        elif names & places:
            acc.add({"location": LOCATION_CUE})
