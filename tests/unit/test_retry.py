"""call_with_retry: bounded full-jitter backoff, typed errors, nothing else retried."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from cycgraph_memory.errors import (
    ConcurrencyError,
    ConnectionLostError,
    DuplicateRecordError,
    StatementTimeoutError,
)
from cycgraph_memory.retry import DEFAULT_RETRY, NO_RETRY, RetryPolicy, call_with_retry


class Flaky:
    def __init__(self, errors: list[Exception], result: str = "ok") -> None:
        self.errors = list(errors)
        self.calls = 0
        self.result = result

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.result


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


async def test_retries_concurrency_and_connection_errors_then_succeeds() -> None:
    op = Flaky([ConcurrencyError("deadlock", sqlstate="40P01"),
                ConnectionLostError("gone", sqlstate="08006")])
    sleeps = Sleeps()
    policy = RetryPolicy(max_attempts=3, base_delay_s=0.1, max_delay_s=0.15)
    assert await call_with_retry(op, policy, sleep=sleeps, rng=random.Random(7)) == "ok"
    assert op.calls == 3
    rng = random.Random(7)
    assert sleeps.delays == [rng.uniform(0, 0.1), rng.uniform(0, 0.15)]  # capped at max


async def test_gives_up_after_max_attempts_with_the_typed_error() -> None:
    op = Flaky([ConcurrencyError(f"serialization {i}", sqlstate="40001") for i in range(9)])
    sleeps = Sleeps()
    with pytest.raises(ConcurrencyError) as info:
        await call_with_retry(op, RetryPolicy(max_attempts=4, seed=1), sleep=sleeps)
    assert op.calls == 4 and len(sleeps.delays) == 3
    assert info.value.attempts == 4 and str(info.value) == "serialization 3"
    assert all(0 <= d <= cap for d, cap in zip(sleeps.delays, (0.02, 0.04, 0.08), strict=True))


@pytest.mark.parametrize(
    "error",
    [DuplicateRecordError("dup", sqlstate="23505"), StatementTimeoutError("slow"),
     ValueError("bad")],
)
async def test_other_errors_are_not_retried(error: Exception) -> None:
    op = Flaky([error])
    sleeps = Sleeps()
    with pytest.raises(type(error)):
        await call_with_retry(op, DEFAULT_RETRY, sleep=sleeps)
    assert op.calls == 1 and sleeps.delays == []


async def test_no_retry_surfaces_the_first_error() -> None:
    op = Flaky([ConcurrencyError("deadlock", sqlstate="40P01")])
    with pytest.raises(ConcurrencyError) as info:
        await call_with_retry(op, NO_RETRY, sleep=Sleeps())
    assert op.calls == 1 and info.value.attempts == 1


def test_policy_is_validated_and_frozen() -> None:
    assert [DEFAULT_RETRY.backoff_cap(n) for n in (1, 2, 3, 7)] == [0.02, 0.04, 0.08, 1.0]
    for bad in ({"max_attempts": 0}, {"base_delay_s": -1}, {"max_delay_s": 1e9},
                {"unknown": 1}, {"max_attempts": "many"}):
        with pytest.raises(ValidationError):
            RetryPolicy(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        DEFAULT_RETRY.max_attempts = 2  # type: ignore[misc]
