# Two targets are the quick start: `make study` and `make test`.
# Both create .venv on first use. torch==2.13.0 is the CPU build on this machine's
# disk; on a machine that already has a torch in .venv nothing is replaced.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/vheads: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test]"
	touch $(BIN)/vheads

setup: $(BIN)/vheads

study: setup
	$(BIN)/vheads study

test: setup
	$(BIN)/python -m pytest

.PHONY: setup study test
