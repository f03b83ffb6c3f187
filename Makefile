# Everything a fresh machine needs: `make test` and `make demo` create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-fast test-compare fuzz demo bench lint clean browser

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@echo "compiling the simulated GPU's native engine (once; numba keeps it on disk)"
	$(BIN)/python -c "from lapis.hardware.simt.native_scheduler import compile_engine; compile_engine()"
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples docs

test: lint browser
	$(BIN)/python -m pytest

# About a minute and a quarter: every test but those marked slow (model training, benchmarks, big kernels), for a
# change to one layer; run `make test` before committing.
test-fast: lint
	$(BIN)/python -m pytest -m "not slow"

# Every test with every kernel dispatch run twice, by the reference executor and by translated code,
# failing on any difference in memory, counters or faults (LAPIS_SIM=compare; slow).
test-compare: $(STAMP)
	LAPIS_SIM=compare $(BIN)/python -m pytest --deselect tests/test_viewer.py

# The fuzz tests (tests/test_fuzz.py) with 20 times their examples; LAPIS_FUZZ_SCALE=N sets another multiple.
fuzz: $(STAMP)
	LAPIS_FUZZ_SCALE=$${LAPIS_FUZZ_SCALE:-20} $(BIN)/python -m pytest tests/test_fuzz.py

# The trace viewer's test drives Debian's chromium headless; install it (and its driver) when missing.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	  (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1) || \
	  echo "warning: could not install chromium and chromium-driver; the viewer's browser test will fail"

demo: $(STAMP)
	$(BIN)/lapis demo

bench: $(STAMP)
	$(BIN)/python benchmarks/simulator.py
	$(BIN)/python benchmarks/libs.py
	$(BIN)/python benchmarks/libs.py --matmul 1024,2048
	LAPIS_GPUS=mi300x $(BIN)/python benchmarks/libs.py --matmul 1024,2048
	$(BIN)/python benchmarks/seed_matmul.py
	$(BIN)/python benchmarks/cuda_cpp.py
	$(BIN)/python benchmarks/framework.py --digits --cpu-ops
	$(BIN)/python benchmarks/micro.py

clean:
	rm -rf $(VENV) build src/*.egg-info
