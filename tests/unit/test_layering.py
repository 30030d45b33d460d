"""Layering: the package root and the pure layers never import the DB stack.

Records, contracts and the algorithms (hierarchy, retrieval, consolidation, retention) import
only records, contracts, numpy and pure helpers, so they run unchanged on every backend and
``import cycgraph_memory`` never pulls in SQLAlchemy or asyncpg.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

PURE_MODULES = [
    "cycgraph_memory",
    "cycgraph_memory.records",
    "cycgraph_memory.contracts",
    "cycgraph_memory.inmemory",
    "cycgraph_memory.hierarchy",
    "cycgraph_memory.hierarchy.pipeline",
    "cycgraph_memory.hierarchy.extractors",
    "cycgraph_memory.embeddings",
    "cycgraph_memory.statistics",
    "cycgraph_memory.retention",
    "cycgraph_memory.retrieval",
    "cycgraph_memory.inmemory.ledger",
    "cycgraph_memory.consolidation",
    "cycgraph_memory.retrieval.pipeline",
    "cycgraph_memory.integration",
    "cycgraph_memory.memory",
    "cycgraph_memory.inspection",
    "cycgraph_memory.progress",
    "cycgraph_memory.observability",
    "cycgraph_memory.export",
    "cycgraph_memory.cli",
    "cycgraph_memory.lifecycle",
]


def test_pure_layers_import_with_the_database_stack_blocked() -> None:
    # A fresh interpreter where importing sqlalchemy, asyncpg or pgvector fails outright.
    code = textwrap.dedent(
        f"""
        import importlib, sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {{"sqlalchemy", "asyncpg", "pgvector", "alembic"}}:
                    raise ImportError("blocked: " + name)
                return None
        sys.meta_path.insert(0, Block())
        for module in {PURE_MODULES!r}:
            importlib.import_module(module)
        leaked = sorted(m for m in sys.modules if m.split(".")[0] in {{"sqlalchemy", "asyncpg"}})
        assert not leaked, leaked
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_postgres_subpackage_reports_a_missing_extra() -> None:
    code = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "sqlalchemy":
                    raise ImportError("No module named 'sqlalchemy'", name="sqlalchemy")
                return None
        sys.meta_path.insert(0, Block())
        try:
            import cycgraph_memory.postgres
        except ImportError as exc:
            from cycgraph_memory.errors import MissingExtraError
            assert isinstance(exc, MissingExtraError), type(exc)
            assert "cycgraph-memory[postgres]" in str(exc), str(exc)
            print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_root_all_is_sorted_and_complete() -> None:
    import cycgraph_memory

    names = cycgraph_memory.__all__

    def kind(name: str) -> tuple[int, str]:
        # isort style: CONSTANTS, then Classes, then functions and dunders.
        return (0 if name.upper() == name else 1 if name[0].isupper() else 2, name)

    assert names == sorted(names, key=kind)
    assert len(set(names)) == len(names)
    assert all(hasattr(cycgraph_memory, n) for n in names)
    for name in ("Memory", "SearchResult", "ForgetReport", "ProgressEvent", "memory_stats"):
        assert name in names
