# Set-up and the two entry points the README names: `make demo` and `make test`.
# A virtual environment in .venv that also sees the system's site-packages, so a
# user who already has torch keeps theirs. Otherwise torch comes from PyTorch's CPU
# index: PyPI's torch pulls about 4.6 GB of CUDA wheels on Linux, never wanted here.
# `make demo` installs the light core plus figures and works without torch (the
# replay says its torch cross-check did not run); `make test` needs torch.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.lrdoctor-installed
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_VERSION ?= 2.13.0
TORCH_CPU := $(BIN)/python -m pip install -q --index-url $(TORCH_INDEX) "torch==$(TORCH_VERSION)"

.PHONY: install install-test demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv --system-site-packages $(VENV)

# The demo: `pip install .[plots]` (no torch), and the CPU torch only when one is at hand.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[plots]'
	@$(BIN)/python -c "import torch" 2>/dev/null || $(TORCH_CPU) 2>/dev/null || \
		echo "torch not installed: the demo runs without lrdoctor's torch engine"
	touch $@

# The tests need torch: the CPU build, or fail (never the CUDA wheels).
$(VENV)/.torch: $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(TORCH_CPU)
	touch $@

# verl and OpenRLHF without their dependencies (Ray, vLLM, CUDA): the randomized
# comparisons of tests/test_replay_peers.py load only their pure packing functions.
# timm, torchtune and torchtitan likewise (their __init__ needs torchvision/torchao/
# spmd_types, no CPU wheels): tests/helpers/pkgsrc.py loads only their scheduler files.
# rlinf likewise (Ray, Megatron, vLLM): tests/replay/test_replay_rlinf.py imports its
# rlinf.utils.data_iter_utils (numpy and torch only) for the dynamic-batching packer.
PEERS := "verl==0.9.1" "openrlhf==0.11.2" "timm==1.0.31" "torchtune==0.6.1" "torchtitan==0.3.0" \
	"rlinf==0.3.0"

$(STAMP)-test: $(STAMP) $(VENV)/.torch
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m pip install -q --no-deps $(PEERS)
	touch $@

install: $(STAMP)
install-test: $(STAMP)-test

demo: install
	$(BIN)/python scripts/demo.py

# Older verl and SkyRL's 3.12-only packer, unpacked (never installed) for the same
# comparisons; a failed download leaves those tests skipped with the reason shown.
PEERS_DIR := $(VENV)/peers
$(PEERS_DIR)/.done: $(STAMP)-test scripts/fetch_peers.py
	$(BIN)/python scripts/fetch_peers.py $(PEERS_DIR)
	touch $@

test: install-test $(PEERS_DIR)/.done
	$(BIN)/python -m ruff check lrdoctor tests scripts benchmarks
	$(BIN)/python -m mypy
	LRDOCTOR_PEER_VERL_OLD=$(PEERS_DIR)/verl-0.9.0 LRDOCTOR_PEER_SKYRL=$(PEERS_DIR)/skyrl-0.4.0 \
		LRDOCTOR_PEER_AREAL=$(PEERS_DIR)/areal-1.0.4 $(BIN)/python -m pytest -q

bench: install-test
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV)
