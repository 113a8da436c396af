#!/usr/bin/env bash
# The test suite (scripts/test.sh, with the same arguments) with two CPU-burning processes
# beside it, at the suite's own priority: the suite must pass on a loaded machine, not only on
# an idle one. The burners end with the suite, however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
burn() { while :; do :; done; }
burn &
first=$!
burn &
second=$!
trap 'kill "$first" "$second" 2>/dev/null || true' EXIT
bash scripts/test.sh "$@"
