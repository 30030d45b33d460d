"""Assemble the hand-written conversation sources (``*.txt``) into ``conversations.json``.

Every turn in the sources is hand-written. This script only parses them and adds, with a
fixed seed, a small-talk opener and closer drawn from hand-written pools to some sessions,
numbers the turns and gives each turn a timestamp (20-80 s after the previous one, so the
5-minute gap never splits a session).

Source format (one file per conversation)::

    @user Maya            # the person's name (message metadata ``name``)
    @assistant Sol        # the assistant's name
    == 2024-01-08 19:05   # a new session and its start time (UTC)
    U: text               # the person speaks
    A: text               # the assistant answers
    U[tag]: text          # a turn that is evidence for questions naming ``tag``
    ? question :: tag1 tag2   # a question; its evidence = every turn carrying a tag

Run ``python bench/data/conversations/build.py`` to regenerate the JSON (deterministic).
"""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).parent

OPENERS_USER = [
    "hey",
    "hi again",
    "heyy",
    "morning!",
    "ok im back",
    "hello hello",
    "hi, quick one tonight",
    "ugh what a day. hi",
    "yo",
    "good evening :)",
    "hey there, you around?",
    "hiya",
]
OPENERS_ASSISTANT = [
    "Hi {name}! Good to hear from you. What's on your mind?",
    "Hey {name}, welcome back. How's it going?",
    "Hello {name}! How are you doing today?",
    "Hi {name}! I'm here. What's up?",
    "Hey! Nice to see you again, {name}.",
    "Good to see you, {name}. How has your week been?",
]
CLOSERS_USER = [
    "ok thats all for now, thanks!!",
    "thanks, gotta run",
    "cool cool. talk later",
    "thank you, that helps a lot",
    "ok night!",
    "alright ttyl",
    "thx :)",
    "perfect, thanks",
    "ok bye for now",
    "great, appreciate it",
]
CLOSERS_ASSISTANT = [
    "Anytime, {name}! Take care.",
    "You're welcome! Talk soon.",
    "Glad I could help. Have a good night!",
    "Sounds good. See you next time!",
    "Take care, {name}!",
    "No problem at all. Bye for now!",
]

_TURN = re.compile(r"^([UA])(?:\[([\w\- ]+)\])?:\s*(.+)$")


def parse(path: Path, rng: random.Random) -> dict[str, object]:
    """Parse one source file into a conversation dict."""
    conv_id = path.stem
    user = assistant = ""
    sessions: list[dict[str, object]] = []
    questions: list[dict[str, object]] = []
    tags_of: dict[str, list[str]] = {}
    clock = datetime(2000, 1, 1, tzinfo=UTC)
    turn_no = 0

    def add(role: str, text: str, tags: list[str]) -> None:
        nonlocal clock, turn_no
        session = sessions[-1]
        turns = session["turns"]
        assert isinstance(turns, list)
        turn_no += 1
        turn_id = f"{conv_id}:s{len(sessions)}:t{len(turns) + 1}"
        clock += timedelta(seconds=rng.randint(20, 80))
        turns.append(
            {
                "id": turn_id,
                "role": "user" if role == "U" else "assistant",
                "name": user if role == "U" else assistant,
                "text": text,
                "timestamp": clock.isoformat(),
            }
        )
        for tag in tags:
            tags_of.setdefault(tag, []).append(turn_id)

    def close_session() -> None:
        if sessions and rng.random() < 0.6:
            add("U", rng.choice(CLOSERS_USER), [])
            add("A", rng.choice(CLOSERS_ASSISTANT).format(name=user), [])

    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@user "):
            user = line[6:].strip()
        elif line.startswith("@assistant "):
            assistant = line[11:].strip()
        elif line.startswith("== "):
            close_session()
            start = datetime.strptime(line[3:].strip(), "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
            clock = start
            sessions.append({"id": f"{conv_id}:s{len(sessions) + 1}", "date": start.isoformat(),
                             "turns": []})
            if rng.random() < 0.7:
                add("U", rng.choice(OPENERS_USER), [])
                add("A", rng.choice(OPENERS_ASSISTANT).format(name=user), [])
        elif line.startswith("?"):
            text, _, tag_text = line[1:].partition("::")
            questions.append({"question": text.strip(), "tags": tag_text.split()})
        else:
            match = _TURN.match(line)
            if match is None:
                raise ValueError(f"{path.name}: cannot parse {line!r}")
            role, tag_text, text = match.groups()
            add(role, text, tag_text.split() if tag_text else [])
    close_session()

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
    return {
        "id": conv_id,
        "user": user,
        "assistant": assistant,
        "sessions": sessions,
        "questions": out_questions,
    }


def main() -> None:
    """Build ``conversations.json`` from every ``*.txt`` source in this folder."""
    rng = random.Random(20240108)
    conversations = [parse(p, rng) for p in sorted(HERE.glob("*.txt"))]
    doc = {
        "description": (
            "Hand-written long-term conversations between a person and an assistant over "
            "weeks, with questions whose evidence turns are annotated. Built by build.py "
            "from the *.txt sources; frozen before any tuning."
        ),
        "conversations": conversations,
    }
    (HERE / "conversations.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    turns = sum(len(s["turns"]) for c in conversations for s in c["sessions"])  # type: ignore[union-attr,misc,arg-type]
    qs = [q for c in conversations for q in c["questions"]]  # type: ignore[attr-defined]
    print(
        f"{len(conversations)} conversations, "
        f"{sum(len(c['sessions']) for c in conversations)} sessions, {turns} turns, "  # type: ignore[arg-type]
        f"{len(qs)} questions ({sum(q['multi_session'] for q in qs)} multi-session)"
    )


if __name__ == "__main__":
    main()
