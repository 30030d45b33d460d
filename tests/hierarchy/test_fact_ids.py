"""Deterministic extractor ids: ``fact_id_for`` is exactly ``uuid5`` of its documented name."""

from __future__ import annotations

import pickle
import uuid

from cycgraph_memory.hierarchy.extractors.simple import FACT_ID_NAMESPACE, fact_id_for


def test_fact_id_for_equals_uuid5_of_the_name() -> None:
    episodes = [uuid.UUID(int=0), uuid.UUID(int=7), uuid.uuid4(), uuid.UUID(int=2**128 - 1)]
    keys = ["", "0", "Alice Smith", "alice|work_at|acme corp", "Zoë Ångström 東京", "x" * 500]
    for episode in episodes:
        for kind in ("parser-entity", "rules-fact", "simple-fact"):
            for key in keys:
                got = fact_id_for(episode, kind, key)
                want = uuid.uuid5(FACT_ID_NAMESPACE, f"{kind}:{episode}:{key}")
                assert got == want
                assert str(got) == str(want)
                assert hash(got) == hash(want)
                assert got.version == 5
                assert got.variant == uuid.RFC_4122
                assert got.is_safe == want.is_safe
                assert pickle.loads(pickle.dumps(got)) == want
                assert isinstance(got, uuid.UUID)
