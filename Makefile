# One entry point for set-up, running, tests, lint and benchmarks. Every target installs what it needs first,
# so `make run` and `make test` work on a fresh Debian machine with Python 3.11.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= test,spark
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
JAVA_PACKAGE := default-jre-headless
COMMA := ,

.PHONY: system-deps compile install install-test run test test-fast lint typecheck docs screenshots bench bench-deps clean

# redis-server (the embedded default and every test's Redis), rsync (network_move), openssl (test certificates)
# and a Java runtime of version 17 or later (Spark, for archive_ingest and its tests) come from Debian's
# packages, each installed only when missing; the tests also get redis-cli (which creates their Redis Clusters),
# Chromium and its chromedriver (the web console's browser tests), lsyncd (bench/lsyncd.py's side-by-side),
# systemd-nspawn with Debian's own Python venv (the units' tests boot systemd in a container, with dataq in a
# virtualenv there), and Prometheus (promtool checks and tests config/prometheus/'s rules; the monitoring tests
# run a prometheus server on loopback), which running dataq does not need. policy-rc.d keeps apt from starting a
# system-wide redis-server or prometheus that nobody asked for.
system-deps:
	@missing=""; \
	for tool in redis-server rsync openssl; do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -n "$(TEST_DEPS)" ]; then \
		command -v redis-cli >/dev/null 2>&1 || missing="$$missing redis-tools"; \
		[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
		[ -x /usr/bin/chromedriver ] || missing="$$missing chromium-driver"; \
		[ -x /usr/lib/systemd/systemd ] || missing="$$missing systemd"; \
		command -v systemd-nspawn >/dev/null 2>&1 || missing="$$missing systemd-container"; \
		command -v lsyncd >/dev/null 2>&1 || missing="$$missing lsyncd"; \
		/usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1 || missing="$$missing python3-venv"; \
		command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	fi; \
	java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])' || missing="$$missing $(JAVA_PACKAGE)"; \
	if [ -n "$$missing" ]; then \
		echo "installing from Debian's packages:$$missing"; \
		ours=""; if [ ! -e /usr/sbin/policy-rc.d ]; then ours=1; \
			printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee /usr/sbin/policy-rc.d >/dev/null && $(SUDO) chmod +x /usr/sbin/policy-rc.d; fi; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
		status=$$?; [ -z "$$ours" ] || $(SUDO) rm -f /usr/sbin/policy-rc.d; exit $$status; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The editable install is redone only when what it is made from changes (a stamp in the virtualenv): the inner
# loop's `make test-fast` starts its tests at once.
$(VENV)/.installed: setup.cfg pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-$(subst $(COMMA),-,$(EXTRAS)): setup.cfg pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[$(EXTRAS)]'
	touch $@

# Byte-compiled as installing a package compiles them: an editable install in a shell with PYTHONDONTWRITEBYTECODE
# set never writes them, and every daemon a test (or `dataq run`) starts would compile some 40 modules again
# (70-80 ms a start). Up to date, this takes a tenth of a second.
compile: | $(BIN)/python
	$(BIN)/python -m compileall -q dataq cli actions testbed

install: system-deps $(VENV)/.installed compile

install-test: $(BIN)/python
	$(MAKE) --no-print-directory system-deps TEST_DEPS=1
	$(MAKE) --no-print-directory $(VENV)/.installed-$(subst $(COMMA),-,$(EXTRAS))
	$(MAKE) --no-print-directory compile

run: install
	$(BIN)/dataq run $(if $(CONFIG),--config $(CONFIG))

