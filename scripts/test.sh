#!/usr/bin/env bash
# The whole test suite: lit/FileCheck tests, then pytest (Triton interpreter on CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TRITON_INTERPRET=1
export PATH="$PWD/.venv/bin:$PWD/tools:$PATH"
.venv/bin/lit -sv tests/filecheck
set +e
.venv/bin/python -m pytest -q -n 2 --dist loadscope tests
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$status"
