"""Lifecycle data: selector validation, digests, root exports (pure, no database)."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from pydantic import ValidationError

import cycgraph_memory
from cycgraph_memory.lifecycle import PurgeCandidates, PurgeSelector, plan_purge


def test_lifecycle_names_are_exported_from_the_root() -> None:
    for name in ("purge", "export", "import_", "reembed", "PurgeSelector", "PurgeReport",
                 "ErasureEntry", "ReembedProgress", "SupportsPurge", "SupportsErasureLog"):
        assert name in cycgraph_memory.__all__
        assert hasattr(cycgraph_memory, name)


def test_selector_kinds_and_digests_name_nobody() -> None:
    eid = uuid.uuid4()
    sel = PurgeSelector(entity_ids=[eid], run_id="run-7", source="tool")
    assert sel.kinds == ["entity_ids", "provenance"]
    digests = sel.digests()
    assert hashlib.sha256(f"entity:{eid}".encode()).hexdigest() in digests
    assert all(str(eid) not in d and "run-7" not in d for d in digests)


@pytest.mark.parametrize(
    "bad",
    [{}, {"tenant": True, "entity_ids": [str(uuid.uuid4())]}, {"run_id": "a\x00b"},
     {"entity_ids": [1]}, {"tenant": False}],
)
def test_bad_selectors(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        PurgeSelector.model_validate(bad)


def test_an_empty_store_gives_an_empty_plan() -> None:
    plan = plan_purge(PurgeSelector(tenant=True), PurgeCandidates())
    assert plan.is_empty
