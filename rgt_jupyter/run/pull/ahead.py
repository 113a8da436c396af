"""The start of a pull in one round trip: the job's records, the stats its state needs and, once
the job ended, the agent's listing with its hashes, read by one remote command
(:mod:`rgt_jupyter.remote.ship` ``look``) instead of a request each. Reads it did not cover go to
the transport as usual, so the answer is only ever a head start, never a different view."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from ...jobs.spec import JobSpec
from ...remote import ship_argv
from ...transport import Transport
from ...transport.base import FileStat
from ..watch.reads import CachedReads

#: The control dir's records a look at a job reads.
RECORDS = (
    "status.json",
    "exit.json",
    "heartbeat.json",
    "resources.json",
    "error.json",
    "manifest.json",
    "env.json",
    "torch.json",
    "findings.json",
    "log",
)
#: Files longer than this are read the usual way...
LIMIT = 1 << 20
#: ...but the agent's end manifest, which lists every file the job left (a large one for a job
#: of many files, read piecemeal a round trip at a time otherwise), up to the size a listing
#: may have.
MANIFEST_LIMIT = 128 << 20


@dataclass
class Ahead:
    """What the look found: a transport whose reads it answers, and the listing (or None)."""

    view: Transport
    listing: bytes | None = None


def read_ahead(transport: Transport, spec: JobSpec, listing_argv: list[str]) -> Ahead:
    """One look (see the module docstring); where the transport carries no bulk streams, or
    the look fails, the transport itself answers everything."""
    if not transport.bulk:
        return Ahead(transport)
    control = spec.control_dir
    boot = "/proc/sys/kernel/random/boot_id"
    request = {
        "files": [f"{control}/{name}" for name in RECORDS]
        + [f"{spec.out_dir}/results.json", "/proc/uptime", boot],
        "stats": [f"{control}/progress.jsonl", f"{control}/log"]
        + ([spec.ckpt_dir] if spec.ckpt_dir else []),
        "limit": LIMIT,
        "limits": {f"{control}/manifest.json": MANIFEST_LIMIT},
        "listing": {"when": f"{control}/exit.json", "argv": listing_argv},
    }
    done = transport.exec(
        ship_argv(spec.python, "look"), stdin=json.dumps(request).encode(), timeout=3600
    )
    if done.returncode != 0:
        return Ahead(transport)
    try:
        answer = json.loads(done.stdout)
        files = {
            path: None if data is None else base64.b64decode(data)
            for path, data in answer["files"].items()
        }
        stats = {
            path: None if st is None else FileStat(int(st[0]), float(st[1]), bool(st[2]))
            for path, st in answer["stats"].items()
        }
    except (ValueError, KeyError, TypeError, IndexError):
        return Ahead(transport)
    booted = files.pop(boot, None)
    view = CachedReads(transport, files, stats, {}, booted.decode().strip() if booted else None)
    listing = answer.get("listing")
    return Ahead(view, None if listing is None else listing.encode())
