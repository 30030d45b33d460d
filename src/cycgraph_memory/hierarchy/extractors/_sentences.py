"""Private sentence splitter for the rule-based extractor.

A boundary is sentence punctuation (``.``, ``!``, ``?``, ``…``) followed by whitespace,
plus every line break. Because whitespace must follow the punctuation, decimals
(``3.14``), versions (``v2.0.1``), URLs and e-mail addresses never split. A period after a
known abbreviation (``Dr.``, ``e.g.``, ``U.S.``, ``Inc.``) or a single-letter initial
(``J. Smith``) does not split either, except that company suffixes and ``etc.`` end a
sentence when the next word is a typical sentence opener ("The", "We", "She", ...) or,
for company suffixes, any capitalised word ("Brightwave Inc. Marta Lind confirmed").
Bullet and numbering markers at the start of a line are removed.
"""

from __future__ import annotations

import re


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


__all__ = ["cap_sentence_words", "split_sentences"]

# Never end a sentence: titles, Latin abbreviations, common short forms.
_NEVER_SPLIT = _wordset(
    """
    mr mrs ms mx dr prof sr jr st mt ft vs v cf e.g eg i.e ie al approx dept est
    ph.d phd m.d b.a m.a b.sc m.sc u.s u.k u.n e.u a.m p.m gen col lt
    sgt capt rev hon messrs mme mlle jan feb mar apr jun jul aug sep sept oct nov
    dec
    """
)
# Abbreviations only before a number: "No. 5", "vol. 2" (but "I said no. We left.").
_NUMBER_ABBREVIATIONS = frozenset(["no", "nos", "vol", "pp", "fig", "p"])
# End a sentence only when a typical sentence opener follows.
_MAYBE_SPLIT = frozenset(["inc", "corp", "ltd", "co", "llc", "plc", "etc"])
_OPENERS = _wordset(
    """
    the a an i we you he she they it this that these those there our my your his her
    their its but and so then however also yes no ok okay
    """
)

_BULLET = re.compile(r"^\s*(?:[-*•·‣▪◦>]+|\(?\d{1,3}[.)]|\(?[a-z][.)](?=\s))\s+")
_BOUNDARY = re.compile(r"[.!?…]+[\"'\u201d\u2019)\]]*(?=\s+|$)")
_PREV_TOKEN = re.compile(r"(\S+)$")
_NEXT_TOKEN = re.compile(r"\s*[\"'\u201c\u2018(\[]*([^\s\"'\u201c\u2018(\[]+)")
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\S+")
_ENDS_SENTENCE = re.compile(r"[.!?…][\"'\u201d\u2019)\]]*$")


def _is_boundary(line: str, match: re.Match[str]) -> bool:
    punct = match.group(0)
    if not punct.startswith("."):
        return True  # ! ? … always end a sentence
    if len(punct.rstrip("\"'\u201d\u2019)]")) > 1:
        return True  # ellipsis "..."
    prev = _PREV_TOKEN.search(line, 0, match.start())
    if prev is None:
        return True
    token = prev.group(1).lstrip("\"'\u201c\u2018([").lower()
    if not token:
        return True
    if token in _NEVER_SPLIT:
        return False
    if token in _NUMBER_ABBREVIATIONS:
        nxt = _NEXT_TOKEN.match(line, match.end())
        return nxt is None or not nxt.group(1)[:1].isdigit()
    if len(token) == 1 and token.isalpha():
        return False  # an initial: "J. Smith"
    if token in _MAYBE_SPLIT:
        nxt = _NEXT_TOKEN.match(line, match.end())
        if nxt is None:
            return False
        word = nxt.group(1)
        # "Brightwave Inc. Marta Lind confirmed ...": a capitalised word after a company
        # suffix starts a new sentence (mid-sentence the suffix is followed by lowercase).
        return word.lower().strip(",;:") in _OPENERS or (
            token != "etc" and word[:1].isupper()
        )
    return True


def _split_line(line: str) -> list[str]:
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(line):
        if _is_boundary(line, match):
            sentences.append(line[start : match.end()])
            start = match.end()
    sentences.append(line[start:])
    return sentences


def split_sentences(text: str) -> list[str]:
    """Split text into cleaned sentences (whitespace collapsed, bullets removed).

    Args:
        text: Free text, possibly multi-line.

    Returns:
        Non-empty sentences in order.
    """
    out: list[str] = []
    for raw_line in text.splitlines():
        line = _BULLET.sub("", raw_line, count=1)
        for sentence in _split_line(line):
            cleaned = _SPACE.sub(" ", sentence).strip()
            if cleaned and any(ch.isalnum() for ch in cleaned):
                out.append(cleaned)
    return out


def cap_sentence_words(text: str, max_words: int) -> str:
    """Keep at most ``max_words`` words of every sentence of ``text`` (linear time).

    A sentence here ends at a word ending in ``.``, ``!``, ``?`` or ``…`` or at a line
    break (a looser rule than :func:`split_sentences`, so a real sentence is never cut
    because an abbreviation hid its start). Words past the cap are dropped up to the
    sentence's end and a line break stands for them, so the next sentence starts apart.
    Text whose sentences are all within the cap comes back unchanged.
    """
    if text.count(" ") + text.count("\n") < max_words and len(text.split()) <= max_words:
        return text
    out: list[str] = []
    count = 0
    dropping = False
    last_end = 0
    for match in _WORD.finditer(text):
        gap = text[last_end : match.start()]
        last_end = match.end()
        if "\n" in gap:
            count = 0
        count += 1
        word = match.group()
        if count <= max_words:
            out.append("\n" if dropping else gap)
            out.append(word)
            dropping = False
        else:
            dropping = True
        if _ENDS_SENTENCE.search(word):
            count = 0
    if not dropping:
        out.append(text[last_end:])
    return "".join(out)
