"""Private proper-name checks of the parser tier (entity noise).

spaCy's small English pipeline tags and labels sentence-initial capitalised common words as
names ("Lesson recorded: ..." -> PERSON, "Understood." -> PROPN) and sometimes lowercase
common nouns too ("the onboarding doc" -> ORG). This module decides whether a detected
name span is *weak*: a span the parser alone proposes, with nothing else to back it. A weak
span becomes an entity only when it is a relation endpoint; see
:meth:`cycgraph_memory.hierarchy.extractors.parser.ParserExtractor`.

A span is supported (never weak) when a speaker name, the gazetteers (companies, software,
places, given names, typed acronyms) or the identifier shape (camelCase, ACRONYM) back it.
Otherwise it is weak when it is

* a single token whose lowercase form is a common English word (the pipeline's own
  lemmatizer word lists, its stop words and the rule tier's filler list) and that is
  sentence-initial or written in lowercase (a capital in mid-sentence is proper-noun
  evidence even when the tagger says NOUN: "her name is Biscuit");
* a multi-word span written entirely in lowercase.

The module also spots a verb that the tagger took for a plural noun in a coordination
("owns the migration project and reports to Carol", where "reports" is tagged as a noun
conjunct of "project").
"""

from __future__ import annotations

from typing import Any

from cycgraph_memory.hierarchy.extractors import _lexicon as lex
from cycgraph_memory.hierarchy.extractors._entities import _INTERNAL_CAP, _is_acronym, _known_type

__all__ = [
    "CommonWords",
    "anaphor_type_cues",
    "is_weak_name",
    "short_form_host",
    "short_form_words",
    "verb_like_conjunct",
]

_POS = ("noun", "verb", "adj", "adv")


class CommonWords:
    """Lowercase common English words, read from a spaCy pipeline's rule lemmatizer.

    The English pipelines ship WordNet word lists per part of speech (``lemma_index``),
    irregular forms (``lemma_exc``) and suffix rules (``lemma_rules``). A pipeline without
    them leaves only the stop words and the rule tier's filler list.

    Args:
        nlp: A loaded ``spacy.language.Language``.
    """

    def __init__(self, nlp: Any) -> None:
        self._index: dict[str, frozenset[str]] = {}
        self._exc: dict[str, frozenset[str]] = {}
        self._rules: dict[str, list[tuple[str, str]]] = {}
        try:
            lookups = nlp.get_pipe("lemmatizer").lookups
            index = lookups.get_table("lemma_index")
            exc = lookups.get_table("lemma_exc")
            rules = lookups.get_table("lemma_rules")
        except (AttributeError, KeyError, ValueError):
            return  # no rule lemmatizer: stop words and fillers only
        for pos in _POS:
            if pos in index:
                self._index[pos] = frozenset(str(w) for w in index[pos])
            if pos in exc:
                self._exc[pos] = frozenset(str(w) for w in exc[pos])
            if pos in rules:
                self._rules[pos] = [(str(old), str(new)) for old, new in rules[pos]]

    def __contains__(self, word: object) -> bool:
        """True when ``word`` (any case) is a common word or an inflection of one."""
        if not isinstance(word, str):
            return False
        low = word.lower().rstrip(".")
        if not low or low in lex.STOPWORDS:
            return True
        for pos, words in self._index.items():
            if low in words or low in self._exc.get(pos, frozenset()):
                return True
            for old, new in self._rules.get(pos, ()):
                if low.endswith(old) and low[: len(low) - len(old)] + new in words:
                    return True
        return False


def _supported(name: str, key: str) -> bool:
    """True when the lexicon or the identifier shape backs the name."""
    words = name.split()
    first = words[0].lower().rstrip(".")
    return (
        _known_type(key) is not None
        or key in lex.LOWERCASE_TOOLS
        or key in lex.ACRONYM_TYPES
        or first in lex.FIRST_NAMES
        or any(_INTERNAL_CAP.search(w) for w in words)
        or any(_is_acronym(w) for w in words)
    )


def is_weak_name(span: Any, name: str, key: str, common: CommonWords) -> bool:
    """Whether a detected name span has nothing but the parser behind it.

    Args:
        span: The spaCy ``Span`` of the name (titles and determiners already stripped).
        name: Its text as the entity name.
        key: Its normalised name.
        common: The common-word list of the pipeline.

    Returns:
        True for a weak span (see the module docstring).
    """
    if _supported(name, key):
        return False
    if len(span) > 1:
        return not any(ch.isupper() for ch in name)
    tok = span[0]
    if not (tok.is_stop or tok.text in common or tok.lemma_ in common):
        return False
    sent = tok.sent
    initial = all(not t.is_alpha for t in sent.doc[sent.start : tok.i])
    # Mid-sentence capitals are proper-noun evidence even when the tagger says NOUN ("her
    # name is Biscuit"); sentence-initial capitals are not.
    return initial or not any(ch.isupper() for ch in tok.text)


