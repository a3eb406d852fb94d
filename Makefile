# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-integrations install install-test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e .

install-test: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]' -e ./client

demo: install
	$(BIN)/losswatch analyze sample_runs --fail-on never

test: install-test
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -m 'not slow'

# Real trainers posting to a real service: torch at its exact pin (the CPU wheel on this
# machine's disk; a looser requirement would pull a multi-GB CUDA build), then transformers
# (with accelerate, which its Trainer needs) and lightning at versions known to work with it;
# Keras 3 on its own, run on the torch backend, so that it failing to install skips its test only.
INTEGRATION_DEPS := torch==2.13.0 transformers==5.24.0 accelerate==1.15.0 lightning==2.6.6
KERAS_DEPS := keras==3.15.1

test-integrations: install-test
	$(BIN)/pip install --quiet $(INTEGRATION_DEPS) || echo "the trainers could not be installed: the integration tests will skip" >&2
	$(BIN)/pip install --quiet $(KERAS_DEPS) || echo "keras could not be installed: its integration test will skip" >&2
	LOSSWATCH_INTEGRATIONS=1 $(BIN)/python -m pytest -q tests/integrations

bench: install-test
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/analyze.py
	$(BIN)/python bench/accuracy.py
	$(BIN)/python bench/scan.py
	$(BIN)/python bench/delivery.py
	$(BIN)/python bench/api.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/series.py
	$(BIN)/python bench/chaos.py
	$(BIN)/python bench/liveness.py
	$(BIN)/python bench/remote.py
	$(BIN)/python bench/client.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/append.py
	$(BIN)/python bench/analyze_memory.py
	$(BIN)/python bench/falling_spikes.py
	$(BIN)/python bench/flat_eval.py
	$(BIN)/python bench/rounded.py
	$(BIN)/python bench/schedules.py

clean:
	rm -rf $(VENV) build *.egg-info app/ingest/_tfrecord.c app/ingest/*.so
