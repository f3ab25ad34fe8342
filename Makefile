# Set-up on a fresh machine: `make demo` or `make test` create .venv if missing,
# install the project with its dev extra, then run the demo or the test suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo demo-behavior test install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python scripts/demo.py

demo-behavior: $(STAMP)
	$(BIN)/python scripts/demo_behavior.py

test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto   # one worker per core (pytest-xdist)

clean:
	rm -rf $(VENV)
