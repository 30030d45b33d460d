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
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cycgraph_memory.postgres import convert, statements
from cycgraph_memory.postgres._base import PostgresIndexMixin
from cycgraph_memory.postgres.schema import MAX_VECTOR_HNSW_DIM
from cycgraph_memory.postgres.statements import row_distance
from cycgraph_memory.records import SearchOptions, SemanticFact, Theme

__all__ = ["HierarchicalCandidates"]


def _ranked(rows: Sequence[Any]) -> list[tuple[float, uuid.UUID, Any]]:
    return sorted(
        ((row_distance(r), convert._uuid(r["id"]), r) for r in rows),
        key=lambda x: (x[0], x[1]),
    )


def _tie_at_cut(ranked: list[tuple[float, uuid.UUID, Any]], limit: int, fetch: int) -> bool:
    return len(ranked) >= fetch and ranked[limit - 1][0] == ranked[-1][0]


class HierarchicalCandidates(PostgresIndexMixin):
    """Mixin of ``PostgresMemoryIndex``: ``hierarchical_candidates`` in one session."""

    if TYPE_CHECKING:

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
        theme_fact_limit: int | None = None,
        valid_at: datetime | None = None,
        changed_since: datetime | None = None,
    ) -> tuple[list[Theme], list[SemanticFact], list[SemanticFact]]:
        """Matched themes, direct fact hits and the themes' other facts, in one session.

        Args:
            embedding: The query vector.
            theme_limit: Themes matched by similarity.
            max_facts_per_theme: Facts taken from each matched theme (citation order).
            fact_limit: Facts fetched by the direct kNN.
            min_similarity: Lowest similarity of a theme or fact.
            include_invalidated: Keep soft-deleted records.
            tags: Facts must carry one of these (``None``: no restriction).
            exclude_tags: Facts must carry none of these.
            valid_at: With ``theme_fact_limit``, theme facts valid at this instant.
            changed_since: With ``theme_fact_limit``, theme facts that changed after it.
            theme_fact_limit: When given, only the themes' facts that pass the query's
                conditions (``include_invalidated``, ``tags``, ``exclude_tags``,
                ``valid_at``, ``changed_since``, ``min_similarity`` less
                ``statements.CUT_TIE_BAND`` for rounding) are read: the
                ``theme_fact_limit`` nearest of them, those within
                ``statements.CUT_TIE_BAND`` of the last of them (near ties the float64
                ranking may order differently) and, when ``min_similarity`` is 0, any
                that cannot be scored. A caller that cuts the merged ranking at ``k``
                facts loses nothing with ``theme_fact_limit >= k``: a theme fact among
                the best ``k`` overall is among the best ``k`` theme facts. Reading ~40
                instead of ~100 rows with their 384-d vectors is most of this path's
                cost. ``None``: every theme fact, unfiltered.

        Returns:
            ``(themes, direct, theme_facts)``: the ``theme_limit`` nearest themes and the
            ``fact_limit`` nearest facts, both at least ``min_similarity`` similar and
            ordered by ``(distance, id)`` (what ``search_themes`` / ``search_facts``
            return), and the facts listed by those themes (the first
            ``max_facts_per_theme`` of each) that are not direct hits, in citation order
            (unfiltered unless ``theme_fact_limit`` is given).
        """
        query = self._query_vector(embedding, self._known_dim(), "hierarchical_candidates")
        ef = min(1000, max(self.ef_search, fact_limit + 1, theme_limit + 1))
        async with self._read(self._search_settings(ef)) as session:
            dim = await self._dim(session)
            query = self._query_vector(query, dim, "hierarchical_candidates", checked=True)
            params: dict[str, Any] = {
                "tenant": self._tenant, "q": query, "min_similarity": min_similarity,
                "exact_below": self.exact_below,
            }
            themes: list[Theme] = []
            if theme_limit:
                stmt = statements.knn(
                    "themes", dim, include_invalidated=include_invalidated, min_similarity=True
                )
                rows = await statements.fetch(session, stmt, {**params, "fetch": theme_limit + 1})
                ranked = _ranked(rows)
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
            # The cut needs distances comparable with the Python ranking: not for the
            # halfvec expression index of wide schemas.
            cut_themes = theme_fact_limit is not None and dim <= MAX_VECTOR_HNSW_DIM
            params["fact_fetch"] = fact_limit + 1
            if tags:
                params["any_tags"] = list(tags)
            if exclude_tags:
                params["no_tags"] = list(exclude_tags)
            shape = "none"
            if wanted:
                params["wanted"] = wanted
                shape = "cut" if cut_themes else "all"
            if shape == "cut":
                params["theme_fact_limit"] = theme_fact_limit
                params["valid_at"] = valid_at
                params["changed_since"] = changed_since
            stmt2 = statements.hierarchical_facts(
                dim,
                include_invalidated=include_invalidated,
                tags=bool(tags),
                exclude_tags=bool(exclude_tags),
                themes=shape,
                temporal=(valid_at is not None, changed_since is not None),
                unscored=min_similarity <= 0,
            )
            rows = await statements.fetch(session, stmt2, params)
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
        ids = [convert._uuid(r["id"]) for r in rows]
        by_id = {i: r for i, r in zip(ids, rows, strict=True) if r["src"] == 1}
        if cut_themes:
            # Direct rows beyond the final direct list (the kNN's extra row, or a tie
            # fallback that chose differently) were excluded above: keep them as theme
            # facts when a theme lists them.
            for i, r in zip(ids, rows, strict=True):
                if r["src"] == 0 and i not in direct_ids:
                    by_id.setdefault(i, r)
        theme_facts = [
            convert.fact_from_row(by_id[i]) for i in wanted if i in by_id and i not in direct_ids
        ]
        return themes, direct, theme_facts
