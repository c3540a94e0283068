#!/usr/bin/env bash
# GPU check: Qwen3-VL-2B and -8B widths (random init, bf16), one command, at most 8 minutes.
# Usage: bash benchmarks/gpu_check.sh [--out DIR] [--only 2b|8b]    (PYTHON=... to pick the interpreter; DIR default ./gpu_check/)
# See benchmarks/README.md, "GPU check". Without a CUDA device it stops at once, exit 2.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check: no CUDA device here (or no torch for $PY): this check needs a GPU. CPU figures: python benchmarks/run.py --quick" >&2
  exit 2
fi
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
timeout 480 "$PY" benchmarks/gpu_check.py "$@"
rc=$?
if [ "$rc" = 124 ]; then
  echo "gpu_check: stopped at the 8-minute limit; the widths finished so far are in DIR/gpu_check.json (default ./gpu_check/)" >&2
fi
exit "$rc"
