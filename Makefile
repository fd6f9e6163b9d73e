# Everything sets itself up in .venv from a fresh clone: only python3, pip and make needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Tests that need PostgreSQL use this server (the machine kind starts it; CI too).
export CONTINUUM_TEST_PG_DSN ?= postgresql://postgres@127.0.0.1:5432/postgres

.PHONY: setup browser hosts test check test-browser test-hosts crash demo lint format typecheck clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,postgres,adapters,otel]'
	touch $(STAMP)

# The operator page's tests drive Debian's chromium through chromedriver (Selenium): installed
# here when missing (as root, or with sudo), after saying what and why. Checked on every run,
# not stamped: a new machine with an old .venv still gets them.
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		echo "make: the operator page's browser tests (tests/e2e/test_operator_page.py) need"; \
		echo "make: Debian's chromium and chromium-driver; installing them with apt-get now"; \
		echo "make: (about 115 packages, a few hundred MB; as root, or with sudo)"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; \
	fi

# The real coding hosts tests/hosts/ drives (Claude Code, Gemini CLI, Codex, Kilo Code), at
# the versions pinned in tests/hosts/hosts.toml, from the npm registry into .cache/hosts/
# (about 1.2 GB; needs Node.js and npm, which this machine kind has). Each is installed
# once; later runs only check that it is in place.
hosts: $(STAMP)
	$(PY) scripts/install_hosts.py

# Just the browser tests of the operator page (they run in `make test` too).
test-browser: $(STAMP) browser
	$(PY) -m pytest -q -p no:cacheprovider tests/e2e/test_operator_page.py

# Just the real-host tests (they run in `make test` too).
test-hosts: $(STAMP) hosts
	$(PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadfile tests/hosts

# Lint and typing first (fast: mypy strict over src, then tests/mypy.ini over the test
# code), then the whole suite: the in-process suites under branch coverage (pytest-cov,
# in $(WORKERS) workers like the rest); the property tests (tests/property: hypothesis,
# pure Python loops that a coverage tracer makes 2-2.5x slower, and whose code the other
# suites cover) without it; then the ones that work through real subprocesses (crashes,
# MCP over stdio, hooks, adapters, e2e, the real hosts, the browser), which coverage of
# this process would not see anyway. The adapters' tests fail (not skip) when an extra is
# missing. Every part runs even when one fails; the last line says what passed, what
# failed and how long it took. The hooks' tests whose hook processes a host runs (the
# host simulator, `continuum try`) then run once more with every hook handed to a
# resident gate (`continuum hooks serve`, one per worker): the same proofs, through the
# gate.
IN_PROCESS := tests/unit tests/contract tests/cli
PROPERTY := tests/property
THROUGH_GATE := $(addprefix tests/hooks/,test_approvals.py test_crash_matrix.py \
	test_fail_closed.py test_observe.py test_sessions.py test_try.py)
# The suites mostly wait (real hosts starting, killed agents, servers, CLI subprocesses):
# four workers on two cores (pytest-xdist; the subprocess suites a file to a worker).
# WORKERS=0 runs them in order.
WORKERS ?= 4
REPORTS := .cache/test-reports
test: export CONTINUUM_REQUIRE_EXTRAS = 1
test: $(STAMP) browser hosts
	@echo "make test: lint and types, then about 2,500 in-process tests, about 120 property"
	@echo "make test: tests, about 970 subprocess tests with the four real hosts and a browser,"
	@echo "make test: and the hooks' through a resident gate (15-25 min on 2 cores, by machine)."
	@echo "make test: 'make check' is the 3-minute loop for editing."
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/ruff format --check src tests scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --config-file tests/mypy.ini tests
	@mkdir -p $(REPORTS) && rm -f $(REPORTS)/*.xml
	@started=$$(date +%s); rc=0; \
	$(PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) --cov=continuum --cov-branch \
		--cov-report= --junitxml=$(REPORTS)/in-process.xml $(IN_PROCESS) || rc=1; \
	$(PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) \
		--junitxml=$(REPORTS)/property.xml $(PROPERTY) || rc=1; \
	$(PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadfile --durations=10 \
		--junitxml=$(REPORTS)/subprocess.xml \
		$(addprefix --ignore=,$(IN_PROCESS) $(PROPERTY)) || rc=1; \
	CONTINUUM_TEST_GATE=1 $(PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadfile \
		--junitxml=$(REPORTS)/through-gate.xml $(THROUGH_GATE) || rc=1; \
	cover=$$($(PY) -m coverage report --format=total 2>/dev/null); \
	$(PY) scripts/test_summary.py --started $$started --coverage "$$cover" \
		in-process=$(REPORTS)/in-process.xml property=$(REPORTS)/property.xml \
		subprocess=$(REPORTS)/subprocess.xml through-gate=$(REPORTS)/through-gate.xml \
		|| rc=1; \
	exit $$rc

# The edit loop (under 3 minutes on 2 cores): lint, types, the unit tests and the store
# contract on SQLite. `make test` runs everything.
check: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/ruff format --check src tests scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --config-file tests/mypy.ini tests
	$(PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) tests/unit \
		tests/contract/test_store_contract.py -k "not postgres"

# Just the fault suites (real kills, power loss, disk faults, tampering), for iteration.
crash: export CONTINUUM_REQUIRE_EXTRAS = 1
crash: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/crash tests/property/test_ledger_faults.py \
		tests/hooks/test_crash_matrix.py tests/hooks/test_fail_closed.py \
		tests/adapters/test_crash_matrix.py

demo: $(STAMP)
	$(PY) scripts/demo.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/ruff format --check src tests scripts

# Rewrites the code in the house format (ruff format; line length in pyproject.toml).
format: $(STAMP)
	$(VENV)/bin/ruff format src tests scripts

typecheck: $(STAMP)
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --config-file tests/mypy.ini tests

# Also what the e2e kit wrote: its working directory (1-setup.sh makes it; a KIT_WORK
# elsewhere is yours to remove) and its scripts' bytecode.
clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .coverage .cache/hosts
	rm -rf e2e-autonomy-test/work e2e-autonomy-test/lib/__pycache__
