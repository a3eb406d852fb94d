# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test install install-test bench clean

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

bench: install-test
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/analyze.py
	$(BIN)/python bench/accuracy.py
	$(BIN)/python bench/scan.py
	$(BIN)/python bench/api.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/chaos.py

clean:
	rm -rf $(VENV) build *.egg-info app/ingest/_tfrecord.c app/ingest/*.so
