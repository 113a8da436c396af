"""What of a machine's jobs outlives it in object storage: each job's newest checkpoint whose
upload to its bucket was verified, as the job side recorded it (``bucket.json``)."""

from __future__ import annotations

from typing import Any

from ..errors import RgtError
from ..jobs.records import read_json
from ..jobs.spec import JobSpec
from ..transport import Transport


def bucket_copies(
    jobs: list[dict[str, Any]], transports: dict[tuple[str, str], Transport]
) -> list[str]:
    """One line per job with a bucket: its newest durable step there, or why none is."""
    out: list[str] = []
    for row in jobs:
        spec = JobSpec.from_row(row)
        if not spec.bucket:
            continue
        url = spec.bucket.get("lineage_url", "")
        transport = transports.get((spec.transport, spec.host_alias or ""))
        try:
            status = read_json(transport, f"{spec.control_dir}/bucket.json") if transport else None
        except (RgtError, OSError):
            status = None
        step = (status or {}).get("durable_step")
        if step is not None:
            out.append(f"{spec.name}'s checkpoint of step {step} in {url} (its upload verified)")
        else:
            why = (status or {}).get("error") or "none is recorded there"
            out.append(f"no checkpoint of {spec.name} is durable in {url}: {why}")
    return out
