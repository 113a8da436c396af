"""VERIFY: is a surprising number a bug, an effect or noise? Checks over pulled runs whose
findings are appended to ``verify/findings.jsonl`` and shown beside the number; nothing is
blocked (see :mod:`.model` for what a job can declare)."""

from __future__ import annotations
