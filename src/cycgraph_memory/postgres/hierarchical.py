"""Native candidate fetch of the hierarchical retrieval path (``PostgresMemoryIndex``).

The generic path makes three calls (``search_themes``, ``search_facts``, ``get_facts`` of
the matched themes' facts), each its own session with its own ``set_config``. Here the
same candidates come from one session and three statements: the HNSW settings, the theme
kNN, and one statement that unions the direct fact kNN with the matched themes' facts.
The candidates are the generic path's: same kNN query shape, same ``(distance, id)`` cut
(with the same fallback when an exact tie straddles it), same filters; one
``hnsw.ef_search`` serves both searches (the larger of the two the generic path would set).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Integer, Table, literal, not_, select
from sqlalchemy.ext.asyncio import AsyncSession

from cycgraph_memory.postgres import convert
from cycgraph_memory.postgres._base import PostgresBackend
from cycgraph_memory.postgres.schema import FactRow, ThemeRow
from cycgraph_memory.records import SearchOptions, SemanticFact, Theme

__all__ = ["HierarchicalCandidates"]

FACTS: Table = FactRow.__table__  # type: ignore[assignment]
THEMES: Table = ThemeRow.__table__  # type: ignore[assignment]


def _ranked(rows: Sequence[Any]) -> list[tuple[float, uuid.UUID, Any]]:
    from cycgraph_memory.postgres.index import _distance

    return sorted(
        ((_distance(r), convert._uuid(r["id"]), r) for r in rows), key=lambda x: (x[0], x[1])
    )


def _tie_at_cut(ranked: list[tuple[float, uuid.UUID, Any]], limit: int, fetch: int) -> bool:
    return len(ranked) >= fetch and ranked[limit - 1][0] == ranked[-1][0]


class HierarchicalCandidates(PostgresBackend):
    """Mixin of ``PostgresMemoryIndex``: ``hierarchical_candidates`` in one session."""

    if TYPE_CHECKING:

        @property
        def ef_search(self) -> int:
            """Default ``hnsw.ef_search`` (the index's)."""

        def _query_vector(
            self, embedding: Sequence[float], dim: int | None, where: str
        ) -> list[float]: ...

        async def _set_search_gucs(self, session: AsyncSession, ef: int) -> None: ...

        async def search_facts(
            self, embedding: Sequence[float], options: SearchOptions | None = None, /,
            **kwargs: Any,
        ) -> Any:
            """The index's ``search_facts``."""

        async def search_themes(
            self, embedding: Sequence[float], options: SearchOptions | None = None, /,
            **kwargs: Any,
        ) -> Any:
            """The index's ``search_themes``."""

    async def hierarchical_candidates(
        self,
        embedding: Sequence[float],
        *,
        theme_limit: int,
        max_facts_per_theme: int | None,
        fact_limit: int,
        min_similarity: float,
        include_invalidated: bool,
        tags: Sequence[str] | None,
        exclude_tags: Sequence[str] | None,
    ) -> tuple[list[Theme], list[SemanticFact], list[SemanticFact]]:
        """Matched themes, direct fact hits and the themes' other facts, in one session.

        Returns:
            ``(themes, direct, theme_facts)``: the ``theme_limit`` nearest themes and the
            ``fact_limit`` nearest facts, both at least ``min_similarity`` similar and
            ordered by ``(distance, id)`` (what ``search_themes`` / ``search_facts``
            return), and the facts listed by those themes (the first
            ``max_facts_per_theme`` of each) that are not direct hits, unfiltered, in
            citation order.
        """
        from cycgraph_memory.postgres.index import distance_expr

        query = self._query_vector(embedding, self._known_dim(), "hierarchical_candidates")
        async with self._session() as session:
            dim = await self._dim(session)
            query = self._query_vector(query, dim, "hierarchical_candidates")
            ef = min(1000, max(self.ef_search, fact_limit + 1, theme_limit + 1))
            await self._set_search_gucs(session, ef)
            themes: list[Theme] = []
            if theme_limit:
                t = THEMES
                tdist = distance_expr(t, query, dim).label("distance")
                inner = select(t, tdist).where(
                    t.c.tenant_id == self._tenant, t.c.embedding.is_not(None)
                )
                if not include_invalidated:
                    inner = inner.where(t.c.invalidated_at.is_(None))
                near = inner.order_by(tdist).limit(theme_limit + 1).subquery("nearest")
                stmt = select(near).where(1 - near.c.distance >= min_similarity)
                ranked = _ranked((await session.execute(stmt)).mappings().all())
                if _tie_at_cut(ranked, theme_limit, theme_limit + 1):  # rare: exact ties
                    hits = await self.search_themes(
                        query, limit=theme_limit, min_similarity=min_similarity,
                        include_invalidated=include_invalidated,
                    )
                    themes = [h.item for h in hits]
                else:
                    themes = [convert.theme_from_row(r) for _, _, r in ranked[:theme_limit]]
            wanted = list(
                dict.fromkeys(i for th in themes for i in th.fact_ids[:max_facts_per_theme])
            )
            f = FACTS
            fdist = distance_expr(f, query, dim).label("distance")
            conds: list[ColumnElement[bool]] = [
                f.c.tenant_id == self._tenant, f.c.embedding.is_not(None)
            ]
            if not include_invalidated:
                conds.append(f.c.invalidated_by.is_(None))
            if tags:
                conds.append(f.c.tags.overlap(list(tags)))
            if exclude_tags:
                conds.append(not_(f.c.tags.overlap(list(exclude_tags))))
            direct_q = (
                select(f, fdist, literal(0, Integer()).label("src"))
                .where(*conds)
                .order_by(fdist)
                .limit(fact_limit + 1)
                .cte("direct")
            )
            direct_sel = select(direct_q).where(1 - direct_q.c.distance >= min_similarity)
            if wanted:
                from cycgraph_memory.postgres.retrieval import _in

                theme_sel = select(f, fdist, literal(1, Integer()).label("src")).where(
                    f.c.tenant_id == self._tenant, _in(f.c.id, wanted)
                )
                stmt2: Any = direct_sel.union_all(theme_sel)
            else:
                stmt2 = direct_sel
            rows = (await session.execute(stmt2)).mappings().all()
        direct_ranked = _ranked([r for r in rows if r["src"] == 0])
        if _tie_at_cut(direct_ranked, fact_limit, fact_limit + 1):  # rare: exact ties
            hits = await self.search_facts(
                query, limit=fact_limit, min_similarity=min_similarity,
                include_invalidated=include_invalidated,
                tags=list(tags) if tags else None,
                exclude_tags=list(exclude_tags) if exclude_tags else None,
            )
            direct = [h.item for h in hits]
        else:
            direct = [convert.fact_from_row(r) for _, _, r in direct_ranked[:fact_limit]]
        direct_ids = {d.id for d in direct}
        by_id = {convert._uuid(r["id"]): r for r in rows if r["src"] == 1}
        theme_facts = [
            convert.fact_from_row(by_id[i]) for i in wanted if i in by_id and i not in direct_ids
        ]
        return themes, direct, theme_facts