# -rs (pytest.ini) names every skip; with CI set, tests/conftest.py fails the run on one. The suite runs on
# TEST_WORKERS processes (pytest-xdist): most tests wait on daemons and topologies (the suite's processes use about
# 70 % of two cores), so three workers per core keep both busy; 6 against 4 took the whole suite from 289 s to
# 256 s and test-fast from 78 s to 61 s, and 8 made test-fast slower again (64 s). Tests that must share a process
# or a moment run on one worker (XDIST_GROUPS in tests/conftest.py). test-fast is the inner loop: the unit and
# integration tiers.
# pytest keeps each test module with its assertions rewritten as bytecode in __pycache__, but only where Python may
# write bytecode: with PYTHONDONTWRITEBYTECODE set in the caller's environment, every worker rewrote all 200 test
# modules at every run (2.5 s of CPU each before its first test).
TEST_WORKERS ?= 6
PARALLEL := -n $(TEST_WORKERS) --dist loadgroup
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest
test: install-test
	$(PYTEST) -q $(PARALLEL) $(PYTEST_ARGS)

test-fast: install-test
	$(PYTEST) -q $(PARALLEL) tests/unit tests/integration $(PYTEST_ARGS)

lint: install-test
	$(BIN)/ruff check dataq cli actions tests testbed bench
	$(MAKE) --no-print-directory typecheck

