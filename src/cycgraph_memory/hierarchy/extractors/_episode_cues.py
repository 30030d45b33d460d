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

from cycgraph_memory.hierarchy.extractors import _lexicon as lex
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


def _pattern(key: str) -> str:
    """A name in any case, as whole words (``key`` is the normalised name)."""
    return r"\s+".join(re.escape(w) for w in key.split())


def episode_type_cues(entities: Mapping[str, _Acc], sentences: Sequence[str]) -> None:
    """Add the cues above to the fallback-typed entities of an episode (in place)."""
    fallback = [acc for acc in entities.values() if acc.type == "concept" and acc.words < 99]
    if not fallback:
        return
    text = "\n".join(sentences)
    roles = "|".join(sorted(map(re.escape, lex.PERSON_ROLE_NOUNS), key=len, reverse=True))
    kin = "|".join(sorted(map(re.escape, _KIN_AND_EVENTS), key=len, reverse=True))
    for acc in fallback:
        names = {acc.key, *(a.lower() for a in acc.aliases)}
        for key in names:
            name = _pattern(key)
            tie = re.search(
                r"\b(?:my|our|his|her|your|their)\s+(?:[a-z]+\s+)?(?:" + roles + r")\s*,?\s+"
                + name + r"(?![\w'\u2019-])",
                text,
                re.IGNORECASE,
            )
            possessive = re.search(
                r"(?<![\w-])" + name + r"['\u2019]s\s+(?:" + kin + r")\b", text, re.IGNORECASE
            )
            if tie is not None or possessive is not None:
                acc.add({"person": PERSON_CUE})
                break
            place = re.search(
                r"\b" + _MOTION_OR_PERSON + r"\s+(?:[a-z]+\s+)?from\s+" + name + r"(?![\w-])",
                text,
                re.IGNORECASE,
            )
            if place is not None:
                acc.add({"location": LOCATION_CUE})
                break
