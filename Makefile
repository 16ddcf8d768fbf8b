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

# Core + priors + torch + train + trl extras. Re-runs when pyproject.toml or constraints.txt change.
$(VENV)/.installed: $(PY) pyproject.toml constraints.txt
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[dev,priors,torch,train,trl]"
	touch $@

# verl 0.9.1's core_algos for the differential tests, without verl's full training stack.
$(VENV)/.verl: $(VENV)/.installed
	$(PIP) install -q -c constraints.txt --no-deps verl==0.9.1
	$(PIP) install -q -c constraints.txt ray tensordict omegaconf codetiming orjson
	touch $@

# verl with its real dependency set (v05[verl]: verl[verl-core] in the tested range, and the priors the example runs),
# in its own environment: verl pins transformers < 5.11 and (via hydra-core) omegaconf < 2.4, which v05's trainer and
# TRL's adapter must not be held to. The verl adapter tests (tests/adapters/test_verl*.py) run there.
VENV_VERL := .venv-verl
$(VENV_VERL)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV_VERL)
	$(VENV_VERL)/bin/python -m pip install -q --upgrade pip
	$(VENV_VERL)/bin/python -m pip install -q torch==2.13.0
	$(VENV_VERL)/bin/python -m pip install -q -c constraints.txt -e ".[dev,verl]"
	touch $@

install: $(VENV)/.installed

# The main job: warm start (cached), GRPO k=16 / GRPO k=4 / V0.5 / v05_eb at one rollout budget, report in runs/demo.
demo: $(VENV)/.installed
	$(VENV)/bin/v05 demo --out runs/demo

simulate: $(VENV)/.installed
	$(VENV)/bin/v05 simulate --out runs/simulate

VERL_TESTS := $(wildcard tests/adapters/test_verl*.py)

test: $(VENV)/.installed $(VENV)/.verl $(VENV_VERL)/.installed
	$(PY) -m pytest -q -m "not slow" $(addprefix --ignore=,$(VERL_TESTS))
	$(VENV_VERL)/bin/python -m pytest -q -m "not slow" -p no:cacheprovider $(VERL_TESTS) tests/estimators/test_verl_parity.py

test-all: $(VENV)/.installed $(VENV)/.verl $(VENV_VERL)/.installed
	$(PY) -m pytest -q $(addprefix --ignore=,$(VERL_TESTS))
	$(VENV_VERL)/bin/python -m pytest -q -p no:cacheprovider $(VERL_TESTS) tests/estimators/test_verl_parity.py

bench: $(VENV)/.installed $(VENV)/.verl
	$(VENV)/bin/v05 bench core

lint: $(VENV)/.installed
	$(PY) -m ruff check src tests benchmarks

clean:
	rm -rf $(VENV) $(VENV_VERL) runs .pytest_cache .hypothesis
