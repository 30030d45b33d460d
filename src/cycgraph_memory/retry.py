"""Bounded, jittered retries for idempotent storage operations.

Serialization failures, deadlocks (:class:`~cycgraph_memory.errors.ConcurrencyError`) and
dropped connections (:class:`~cycgraph_memory.errors.ConnectionLostError`) leave nothing
committed, so an operation that is safe to run twice (an upsert, ``touch_facts``, a whole
ingest) can simply run again. :func:`call_with_retry` does that with "full jitter"
exponential backoff (each wait is uniform in ``[0, min(max_delay_s, base_delay_s * 2**n)]``)
and gives up after ``max_attempts``, re-raising the last typed error with its
``attempts`` attribute set. Anything else propagates at once.

This module is pure (no database imports); backends and the ingest pipeline take a
:class:`RetryPolicy` as an injected option.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from cycgraph_memory.errors import ConcurrencyError, ConnectionLostError, StorageError
from cycgraph_memory.records import Count, Number

__all__ = ["DEFAULT_RETRY", "NO_RETRY", "RETRYABLE_ERRORS", "RetryPolicy", "call_with_retry"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

RETRYABLE_ERRORS: tuple[type[StorageError], ...] = (ConcurrencyError, ConnectionLostError)
"""Errors after which nothing was committed and an idempotent operation may run again."""


class RetryPolicy(BaseModel):
    """How often and how patiently an idempotent operation is retried.

    Attributes:
        max_attempts: Total attempts, the first included (1 disables retrying).
        base_delay_s: Backoff cap of the first retry; doubles per attempt.
        max_delay_s: Upper bound of any single wait.
        seed: Seed of the jitter's random generator (``None``: fresh randomness).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: Count = Field(default=5, ge=1, le=100)
    base_delay_s: Number = Field(default=0.02, ge=0.0, le=60.0)
    max_delay_s: Number = Field(default=1.0, ge=0.0, le=600.0)
    seed: Count | None = None

    def backoff_cap(self, retry_number: int) -> float:
        """Upper bound of the wait before retry ``retry_number`` (1-based)."""
        return float(min(self.max_delay_s, self.base_delay_s * (2 ** (retry_number - 1))))


DEFAULT_RETRY = RetryPolicy()
"""Five attempts, 20 ms doubling, at most 1 s per wait."""

NO_RETRY = RetryPolicy(max_attempts=1)
"""Run once; retryable errors propagate immediately."""


async def call_with_retry(
    operation: Callable[[], Awaitable[T]],
    policy: RetryPolicy | None = None,
    *,
    name: str = "operation",
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    rng: random.Random | None = None,
) -> T:
    """Run ``operation()``; on a retryable error wait a jittered backoff and run it again.

    Only use it for operations that are safe to repeat after a failed attempt (every
    attempt must be its own transaction, or a savepoint).

    Args:
        operation: Zero-argument coroutine factory; called once per attempt.
        policy: Retry policy (default :data:`DEFAULT_RETRY`).
        name: Label used in log messages.
        sleep: Awaitable sleep (injected by tests).
        rng: Random generator for the jitter (default: seeded from ``policy.seed``).

    Returns:
        The result of the first successful attempt.

    Raises:
        ConcurrencyError: Still failing after ``policy.max_attempts`` attempts
            (``attempts`` attribute set).
        ConnectionLostError: Likewise for connection failures.
    """
    policy = DEFAULT_RETRY if policy is None else policy
    generator = rng if rng is not None else random.Random(policy.seed)
    attempt = 1
    while True:
        try:
            return await operation()
        except RETRYABLE_ERRORS as exc:
            exc.attempts = attempt
            if attempt >= policy.max_attempts:
                raise
            delay = generator.uniform(0.0, policy.backoff_cap(attempt))
            logger.warning(
                "%s failed (%s, sqlstate %s), retry %d/%d in %.3fs",
                name,
                type(exc).__name__,
                exc.sqlstate,
                attempt,
                policy.max_attempts - 1,
                delay,
            )
            await sleep(delay)
            attempt += 1
