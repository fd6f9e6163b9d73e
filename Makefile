# Everything sets itself up in .venv from a fresh clone: only python3, pip and make needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Tests that need PostgreSQL use this server (the machine kind starts it; CI too).
export CONTINUUM_TEST_PG_DSN ?= postgresql://postgres@127.0.0.1:5432/postgres

.PHONY: setup test demo lint typecheck clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,postgres]'
	touch $(STAMP)

# Lint and strict typing first (fast), then the whole suite.
test: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -p no:cacheprovider

demo: $(STAMP)
	$(PY) scripts/demo.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts

typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
