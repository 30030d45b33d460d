"""Private dependency-parse rules of the parser tier (spaCy tokens in, edges out).

Works on the tokens of one parsed sentence: subject / verb / object from dependency
relations (``nsubj``, ``dobj``, ``prep`` + ``pobj``), passives (``nsubjpass`` + ``agent``),
relative clauses (``relcl``: the relative pronoun stands for the modified noun),
participle modifiers (``acl``: "the gateway maintained by X"), open complements
(``xcomp``: "appointed X to chair Y"), verb coordination (``conj`` inherits the subject),
name coordination (one edge per conjunct), appositions and role nouns ("its co-founder Sam
Whitfield", "Chef Rosa Delgado, formerly of Copper Kettle"), and nominalised events ("the
signing of X", "a replacement for X"). A claim under negation, a modal, a conditional, a
question or a non-asserting verb ("denied that", "plans to") yields no edge.

The module never imports spaCy: tokens are duck-typed (``Any``), so the rest of the package
type-checks and imports without the extra.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from cycgraph_memory.hierarchy.extractors import _parse_tables as tab
from cycgraph_memory.hierarchy.extractors._lexicon import FIRST_NAMES
from cycgraph_memory.hierarchy.extractors._parse_names import verb_like_conjunct

__all__ = [
    "SPEAKER",
    "OrgBefore",
    "RawEdge",
    "asserted",
    "edges_for_sentence",
    "forget_children",
]

SPEAKER: Any = object()
"""Stands for the speaker as the implicit subject of a subjectless chat clause
("starting at Spotify in March", "been going to Iron Temple")."""


@dataclass(frozen=True, slots=True)
class OrgBefore:
    """The organisation named last before token ``before`` in its sentence.

    The organisation of an unattached role noun: "Northwind's board said ... chief
    executive Olga Brandt".
    """

    before: int


_COMITATIVE = "with:"  # marks an edge whose subject came from "with": people only
_MAX_DEPTH = 12  # ancestor walks are bounded: work per token stays constant
_SUBJ = frozenset({"nsubj", "csubj", "expl"})
_RELATIVE = frozenset({"who", "which", "that", "whom"})


@dataclass(frozen=True, slots=True)
class RawEdge:
    """An edge between two tokens, before the tokens are resolved to entities."""

    subject: Any
    relation: str
    object: Any
    confidence: float
    ended: bool = False
    """The clause says the relation has stopped ("no longer works at")."""


_KIDS = "cycgraph_memory.children"  # Doc.user_data key of the children table


def _kids(tok: Any) -> list[tuple[str, Any]]:
    """``(dep_, child)`` of ``tok``'s children in order, from a table built once per doc.

    The same tokens as ``tok.children`` (spaCy walks the token's left and right edges and
    builds each child's ``dep_`` string on every call; the rules ask ~15 times a sentence).
    """
    doc = tok.doc
    table: list[list[tuple[str, Any]]] | None = doc.user_data.get(_KIDS)
    if table is None:
        table = [[] for _ in range(len(doc))]
        for child in doc:
            head = child.head.i
            if head != child.i:
                table[head].append((child.dep_, child))
        doc.user_data[_KIDS] = table
    return table[tok.i]


def forget_children(doc: Any) -> None:
    """Drop ``doc``'s children table (built again if the doc is read again).

    Called once a doc's rules have run, so a cached parse keeps no table alive for the
    garbage collector to scan.
    """
    doc.user_data.pop(_KIDS, None)


def _children(tok: Any, *deps: str) -> list[Any]:
    return [c for dep, c in _kids(tok) if dep in deps]


def _conjuncts(tok: Any) -> list[Any]:
    """``tok`` and the names coordinated with it, minus a negated one ("X but not Y")."""
    out = [tok]
    for _ in range(_MAX_DEPTH):
        nxt = _children(out[-1], "conj")
        if not nxt:
            break
        out.append(nxt[0])
    # "founded by brothers Luis and Mateo Ortega": the tagger hangs "Luis and" on
    # "Ortega" as a modifier with its own coordination; that modifier is a conjunct too.
    split = [
        c
        for c in tok.lefts
        if c.dep_ in {"nmod", "compound"} and c.pos_ == "PROPN" and _children(c, "cc")
    ]
    return [out[0], *split, *(c for c in out[1:] if not _children(c, "neg"))]


def _verbal(tok: Any) -> bool:
    """A verb, or a root with a subject that the tagger took for a plural noun.

    "the gateway runs on Envoy": "runs" is tagged NNS.
    """
    return tok.pos_ in {"VERB", "AUX"} or (
        tok.dep_ == "ROOT" and tok.tag_ == "NNS" and bool(_children(tok, "nsubj"))
    )


def _is_passive(verb: Any) -> bool:
    if _children(verb, "nsubjpass", "auxpass") or (verb.dep_ == "acl" and verb.tag_ == "VBN"):
        return True
    # "The study was led by X and funded by Y": a bare participle conjunct of a passive.
    return (
        verb.dep_ == "conj"
        and verb.tag_ == "VBN"
        and not _children(verb, "nsubj", "aux")
        and verb.head is not verb
        and _is_passive(verb.head)
    )


def _blocked(tok: Any, *, negation: bool = True) -> bool:
    """Negation, a modal, a conditional mark or a conditional clause on ``tok`` itself.

    With ``negation=False`` a ``neg`` child does not count (see :func:`stopped`).
    """
    for dep, child in _kids(tok):
        low = child.lower_
        if (dep == "neg" and negation) or (dep == "advmod" and low in {"never", "hardly"}):
            return True
        if dep == "aux" and low in tab.MODALS:
            return True
        if dep == "mark" and low in tab.CONDITIONAL_MARKS:
            return True
        if dep == "advcl" and any(
            d == "mark" and m.lower_ in tab.CONDITIONAL_MARKS for d, m in _kids(child)
        ):
            return True  # the consequent of "if ..., X will ..."
    return False


_PRESENT_OR_PAST_AUX = frozenset(
    ["do", "does", "did", "is", "are", "was", "were", "am", "'s", "'re", "'m", "\u2019s",
     "\u2019re", "\u2019m"]
)


_PERFECT_AUX = frozenset(["has", "have", "'s", "'ve", "\u2019s", "\u2019ve"])


def stopped(verb: Any) -> bool:
    """A negated clause that says its relation stopped: "doesn't work at Acme anymore".

    Only the negation blocks the clause (no modal, condition or "never"), it is the main
    clause or asserted under its head, and "anymore" / "any more" follows the verb before
    any punctuation; or, in the present perfect, "since" follows it or opens the sentence
    ("hasn't worked at Acme since 2022": ``claim_polarity`` reads it as ended only when a
    date follows "since"). The edges it gives are ended, never asserted;
    ``claim_polarity`` still reads the sentence.
    """
    if not _children(verb, "neg") or _blocked(verb, negation=False):
        return False
    auxes = [a.lower_ for a in _children(verb, "aux")]
    perfect = any(a in _PERFECT_AUX for a in auxes)
    if any(a not in _PRESENT_OR_PAST_AUX and a not in _PERFECT_AUX for a in auxes):
        return False  # "won't work there anymore" has not stopped yet
    if not (verb.dep_ == "ROOT" or verb.head is verb or asserted(verb.head)):
        return False
    sent = verb.sent
    if perfect and sent[0].lower_ == "since":
        return True  # "since 2022 she hasn't worked at Acme" (claim_polarity reads the date)
    for tok in sent[verb.i - sent.start + 1 :]:
        if tok.is_punct:
            return False
        if tok.lower_ == "anymore" or (
            tok.lower_ == "any" and tok.i + 1 < sent.end and tok.nbor(1).lower_ == "more"
        ):
            return True
        if perfect and tok.lower_ == "since":
            return True  # "hasn't worked at Acme since 2022" (claim_polarity reads the date)
    return False


def asserted(verb: Any) -> bool:
    """False when the clause of ``verb`` is negated, modal, conditional or reported doubt.

    Negation and modality propagate down open complements and shared-subject conjuncts
    ("not planning to sell", "would not A and B"); through other clause links only a
    non-asserting head verb ("denied that", "hopes to") blocks the claim, so a comma
    splice ("I work at X, they don't care") keeps its first clause.
    """
    tok = verb
    strict = True
    for depth in range(_MAX_DEPTH):
        if strict and _blocked(tok):
            return False
        if depth > 0 and tok.lemma_.lower() in tab.NON_ASSERTING_HEADS:
            return False
        if tok.dep_ == "ROOT" or tok.head is tok:
            return True
        if tok.dep_ == "relcl" and strict:
            # A relative clause is asserted on its own: "Kerrigan, which is owned by the
            # Doyle family, denied ..." (a noun's content clause, "reports that ...", is an
            # ``acl`` and stays under the verb above it).
            return True
        own_subject = bool(_children(tok, *_SUBJ, "nsubjpass"))
        strict = strict and (
            tok.dep_ == "xcomp"
            or (tok.dep_ == "conj" and not own_subject and not _comma_splice(tok))
        )
        tok = tok.head
    return True


def _comma_splice(verb: Any) -> bool:
    """A past-tense conjunct after a bare comma, of a verb negated with "do".

    "i don't live in Ottawa anymore, moved to Montreal": "moved" cannot share the "do" of
    the negated clause (a bare conjunct can: "didn't quit, sell or move"), so the
    negation stays in its own clause.
    """
    head = verb.head
    return bool(
        verb.tag_ == "VBD"
        and verb.i > 0
        and verb.doc[verb.i - 1].lower_ == ","
        and not _children(verb, "cc")
        and not _children(head, "cc")
        and _children(head, "neg")
        and any(a.lemma_.lower() == "do" for a in _children(head, "aux"))
    )


def _subjects(verb: Any) -> list[Any]:
    """Subject tokens of a verb (inherited through conj / xcomp / relcl / acl)."""
    tok = verb
    for _ in range(_MAX_DEPTH):
        subs = _children(tok, "nsubj")
        if subs:
            return subs
        if tok.dep_ == "xcomp":
            objects = _children(tok.head, "dobj")
            return objects or _subjects(tok.head)
        if tok.dep_ == "conj" and _verbal(tok.head):
            tok = tok.head
            # "X is written in Go and depends on Kafka": the shared subject is passive.
            shared = _children(tok, "nsubjpass")
            if shared and not _children(tok, "nsubj"):
                return shared
            continue
        if tok.dep_ == "acl" and tok.tag_ != "VBN":
            return [tok.head]  # "the team developing X"
        if tok.dep_ == "advcl" and tok.tag_ == "VBG":
            return _subjects(tok.head)  # "..., before joining X"
        return []
    return []


def _pobjs(verb: Any, prep: str) -> list[Any]:
    out: list[Any] = []
    for child in verb.children:
        if child.dep_ in {"prep", "agent", "dative", "prt"} and child.lower_ == prep:
            out.extend(_children(child, "pobj"))
        elif child.dep_ == "advmod" and child.lower_ in {"there", "here"}:
            continue
    if not out:
        # "spent eleven years at X": the preposition hangs off the direct object.
        for obj in _children(verb, "dobj"):
            for child in obj.children:
                if child.dep_ == "prep" and child.lower_ == prep and verb.lemma_ == "spend":
                    out.extend(_children(child, "pobj"))
    return out


def _agents(verb: Any) -> list[Any]:
    out: list[Any] = []
    for child in _children(verb, "agent"):
        out.extend(_children(child, "pobj"))
    return out


def _patients(verb: Any) -> list[Any]:
    """The passive subject ("X was led by Y" -> X, "the gateway maintained by" -> gateway)."""
    subs = _children(verb, "nsubjpass")
    if subs:
        return subs
    if verb.dep_ == "acl":
        return [verb.head]
    if verb.dep_ == "conj":
        return _patients(verb.head)
    return []


def _verb_edges(verb: Any, chat: bool) -> Iterator[tuple[Any, str, Any, float]]:
    for s, relation, o, confidence in _verb_edges_raw(verb):
        yield s, relation, o, confidence
    if (
        chat
        and not _subjects(verb)
        and not _is_passive(verb)
        and (verb.tag_ in {"VBG", "VBD", "VBN"} or _bare_quit(verb))
        and (verb.dep_ == "ROOT" or (verb.dep_ == "conj" and _subjectless_root(verb.head)))
        and not _missed_name_before(verb)
    ):
        # A subjectless chat clause: the speaker is the subject ("moved to Leeds in may,
        # started at Arup in june": the second clause too).
        for _, relation, o, confidence in _verb_edges_raw(verb, implicit=True):
            yield SPEAKER, relation, o, confidence - 0.1


def _missed_name_before(verb: Any) -> bool:
    """A known first name before ``verb`` in its sentence that the tagger did not read as one.

    spaCy's small model tags a first word such as "Raj" as an adverb ("Raj left Shopify"):
    the clause has a subject the parse lost, and it is not the speaker's.
    """
    sent = verb.sent
    return any(
        t.is_title and t.lower_ in FIRST_NAMES and t.pos_ != "PROPN"
        for t in verb.doc[sent.start : verb.i]
    )


def _bare_quit(verb: Any) -> bool:
    """A sentence-opening "quit" the tagger reads as an imperative.

    "yeah quit Shopify in december" is chat's past tense ("quit" has one form): the
    ending is the speaker's.
    """
    before = verb.doc[verb.sent.start : verb.i]
    return bool(
        verb.lower_ == "quit"
        and verb.dep_ == "ROOT"
        and all(t.pos_ in {"INTJ", "ADV", "CCONJ", "PUNCT"} for t in before)
    )


def _subjectless_root(verb: Any) -> bool:
    """The sentence's root verb, with no subject of its own ("quit Shopify, joined ...")."""
    return bool(
        verb.dep_ == "ROOT"
        and verb.pos_ == "VERB"
        and not _subjects(verb)
        and not _is_passive(verb)
    )


def _verb_edges_raw(verb: Any, implicit: bool = False) -> Iterator[tuple[Any, str, Any, float]]:
    lemma = verb.lemma_.lower()
    table = dict(tab.VERB_RELATIONS.get(lemma, {}))
    particles = {c.lower_ for c in _children(verb, "prt")}
    for particle in particles:
        relation = tab.PARTICLE_RELATIONS.get((lemma, particle))
        if relation is not None:
            table = {"": relation}
    if lemma in tab.AS_RELATIONS and _pobjs(verb, "as"):
        table[""] = tab.AS_RELATIONS[lemma]
    if lemma == "count":
        # "X counts A and B among its customers": A customer_of X.
        for obj in _pobjs(verb, "among"):
            if obj.lemma_.lower() in {"customer", "client", "user", "partner"}:
                for patient in _children(verb, "dobj"):
                    for subject in _subjects(verb):
                        yield patient, "customer_of", subject, 0.7
        return
    for obj in _children(verb, "dobj"):
        noun = obj.lemma_.lower()
        if (noun in tab.JOB_NOUNS and lemma in tab.JOB_TAKING_VERBS) or (
            noun == "offer" and lemma in tab.OFFER_TAKING_VERBS and not _children(obj, "compound")
        ):
            # "got a job at X", "accepted an offer from X"
            # The preposition hangs off the noun or, as often, off the verb ("got a job at X").
            for child in [*_children(obj, "prep"), *_children(verb, "prep")]:
                if child.lower_ in {"at", "with", "from"}:
                    relation = "join" if noun == "offer" else "work_at"
                    for target in _children(child, "pobj"):
                        for subject in _subjects(verb):
                            yield subject, relation, target, 0.7
        elif noun in tab.JOB_NOUNS and lemma in tab.JOB_LEAVING_VERBS:
            # "quit his job at X": a departure (ends the job, never starts one)
            for child in [*_children(obj, "prep"), *_children(verb, "prep")]:
                if child.lower_ == "at":
                    for target in _children(child, "pobj"):
                        for subject in _subjects(verb):
                            yield subject, "left_job", target, 0.7
    if not table:
        return
    passive = _is_passive(verb)
    if lemma in tab.PASSIVE_ONLY and not passive:
        return
    for prep, relation in table.items():
        if prep == "":
            if passive:
                subjects, objects = _agents(verb), _patients(verb)
                confidence = 0.7
            else:
                subjects, objects = _subjects(verb), _children(verb, "dobj")
                if implicit:
                    subjects = [verb]
                confidence = 0.75
                if (
                    not objects
                    and verb.dep_ == "relcl"
                    and not any(c.lower_ in _RELATIVE for c in _children(verb, "nsubj"))
                ):
                    # "the design system Lukas made": the modified noun is the object.
                    objects = [verb.head]
        else:
            objects = _pobjs(verb, prep)
            subjects = _patients(verb) if passive else _subjects(verb)
            if implicit:
                subjects = [verb]
            confidence = 0.8
        if relation == "move_to":
            objects = [_place_in(o, verb) for o in objects]
        objects = [_called(o) for o in objects]
        for s in subjects:
            for o in objects:
                yield s, relation, o, confidence
        if relation in tab.COMITATIVE_RELATIONS and not passive and not implicit:
            # "Marsh started Tidewater with Raj Patel": a person after "with" shares the act
            # (kept only when that token is a person, see ``edges_for_sentence``).
            for partner in _pobjs(verb, "with"):
                for o in objects:
                    yield partner, _COMITATIVE + relation, o, confidence - 0.1


def _called(obj: Any) -> Any:
    """The name of "a tiny studio called Pixelfern" / "a startup named Lumen" (else ``obj``)."""
    if obj.pos_ != "NOUN":
        return obj
    for acl in _children(obj, "acl"):
        if acl.lemma_.lower() in {"call", "name"} and acl.tag_ == "VBN":
            for name in _children(acl, "oprd", "dobj", "attr"):
                if name.pos_ == "PROPN":
                    return name
    return obj


def _place_in(obj: Any, verb: Any) -> Any:
    """The named place of "moved to a new office in Boulder" (else the object itself)."""
    if obj.pos_ != "NOUN" or obj.lemma_.lower() not in tab.PLACE_NOUNS:
        return obj
    for child in [*_children(obj, "prep"), *_children(verb, "prep")]:
        if child.lower_ == "in":
            places = [p for p in _children(child, "pobj") if p.pos_ == "PROPN"]
            if places:
                return places[0]
    return obj


def _located_edges(tok: Any) -> Iterator[tuple[Any, str, Any, float]]:
    """Location of an organisation from its description.

    "Bluefin, a Denver-based maker of ...": the place before "-based"; "Pebble, a startup
    in Austin,": a named place after "in" on an organisation noun in apposition.
    """
    if tok.lower_ == "based" and tok.dep_ == "amod":
        noun = tok.head
        owner = noun.head if noun.dep_ == "appos" else noun
        for place in tok.children:
            if place.dep_ in {"npadvmod", "compound", "nmod"} and place.pos_ == "PROPN":
                yield owner, "locate_in", place, 0.65
    elif (
        tok.dep_ == "appos"
        and tok.pos_ == "NOUN"
        and tok.lemma_.lower() in tab.ORG_DESCRIPTION_NOUNS
    ):
        for child in _children(tok, "prep"):
            if child.lower_ == "in":
                for place in _children(child, "pobj"):
                    if place.pos_ == "PROPN":
                        yield tok.head, "locate_in", place, 0.6


def _part_of_edges(noun: Any) -> Iterator[tuple[Any, str, Any, float]]:
    """Membership from a copula: "The data division is part of the bank's office"."""
    head = noun.head
    if noun.dep_ != "attr" or head.lemma_ != "be" or not asserted(head):
        return
    for child in _children(noun, "prep"):
        if child.lower_ == "of":
            for whole in _children(child, "pobj"):
                for part in _subjects(head):
                    yield part, "part_of", whole, 0.7


def _nominal_edges(noun: Any) -> Iterator[tuple[Any, str, Any, float]]:
    prep, relation = tab.NOMINAL_EVENTS[noun.lemma_.lower()]
    patients: list[Any] = []
    for child in _children(noun, "prep"):
        if child.lower_ == prep:
            patients.extend(_children(child, "pobj"))
    if not patients:
        return
    heads = tab.NOMINAL_HEADS.get(noun.lemma_.lower())
    if heads is not None and noun.head.lemma_.lower() not in heads:
        return  # "ended its partnership with X" states no partnership
    agents = _children(noun, "poss")
    if not agents:
        head = noun.head
        if noun.dep_ == "pobj" and head.dep_ == "prep":
            head = head.head  # "joins as a replacement for X"
        if noun.dep_ in {"dobj", "pobj", "attr"} and head.pos_ in {"VERB", "AUX"}:
            agents = _subjects(head)
            if not asserted(head):
                return
        elif noun.dep_ == "appos":
            agents = [head]
    for a in agents:
        for p in patients:
            yield a, relation, p, 0.7


def _org_like(tok: Any) -> bool:
    # A capitalised adjective or noun, sentence-initial included ("Northgate manager X":
    # the tagger makes "Northgate" an adjective); the caller keeps only resolved names.
    return (
        tok.pos_ == "PROPN"
        or tok.lower_ in {"its", "their", "our"}
        or (tok.pos_ in {"ADJ", "NOUN"} and tok.text[:1].isupper())
    )


def _work_edges(noun: Any) -> Iterator[tuple[Any, str, Any, float]]:
    """Authorship from a work noun: "the debut novel by Nadia Farouk" -> write."""
    for child in _children(noun, "prep"):
        if child.lower_ == "by":
            work = noun.head if noun.dep_ == "appos" else noun
            for author in _children(child, "pobj"):
                yield author, "write", work, 0.65


def _attached(tok: Any, anchors: set[int]) -> bool:
    """``tok`` hangs (through nouns only) off one of the ``anchors`` tokens.

    "former Oracle engineer X": Oracle modifies the role; in "Porthaven FC confirmed that
    striker X" FC is the subject of another verb and no organisation of the role.
    """
    cur = tok
    for _ in range(4):
        if cur.i in anchors:
            return True
        if cur.head is cur or cur.pos_ in {"VERB", "AUX"}:
            return False
        cur = cur.head
    return cur.i in anchors


def _role_of_at(role: Any) -> tuple[list[Any], list[Any]]:
    """The "of" and "at" objects of a role noun ("head of the lab at Carrow University")."""
    of: list[Any] = []
    at: list[Any] = []
    for child in _children(role, "prep"):
        if child.lower_ == "of":
            for obj in _children(child, "pobj"):
                of.append(obj)
                for grand in _children(obj, "prep"):
                    if grand.lower_ == "at":
                        at.extend(_children(grand, "pobj"))
        elif child.lower_ in {"at", "with"}:
            at.extend(_children(child, "pobj"))
    return of, at


def _role_relation(role: Any) -> str:
    doc = role.doc
    word = role.lower_ if role.lower_ in tab.ROLE_RELATIONS else role.lemma_.lower()
    relation = tab.ROLE_RELATIONS[word]
    if word == "executive" and (role.i == 0 or doc[role.i - 1].lower_ != "chief"):
        relation = "work_at"  # "a Visa executive" works there; a chief executive leads
    return relation


def _possessor(role: Any, person: Any, ref: Callable[[Any], str | None]) -> list[Any]:
    """The organisation a possessive names on a role noun ("Helix's", "the board's", "its")."""
    out: list[Any] = []
    own = ref(person)
    for child in _children(role, "poss"):
        if child.lower_ in {"its", "their"}:
            named_before = any(
                t.pos_ == "PROPN" and ref(t) not in {None, own} for t in role.sent if t.i < child.i
            )
            # Another name earlier in the sentence makes the pronoun ambiguous with a
            # previous sentence's organisation: only an organisation of this sentence.
            out.append(OrgBefore(child.i) if named_before else child)
        elif child.pos_ == "PROPN" or (
            child.pos_ == "NOUN" and any(d.lower_ in {"the", "this"} for d in child.children)
        ):
            out.append(child)  # "Tidewater's chief executive", "the board's chair"
    return out


def _role_edges(
    person: Any, span_start: int, ref: Callable[[Any], str | None]
) -> Iterator[tuple[Any, str, Any, float]]:
    """Role nouns and appositions around a person's name (``person`` is the name's head).

    An appositive role ("X, head of the lab at Y,") outranks a title before the name
    ("Professor X"); the role's "of" object takes the role's relation and an "at" object
    next to it a ``work_at`` edge. An organisation before the name counts only when it
    modifies the role or the name ("Northgate manager X"), not when it is the subject of
    another clause ("FC confirmed that striker X").
    """
    doc = person.doc
    window = [doc[i] for i in range(max(person.sent.start, span_start - 4), span_start)]
    appos_roles = [a for a in _children(person, "appos") if a.lemma_.lower() in tab.ROLE_RELATIONS]
    # "The board's chair, Samuel Okoye": the name is the apposition of the role.
    if person.dep_ == "appos" and person.head.lemma_.lower() in tab.ROLE_RELATIONS:
        appos_roles.append(person.head)
    title_roles = [c for c in window if c.lower_ in tab.ROLE_RELATIONS]
    anchors = {person.i, *(r.i for r in title_roles)}
    if appos_roles:
        # "the co-founder of X" may split into several appositions: the one with a
        # preposition or a possessive carries the organisation.
        appos_roles.sort(key=lambda r: not _children(r, "prep", "poss"))
        role = appos_roles[0]
        of, at = _role_of_at(role)
        owners = [*_possessor(role, person, ref), *_children(role, "compound")]
        # "Helix's head of sales": the role's relation goes to its "of" object (a unit, here
        # no entity); the possessor is where the person works.
        orgs: list[Any] = of if of else owners
        extra = [*at, *owners] if of else at
    elif title_roles:
        role = title_roles[-1]
        orgs = [
            c
            for c in window
            if c.lower_ not in tab.ROLE_RELATIONS and _org_like(c) and _attached(c, anchors)
        ]
        orgs.extend(o for o in _possessor(role, person, ref) if o not in orgs)
        orgs.extend(c for c in role.children if _org_like(c) and c not in orgs)
        of, extra = _role_of_at(role)
        orgs.extend(of)
    else:
        role = None
    if role is not None:
        relation = _role_relation(role)
        # "the founder and CEO of Helix": a coordinated role holds at the same place.
        also = [
            _role_relation(c)
            for c in _children(role, "conj")
            if c.lemma_.lower() in tab.ROLE_RELATIONS or c.lower_ in tab.ROLE_RELATIONS
        ]
        for org in orgs:
            if isinstance(org, OrgBefore) or ref(org) is not None:
                confidence = 0.65 if not isinstance(org, OrgBefore) else 0.6
                for rel in dict.fromkeys([relation, *also]):
                    yield person, rel, org, confidence
                break
        else:
            if relation in {"found", "lead"} and not extra:
                # "Tidewater said that co-founder Helen Marsh": the organisation named last
                # before the role in the sentence (resolved by the caller).
                yield person, relation, OrgBefore(span_start), 0.6
        for org in extra:
            if ref(org) is not None:
                yield person, "work_at", org, 0.6
                break
    # "Aisha Bello is head of data science at Monzo": a role said with a present "is"
    # holds at its "at" organisation (``work_at`` whatever the role: she heads a unit).
    head = person.head
    # "Tom is CEO of Monzo", "Tom is the founder of Monzo": the role's relation to its "of"
    # organisation, as in an apposition ("Tom, CEO of Monzo,").
    if person.dep_ == "nsubj" and head.lemma_ == "be" and head.tag_ == "VBZ" and asserted(head):
        for attr in _children(head, "attr"):
            if attr.lower_ in tab.ROLE_RELATIONS or attr.lemma_.lower() in tab.ROLE_RELATIONS:
                for org in _role_of_at(attr)[0]:
                    if org.pos_ == "PROPN" and ref(org) is not None:
                        yield person, _role_relation(attr), org, 0.6
                        break
                for org in _role_of_at(attr)[1]:
                    if ref(org) is not None:
                        yield person, "work_at", org, 0.6
                        break
    # "Chef Rosa Delgado, formerly of Copper Kettle" / "Priya at Stripe"
    for child in _children(person, "prep"):
        if child.lower_ in {"of", "at"}:
            for org in _children(child, "pobj"):
                yield person, "work_at", org, 0.6


def _parallel_subject(subject: Any, people: set[int]) -> Any:
    """The earlier clause's subject for a subject "it" / "they" in the same sentence.

    "The checkout service never used Redis; it depends on Memcached": a subject pronoun
    continues the subject of the clause before it (the object Redis is no antecedent).
    Only a non-person noun of the same number before the pronoun counts.
    """
    if subject is SPEAKER or isinstance(subject, OrgBefore):
        return subject
    low = subject.lower_
    if subject.pos_ != "PRON" or low not in {"it", "they"} or subject.dep_ != "nsubj":
        return subject
    plural = low == "they"
    for tok in reversed(list(subject.sent)[: subject.i - subject.sent.start]):
        if (
            tok.dep_ in {"nsubj", "nsubjpass"}
            and tok.pos_ in {"NOUN", "PROPN"}
            and tok.i not in people
            and tok.tag_ in ({"NNS", "NNPS"} if plural else {"NN", "NNP"})
        ):
            return tok
    return subject


def edges_for_sentence(
    tokens: list[Any],
    person_heads: list[tuple[Any, int]],
    ref: Callable[[Any], str | None],
    *,
    chat: bool = False,
) -> list[RawEdge]:
    """Raw edges of one sentence (asserted claims only).

    Args:
        tokens: The sentence's tokens (already capped to the per-sentence word limit).
        person_heads: ``(head token, name start index)`` of the person mentions.
        ref: Resolves a token to an entity key (used to pick role-noun organisations).
        chat: The sentence comes from a named speaker: a subjectless clause takes the
            speaker (:data:`SPEAKER`) as subject.

    Returns:
        Edges in sentence order; coordinated arguments expand to one edge each.
    """
    found: list[tuple[Any, str, Any, float]] = []
    ended: list[tuple[Any, str, Any, float]] = []
    for tok in tokens:
        if _verbal(tok) or tok.dep_ in {"relcl", "acl", "xcomp"}:
            if asserted(tok):
                found.extend(_verb_edges(tok, chat))
            elif stopped(tok):
                ended.extend(_verb_edges(tok, chat))
        elif tok.pos_ == "NOUN" and (relation := verb_like_conjunct(tok, tab.VERB_RELATIONS)):
            # "owns the project and reports to Carol": "reports" is a verb.
            verb = tok.head.head
            if asserted(verb):
                for s in _subjects(verb):
                    for o in _children(tok.nbor(1), "pobj"):
                        found.append((s, relation, o, 0.7))
        elif tok.pos_ == "NOUN" and tok.lemma_.lower() in tab.NOMINAL_EVENTS:
            found.extend(_nominal_edges(tok))
        elif tok.pos_ == "NOUN" and tok.lemma_.lower() in tab.WORK_NOUNS:
            found.extend(_work_edges(tok))
        elif tok.pos_ == "NOUN" and tok.lemma_.lower() == "part":
            found.extend(_part_of_edges(tok))
        if tok.lower_ == "based" or tok.dep_ == "appos":
            found.extend(_located_edges(tok))
    for head, start in person_heads:
        found.extend(_role_edges(head, start, ref))
    people = {h.i for h, _ in person_heads}
    out: list[RawEdge] = []
    for (subject, relation, obj, confidence), stop in [
        *((e, False) for e in found),
        *((e, True) for e in ended),
    ]:
        subject = _parallel_subject(subject, people)
        if relation == "part_of" and subject is not SPEAKER and subject.i in people:
            continue  # "Tom is part of the team": membership, not an organisation's part
        if relation.startswith(_COMITATIVE):
            if subject is SPEAKER:
                continue
            # "with his wife Carmen": the name in apposition to the role noun.
            named = [c for c in subject.children if c.dep_ in {"appos", "compound"}]
            subject = next((c for c in [subject, *named] if c.i in people), None)
            if subject is None:
                continue
            relation = relation.removeprefix(_COMITATIVE)
        for s in [subject] if subject is SPEAKER else _conjuncts(subject):
            for o in [obj] if isinstance(obj, OrgBefore) else _conjuncts(obj):
                if o is obj or not verb_like_conjunct(o, tab.VERB_RELATIONS):
                    out.append(RawEdge(s, relation, o, confidence, stop))
    return out
