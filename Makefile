# Everything a fresh machine needs: `make test` and `make demo` create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo bench lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples

test: lint
	$(BIN)/python -m pytest

demo: $(STAMP)
	$(BIN)/lapis demo

bench: $(STAMP)
	$(BIN)/python benchmarks/simulator.py
	$(BIN)/python benchmarks/libs.py
	$(BIN)/python benchmarks/seed_matmul.py
	$(BIN)/python benchmarks/framework.py

clean:
	rm -rf $(VENV) build src/*.egg-info
