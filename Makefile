# Everything runs in labs/.venv, built from the pinned requirements.txt.
PYTHON ?= python3
VENV   := labs/.venv
PY     := $(VENV)/bin/python
# Material prints a banner about MkDocs 2.0 on every build; it says nothing about this site.
export NO_MKDOCS_2_WARNING := 1

.PHONY: venv test site serve bench clean

venv: $(VENV)/.installed

# Re-created from scratch whenever requirements.txt changes, so no stale package survives.
$(VENV)/.installed: requirements.txt
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

test: venv
	$(PY) -m pytest

site: venv
	$(PY) -m mkdocs build --strict --site-dir site

serve: venv
	$(PY) -m mkdocs serve

# Every registered lab's benchmark, as its lab.toml states it (see labs/labkit/run_benchmarks.py).
bench: venv
	$(PY) labs/labkit/run_benchmarks.py

clean:
	rm -rf site .cache test-output .pytest_cache .hypothesis
