"""Data of the lifecycle operations: purge selectors, candidates, plans and reports.

Pure pydantic models (no I/O). Backends fill :class:`PurgeCandidates` and apply a
:class:`PurgePlan`; :func:`cycgraph_memory.lifecycle.plan_purge` turns one into the other.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cycgraph_memory.records import (
    Entity,
    Episode,
    Flag,
    ProvenanceSource,
    Relationship,
    SemanticFact,
    Theme,
    UtcDatetime,
    utc_now,
)

__all__ = [
    "ERASED_BY",
    "MAX_PURGE_IDS",
    "ErasureEntry",
    "erased_fact_digest",
    "LedgerErasure",
    "PurgeCandidates",
    "PurgePlan",
    "PurgeReport",
    "PurgeSelector",
    "REDACTED_FACT_ID",
]

REDACTED_FACT_ID = uuid.UUID(int=0)
"""The fact id a redacted gate-audit row carries (the nil UUID) after its fact was purged."""

ERASED_BY = "erased"
"""``invalidated_by`` a purge writes on a surviving soft-deleted fact or relationship whose
``invalidated_by`` named a record it erased (a merge keeper, a conflict winner): the
survivor stays invalidated, and no row keeps the erased record's id. A hard-mode
consolidation writes it too, for a fact whose invalidator it deleted without a surviving
keeper to re-point it at."""

def erased_fact_digest(fact_id: uuid.UUID) -> str:
    """SHA-256 (hex) of ``fact:<id>``: how a ledger remembers a fact id it erased.

    The ledgers keep this digest, never the id, so that no table or structure names an
    erased record after a purge; ``record_outcome`` digests the ids it is given and does
    not link one whose digest is remembered. An auditor holding an id can check it.
    """
    return hashlib.sha256(f"fact:{fact_id}".encode()).hexdigest()


MAX_PURGE_IDS = 100_000
"""Most entity or message ids one purge selector may name."""

_Ident = Annotated[str, Field(min_length=1, max_length=1000, pattern=r"^[^\x00]*$")]


class PurgeSelector(BaseModel):
    """What to erase. Give at least one criterion; all given criteria are combined (OR).

    Attributes:
        entity_ids: Entities to erase, with every fact mentioning them and every edge
            touching them.
        message_ids: Messages to erase; facts grounded only in erased messages go too.
        run_id: Erase every record whose ``provenance.run_id`` is this value.
        agent_id: Erase every record whose ``provenance.agent_id`` is this value.
        source: Erase every record whose ``provenance.source`` is this value.
        tenant: Erase the whole tenant (may not be combined with other criteria).

    ``run_id``, ``agent_id`` and ``source`` together form ONE provenance criterion: a
    record matches when its provenance has every given value.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    entity_ids: list[uuid.UUID] = Field(default_factory=list, max_length=MAX_PURGE_IDS)
    message_ids: list[uuid.UUID] = Field(default_factory=list, max_length=MAX_PURGE_IDS)
    run_id: _Ident | None = None
    agent_id: _Ident | None = None
    source: ProvenanceSource | None = None
    tenant: Flag = False

    @model_validator(mode="after")
    def _check(self) -> PurgeSelector:
        if self.tenant and self.kinds != ["tenant"]:
            raise ValueError("tenant=True erases everything: give no other criterion")
        if not self.kinds:
            raise ValueError(
                "a purge selector needs at least one of entity_ids, message_ids, run_id, "
                "agent_id, source or tenant=True"
            )
        return self

    @property
    def kinds(self) -> list[str]:
        """The criteria given, in a fixed order (``entity_ids``, ``message_ids``, ...)."""
        out = []
        if self.entity_ids:
            out.append("entity_ids")
        if self.message_ids:
            out.append("message_ids")
        if self.has_provenance:
            out.append("provenance")
        if self.tenant:
            out.append("tenant")
        return out

    @property
    def has_provenance(self) -> bool:
        """Whether a provenance criterion (``run_id``, ``agent_id``, ``source``) is given."""
        return self.run_id is not None or self.agent_id is not None or self.source is not None

    def matches_provenance(
        self, record: Entity | Relationship | Episode | SemanticFact | Theme
    ) -> bool:
        """Whether ``record`` is selected by the provenance criterion (or by ``tenant``)."""
        if self.tenant:
            return True
        if not self.has_provenance:
            return False
        p = record.provenance
        return (
            (self.run_id is None or p.run_id == self.run_id)
            and (self.agent_id is None or p.agent_id == self.agent_id)
            and (self.source is None or p.source == self.source)
        )

    def digests(self) -> list[str]:
        """SHA-256 digests of every selector value (``kind:value``), sorted.

        The erasure log keeps these instead of the values: an auditor holding an id can
        check that it was erased, while the log itself names nobody.
        """
        values = [f"entity:{i}" for i in self.entity_ids]
        values += [f"message:{i}" for i in self.message_ids]
        if self.run_id is not None:
            values.append(f"run_id:{self.run_id}")
        if self.agent_id is not None:
            values.append(f"agent_id:{self.agent_id}")
        if self.source is not None:
            values.append(f"source:{self.source}")
        if self.tenant:
            values.append("tenant")
        return sorted({hashlib.sha256(v.encode()).hexdigest() for v in values})


