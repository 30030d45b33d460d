"""``retrieve_gated_lessons``: verified lessons first, plus exploration slots for candidates.

The retrieval half of eval-gated retention. A candidate that is never retrieved never
accrues trials, so the gate could never rule on it; a few candidate slots per prompt keep
evidence flowing while verified lessons fill the rest of the budget.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from cycgraph_memory._validate import changed_from_defaults, check_same_tenant, option_bundle
from cycgraph_memory.contracts import MemoryStore, OutcomeLedger, SupportsFactStatsBatch
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.records import QUARANTINE_TAG, FactFilter, FactStats, SemanticFact

__all__ = ["DEFAULT_CANDIDATE_TAG", "GatedLessonOptions", "retrieve_gated_lessons"]

DEFAULT_CANDIDATE_TAG = "candidate"
"""Tag marking a lesson still on trial."""


class GatedLessonOptions(BaseModel):
    """The options of :func:`retrieve_gated_lessons` as one object (the spec's shape).

    ``retrieve_gated_lessons(store, GatedLessonOptions(tags=["lesson"]))``, or a plain
    dict with the same keys, is the same call as
    ``retrieve_gated_lessons(store, tags=["lesson"])``. Ranges are checked by the
    function (``InvalidInputError``), as for the keyword form.

    Attributes:
        tags: Scope tags (any-of), e.g. ``["lesson", "graph:research-v1"]``; required.
        candidate_tag: Tag marking on-trial lessons (default ``"candidate"``).
        max_facts: Total lessons to return (default 10).
        candidate_slots: Places reserved for candidates (default 2).
        ledger: An ``OutcomeLedger`` for in-progress-first candidate selection.
        rest_after_trials: Bench candidates once they have this many trials (needs
            ``ledger``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    tags: list[StrictStr]
    candidate_tag: StrictStr = DEFAULT_CANDIDATE_TAG
    max_facts: StrictInt = 10
    candidate_slots: StrictInt = 2
    ledger: Any = Field(default=None)
    rest_after_trials: StrictInt | None = None


def _check_int(name: str, value: object, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InvalidInputError(f"{name} must be an int >= {low}, got {value!r}")
    return value


async def _stats_for(
    ledger: OutcomeLedger, ids: list[uuid.UUID]
) -> dict[uuid.UUID, FactStats]:
    if not ids:
        return {}
    if hasattr(ledger, "get_fact_stats_batch"):  # cheaper than a runtime Protocol check
        return await cast(SupportsFactStatsBatch, ledger).get_fact_stats_batch(ids)
    found: dict[uuid.UUID, FactStats] = {}
    for fid in ids:
        stats = await ledger.get_fact_stats(fid)
        if stats is not None:
            found[fid] = stats
    return found


@lru_cache(maxsize=256)
def _scope_filter(tags: tuple[str, ...]) -> FactFilter:
    # Validated once per tag set: prompt builds (and the gate simulator) repeat it per run.
    return FactFilter(tags=list(tags), exclude_tags=[QUARANTINE_TAG])


def _newest_first(facts: list[SemanticFact]) -> None:
    """Sort in place: ``valid_from`` descending, then id ascending.

    Two stable sorts on the datetimes themselves: a float timestamp has no microsecond
    resolution before 1697 or after 2242, which ordered facts a microsecond apart by id.
    """
    facts.sort(key=lambda f: str(f.id))
    facts.sort(key=lambda f: f.valid_from, reverse=True)


async def retrieve_gated_lessons(
    store: MemoryStore,
    options: GatedLessonOptions | Mapping[str, Any] | None = None,
    /,
    *,
    tags: Sequence[str] | None = None,
    candidate_tag: str = DEFAULT_CANDIDATE_TAG,
    max_facts: int = 10,
    candidate_slots: int = 2,
    ledger: OutcomeLedger | None = None,
    rest_after_trials: int | None = None,
) -> list[SemanticFact]:
    """Return verified lessons first, then up to ``candidate_slots`` candidates on trial.

    The options come either as keyword arguments or, as in the spec's
    ``retrieveGatedLessons(store, options)``, as one :class:`GatedLessonOptions` or dict
    (not both).

    Active facts carrying any of ``tags`` are read in one ``find_facts`` call. Facts tagged
    ``quarantined`` never appear. Facts with ``candidate_tag`` are candidates; every other
    fact counts as verified (so lesson stores written before eval-gating keep working).

    * Verified lessons fill ``max_facts - candidate_slots`` places, newest first
      (``valid_from`` descending, then id). Candidate slots left unused go back to verified
      lessons. More ``candidate_slots`` than ``max_facts`` (``max_facts=1`` with the
      default 2) reserve the whole budget for candidates: never more than ``max_facts``
      lessons come back.
    * With a ``ledger`` candidates are chosen in-progress-first: most trials first (those
      keep their slots until the gate rules on them), then oldest ``valid_from``, then id;
      fresh candidates enter only when a slot is free. Their stats are read with one
      ``get_fact_stats_batch`` call when the ledger has it.
    * Without a ledger candidates are chosen newest-first.
    * ``rest_after_trials`` (needs ``ledger``) benches candidates with at least that many
      trials, so the leave-one-out baseline gets runs without them. Set it to the retention
      policy's ``min_trials``.

    Args:
        store: Any ``MemoryStore``.
        options: All the options below as one :class:`GatedLessonOptions` or dict
            (instead of the keyword arguments).
        tags: Scope tags (any-of), e.g. ``["lesson", "graph:research-v1"]``; required.
        candidate_tag: Tag marking on-trial lessons.
        max_facts: Total lessons to return (>= 1).
        candidate_slots: Places reserved for candidates (>= 0; at most ``max_facts`` are
            used). ``0`` starves the gate: candidates then never accrue trials.
        ledger: Outcome ledger enabling in-progress-first candidate selection.
        rest_after_trials: Bench candidates once they have this many trials (>= 1).

    Returns:
        Verified lessons, then the chosen candidates.

    Raises:
        InvalidInputError: Empty or missing ``tags``, out-of-range counts,
            ``rest_after_trials`` without a ``ledger``, or ``options`` together with
            keyword options. Nothing is read then.
        InvalidTypeError: ``store`` or ``ledger`` lacks the methods of its contract, or
            ``options`` is neither a ``GatedLessonOptions`` nor a mapping.
        pydantic.ValidationError: ``options`` given as a mapping that does not validate.
    """
    if options is not None:
        explicit = changed_from_defaults(
            ("tags", tags, None),
            ("candidate_tag", candidate_tag, DEFAULT_CANDIDATE_TAG),
            ("max_facts", max_facts, 10),
            ("candidate_slots", candidate_slots, 2),
            ("ledger", ledger, None),
            ("rest_after_trials", rest_after_trials, None),
        )
        bundle = option_bundle(GatedLessonOptions, options, explicit, "retrieve_gated_lessons")
        tags = bundle["tags"]
        candidate_tag = bundle["candidate_tag"]
        max_facts = bundle["max_facts"]
        candidate_slots = bundle["candidate_slots"]
        ledger = bundle["ledger"]
        rest_after_trials = bundle["rest_after_trials"]
    if tags is None:
        raise InvalidInputError("retrieve_gated_lessons needs tags (the lesson scope)")
    check_same_tenant(store, ledger=ledger)
    if not callable(getattr(store, "find_facts", None)):
        raise InvalidTypeError(
            f"store must be a MemoryStore (find_facts), got {type(store).__name__}"
        )
    if isinstance(tags, str) or not tags or not all(isinstance(t, str) and t for t in tags):
        raise InvalidInputError("tags must be a non-empty list of non-empty strings")
    if not isinstance(candidate_tag, str) or not candidate_tag:
        raise InvalidInputError("candidate_tag must be a non-empty string")
    _check_int("max_facts", max_facts, 1)
    _check_int("candidate_slots", candidate_slots, 0)
    candidate_slots = min(candidate_slots, max_facts)  # the spec: candidates fill the rest
    if rest_after_trials is not None:
        _check_int("rest_after_trials", rest_after_trials, 1)
        if ledger is None:
            raise InvalidInputError("rest_after_trials requires a ledger")
    if ledger is not None and not callable(getattr(ledger, "get_fact_stats", None)):
        raise InvalidTypeError(
            f"ledger must be an OutcomeLedger (get_fact_stats), got {type(ledger).__name__}"
        )

    facts = await store.find_facts(_scope_filter(tuple(tags)))
    verified: list[SemanticFact] = []
    candidates: list[SemanticFact] = []
    for fact in facts:
        (candidates if candidate_tag in fact.tags else verified).append(fact)

    chosen: list[SemanticFact] = []
    if candidate_slots and candidates:
        if ledger is None:
            _newest_first(candidates)
        else:
            stats = await _stats_for(ledger, [f.id for f in candidates])
            trials = {fid: s.trials for fid, s in stats.items()}
            if rest_after_trials is not None:
                candidates = [f for f in candidates if trials.get(f.id, 0) < rest_after_trials]

            def in_progress_first(fact: SemanticFact) -> tuple[int, datetime, str]:
                return (-trials.get(fact.id, 0), fact.valid_from, str(fact.id))

            candidates.sort(key=in_progress_first)
        chosen = candidates[:candidate_slots]

    _newest_first(verified)
    return verified[: max_facts - len(chosen)] + chosen
