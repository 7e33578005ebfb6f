# One gate for everything: `make check` (what CI runs, through .ci/run).
VENV ?= .venv
PYTHON ?= python3
BIN = $(VENV)/bin

.PHONY: check test lint docs proto sample clean

check: lint test

test: $(VENV)/.installed
	$(BIN)/pytest -q

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# schemas/README.md is generated from schemas/tables.toml.
docs: $(VENV)/.installed
	$(BIN)/python -m tracekit.schema > schemas/README.md

# tracekit/parsers/et_def_pb2.py is generated from schemas/et_def.proto.
proto: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[proto]'
	cd schemas && ../$(BIN)/python -m grpc_tools.protoc -I. --python_out=../tracekit/parsers --pyi_out=../tracekit/parsers et_def.proto

clean:
	rm -rf $(VENV) sample.dataset .pytest_cache .ruff_cache
