# Set-up and the two entry points the README names: `make demo` and `make test`.
# A virtual environment in .venv that also sees the system's site-packages, so a
# user who already has torch keeps theirs; otherwise the CPU build of torch is
# installed (never the multi-GB CUDA wheels).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.lrdoctor-installed

.PHONY: install install-test demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv --system-site-packages $(VENV)

$(VENV)/.torch: $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "torch==2.13.0"
	touch $@

$(STAMP): $(VENV)/.torch pyproject.toml
	$(BIN)/python -m pip install -q -e .
	touch $@

$(STAMP)-test: $(STAMP)
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q -e '.[test]'
	touch $@

install: $(STAMP)
install-test: $(STAMP)-test

demo: install
	$(BIN)/python scripts/demo.py

test: install-test
	$(BIN)/python -m ruff check lrdoctor tests scripts benchmarks
	$(BIN)/python -m pytest -q

bench: install-test
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV)
