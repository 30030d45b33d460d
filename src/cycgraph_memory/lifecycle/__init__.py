"""Memory lifecycle: verifiable erasure, portable export/import and re-embedding.

Written against the contracts; the backends provide the optional capabilities
(:class:`~cycgraph_memory.contracts.SupportsPurge`,
:class:`~cycgraph_memory.contracts.SupportsErasureLog`).
"""

from cycgraph_memory.lifecycle.export import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    ExportReport,
    ImportReport,
    export,
    export_lines,
    import_,
)
from cycgraph_memory.lifecycle.models import (
    ERASED_BY,
    MAX_PURGE_IDS,
    REDACTED_FACT_ID,
    ErasureEntry,
    LedgerErasure,
    PurgeCandidates,
    PurgePlan,
    PurgeReport,
    PurgeSelector,
)
from cycgraph_memory.lifecycle.purge import plan_purge, purge
from cycgraph_memory.lifecycle.reembed import (
    REEMBED_RECORD_TYPES,
    ReembedProgress,
    ReembedReport,
    reembed,
)

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "ExportReport",
    "ImportReport",
    "export",
    "export_lines",
    "import_",
    "ERASED_BY",
    "MAX_PURGE_IDS",
    "REDACTED_FACT_ID",
    "REEMBED_RECORD_TYPES",
    "ErasureEntry",
    "LedgerErasure",
    "PurgeCandidates",
    "PurgePlan",
    "PurgeReport",
    "PurgeSelector",
    "ReembedProgress",
    "ReembedReport",
    "plan_purge",
    "purge",
    "reembed",
]
