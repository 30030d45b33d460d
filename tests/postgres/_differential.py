"""Shared pieces of the differential tests (tests/postgres/test_differential_*.py).

A seeded chat scenario (people, jobs, moves, endings, likes, repeated lines), the
normalisation of what two backends return (run-time timestamps by presence, random ids
by presence, floats within ``APPROX``), the first difference of two values, and the
failure message that names the seed and the steps so a disagreement can be replayed.
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from cycgraph_memory.records import Message

APPROX = 1e-5
PASS_NS = uuid.UUID("1b0e4b3c-6a43-4f0e-9a51-7f6a0c1d2e33")
NOW = "<now>"
RANDOM = "<random>"
RANDOM_KEYS = frozenset({"erasure_id"})  # uuid4 per purge, no way to inject one

PEOPLE = ["Maya", "Liam", "Priya", "Tom"]
COMPANIES = ["Acme Corp", "Globex", "Initech", "Umbrella Labs"]
JOBS = ["software engineer", "nurse", "product manager", "data scientist", "teacher"]
CITIES = ["Berlin", "Lisbon", "Oslo", "Toronto"]
LIKES = ["hiking", "green tea", "jazz", "board games", "sushi"]
MONTHS = ["January", "March", "May", "July", "September", "November"]


# --------------------------------------------------------------------------- scenario


class Scenario:
    """Deterministic chat sessions for one seed (ids are uuid5 of the seed and a counter)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.count = 0
        self.day = datetime(2024, 1, 8, 9, 0, tzinfo=UTC)
        self.sent: list[Message] = []
        self.namespace = uuid.uuid5(PASS_NS, f"seed-{seed}")

    def pick(self, seq: list[str]) -> str:
        return self.rng.choice(seq)

    def statement(self, speaker: str) -> str:
        r = self.rng.random()
        company, job, city = self.pick(COMPANIES), self.pick(JOBS), self.pick(CITIES)
        like, other = self.pick(LIKES), self.pick([p for p in PEOPLE if p != speaker])
        options = [
            f"My name is {speaker} and I work at {company} as a {job}.",
            f"I work at {company} as a {job}.",
            f"I no longer work at {company}.",
            f"I moved to {city} in {self.pick(MONTHS)} 2024.",
            f"I live in {city} now.",
            f"{other} works at {company}.",
            f"{other} no longer works at {company}.",
            f"I started at {company} on {self.pick(MONTHS)} 3, 2024.",
            f"I love {like}.",
            f"I really love {like}!",
            f"I don't like {like} anymore.",
            f"My sister {other} moved to {city} last year.",
            f"I prefer {like} over {self.pick(LIKES)}.",
        ]
        if r < 0.15 and self.sent:
            # a repeated statement (same words, a new message)
            users = [m.content for m in self.sent if m.role == "user"]
            if users:
                return self.pick(users)
        return self.pick(options)

    def reply(self, speaker: str) -> str:
        return self.pick([
            "Thanks for sharing!",
            f"Got it, {speaker}. I'll remember that.",
            "Noted.",
            f"Good to know, {speaker}. How is it going?",
        ])

    def session(self) -> list[Message]:
        """One batch of 2-8 messages between a person and the assistant."""
        speaker = self.pick(PEOPLE)
        self.day += timedelta(days=self.rng.randint(1, 20), minutes=self.rng.randint(0, 600))
        at = self.day
        out: list[Message] = []
        for i in range(self.rng.randint(2, 8)):
            user = i % 2 == 0 or self.rng.random() < 0.3
            self.count += 1
            at += timedelta(minutes=self.rng.randint(1, 12))
            out.append(
                Message(
                    id=uuid.uuid5(self.namespace, f"message-{self.count}"),
                    role="user" if user else "assistant",
                    content=self.statement(speaker) if user else self.reply(speaker),
                    timestamp=at,
                    metadata={"name": speaker} if user else {},
                )
            )
        self.sent.extend(out)
        return out


# --------------------------------------------------------------------------- normalisation


class Window:
    """The wall-clock span of the test: timestamps inside it are run-time stamps."""

    def __init__(self) -> None:
        self.start = datetime.now(UTC) - timedelta(minutes=1)

    def is_now(self, value: datetime) -> bool:
        return self.start <= value <= datetime.now(UTC) + timedelta(minutes=1)


def normal(value: Any, window: Window) -> Any:
    """JSON-like data with run-time timestamps replaced by ``<now>``."""
    if isinstance(value, dict):
        return {
            k: RANDOM if k in RANDOM_KEYS and v is not None else normal(v, window)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [normal(v, window) for v in value]
    if isinstance(value, datetime):
        return NOW if window.is_now(value) else value.isoformat()
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] == "T":
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return value
        if parsed.tzinfo is not None:
            return NOW if window.is_now(parsed) else parsed.astimezone(UTC).isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def dump(value: Any, window: Window) -> Any:
    """Models and containers of models as normalised JSON-like data."""
    if hasattr(value, "model_dump"):
        return normal(value.model_dump(mode="json"), window)
    if isinstance(value, dict):
        return {
            str(k): RANDOM if k in RANDOM_KEYS and v is not None else dump(v, window)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [dump(v, window) for v in value]
    return normal(value, window)


def differ(a: Any, b: Any, path: str = "") -> str | None:
    """Where ``a`` and ``b`` differ (floats within ``APPROX``), or ``None``."""
    if isinstance(a, float | int) and isinstance(b, float | int) and not (
        isinstance(a, bool) or isinstance(b, bool)
    ):
        return None if abs(a - b) <= APPROX else f"{path}: {a!r} != {b!r}"
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return f"{path}: keys {sorted(a.keys() ^ b.keys())} on one side only"
        for k in a:
            found = differ(a[k], b[k], f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}: {a!r} != {b!r}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = differ(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def disagreement(seed: int, log: list[str], exc: AssertionError) -> AssertionError:
    """The error of a failed comparison, with the seed and the numbered steps so far."""
    steps = "\n".join(f"  {i:3d}. {line}" for i, line in enumerate(log))
    return AssertionError(
        f"backends disagree (seed={seed}; re-run with CYCGRAPH_DIFF_SEED={seed}):\n"
        f"{exc}\nsteps:\n{steps}"
    )