class PurgeCandidates(BaseModel):
    """Every stored record a purge might touch (a superset; the planner decides).

    Filled by a backend's ``purge_candidates``. Records are copies.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    entities: list[Entity] = Field(default_factory=list)
    relationships: list[Relationship] = Field(default_factory=list)
    episodes: list[Episode] = Field(default_factory=list)
    facts: list[SemanticFact] = Field(default_factory=list)
    themes: list[Theme] = Field(default_factory=list)
    superseding: list[Entity] = Field(default_factory=list)
    writer_keys: dict[str, list[uuid.UUID]] = Field(default_factory=dict)
    message_vectors: set[uuid.UUID] = Field(default_factory=set)
    setting_keys: list[str] = Field(default_factory=list)


class PurgePlan(BaseModel):
    """The mutations one purge applies (computed by ``plan_purge``; applied in one unit).

    Attributes:
        selector: The selector planned.
        delete_*: Ids hard-deleted.
        put_*: Surviving records rewritten without the purged references.
        delete_message_ids: Every erased message (of deleted and of surviving episodes).
        delete_writer_keys: Idempotency keys that recorded a deleted fact.
        delete_setting_keys: The tenant's settings (``get_tenant_setting``), on a whole
            tenant purge.
        embeddings: Vectors erased (records and messages with an embedding).
    """

    model_config = ConfigDict(extra="forbid")

    selector: PurgeSelector
    delete_entity_ids: list[uuid.UUID] = Field(default_factory=list)
    delete_relationship_ids: list[uuid.UUID] = Field(default_factory=list)
    delete_episode_ids: list[uuid.UUID] = Field(default_factory=list)
    delete_message_ids: list[uuid.UUID] = Field(default_factory=list)
    delete_fact_ids: list[uuid.UUID] = Field(default_factory=list)
    delete_theme_ids: list[uuid.UUID] = Field(default_factory=list)
    delete_writer_keys: list[str] = Field(default_factory=list)
    delete_setting_keys: list[str] = Field(default_factory=list)
    put_entities: list[Entity] = Field(default_factory=list)
    put_episodes: list[Episode] = Field(default_factory=list)
    put_facts: list[SemanticFact] = Field(default_factory=list)
    put_themes: list[Theme] = Field(default_factory=list)
    put_relationships: list[Relationship] = Field(default_factory=list)
    embeddings: int = 0

    @property
    def is_empty(self) -> bool:
        """True when the purge changes no stored record."""
        return not any(
            (
                self.delete_entity_ids, self.delete_relationship_ids, self.delete_episode_ids,
                self.delete_message_ids, self.delete_fact_ids, self.delete_theme_ids,
                self.delete_writer_keys, self.delete_setting_keys,
                self.put_entities, self.put_episodes,
                self.put_facts, self.put_themes, self.put_relationships,
            )
        )


class LedgerErasure(BaseModel):
    """What a ledger removed (or would remove, on a dry run) for one purge."""

    model_config = ConfigDict(extra="forbid")

    ledger_links: int = 0
    ledger_runs: int = 0
    audit_entries_redacted: int = 0


class PurgeReport(BaseModel):
    """Result of ``purge``: how many records of each type were erased or rewritten.

    Attributes:
        dry_run: True when nothing was changed (the counts say what would be).
        selector_kinds: Criteria of the selector (``entity_ids``, ``message_ids``,
            ``provenance``, ``tenant``).
        entities / relationships / episodes / messages / facts / themes: Hard-deleted.
        entities_updated / relationships_updated / episodes_updated: Surviving records
            rewritten without the purged references (an ``invalidated_by`` naming an
            erased record becomes :data:`ERASED_BY`).
        facts_updated / themes_updated: The same for facts and themes (themes re-centred
            and relabelled from their surviving facts).
        embeddings: Vectors erased with their records (also gone from every index).
        text_search_entries: Full-text entries erased (facts, messages, episodes).
        idempotency_keys: ``put_facts_once`` keys that recorded a deleted fact.
        tenant_settings: Per-tenant settings erased (whole tenant purge: e.g. the theme
            calibration).
        ledger_links / ledger_runs: Outcome-ledger rows removed.
        audit_entries_redacted: Gate-audit rows whose fact id named a deleted fact.
        erasure_id: Id of the erasure-log entry (``None`` on a dry run or with no ledger).
    """

    model_config = ConfigDict(extra="forbid")

    dry_run: bool
    selector_kinds: list[str]
    entities: int = 0
    relationships: int = 0
    episodes: int = 0
    messages: int = 0
    facts: int = 0
    themes: int = 0
    entities_updated: int = 0
    relationships_updated: int = 0
    episodes_updated: int = 0
    facts_updated: int = 0
    themes_updated: int = 0
    embeddings: int = 0
    text_search_entries: int = 0
    idempotency_keys: int = 0
    tenant_settings: int = 0
    ledger_links: int = 0
    ledger_runs: int = 0
    audit_entries_redacted: int = 0
    erasure_id: uuid.UUID | None = None

    def counts(self) -> dict[str, int]:
        """Every count by name (the erasure log stores this)."""
        return {
            k: v
            for k, v in self.model_dump().items()
            if isinstance(v, int) and not isinstance(v, bool)
        }


class ErasureEntry(BaseModel):
    """One row of the append-only erasure log: one purge, with no erased content.

    Attributes:
        erasure_id: Id of the purge.
        selector_kinds: Which criteria selected the data.
        selector_digests: SHA-256 digests of the selector values (see
            :meth:`PurgeSelector.digests`), never the values.
        counts: Records erased or rewritten, by type (:meth:`PurgeReport.counts`).
        erased_at: When the purge committed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    erasure_id: uuid.UUID = Field(default_factory=uuid.uuid4)
    kind: Literal["purge"] = "purge"
    selector_kinds: list[str]
    selector_digests: list[str]
    counts: dict[str, int]
    erased_at: UtcDatetime = Field(default_factory=utc_now)
