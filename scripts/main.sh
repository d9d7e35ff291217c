#!/usr/bin/env bash
# The main job on a bundled example: parse, verify and print the LLaMA block, then compile
# a bundled program to Triton, run it (GPU if present, else the Triton interpreter on CPU)
# and check it against PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== coda-opt examples/llama_block.mlir (parse, verify, print) =="
coda-opt examples/llama_block.mlir
if [ -f examples/run_example.py ]; then
  echo "== compile and run a bundled example =="
  .venv/bin/python examples/run_example.py "$@"
fi