# mypy cannot follow setup.cfg's package_dir (cli/ -> dataq.cli, actions/ -> dataq.actions), so it checks a tree
# of symlinks laid out as the installed package is: the same files, under the import names they really have.
typecheck:
	rm -rf build/typecheck && mkdir -p build/typecheck/dataq
	for f in dataq/*; do ln -s ../../../$$f build/typecheck/dataq/; done
	ln -s ../../../cli build/typecheck/dataq/cli && ln -s ../../../actions build/typecheck/dataq/actions
	cd build/typecheck && ../../$(BIN)/mypy --config-file ../../setup.cfg -p dataq

# The documentation site, into site/ (mkdocs.yml; the configuration reference is generated from the code).
docs: install-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The web console's screenshots in the documentation (docs/console-*.png), taken by its browser tests.
screenshots: install-test
	DATAQ_CONSOLE_SCREENSHOTS=docs $(BIN)/pytest -q -p no:cacheprovider tests/web/test_browser_console.py

bench: install-test
	$(BIN)/python bench/store.py

# What the benchmarks compare against (lsyncd, rsync) comes with the test tools.
bench-deps: install-test

clean:
	rm -rf $(VENV) build dist site *.egg-info .mypy_cache .pytest_cache .ruff_cache .hypothesis

# --- systemd (docs/operating/systemd.md) ---------------------------------------------------------------------
# install-systemd (as root) installs the units, the dedicated user `dataq` and, if absent, the settings file.
# The units run /usr/local/bin/dataq; DATAQ_BIN rewrites that path on the way in. DESTDIR stages the files
# into a directory instead (packaging, check-systemd): then no user is created and systemd is not reloaded.
DESTDIR ?=
DATAQ_BIN ?= /usr/local/bin/dataq
UNIT_DIR ?= /etc/systemd/system
GENERATOR_DIR ?= /etc/systemd/system-generators
SYSUSERS_DIR ?= /etc/sysusers.d
CONFIG_DIR ?= /etc/dataq
UNIT_FILES := $(wildcard systemd/*.service systemd/*.target systemd/*.timer)
ROOT_SUDO := $(if $(DESTDIR),,$(SUDO))

.PHONY: install-systemd check-systemd

install-systemd:
	$(ROOT_SUDO) install -d -m 0755 $(DESTDIR)$(UNIT_DIR) $(DESTDIR)$(GENERATOR_DIR) $(DESTDIR)$(SYSUSERS_DIR) \
		$(DESTDIR)$(CONFIG_DIR)
	@for unit in $(UNIT_FILES); do \
		echo "installing $(DESTDIR)$(UNIT_DIR)/$${unit#systemd/}"; \
		sed 's|/usr/local/bin/dataq|$(DATAQ_BIN)|g' "$$unit" | \
			$(ROOT_SUDO) install -m 0644 /dev/stdin "$(DESTDIR)$(UNIT_DIR)/$${unit#systemd/}" || exit 1; \
	done
	@# The generator makes dataq.target want the daemons of every queue in the settings (docs/operating/systemd.md).
	@echo "installing $(DESTDIR)$(GENERATOR_DIR)/dataq-generator"; \
	sed 's|/usr/local/bin/dataq|$(DATAQ_BIN)|g' systemd/dataq-generator | \
		$(ROOT_SUDO) install -m 0755 /dev/stdin "$(DESTDIR)$(GENERATOR_DIR)/dataq-generator"
	$(ROOT_SUDO) install -m 0644 systemd/dataq.sysusers $(DESTDIR)$(SYSUSERS_DIR)/dataq.conf
	@if [ -z "$(DESTDIR)" ]; then \
		if command -v systemd-sysusers >/dev/null 2>&1; then $(SUDO) systemd-sysusers $(SYSUSERS_DIR)/dataq.conf; \
		elif ! id dataq >/dev/null 2>&1; then $(SUDO) useradd --system --user-group --home-dir /var/lib/dataq \
			--no-create-home --shell /usr/sbin/nologin --comment "dataq data queue" dataq; fi || exit 1; \
	fi
	@# The settings may name secrets' files, so they are readable by root and the dataq group only.
	@if [ -e "$(DESTDIR)$(CONFIG_DIR)/dataq.toml" ]; then echo "keeping $(DESTDIR)$(CONFIG_DIR)/dataq.toml"; \
	else $(ROOT_SUDO) install -m 0640 config/dataq.toml $(DESTDIR)$(CONFIG_DIR)/dataq.toml || exit 1; \
		[ -n "$(DESTDIR)" ] || $(SUDO) chgrp dataq $(CONFIG_DIR)/dataq.toml; fi
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then $(SUDO) systemctl daemon-reload; fi
	@[ -n "$(DESTDIR)" ] || [ -x "$(DATAQ_BIN)" ] || echo "warning: $(DATAQ_BIN) does not exist; install dataq there or pass DATAQ_BIN=..."
	@if ls $(DESTDIR)$(UNIT_DIR)/dataq.target.wants/*@* >/dev/null 2>&1; then \
		echo "warning: daemons enabled by hand in $(DESTDIR)$(UNIT_DIR)/dataq.target.wants; the generator starts every configured queue now: systemctl disable 'dataq-push@*' 'dataq-pop@*' dataq-web"; fi
	@[ -n "$(DESTDIR)" ] || echo "next: edit $(CONFIG_DIR)/dataq.toml (its queues), then: systemctl enable --now dataq"

# check-systemd stages exactly what install-systemd installs, with DATAQ_BIN set to this virtualenv's dataq:
# systemd-analyze verify refuses a unit whose ExecStart= binary is missing, and its --root= does not apply to
# that check, so the units are verified as installed on a host where dataq lives in $(VENV). verify exits 0
# after mere warnings (unknown keys, bad dependency names), so any output at all fails the check.
check-systemd: install
	@command -v systemd-analyze >/dev/null 2>&1 || { echo "installing systemd (for systemd-analyze) from Debian's packages"; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd; }
	@stage=$$(mktemp -d) && trap 'rm -rf "$$stage"' EXIT && \
	$(MAKE) --no-print-directory install-systemd DESTDIR="$$stage" DATAQ_BIN="$(abspath $(BIN))/dataq" >/dev/null && \
	cd "$$stage$(UNIT_DIR)" && \
	output=$$(systemd-analyze verify --man=no $(notdir $(UNIT_FILES)) 2>&1); status=$$?; \
	if [ $$status -ne 0 ] || [ -n "$$output" ]; then \
		echo "$$output"; echo "check-systemd: systemd-analyze verify printed the above (exit status $$status)"; exit 1; \
	fi; \
	echo "systemd-analyze verify: $(words $(UNIT_FILES)) units, no warning"; \
	for unit in $(notdir $(filter %.service,$(UNIT_FILES))); do \
		systemd-analyze security --offline=yes --no-pager "$$unit" 2>&1 | grep -F 'Overall exposure' || exit 1; \
	done
