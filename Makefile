# Harvester: `make demo` and `make test` work on a fresh machine that has only Python 3.11 (`make test`, run as
# root on Debian or Ubuntu, installs the Chromium its report tests open pages in).
# Both create their own virtual environment (.venv) and install what they need into it.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BUILD := build

.PHONY: demo test test-fast lint install bench clean chromium

$(STAMP): pyproject.toml layers/harvester/requirements.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Harvester needs Python 3.11+, found " + sys.version'
	$(PYTHON) -m venv $(VENV)
	@# uv installs the versions pip would, in a third of pip's time (and compiles them: a process imports
	@# from bytecode); where uv cannot be had, pip installs and compileall compiles on every core.
	$(BIN)/python -m pip install --quiet uv && $(BIN)/python -m uv pip install --quiet --python $(BIN)/python \
		--compile-bytecode -e '.[dev]' || { $(BIN)/python -m pip install --quiet --no-compile -e '.[dev]' && \
		$(BIN)/python -m compileall -q -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" > /dev/null; }
	@touch $(STAMP)

install: $(STAMP)

## demo: serve the bundled demo site on 127.0.0.1 and crawl it with `harvest crawl`
demo: $(STAMP)
	$(BIN)/python -m harvester.demo

## lint: ruff, cfn-lint on template.yaml and on its samtranslator translation, the project's template checks
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@mkdir -p $(BUILD)
	$(BIN)/cfn-lint template.yaml
	$(BIN)/python -m tests.tools.translate template.yaml $(BUILD)/template.translated.json
	$(BIN)/cfn-lint $(BUILD)/template.translated.json
	$(BIN)/python -m tests.tools.check_template template.yaml

## test: set-up, lint, then every test in two runs at once: the tests held to time budgets (a host's pace
## as the site sees the requests, containers side by side within an invocation's timeout), and niced
## beside them every other test, a module to a worker, the longest first (TEST_WORKERS: a third of
## their time is waiting on servers, delays and subprocesses, so more workers than a 2-core machine's
## cores; four made the run longer: the tests are CPU-bound beside the timed ones). Niced,
## the others take only the CPU the timed tests leave; the timed run's output is printed when both are over.
## The sources are compiled first: the many processes the tests start (the containers, `harvest`
## commands) would each compile what they import where bytecode is not written.
## The slowest tests are listed at the end (`make test` is held to 10 minutes on a 2-core machine).
## While lint runs, one collection of the tests writes pytest's rewritten test modules (even where
## PYTHONDONTWRITEBYTECODE is set), which the four pytest processes then read instead of each rewriting them.
TEST_WORKERS ?= 3
## chromium: the headless browser the crawl report's tests open its page in (tests/browser.py; they fail
## without it): Debian's package, installed when missing and make runs as root; else named, and make stops.
## `make test` installs it while lint runs (a download, not CPU).
chromium:
	@command -v chromium > /dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null; then \
			apt-get update -q > /dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium > /dev/null; \
		else echo "make test needs Chromium for the crawl report's tests: apt-get install chromium (as root)"; exit 1; fi; }
#: The modules marked time_budget (the timed run collects only these).
TIME_BUDGET_MODULES = $(shell grep -rl --include='test_*.py' '^pytestmark = pytest.mark.time_budget' tests)
test: $(STAMP)
	@mkdir -p $(BUILD)
	@$(MAKE) --no-print-directory chromium > $(BUILD)/chromium.log 2>&1 & browser=$$!; \
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest --collect-only -q -p no:cacheprovider > $(BUILD)/collect.log 2>&1 & collect=$$!; \
	$(MAKE) --no-print-directory lint; linted=$$?; wait $$collect; \
	wait $$browser || { cat $(BUILD)/chromium.log; exit 1; }; test $$linted -eq 0
	@$(BIN)/python -m compileall -q -j 0 layers functions tests bench > /dev/null
	@$(BIN)/python -m pytest -m time_budget $(TIME_BUDGET_MODULES) > $(BUILD)/time-budget.log 2>&1 & timed=$$!; \
	trap 'kill $$timed 2>/dev/null' INT TERM; \
	nice -n 10 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 -m "not time_budget"; \
	others=$$?; wait $$timed; budgets=$$?; \
	echo "== the tests held to time budgets ($(BUILD)/time-budget.log)"; tail -n 40 $(BUILD)/time-budget.log; \
	test $$others -eq 0 && test $$budgets -eq 0

## test-fast: the edit loop's tests: unit tests and the contract tests on the local backend (no moto, no
## crawls end to end, no kill-after-every-write runs); `make test` runs every test
FAST := tests/engine tests/crawldb tests/model tests/pipeline tests/sitemap tests/fetch tests/archive tests/contract tests/template tests/politeness/test_gate.py
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" -k "not aws" --ignore=tests/engine/test_faults.py $(FAST)

## bench: the performance scripts of bench/ (figures and ratios against named baselines); installs the
## `bench` extra (the parsers bench/parser.py compares against) the first time and whenever pyproject.toml changes
bench: $(STAMP)
	@test $(VENV)/.installed-bench -nt pyproject.toml || \
		{ $(BIN)/python -m pip install --quiet -e '.[bench]' && touch $(VENV)/.installed-bench; }
	@for script in bench/[!_]*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) $(BUILD) .pytest_cache .ruff_cache .harvest .harvest-demo
