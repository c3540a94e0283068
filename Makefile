# Two targets are the quick start: `make study` and `make test`.
# Both create .venv on first use. torch==2.13.0 is the CPU build on this machine's
# disk; on a machine that already has a torch in .venv nothing is replaced.
#
# A GPU box: `make setup TORCH_INDEX=https://download.pytorch.org/whl/cu128` installs the
# CUDA build of $(TORCH) from PyTorch's index (replacing a CPU torch already in .venv), so
# pip cannot pick a `+cpu` wheel; `TORCH=torch==X.Y.Z` chooses another version.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
TORCH_INDEX ?=

# the torch install: asked for (TORCH_INDEX or TORCH on the command line) replaces the
# venv's torch; otherwise only a venv without torch gets one
ifneq ($(TORCH_INDEX)$(filter command line,$(origin TORCH)),)
TORCH_INSTALL = $(BIN)/pip install -q --force-reinstall --no-deps $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) && $(BIN)/pip install -q $(TORCH) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
else
TORCH_INSTALL = $(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q $(TORCH)
endif

$(BIN)/vheads: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(TORCH_INSTALL)
	$(BIN)/pip install -q -e ".[test]"
	$(BIN)/python -m vheads._versions
	touch $(BIN)/vheads

setup: $(BIN)/vheads

study: setup
	$(BIN)/vheads study

test: setup
	$(BIN)/python -m pytest

.PHONY: setup study test
