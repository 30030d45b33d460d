"""Verifiable erasure: ``purge`` hard-deletes a selection and everything derived from it.

The work is split the usual way (plan as data, then apply):

1. The backend lists every record the selector might touch
   (``SupportsPurge.purge_candidates``; a superset, found through its indexes).
2. :func:`plan_purge` (pure) decides what goes and what is rewritten.
3. The backend applies the plan (``SupportsPurge.apply_purge``) and the ledger erases its
   links, redacts the gate-audit rows that named a deleted fact and appends one erasure
   entry (``SupportsErasureLog``), all in ONE unit of work of the store. The unit holds
   the purge's pass lock and those of the passes whose records it rewrites
   (``_REWRITING_PASSES``), so none of them commits between its read and its write.

What is derived from what (the rules the planner applies):

* Entities: the selected ones and those whose provenance matches, and the duplicates
  entity resolution merged into one of them (soft-deleted with ``superseded_by`` naming
  it, through chains of merges: the same subject). A selected id that is such a
  duplicate (a stale id) names the entity it was merged into, as retrieval forwards it.
  Every relationship touching one goes, and so does every fact mentioning one (its text
  is about them). Surviving (live) entities that named one in ``superseded_by`` lose that
  reference.
* Messages: the selected ones and every message of a deleted episode. An episode goes
  when its provenance matches or when every one of its messages is erased; surviving
  episodes lose the erased messages and the ids of deleted facts, their vector (computed
  from text that included the erased messages), and a topic that quotes an erased
  message (taken again from the first surviving one).
* Relationships extracted from an erased message (``attributes["message_id"]``, whose
  ``evidence`` quotes it) go.
* Facts: deleted when their provenance matches, when they mention an erased entity, or
  when every one of their sources is erased (sources are ``source_message_ids``, or
  ``source_episode_ids`` for facts without message grounding; a message named counts as
  erased even when it is no longer stored, e.g. its episode was pruned by a hard
  consolidation pass). A fact with a surviving source keeps it and loses the erased ones.
* Themes: deleted when all their facts are deleted, or when their provenance matches
  and they list no surviving live fact (or are soft-deleted). A live theme whose
  provenance matches but which still lists surviving live facts (of other runs, agents or
  sources) is kept, so that every live fact stays in one live theme that lists it: it is
  re-attributed (its provenance becomes that of its first surviving live fact, which the
  selector does not match) and relabelled. A theme that lost facts or was re-attributed
  is re-centred (the normalised mean of its surviving live facts' unit embeddings, as
  consolidation and ``reembed`` compute it; ``None`` without one) and relabelled from its
  surviving facts (labels and descriptions quote fact text, so nothing erased is kept);
  quarantined facts stay listed but shape neither (``hierarchy.theme_upkeep.recentre_theme``).
* A surviving (soft-deleted) fact or relationship whose ``invalidated_by`` names an erased
  one (the keeper of a merge, the winner of a conflict) stays invalidated, with
  ``invalidated_by = ERASED_BY``: no row keeps the erased id.
* A whole-tenant purge also erases the tenant's settings (the theme calibration: its
  thresholds are read off the tenant's vectors).
* Idempotency keys that recorded a deleted fact, the ledger's links of deleted facts (and
  the run named by ``run_id``) go; gate-audit rows naming a deleted fact are redacted.
  The ledger remembers the deleted fact ids (a digest of each): an outcome recorded after
  the purge never links them again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from cycgraph_memory._exclusive import FACTS_LOCK, THEMES_LOCK, exclusive_passes
from cycgraph_memory._validate import check_bool, check_same_tenant
from cycgraph_memory.consolidation._common import facts_reader_for_update
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.hierarchy.segmenters import truncate_topic
from cycgraph_memory.hierarchy.theme_upkeep import recentre_theme
from cycgraph_memory.lifecycle.models import (
    ERASED_BY,
    ErasureEntry,
    LedgerErasure,
    PurgeCandidates,
    PurgePlan,
    PurgeReport,
    PurgeSelector,
)
from cycgraph_memory.observability import traced
from cycgraph_memory.records import Episode, Message, Relationship, SemanticFact, Theme

__all__ = ["plan_purge", "purge"]

_log = logging.getLogger(__name__)


_REWRITING_PASSES: tuple[str, ...] = (FACTS_LOCK, THEMES_LOCK)
"""Locks a purge holds besides its own (taken in ``PASS_LOCK_ORDER``).

