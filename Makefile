# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.stamp-install

.PHONY: demo test lint typecheck pytest docs bench clean

# (Re)install only when the venv is new or pyproject.toml changed.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m cycgraph_memory.demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench migrations

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

pytest: $(STAMP)
	$(BIN)/pytest

# The documentation site (MkDocs Material + mkdocstrings); warnings are errors.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: lint typecheck docs pytest

bench: $(STAMP)
	$(BIN)/python bench/index_search.py
	$(BIN)/python bench/postgres_store.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/extraction_quality.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .pgdata .demo-pgdata site
