# One gate for everything: `make check` (what CI runs, through .ci/run).
VENV ?= .venv
PYTHON ?= python3
BIN = $(VENV)/bin

.PHONY: check fast test lint docs proto js sample clean

check: lint test

# The quick gate while working (about 3 minutes on 2 cores): ruff, then every test but the slow ones,
# the browser's and the fuzz campaign's, over every core, each property test at a tenth of its examples
# (tests/examples.py). `make check` is the whole gate.
fast: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/pytest -q -n auto -m "not slow and not browser and not fuzz" --hypothesis-profile fast

test: $(VENV)/.installed
	$(BIN)/pytest -q -n auto

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

# schemas/README.md and tracekit/rows.py are generated from schemas/tables.toml.
docs: $(VENV)/.installed
	$(BIN)/python -m tracekit.schema > schemas/README.md
	$(BIN)/python -m tracekit.schema rows > tracekit/rows.py

# tracekit/parsers/et_def_pb2.py is generated from schemas/et_def.proto.
proto: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[proto]'
	cd schemas && ../$(BIN)/python -m grpc_tools.protoc -I. --python_out=../tracekit/parsers --pyi_out=../tracekit/parsers et_def.proto

# tracekit/report/vendor/ holds the Vega, Vega-Lite and vega-embed builds that `tracekit report` inlines
# into its pages (so they render offline). Vega-Lite's version is the one altair's schema targets.
VEGA ?= 6.2.0
VEGA_LITE ?= 6.4.1
VEGA_EMBED ?= 7.0.2
VENDOR = tracekit/report/vendor
js:
	rm -rf .js-build && mkdir -p .js-build
	cd .js-build && npm pack --silent vega@$(VEGA) vega-lite@$(VEGA_LITE) vega-embed@$(VEGA_EMBED) >/dev/null
	for pkg in vega-$(VEGA) vega-lite-$(VEGA_LITE) vega-embed-$(VEGA_EMBED); do \
	  name=$${pkg%-*}; mkdir -p .js-build/$$name && tar xzf .js-build/$$pkg.tgz -C .js-build/$$name && \
	  cp .js-build/$$name/package/build/$$name.min.js $(VENDOR)/$$name.min.js && \
	  cp .js-build/$$name/package/LICENSE $(VENDOR)/LICENSE.$$name; \
	done
	printf 'vega=%s\nvega-lite=%s\nvega-embed=%s\n' $(VEGA) $(VEGA_LITE) $(VEGA_EMBED) > $(VENDOR)/VERSIONS
	rm -rf .js-build

clean:
	rm -rf $(VENV) sample.dataset .pytest_cache .ruff_cache
