#!/usr/bin/env bash
# Set up rgt-jupyter in ./.venv: Python 3.10+, torch (the CPU wheel where one lies on this
# machine's disk), the package in editable mode with its test and lint tools.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" - <<'PYV'
import sys
if sys.version_info < (3, 10):
    sys.exit(f"rgt-jupyter needs Python 3.10+, found {sys.version.split()[0]}")
PYV
# The tests run against real parts: an OpenSSH server on 127.0.0.1 (and its client), tmux for the
# tmux launcher, a one-node Slurm cluster (slurmctld, slurmd, and munged for its authentication),
# Debian's Chromium for the JupyterLab tests that Playwright drives (it cannot download one), and
# a C compiler for the fault tests' LD_PRELOAD shim, and rsync, an anchor of the transfer benchmark.
need=()
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null || need+=(openssh-client)
command -v tmux >/dev/null || need+=(tmux)
{ [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ]; } || need+=(slurm-wlm)
[ -x /usr/sbin/munged ] || need+=(munge)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v rsync >/dev/null || need+=(rsync)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "note: ${need[*]} missing; the tests need them installed" >&2
  fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
# torch==2.13.0 resolves to the CPU wheel kept on this machine's disk; elsewhere pip picks the
# build for the platform. The package itself only asks for a loose torch>=2.0.
python -m pip install -q "torch==2.13.0" numpy 2>&1 | grep -v "^WARNING: Location" || true
python -c "import torch" || { echo "torch did not install" >&2; exit 1; }
python -m pip install -q -e ".[dev]" 2>&1 | grep -v "^WARNING: Location" || true
python -c "import rgt_jupyter, nbclient, ipykernel, matplotlib, pytest, jupyterlab, playwright, transformers, accelerate, lightning, safetensors, tensorboard, boto3, moto.server" \
  || { echo "setup incomplete: a dependency failed to install" >&2; exit 1; }
# A real Ray cluster for the ray backend's tests, from an environment of its own (.venv-ray): Ray
# pins its own dependencies, and the notebook side of the backend needs no ray (plain HTTP).
[ -x .venv-ray/bin/python ] || "$PY" -m venv .venv-ray
.venv-ray/bin/python -m pip install -q "ray[default]==2.60.0" 2>&1 | grep -v "^WARNING: Location" || true
.venv-ray/bin/ray --version >/dev/null || { echo "setup incomplete: ray did not install" >&2; exit 1; }
echo "rgt-jupyter is set up in .venv (and a Ray cluster's environment in .venv-ray)"
