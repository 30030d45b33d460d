"""Private: spaCy's attribute ruler as token tables (same annotations, a fraction of the time).

The English pipelines map the tagger's fine tags to coarse parts of speech, morphology and
some lemmas with an ``AttributeRuler``: ~180 rules run through spaCy's general ``Matcher``
on every doc, about a quarter of the parse time of the small pipeline. Nearly all rules
test one token's ``TAG`` / ``LOWER`` / ``DEP`` / ``IS_SPACE`` against a value, a set or a
regular expression, so :class:`AttributeTable` finds the same matches with dictionary
lookups and applies them exactly as the ruler does: every match is found on the doc as it
was before any change, then applied in rule order (a later rule wins), through spaCy's
own ``set_token_attrs``.

The lemmatizer that follows the ruler runs as :class:`_RuleLemmas` when it is spaCy's rule
lemmatizer: its lemma is a function of a token's text, part of speech and morphology, so
each distinct triple is lemmatized once (by the lemmatizer itself) and remembered, and a
doc's lemmas are written in one array call. spaCy caches only some of these answers (not
the base forms, most nouns) and reads each token through Python objects.

:func:`attribute_table` builds the table only when every rule uses those forms (else the
pipeline keeps its ruler); :func:`pipe_docs` runs a pipeline with the table in place of
the ruler. The tests compare every token's annotations with the ruler's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["AttributeTable", "attribute_table", "pipe_docs"]

_ATTRS = ("TAG", "LOWER", "DEP", "IS_SPACE")  # the columns of a token row
_AFTER = frozenset({"lemmatizer"})  # components that may follow the ruler (run per doc)

TokenRow = list[int]  # hashes of TAG, LOWER, DEP and 0/1 for IS_SPACE (Doc.to_array)
Check = Callable[[TokenRow], bool]


class _Unsupported(ValueError):
    """A rule uses a form the table does not reproduce."""


def _hashed(value: object, string_id: Callable[[str], int]) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        return string_id(value)
    raise _Unsupported(f"value {value!r}")


def _condition(
    slot: int, value: object, string_id: Callable[[str], int], text: Callable[[int], str]
) -> tuple[Check, str | None, frozenset[int]]:
    """One attribute test on a token row; how it can be indexed (op, hashed values)."""
    if isinstance(value, bool | str):
        wanted = _hashed(value, string_id)
        return (lambda row: row[slot] == wanted), "eq", frozenset({wanted})
    if not isinstance(value, dict) or len(value) != 1:
        raise _Unsupported(f"value {value!r}")
    ((op, arg),) = value.items()
    if op in {"IN", "NOT_IN"} and isinstance(arg, list):
        members = frozenset(_hashed(a, string_id) for a in arg)
        if op == "IN":
            return (lambda row: row[slot] in members), "in", members
        return (lambda row: row[slot] not in members), None, frozenset()
    if op == "REGEX" and isinstance(arg, str) and _ATTRS[slot] != "IS_SPACE":
        search = re.compile(arg).search
        return (lambda row: search(text(row[slot])) is not None), None, frozenset()
    raise _Unsupported(f"operator {op!r}")


class _Spec:
    """One token of a pattern: its tests, and the (slot, values) that index it."""

    def __init__(
        self, spec: object, string_id: Callable[[str], int], text: Callable[[int], str]
    ) -> None:
        if not isinstance(spec, dict) or not spec:
            raise _Unsupported(f"token pattern {spec!r}")
        self.checks: list[Check] = []
        self.key: tuple[int, frozenset[int]] | None = None
        for name, value in spec.items():
            if name not in _ATTRS:
                raise _Unsupported(f"attribute {name!r}")
            slot = _ATTRS.index(name)
            check, op, values = _condition(slot, value, string_id, text)
            self.checks.append(check)
            if op is not None and (self.key is None or slot == 1):
                self.key = (slot, values)  # prefer LOWER: the most selective column

    def matches(self, row: TokenRow) -> bool:
        return all(check(row) for check in self.checks)


class _RuleLemmas:
    """A rule lemmatizer's answers by (text, part of speech, morphology), written per doc."""

    _MAX = 200_000  # remembered triples (cleared beyond: a pure cache)

    def __init__(self, lemmatizer: Any) -> None:
        from spacy.attrs import LEMMA, MORPH, ORTH, POS

        self._lemmatizer = lemmatizer
        self._strings = lemmatizer.vocab.strings
        self._read = [ORTH, POS, MORPH, LEMMA]
        self._write = [LEMMA]
        self._memo: dict[tuple[int, int, int], int] = {}

    @staticmethod
    def fits(proc: Any) -> bool:
        """True for spaCy's rule lemmatizer that keeps lemmas already set."""
        try:
            from spacy.pipeline import Lemmatizer
        except ImportError:  # pragma: no cover - the extra is installed with spaCy
            return False
        return (
            isinstance(proc, Lemmatizer)
            and getattr(proc, "mode", None) == "rule"
            and getattr(proc, "overwrite", True) is False
        )

    def __call__(self, doc: Any) -> Any:
        """Set the lemma of every token that has none, as the lemmatizer would."""
        if not len(doc):
            return self._lemmatizer(doc)
        array = doc.to_array(self._read)
        memo = self._memo
        lemmas = array[:, 3].copy()
        for i, (orth, pos, morph, lemma) in enumerate(array.tolist()):
            if lemma:
                continue  # set by the attribute ruler: the lemmatizer keeps it
            key = (orth, pos, morph)
            value = memo.get(key)
            if value is None:
                if len(memo) >= self._MAX:
                    memo.clear()
                value = self._strings.add(self._lemmatizer.lemmatize(doc[i])[0])
                memo[key] = value
            lemmas[i] = value
        doc.from_array(self._write, lemmas.reshape(-1, 1))
        return doc


