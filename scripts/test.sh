#!/usr/bin/env bash
# Set up, then lint (ruff), type-check (mypy) and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check rgt_jupyter tests bench
ruff format --check rgt_jupyter tests bench
mypy
python -m pytest "$@"