def verb_like_conjunct(tok: Any, verb_relations: dict[str, dict[str, str]]) -> str | None:
    """The relation of a verb mis-tagged as a bare plural noun conjunct, else None.

    "Dave owns the migration project and reports to Carol": the tagger makes "reports" a
    plural noun coordinated with "project" and hangs "to Carol" on "project". A bare
    (no determiner or modifier) plural conjunct of a verb's object, whose lemma is a
    relation verb and which is directly followed by that verb's preposition, is that verb.

    Args:
        tok: A token.
        verb_relations: Relation verbs: lemma -> {preposition or "": relation}.

    Returns:
        The relation name, or None when ``tok`` is not such a verb.
    """
    if tok.dep_ != "conj" or tok.tag_ != "NNS" or tok.i + 1 >= len(tok.doc):
        return None
    if any(c.dep_ in {"det", "poss", "amod", "compound", "nummod"} for c in tok.lefts):
        return None
    table = verb_relations.get(tok.lemma_.lower(), {})
    prep = tok.nbor(1)
    if prep.pos_ != "ADP" or prep.lower_ not in table:
        return None
    if tok.head.dep_ != "dobj":
        return None
    return table[prep.lower_]


def short_form_host(
    entities: dict[str, Any], key: str, speakers: set[str], *, person: bool = False
) -> str | None:
    """The full name an earlier one-word mention ``key`` is a short form of, else None.

    Document-level short forms: "Bluefin" after "Bluefin Analytics", "Ruiz" after "Carmen
    Ruiz". The host is the only multi-word entity seen so far whose first word is ``key``
    (a person's only when the mention is no other entity yet) or a person whose last word
    is ``key``. A name already an entity of its own, or a speaker, keeps its own entity.

    Args:
        entities: The episode's entities so far (key -> accumulator with ``key``,
            ``words`` and ``type``).
        key: The normalised one-word mention.
        speakers: Keys of the speakers (never hosts).
        person: The mention itself has person evidence (a title, a given name): only a
            person hosts it ("Dr. Morgan" after "Morgan Stanley" stays apart).
    """
    if " " in key or key in entities or key in speakers:
        return None
    hosts = [
        acc.key
        for acc in entities.values()
        if 2 <= acc.words < 99
        and acc.key not in speakers
        and (key == acc.key.split()[0] or (key == acc.key.split()[-1] and acc.type == "person"))
    ]
    if len(hosts) != 1 or (person and entities[hosts[0]].type != "person"):
        return None
    return str(hosts[0])


def short_form_words(entities: dict[str, Any]) -> frozenset[str]:
    """First words of multi-word entities and last names of people seen so far.

    A capitalised sentence-initial word among them is a name even when the tagger calls
    it an adjective or a common noun ("Pebble, a seed-stage startup", "Ruiz replaces").
    """
    out: set[str] = set()
    for acc in entities.values():
        if 2 <= acc.words < 99:
            parts = acc.key.split()
            out.add(parts[0])
            if acc.type == "person":
                out.add(parts[-1])
    return frozenset(out)


ANAPHOR_ORG_CUE = 60
"""Organisation evidence from a definite organisation noun ("the club said")."""

_DEFINITE = frozenset({"the", "this"})


def anaphor_type_cues(
    tokens: list[Any],
    index: int,
    history: list[tuple[tuple[int, int], str]],
    entities: dict[str, Any],
    org_nouns: frozenset[str],
    speakers: set[str],
) -> list[str]:
    """Keys that a definite organisation noun of this sentence refers back to.

    "Linked with Ajax, ... he is not joining the Dutch club", "Kingsbridge Rovers sacked
    their manager. The club said ...": "the club" / "the council" / "the company" names an
    organisation, and the name it refers back to is the latest one of this or the previous
    sentence that no evidence makes a person or a place. Nothing when a name of the
    episode already ends with that noun ("the council" after "Brookfield Town Council").

    Args:
        tokens: The sentence's tokens.
        index: The sentence's index in the episode.
        history: ``((sentence, token), key)`` of the mentions so far, in order.
        entities: The episode's entities (key -> accumulator with ``cues``).
        org_nouns: Nouns that name a whole organisation ("club", "council", "company").
        speakers: Keys of the speakers (never an antecedent).

    Returns:
        The keys to give organisation evidence (at most one per definite noun).
    """
    out: list[str] = []
    for tok in tokens:
        lemma = tok.lemma_.lower()
        if tok.pos_ != "NOUN" or lemma not in org_nouns:
            continue
        if tok.dep_ not in {"nsubj", "nsubjpass", "dobj", "poss"}:
            continue  # "we went to the club" refers to no name
        if not any(c.dep_ == "det" and c.lower_ in _DEFINITE for c in tok.children):
            continue
        if any(c.dep_ == "compound" for c in tok.children):
            continue  # "the book club" is a new description, not a reference
        if any(key.split()[-1] == lemma for _, key in history):
            continue
        for (sentence, start), key in reversed(history):
            if (sentence, start) >= (index, tok.i) or key in speakers or key not in entities:
                continue
            if sentence < index - 1:
                break
            cues = entities[key].cues
            if cues.get("person", 0) > 0 or cues.get("location", 0) > 0:
                continue  # a person or a place is not what "the club" refers to
            out.append(key)
            break
    return out
