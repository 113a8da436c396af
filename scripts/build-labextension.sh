#!/usr/bin/env bash
# Build the JupyterLab extension (the "rgt jobs" sidebar, placeholders rendered while writing)
# from labextension/ into rgt_jupyter/labextension/, the prebuilt extension the wheel ships:
# installing the package needs no node and no network. Run after changing labextension/; it needs
# node, npm and the npm registry (the packages pinned by labextension/package-lock.json).
# tests/test_labextension.py fails while the committed build is not the build of the sources.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v npm >/dev/null || { echo "npm is needed to build the extension" >&2; exit 2; }
[ -x .venv/bin/jupyter-builder ] || { echo "run scripts/setup.sh first" >&2; exit 2; }
( cd labextension && npm ci --no-audit --no-fund --loglevel=error )
rm -rf rgt_jupyter/labextension
( cd labextension && PATH="$PWD/../.venv/bin:$PATH" jupyter-builder build . )
# What it was built from: tests/test_labextension.py compares these hashes with the sources.
sha256sum labextension/package.json labextension/package-lock.json labextension/src/*.js \
  labextension/style/*.css > rgt_jupyter/labextension/sources.sha256
# The editable install copies the built files into the environment's share/jupyter.
.venv/bin/python -m pip install -q --no-deps -e . 2>&1 | grep -v "^WARNING: Location" || true
echo "built rgt_jupyter/labextension"
