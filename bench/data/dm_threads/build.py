"""Assemble the hand-written direct-message threads (``*.txt``) into ``dm_threads.json``.

A third evaluation set, held out: written and frozen before the fusion and theme
calibration changes it is used to check, and never used to choose a parameter. Another
style than ``../conversations`` (one person and an assistant) and ``../group_chats``
(groups of 3-4): two people texting each other (siblings, a couple, coworkers, old
friends, a mother and her son) over weeks or months; short turns, typos, pronouns,
dates relative to the message time ("next thurs", "the weekend after"), plans that
change ("moving it to sunday"), and questions whose answer is the latest plan or spans
things said sessions apart. Every turn in the sources is hand-written; this script only
parses them and adds, with a fixed seed, a few small-talk turns from a hand-written pool
to some sessions, numbers the turns and gives each a timestamp 20-80 s after the
previous one.

Source format (one file per thread)::

    @people Dani Leo          # the two people (message metadata ``name``)
    == 2024-05-06 20:14       # a new session and its start time (UTC)
    Dani: text                # a person speaks
    Leo[tag]: text            # a turn that is evidence for questions naming ``tag``
    ? question :: tag1 tag2   # a question; its evidence = every turn carrying a tag

Run ``python bench/data/dm_threads/build.py`` to regenerate the JSON (deterministic).
"""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).parent

SMALL_TALK = [
    "lol",
    "haha",
    "xx",
    "hang on",
    "ugh",
    "omg",
    "same",
    "wait what",
    "😂😂",
    "ok",
    "true",
    "brb",
    "ya",
    "hahaha stop",
    "nice",
    "ikr",
    "no way",
    "👍",
    "sorry was in the shower",
    "k",
    "love that",
]

_TURN = re.compile(r"^(\w+)(?:\[([\w\- ]+)\])?:\s*(.+)$")


def parse(path: Path, rng: random.Random) -> dict[str, object]:
    """Parse one source file into a conversation dict."""
    conv_id = path.stem
    people: list[str] = []
    sessions: list[dict[str, object]] = []
    raw_sessions: list[tuple[datetime, list[tuple[str, str, list[str]]]]] = []
    questions: list[dict[str, object]] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@people "):
            people = line[8:].split()
        elif line.startswith("== "):
            start = datetime.strptime(line[3:].strip(), "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
            raw_sessions.append((start, []))
        elif line.startswith("?"):
            text, _, tag_text = line[1:].partition("::")
            questions.append({"question": text.strip(), "tags": tag_text.split()})
        else:
            match = _TURN.match(line)
            if match is None or match.group(1) not in people:
                raise ValueError(f"{path.name}: cannot parse {line!r}")
            name, tag_text, text = match.groups()
            raw_sessions[-1][1].append((name, text, tag_text.split() if tag_text else []))

    tags_of: dict[str, list[str]] = {}
    for number, (start, turns) in enumerate(raw_sessions, start=1):
        turns = list(turns)
        for _ in range(rng.choice((0, 1, 1, 2))):
            filler = (rng.choice(people), rng.choice(SMALL_TALK), [])
            turns.insert(rng.randint(1, len(turns)), filler)
        clock = start
        out_turns = []
        for index, (name, text, tags) in enumerate(turns, start=1):
            turn_id = f"{conv_id}:s{number}:t{index}"
            clock += timedelta(seconds=rng.randint(20, 80))
            out_turns.append(
                {
                    "id": turn_id,
                    "role": "user",
                    "name": name,
                    "text": text,
                    "timestamp": clock.isoformat(),
                }
            )
            for tag in tags:
                tags_of.setdefault(tag, []).append(turn_id)
        sessions.append({"id": f"{conv_id}:s{number}", "date": start.isoformat(),
                         "turns": out_turns})

    out_questions = []
    for number, q in enumerate(questions, start=1):
        tags = q["tags"]
        assert isinstance(tags, list)
        evidence: list[str] = []
        for tag in tags:
            if tag not in tags_of:
                raise ValueError(f"{path.name}: question tag {tag!r} marks no turn")
            evidence.extend(t for t in tags_of[tag] if t not in evidence)
        n_sessions = len({e.rsplit(":", 1)[0] for e in evidence})
        out_questions.append(
            {
                "id": f"{conv_id}:q{number}",
                "question": q["question"],
                "evidence": evidence,
                "sessions": n_sessions,
                "multi_session": n_sessions >= 2,
            }
        )
    return {"id": conv_id, "people": people, "sessions": sessions, "questions": out_questions}


def main() -> None:
    """Build ``dm_threads.json`` from every ``*.txt`` source in this folder."""
    rng = random.Random(20240506)
    conversations = [parse(p, rng) for p in sorted(HERE.glob("*.txt"))]
    doc = {
        "description": (
            "Held-out set: hand-written direct-message threads between two people over "
            "weeks or months (relative dates, plans that change, things said sessions "
            "apart); evidence turns annotated. Built by build.py from the *.txt sources; "
            "frozen before the fusion and theme-calibration changes it checks."
        ),
        "conversations": conversations,
    }
    (HERE / "dm_threads.json").write_text(
        json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    turns = sum(len(s["turns"]) for c in conversations for s in c["sessions"])  # type: ignore[union-attr,misc,arg-type]
    qs = [q for c in conversations for q in c["questions"]]  # type: ignore[attr-defined]
    print(
        f"{len(conversations)} conversations, "
        f"{sum(len(c['sessions']) for c in conversations)} sessions, {turns} turns, "  # type: ignore[arg-type]
        f"{len(qs)} questions ({sum(q['multi_session'] for q in qs)} multi-session)"
    )


if __name__ == "__main__":
    main()
