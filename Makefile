# The README's two commands: `make demo` (the main job: training) and `make test` (the test suite).
# Both create .venv on first use and install what they need; torch is pinned and installed first
# (an unpinned torch would pull a multi-GB CUDA build).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
export OPENBLAS_NUM_THREADS ?= 1
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1

.PHONY: demo simulate test test-all bench lint clean install

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Core + priors + torch extras. Re-runs when pyproject.toml or constraints.txt change.
$(VENV)/.installed: $(PY) pyproject.toml constraints.txt
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[dev,priors,torch,train,trl]"
	touch $@

# verl 0.9.1's core_algos for the differential tests, without verl's full training stack.
$(VENV)/.verl: $(VENV)/.installed
	$(PIP) install -q -c constraints.txt --no-deps verl==0.9.1
	$(PIP) install -q -c constraints.txt ray tensordict omegaconf codetiming orjson
	touch $@

install: $(VENV)/.installed

# The main job: warm start (cached), GRPO k=16 / GRPO k=4 / V0.5 / v05_eb at one rollout budget, report in runs/demo.
demo: $(VENV)/.installed
	$(VENV)/bin/v05 demo --out runs/demo

simulate: $(VENV)/.installed
	$(VENV)/bin/v05 simulate --out runs/simulate

test: $(VENV)/.installed $(VENV)/.verl
	$(PY) -m pytest -q -m "not slow"

test-all: $(VENV)/.installed $(VENV)/.verl
	$(PY) -m pytest -q

bench: $(VENV)/.installed $(VENV)/.verl
	$(VENV)/bin/v05 bench core

lint: $(VENV)/.installed
	$(PY) -m ruff check src tests benchmarks

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
