# Everything runs in labs/.venv, built from the pinned requirements.txt.
PYTHON ?= python3
VENV   := labs/.venv
PY     := $(VENV)/bin/python
PORT   ?= 8000
# Material prints a banner about MkDocs 2.0 on every build; it says nothing about this site.
export NO_MKDOCS_2_WARNING := 1
# Every lab folder with a pyproject.toml: its package is installed in development mode, found by glob.
LAB_PROJECTS := $(wildcard labs/*/*/pyproject.toml)

.PHONY: venv test lint site serve bench lab-server clean

venv: $(VENV)/.installed $(VENV)/.develop

# Re-created from scratch whenever requirements.txt changes, so no stale package survives.
$(VENV)/.installed: requirements.txt
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

# The site's code and every lab's package, importable from the venv without any sys.path edit.
$(VENV)/.develop: $(VENV)/.installed pyproject.toml $(LAB_PROJECTS)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
		-e . $(foreach project,$(LAB_PROJECTS),-e $(dir $(project)))
	touch $@

test: venv lint
	$(PY) -m pytest

lint: venv
	$(PY) -m ruff check --quiet .

site: venv
	$(PY) -m mkdocs build --strict --site-dir site

serve: venv
	$(PY) -m mkdocs serve

# Every registered lab's benchmark, as its lab.toml states it (see labs/labkit/run_benchmarks.py).
# Writes this machine's records (results/machines/<lab>/<label>.json); REFERENCE=1 replaces the
# committed reference records instead; MACHINE=<label> names this machine; LAB=<name> runs one lab's
# benchmark only (LAB="a b" several); QUICK=1 runs each with --quick, a smoke test marked in its record.
# exec: run_benchmarks is make's own child, so it sees make die or handle a signal (labkit/run_benchmarks.py).
bench: venv
	exec $(PY) -m labkit.run_benchmarks $(if $(filter 1 yes true,$(REFERENCE)),--reference) \
		$(if $(MACHINE),--machine '$(MACHINE)') $(if $(filter 1 yes true,$(QUICK)),--quick) $(LAB)

# The serving lab's HTTP server on 127.0.0.1:$(PORT); Ctrl-C stops it.
lab-server: venv
	$(PY) -m kv_serving.server --port $(PORT)

clean:
	rm -rf site .cache test-output .pytest_cache .hypothesis .ruff_cache
