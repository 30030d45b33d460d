"""Referential checks of fact writes: a fact may cite only records of its own tenant.

Shared by the store's writes and the idempotent writer (``put_facts_once``), so neither
imports the other.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import Text, bindparam, literal_column, select
from sqlalchemy.ext.asyncio import AsyncSession

from cycgraph_memory.errors import DanglingReferenceError
from cycgraph_memory.postgres import convert
from cycgraph_memory.postgres.statements import ENTITIES, EPISODES, THEMES, any_id
from cycgraph_memory.records import SemanticFact

__all__ = ["check_fact_references"]


_KINDS = ("entity", "episode", "theme")
_TABLE_OF = {"entity": ENTITIES, "episode": EPISODES, "theme": THEMES}


@lru_cache(maxsize=8)
def _locked_citations(kinds: tuple[str, ...]) -> Any:
    """The cited ids of ``kinds`` that exist, locked ``FOR KEY SHARE`` (built once).

    One CTE per kind (a ``FOR KEY SHARE`` select cannot be a ``UNION`` branch), rows
    ``(kind, id)``. Parameters: ``tenant`` and ``<kind>_ids`` for each kind.
    """
    parts = []
    for kind in kinds:
        table = _TABLE_OF[kind]
        locked = (
            select(table.c.id)
            .where(
                table.c.tenant_id == bindparam("tenant", type_=Text()),
                any_id(table.c.id, f"{kind}_ids"),
            )
            .with_for_update(read=True, key_share=True)
            .cte(f"cited_{kind}")
        )
        parts.append(select(literal_column(f"'{kind}'"), locked.c.id))
    return parts[0] if len(parts) == 1 else parts[0].union_all(*parts[1:])


async def check_fact_references(
    session: AsyncSession, tenant: str, facts: Sequence[SemanticFact], *, themes: bool = True
) -> None:
    """Refuse facts citing entity, episode or theme ids that are not records of ``tenant``.

    One statement; the cited rows are locked ``FOR KEY SHARE`` until the transaction ends
    (what a foreign key does), so a concurrent delete cannot leave the facts dangling.

    ``themes=False`` leaves the ``theme_id`` citations out (an import checks them once
    every theme of the file is written).

    Raises:
        DanglingReferenceError: Naming every missing id (nothing is written).
    """
    wanted: dict[str, dict[uuid.UUID, None]] = {"entity": {}, "episode": {}, "theme": {}}
    for fact in facts:
        wanted["entity"].update(dict.fromkeys(fact.entity_ids))
        wanted["episode"].update(dict.fromkeys(fact.source_episode_ids))
        if themes and fact.theme_id is not None:
            wanted["theme"][fact.theme_id] = None
    present = tuple(kind for kind in _KINDS if wanted[kind])
    if not present:
        return
    params: dict[str, Any] = {"tenant": tenant}
    params.update({f"{kind}_ids": list(wanted[kind]) for kind in present})
    stmt = _locked_citations(present)
    found = {
        (kind, convert._uuid(i)) for kind, i in (await session.execute(stmt, params)).all()
    }
    missing = [(k, i) for k, ids in wanted.items() for i in ids if (k, i) not in found]
    if missing:
        raise DanglingReferenceError(
            "facts cite records that are not in this store: "
            + ", ".join(f"{k} {i}" for k, i in missing),
            missing_ids=[i for _, i in missing],
        )