class AttributeTable:
    """The rules of one ``AttributeRuler`` as token tables (see the module docstring).

    Args:
        ruler: The pipeline's ``attribute_ruler`` component.

    Raises:
        ValueError: A rule uses a form the table does not handle.
    """

    def __init__(self, ruler: Any) -> None:
        from spacy.attrs import DEP, IS_SPACE, LOWER, TAG
        from spacy.strings import get_string_id
        from spacy.tokens._retokenize import set_token_attrs

        strings = ruler.vocab.strings
        self._columns = [TAG, LOWER, DEP, IS_SPACE]
        self._set = set_token_attrs
        self._attrs: list[Any] = list(ruler.attrs)
        self._indices: list[int] = list(ruler.indices)
        # Patterns by the first token's indexed column value; the rest are tried everywhere.
        self._indexed: list[dict[int, list[tuple[int, list[_Spec]]]]] = [{}, {}, {}, {}]
        self._after: dict[str, Callable[[Any], Any]] = {}
        self._anywhere: list[tuple[int, list[_Spec]]] = []

        def text(value: int) -> str:
            return str(strings[value]) if value in strings else ""

        for rule, entry in enumerate(ruler.patterns):
            for pattern in entry["patterns"]:
                if not isinstance(pattern, list) or not pattern:
                    raise _Unsupported(f"attribute rule {rule}: pattern {pattern!r}")
                specs = [_Spec(spec, get_string_id, text) for spec in pattern]
                key = specs[0].key
                if key is None:
                    self._anywhere.append((rule, specs))
                    continue
                slot, values = key
                for value in values:
                    self._indexed[slot].setdefault(value, []).append((rule, specs))

    def after(self, name: str, proc: Any) -> Callable[[Any], Any]:
        """The component ``name`` that follows the ruler, or its faster equivalent."""
        fast = self._after.get(name)
        if fast is None:
            fast = self._after[name] = _RuleLemmas(proc) if _RuleLemmas.fits(proc) else proc
        return fast

    def __call__(self, doc: Any) -> Any:
        """Annotate ``doc`` in place as the ruler would, and return it."""
        rows: list[TokenRow] = doc.to_array(self._columns).tolist()
        n = len(rows)
        matches: list[tuple[int, int, int]] = []  # (rule, start, end), found before any change
        tag_ix, lower_ix, dep_ix, space_ix = self._indexed
        anywhere = self._anywhere
        for i, row in enumerate(rows):
            for candidates in (
                tag_ix.get(row[0]),
                lower_ix.get(row[1]),
                dep_ix.get(row[2]),
                space_ix.get(row[3]),
                anywhere,
            ):
                if not candidates:
                    continue
                for rule, specs in candidates:
                    width = len(specs)
                    if i + width > n:
                        continue
                    if all(spec.matches(rows[i + k]) for k, spec in enumerate(specs)):
                        matches.append((rule, i, i + width))
        matches.sort()
        for rule, start, end in matches:
            index = self._indices[rule]
            position = (start if index >= 0 else end) + index
            if start <= position < end:
                self._set(doc[position], self._attrs[rule])
        return doc


def attribute_table(nlp: Any) -> AttributeTable | None:
    """A table for ``nlp``'s attribute ruler, or ``None`` when the pipeline does not fit.

    It fits when the ruler is followed only by a lemmatizer and every rule is one the
    table reproduces; otherwise the pipeline runs as it is.
    """
    names = list(getattr(nlp, "pipe_names", ()))
    if "attribute_ruler" not in names:
        return None
    if not set(names[names.index("attribute_ruler") + 1 :]) <= _AFTER:
        return None
    try:
        return AttributeTable(nlp.get_pipe("attribute_ruler"))
    except (ValueError, AttributeError, KeyError, TypeError, ImportError):
        return None


def pipe_docs(
    nlp: Any, table: AttributeTable | None, texts: Iterable[Any], batch_size: int
) -> Iterator[Any]:
    """``nlp.pipe(texts)``, with ``table`` standing in for the attribute ruler when given.

    ``texts`` are strings, or spaCy ``Doc`` objects already tokenized (``nlp.pipe`` takes
    both).
    """
    if table is None:
        yield from nlp.pipe(texts, batch_size=batch_size)
        return
    names = list(nlp.pipe_names)
    after = names[names.index("attribute_ruler") + 1 :]
    procs = [table.after(name, nlp.get_pipe(name)) for name in after]
    ruler = nlp.get_pipe("attribute_ruler")
    for doc in nlp.pipe(texts, batch_size=batch_size, disable=["attribute_ruler", *after]):
        # An unparsed or untagged doc (empty text) goes through the ruler itself.
        annotated = doc.has_annotation("TAG") and doc.has_annotation("DEP")
        doc = table(doc) if annotated else ruler(doc)
        for proc in procs:
            doc = proc(doc)
        yield doc