A purge writes back facts, themes, episodes and entities it read. Every pass that rewrites
facts (entity and conflict resolution, ``Memory.forget``, the gate, consolidation) holds
``FACTS_LOCK``; ingest's theme assignment and consolidation hold ``THEMES_LOCK``. Holding
both, the purge never undoes a write one of them committed between its read and its
write, and the one lock order of ``exclusive_passes`` rules out a cycle.
"""


def _without_erased_text(
    episode: Episode, erased: list[Message], kept: list[Message]
) -> dict[str, Any]:
    """The topic and vector of an episode that lost messages, free of their text.

    The topic is its first message's text (see the segmenters): when it quotes an erased
    message it is taken again from the first surviving message, the same way. The
    episode's vector was computed from text that included the erased messages: it is
    dropped (re-embedding the episode gives it a new one).
    """
    update: dict[str, Any] = {"embedding": None}
    topic = " ".join(episode.topic.split())
    if topic and any(topic in " ".join(m.content.split()) for m in erased):
        first = next((m.content for m in kept if m.content.strip()), "")
        update["topic"] = truncate_topic(first, max(len(episode.topic), 1)) or "(erased)"
    return update


async def _with_current_counters(store: Any, facts: list[SemanticFact]) -> list[SemanticFact]:
    """``facts`` carrying the access counters of their rows as they are now.

    The plan was made from the candidates as listed; a touch (which holds no pass lock)
    may have committed since. The rows are re-read locked (Postgres ``FOR UPDATE``, until
    the purge commits; the purge already holds the themes lock, so no ingest writing them
    is waited on), so a later touch waits and none is undone by the write-back.
    """
    current = await facts_reader_for_update(store)([f.id for f in facts])
    out = []
    for fact in facts:
        now = current.get(fact.id)
        if now is not None and (
            now.access_count != fact.access_count or now.last_accessed_at != fact.last_accessed_at
        ):
            fact = fact.model_copy(
                update={
                    "access_count": now.access_count,
                    "last_accessed_at": now.last_accessed_at,
                }
            )
        out.append(fact)
    return out


def _fact_sources(fact: SemanticFact) -> list[uuid.UUID]:
    return list(fact.source_message_ids) or list(fact.source_episode_ids)


def plan_purge(selector: PurgeSelector, candidates: PurgeCandidates) -> PurgePlan:
    """Decide what a purge deletes and rewrites (pure; see the module docstring).

    Args:
        selector: What to erase.
        candidates: Every stored record the selector might touch (a superset is fine:
            records the rules do not reach are left alone).

    Returns:
        The plan; planning again over the store it leaves gives an empty plan.
    """
    sel = selector
    # entities
    wanted_entities = set(sel.entity_ids)
    # A stale id (a duplicate entity resolution merged away: soft-deleted, with
    # ``superseded_by``) names the entity it was merged into, as retrieval forwards it.
    stored = {e.id: e for e in candidates.entities}
    frontier = wanted_entities & set(stored)
    while frontier:
        frontier = {
            e.superseded_by
            for e in (stored[i] for i in frontier)
            if e.invalidated_at is not None
            and e.superseded_by in stored
            and e.superseded_by not in wanted_entities
        }
        wanted_entities |= frontier
    del_entities = {
        e.id for e in candidates.entities if e.id in wanted_entities or sel.matches_provenance(e)
    }
    # A duplicate entity resolution merged into an erased entity (soft-deleted with
    # ``superseded_by`` naming it, through chains of merges) is the same subject: its name,
    # attributes and vector go too, and so does everything derived from it.
    aliases = [
        e for e in candidates.entities if e.invalidated_at is not None and e.superseded_by
    ]
    grew = True
    while grew:
        found = {e.id for e in aliases if e.superseded_by in del_entities} - del_entities
        del_entities |= found
        grew = bool(found)
    # episodes and messages
    wanted_messages = set(sel.message_ids)
    del_episodes: set[uuid.UUID] = set()
    del_messages: set[uuid.UUID] = set()
    for ep in candidates.episodes:
        mids = [m.id for m in ep.messages]
        if sel.matches_provenance(ep) or (mids and all(m in wanted_messages for m in mids)):
            del_episodes.add(ep.id)
            del_messages.update(mids)
        else:
            del_messages.update(m for m in mids if m in wanted_messages)
    # A message named is erased whether or not it is still stored: one whose episode a
    # hard consolidation pass deleted is still cited by the facts derived from it.
    gone_messages = del_messages | wanted_messages
    # facts
    del_facts: set[uuid.UUID] = set()
    for f in candidates.facts:
        sources = _fact_sources(f)
        gone = gone_messages if f.source_message_ids else del_episodes
        if (
            sel.matches_provenance(f)
            or not del_entities.isdisjoint(f.entity_ids)
            or (sources and all(s in gone for s in sources))
        ):
            del_facts.add(f.id)
    # relationships (an edge extracted from an erased message quotes it as evidence)
    erased_keys = {str(m) for m in gone_messages}
    del_relationships = {
        r.id
        for r in candidates.relationships
        if r.source_id in del_entities or r.target_id in del_entities or sel.matches_provenance(r)
        or str(r.attributes.get("message_id")) in erased_keys
    }
    erased_edges = {str(i) for i in del_relationships}
    put_relationships: list[Relationship] = [
        r.model_copy(update={"invalidated_by": ERASED_BY})
        for r in candidates.relationships
        if r.id not in del_relationships
        and r.invalidated_by is not None and r.invalidated_by in erased_edges
    ]
    # themes
    facts_by_id = {f.id: f for f in candidates.facts}
    del_themes: set[uuid.UUID] = set()
    put_themes: list[Theme] = []
    for t in candidates.themes:
        kept = [fid for fid in t.fact_ids if fid not in del_facts]
        members = [facts_by_id[fid] for fid in kept if fid in facts_by_id]
        if sel.matches_provenance(t):
            # Deleting it would leave its surviving live facts (of other runs, agents or
            # sources) in no live theme: it is kept, re-attributed to one of them (which
            # the selector does not match) and relabelled from them.
            live = [f for f in members if f.invalidated_by is None]
            if t.invalidated_at is None and live:
                put_themes.append(
                    recentre_theme(t, members).model_copy(
                        update={"provenance": live[0].provenance}
                    )
                )
            else:
                del_themes.add(t.id)
            continue
        if len(kept) == len(t.fact_ids):
            continue
        if not kept:
            del_themes.add(t.id)
            continue
        put_themes.append(recentre_theme(t, members))
    # surviving facts rewritten
    erased_facts = {str(i) for i in del_facts}
    put_facts: list[SemanticFact] = []
    for f in candidates.facts:
        if f.id in del_facts:
            continue
        update: dict[str, Any] = {}
        if f.invalidated_by is not None and f.invalidated_by in erased_facts:
            update["invalidated_by"] = ERASED_BY  # it named an erased fact
        msgs = [m for m in f.source_message_ids if m not in gone_messages]
        if len(msgs) != len(f.source_message_ids):
            update["source_message_ids"] = msgs
        eps = [e for e in f.source_episode_ids if e not in del_episodes]
        if len(eps) != len(f.source_episode_ids):
            update["source_episode_ids"] = eps
        if f.theme_id is not None and f.theme_id in del_themes:
            update["theme_id"] = None
        if update:
            put_facts.append(f.model_copy(update=update))
    # surviving episodes rewritten
    had_vector = {ep.id for ep in candidates.episodes if ep.embedding}
    put_episodes: list[Episode] = []
    for ep in candidates.episodes:
        if ep.id in del_episodes:
            continue
        messages = [m for m in ep.messages if m.id not in del_messages]
        fact_ids = [fid for fid in ep.fact_ids if fid not in del_facts]
        if len(messages) != len(ep.messages) or len(fact_ids) != len(ep.fact_ids):
            update = {"messages": messages, "fact_ids": fact_ids}
            if len(messages) != len(ep.messages):
                erased = [m for m in ep.messages if m.id in del_messages]
                update.update(_without_erased_text(ep, erased, messages))
            put_episodes.append(ep.model_copy(update=update))
    put_entities = [
        e.model_copy(update={"superseded_by": None})
        for e in candidates.superseding
        if e.superseded_by in del_entities and e.id not in del_entities
    ]
    writer_keys = sorted(
        k for k, ids in candidates.writer_keys.items() if not del_facts.isdisjoint(ids)
    )
    embeddings = (
        sum(1 for e in candidates.entities if e.id in del_entities and e.embedding)
        + sum(1 for f in candidates.facts if f.id in del_facts and f.embedding)
        + sum(1 for t in candidates.themes if t.id in del_themes and t.embedding)
        + sum(1 for ep in candidates.episodes if ep.id in del_episodes and ep.embedding)
        + sum(1 for ep in put_episodes if ep.embedding is None and ep.id in had_vector)
        + len(del_messages & candidates.message_vectors)
    )
    return PurgePlan(
        selector=sel,
        delete_setting_keys=sorted(candidates.setting_keys) if sel.tenant else [],
        delete_entity_ids=sorted(del_entities),
        delete_relationship_ids=sorted(del_relationships),
        delete_episode_ids=sorted(del_episodes),
        delete_message_ids=sorted(del_messages),
        delete_fact_ids=sorted(del_facts),
        delete_theme_ids=sorted(del_themes),
        delete_writer_keys=writer_keys,
        put_entities=put_entities,
        put_episodes=put_episodes,
        put_facts=put_facts,
        put_themes=put_themes,
        put_relationships=put_relationships,
        embeddings=embeddings,
    )


def _coerce_selector(selector: object, kwargs: Mapping[str, Any]) -> PurgeSelector:
    if isinstance(selector, PurgeSelector):
        if kwargs:
            raise InvalidInputError("give a PurgeSelector or keyword criteria, not both")
        return selector
    if selector is None:
        return PurgeSelector.model_validate(dict(kwargs))
    if isinstance(selector, Mapping):
        return PurgeSelector.model_validate({**selector, **kwargs})
    raise InvalidTypeError(
        f"expected a PurgeSelector or a mapping, got {type(selector).__name__}"
    )


def _report(plan: PurgePlan, ledger: LedgerErasure, *, dry_run: bool) -> PurgeReport:
    return PurgeReport(
        dry_run=dry_run,
        selector_kinds=plan.selector.kinds,
        entities=len(plan.delete_entity_ids),
        relationships=len(plan.delete_relationship_ids),
        episodes=len(plan.delete_episode_ids),
        messages=len(plan.delete_message_ids),
        facts=len(plan.delete_fact_ids),
        themes=len(plan.delete_theme_ids),
        entities_updated=len(plan.put_entities),
        relationships_updated=len(plan.put_relationships),
        episodes_updated=len(plan.put_episodes),
        facts_updated=len(plan.put_facts),
        themes_updated=len(plan.put_themes),
        embeddings=plan.embeddings,
        text_search_entries=len(plan.delete_fact_ids)
        + len(plan.delete_message_ids)
        + len(plan.delete_episode_ids),
        idempotency_keys=len(plan.delete_writer_keys),
        tenant_settings=len(plan.delete_setting_keys),
        ledger_links=ledger.ledger_links,
        ledger_runs=ledger.ledger_runs,
        audit_entries_redacted=ledger.audit_entries_redacted,
    )


def _keeps_copies(index: Any) -> bool:
    """An index that keeps its own copies (the in-memory one); Postgres reads the tables."""
    return index is not None and hasattr(index, "remove") and hasattr(index, "upsert_many")


async def _indexed_episodes(store: Any, plan: PurgePlan) -> list[Any]:
    """The rewritten episodes with their stored messages (vectors included).

    Read inside the unit of work: the index is then updated after the commit without
    awaiting.
    """
    episodes = list(plan.put_episodes)
    mids = [m.id for ep in episodes for m in ep.messages]
    full = await store.get_messages(mids) if mids else {}
    return [
        ep.model_copy(update={"messages": [full.get(m.id, m) for m in ep.messages]})
        for ep in episodes
    ]


def _sync_index(index: Any, plan: PurgePlan, episodes: list[Any]) -> None:
    """Bring an index that keeps its own copies up to date.

    No await: a cancellation cannot land between the commit and this, nor between its
    removals and upserts.
    """
    for rid in (
        *plan.delete_entity_ids, *plan.delete_fact_ids, *plan.delete_theme_ids,
        *plan.delete_episode_ids,
    ):
        index.remove(rid)
    index.upsert_many([*plan.put_entities, *plan.put_facts, *plan.put_themes, *episodes])


@traced(
    "cycgraph.purge",
    lambda report: {"rows": sum(report.counts().values()), "dry_run": report.dry_run},
)
async def purge(
    store: Any,
    selector: PurgeSelector | Mapping[str, Any] | None = None,
    /,
    *,
    index: Any = None,
    ledger: Any = None,
    dry_run: bool = False,
    **criteria: Any,
) -> PurgeReport:
    """Erase a selection for good, with everything derived from it, in one unit of work.

    Args:
        store: A store implementing :class:`~cycgraph_memory.contracts.SupportsPurge`
            (both shipped stores do).
        selector: A :class:`PurgeSelector` (or a dict), or give its fields as keywords
            (``purge(store, entity_ids=[...])``).
        index: The store's index when it keeps its own copies (the in-memory index); it
            is updated after the purge commits. A Postgres index needs nothing.
        ledger: The outcome ledger (``SupportsErasureLog``): its links of deleted facts are
            removed (and never recorded again), gate-audit rows naming them are redacted,
            and one erasure entry is appended. Without it, the ledger is left alone.
        dry_run: Compute the report only; nothing changes.
        **criteria: The selector's fields, when ``selector`` is not given.

    Returns:
        The :class:`PurgeReport` (what was, or would be, erased).

    Raises:
        pydantic.ValidationError: A malformed selector (no criterion, bad ids, ...).
        InvalidTypeError: The store cannot purge, the selector has a wrong type, or
            ``dry_run`` is not a real ``bool``.
    """
    sel = _coerce_selector(selector, criteria)
    # A real bool: ``dry_run=None`` (or ``0``) would otherwise erase for good.
    dry_run = check_bool(dry_run, "dry_run")
    if not hasattr(store, "purge_candidates") or not hasattr(store, "apply_purge"):
        raise InvalidTypeError(f"{type(store).__name__} does not support purge")
    if ledger is not None and not hasattr(ledger, "erase_facts"):
        raise InvalidTypeError(f"{type(ledger).__name__} does not support erasure")
    store_tenant = getattr(store, "tenant_id", None)
    ledger_tenant = getattr(ledger, "tenant_id", None)
    if ledger is not None and store_tenant != ledger_tenant:
        raise InvalidInputError(
            f"the ledger's tenant {ledger_tenant!r} is not the store's {store_tenant!r}"
        )
    check_same_tenant(store, index=index)
    async with exclusive_passes(store, "purge", *_REWRITING_PASSES):
        candidates = await store.purge_candidates(sel)
        plan = plan_purge(sel, candidates)
        run_ids = [sel.run_id] if sel.run_id is not None else []
        erased = LedgerErasure()
        if ledger is not None:
            erased = await ledger.erase_facts(
                plan.delete_fact_ids, run_ids, tenant=sel.tenant, dry_run=True
            )
        report = _report(plan, erased, dry_run=dry_run)
        if dry_run:
            return report
        if plan.put_facts:
            plan = plan.model_copy(
                update={"put_facts": await _with_current_counters(store, plan.put_facts)}
            )
        await store.apply_purge(plan)
        episodes = await _indexed_episodes(store, plan) if _keeps_copies(index) else []
        if ledger is not None:
            entry = ErasureEntry(
                selector_kinds=sel.kinds,
                selector_digests=sel.digests(),
                counts=report.counts(),
            )
            await ledger.erase_facts(
                plan.delete_fact_ids, run_ids, tenant=sel.tenant, dry_run=False, entry=entry
            )
            report = report.model_copy(update={"erasure_id": entry.erasure_id})
    _log.info("purge committed: %s", report.counts())
    if _keeps_copies(index):
        _sync_index(index, plan, episodes)
    return report
