"""``export`` to a path: staged beside the destination, renamed over it only when complete."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from cycgraph_memory.inmemory import InMemoryMemoryStore
from cycgraph_memory.lifecycle import export
from cycgraph_memory.records import Entity, Provenance, Relationship


class FailingStore(InMemoryMemoryStore):
    """Fails once the entities are written (while reading the edges)."""

    async def get_relationships_for_entities(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("connection lost")


async def _fill(store: InMemoryMemoryStore) -> None:
    prov = Provenance(source="system")
    a = Entity(name="Alice", entity_type="person", provenance=prov)
    b = Entity(name="Acme", entity_type="organization", provenance=prov)
    await store.put_entities([a, b])
    await store.put_relationship(Relationship(
        source_id=a.id, target_id=b.id, relation_type="works_at", provenance=prov,
    ))


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


async def test_a_failed_export_leaves_the_existing_file_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "backup.jsonl"
    target.write_text("the previous backup\n", encoding="utf-8")
    store = FailingStore()
    await _fill(store)
    with pytest.raises(RuntimeError, match="connection lost"):
        await export(store, target, page_size=1)
    assert target.read_text(encoding="utf-8") == "the previous backup\n"
    assert _leftovers(tmp_path) == []


async def test_a_failed_export_to_a_new_path_leaves_nothing(tmp_path: Path) -> None:
    store = FailingStore()
    await _fill(store)
    with pytest.raises(RuntimeError):
        await export(store, tmp_path / "new.jsonl", page_size=1)
    assert _entries(tmp_path) == []


async def test_a_complete_export_replaces_the_file_and_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "backup.jsonl"
    target.write_text("old\n", encoding="utf-8")
    os.chmod(target, 0o600)
    store = InMemoryMemoryStore()
    await _fill(store)
    report = await export(store, target)
    text = target.read_text(encoding="utf-8")
    assert text.count("\n") == report.lines and '"type":"relationship"' in text
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert _leftovers(tmp_path) == []


async def test_a_symlink_is_followed_not_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real.jsonl"
    real.write_text("old\n", encoding="utf-8")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    store = InMemoryMemoryStore()
    await _fill(store)
    await export(store, link)
    assert link.is_symlink()
    assert '"type":"entity"' in real.read_text(encoding="utf-8")


async def test_a_device_is_written_in_place() -> None:
    store = InMemoryMemoryStore()
    await _fill(store)
    report = await export(store, os.devnull)
    assert report.lines > 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)  # still the device, not a file
