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
	$(PY) -m pip install --quiet -e '.[dev,postgres,adapters]'
	touch $(STAMP)

# Lint and strict typing first (fast), then the whole suite.
# The adapters' tests fail (not skip) when an extra is missing.
test: export CONTINUUM_REQUIRE_EXTRAS = 1
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

# Also what the e2e kit wrote: its working directory (1-setup.sh makes it; a KIT_WORK
# elsewhere is yours to remove) and its scripts' bytecode.
clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
	rm -rf e2e-autonomy-test/work e2e-autonomy-test/lib/__pycache__
