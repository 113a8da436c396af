"""Pull a job's outputs and checkpoints into an immutable ``runs/<run-id>/``, verified.

Every file lands as ``<name>.part``, hashed while written, fsynced, and is renamed to its name only
when its sha256 equals both the pull-time listing and the end-of-job manifest the agent wrote
when the job exited (so a file altered or truncated after the job wrote it is caught). Each
checkpoint (:mod:`.formats` says which files, and names the folders frameworks write) is then
loaded in a separate, time-limited process with ``weights_only=True`` and an allowlist of plain
data types. The run is ``verified`` only when every hash matches and every checkpoint loads, or,
pickled with a class outside the allowlist, stands verified by sha256 only (disclosed as
``pickled: not loaded, it would run code``); ``verification.json`` and ``run.json`` say per file
which were loaded, which only hashed. The whole run dir is
assembled under a hidden partial name and renamed into place at the end; an existing run is never
touched, and a second pull mints a new run id.

The destination's room (bytes and inodes) is checked before anything is written. A disk that
fills up anyway (another writer) ends the pull with what is kept and what is still needed; the
parts that landed are resumed by the next pull. A part whose fsync failed is discarded instead:
the disk did not confirm its bytes, so they are never renamed into place nor resumed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...backends import observe
from ...errors import PullError, TransportError
from ...jobs.records import read_record
from ...jobs.spec import JobSpec
from ...remote import ship_argv
from ...store.fsutil import atomic_write_bytes, fsync_dir
from ...store.locks import held, lock_path
from ...store.project import runs_dir
from ...store.registry import Registry
from ...transport import Transport, get_transport
from ..phases import phase
from ..secrets import drop_leftover_secrets
from .ahead import read_ahead
from .formats import PASSING, file_checks, to_check, verdict
from .loader import load_checkpoints, warm_loader
from .record import build_run_json
from .resume import partial_dir, settle_interrupted_pull
from .transfer import FULL_ERRNOS, ProgressFn, safe_relpath, transfer

#: One pull takes at most this many files: past it, per-file work (a fsync, a rename, a hash
#: each) takes hours and a listing that claims more is more likely hostile than useful.
MAX_LISTING_FILES = 100_000
#: The listing's JSON is refused unread past this size: parsed, it takes several times as much
#: memory (a listing of MAX_LISTING_FILES files with ordinary names is some 30 MB).
MAX_LISTING_BYTES = 128 << 20


def _write_json(path: Path, obj: Any) -> None:
    data = json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"
    atomic_write_bytes(path, data.encode())


def listing_argv(spec: JobSpec) -> list[str]:
    """The agent's listing of the job's outputs and checkpoints, with their sha256."""
    return [
        spec.python,
        f"{spec.control_dir}/agent.py",
        "manifest",
        f"--reuse={spec.control_dir}/manifest.json",
        f"outputs={spec.out_dir}",
        f"checkpoints={spec.ckpt_dir}",
    ]


def parse_listing(spec: JobSpec, stdout: bytes) -> dict[str, Any]:
    """The listing's JSON, refused unread past :data:`MAX_LISTING_BYTES`."""
    if len(stdout) > MAX_LISTING_BYTES:
        raise PullError(
            f"the remote listing of job {spec.job_id} is {len(stdout)} bytes, more than "
            f"the {MAX_LISTING_BYTES} a pull reads; nothing was written. Archive the job's files "
            "into fewer (a tar per folder, in the job) and pull again."
        )
    listing: dict[str, Any] = json.loads(stdout)
    return listing


def remote_listing(transport: Transport, spec: JobSpec) -> dict[str, Any]:
    """List the job's outputs and checkpoints with their sha256, where they live (one command
    through the agent). Files unchanged since the end-of-job manifest (same size, mtime, ctime
    and inode) keep its hash; every other file is read and hashed now."""
    result = transport.exec(listing_argv(spec), timeout=3600).check()
    return parse_listing(spec, result.stdout)


def check_space(dest_root: Path, nbytes: int, nfiles: int) -> None:
    """Refuse up front when the files cannot fit (bytes or inodes) where the run will land."""
    existing = next(p for p in (dest_root, *dest_root.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    st = os.statvfs(existing)
    margin = 1 << 20
    if nbytes + margin > free:
        raise PullError(
            f"not enough space in {dest_root}: the pull needs {nbytes} bytes, "
            f"{free} are free. Free some space or pull elsewhere with --to DIR."
        )
    if st.f_files and nfiles + 16 > st.f_favail:
        raise PullError(
            f"not enough inodes in {dest_root}: the pull needs {nfiles + 16} inodes ({nfiles} "
            f"files, their folders and the run's records), {st.f_favail} are free. Free some "
            "there (delete files) or pull elsewhere with --to DIR."
        )


def claim_run_dir(root: Path, job_id: str, taken: set[str]) -> tuple[str, Path]:
    """Claim the next free ``<job-id>-r<n>`` by creating it (empty) so no other pull takes it;
    ids already in the registry (runs pulled into other folders) are skipped too."""
    n = 1
    while True:
        path = root / f"{job_id}-r{n}"
        if path.name in taken:
            n += 1
            continue
        try:
            path.mkdir()
        except FileExistsError:
            n += 1
            continue
        return path.name, path


#: A pulled file's path below its run folder stays this short, leaving room for the folder
#: itself within PATH_MAX (4096 bytes).
MAX_RELPATH_BYTES = 3072


def validate_listing(files: dict[str, dict[str, Any]], refused: list[str]) -> None:
    """Reject a remote listing whole, before any write: unsafe or unholdable names, duplicates
    after normalisation, symlinks, sizes that are not plain non-negative integers, more files
    than :data:`MAX_LISTING_FILES`."""
    if len(files) > MAX_LISTING_FILES:
        raise PullError(
            f"the remote listing was rejected, nothing was written: it names {len(files)} files, "
            f"more than the {MAX_LISTING_FILES} one pull takes. Archive them into fewer files "
            "in the job (a tar per folder of small files) and pull again."
        )
    problems = [f"{rel!r}: a symlink or special file" for rel in refused]
    seen: set[str] = set()
    for rel, entry in files.items():
        try:
            safe_relpath(rel)
        except PullError as exc:
            problems.append(str(exc))
            continue
        if not isinstance(entry, dict):
            problems.append(f"{rel!r}: the listing entry {entry!r} is not a record")
            continue
        try:
            encoded = rel.encode()
        except UnicodeEncodeError:
            problems.append(
                f"{rel!r}: the file name is not UTF-8; rename it on the machine (the job wrote "
                "bytes no portable name can carry) and pull again"
            )
            continue
        if any(len(part) > 255 for part in encoded.split(b"/")):
            problems.append(f"{rel!r}: a name longer than this filesystem can hold")
        if len(encoded) > MAX_RELPATH_BYTES:
            problems.append(f"{rel!r}: a path longer than this filesystem can hold")
        key = rel.rstrip("/")
        if key in seen:
            problems.append(f"{rel!r}: listed twice")
        seen.add(key)
        size, sha = entry.get("size"), entry.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            problems.append(f"{rel!r}: size {size!r} is not a byte count")
        if not isinstance(sha, str) or len(sha) != 64:
            problems.append(f"{rel!r}: no sha256")
    folded: dict[str, str] = {}
    for rel in files:  # a run must hold on a case-insensitive disk too (macOS, Windows)
        other = folded.setdefault(rel.casefold(), rel)
        if other != rel:
            problems.append(
                f"{rel!r} and {other!r}: names that differ only in case would land on one file "
                "on a case-insensitive disk; rename one on the machine and pull again"
            )
    names = set(files)
    for rel in files:  # a file may not also be a folder of another entry
        parts = rel.split("/")
        if any("/".join(parts[:k]) in names for k in range(1, len(parts))):
            problems.append(f"{rel!r}: lies under another listed file")
    if problems:
        raise PullError(
            "the remote listing was rejected, nothing was written: " + "; ".join(problems[:10])
        )


def pull(
    spec: JobSpec,
    project: Path,
    to: Path | None = None,
    on_progress: ProgressFn | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Path:
    """Pull a job into a new run dir and return its path (see the module docstring).

    Pulls of one job take turns (a notebook's ``%pull`` and a terminal's ``rgt pull``, say): a
    second waits for the first (``on_wait(holder)`` says so) and, when the first landed a run
    meanwhile, returns that run instead of pulling the same files again. A pull of this job that
    was killed is settled first (:func:`.resume.settle_interrupted_pull`): when its run had
    landed whole, that run is registered and returned; otherwise this pull resumes from what it
    had fetched.
    """
    before = {r["run_id"] for r in Registry(project).runs(spec.job_id)}
    lock = lock_path(project, "pull", spec.job_id)
    with held(lock, f"the pull of job {spec.job_id}", on_wait=on_wait) as waited:
        landed = [r for r in Registry(project).runs(spec.job_id) if r["run_id"] not in before]
        if waited and landed:
            return Path(landed[-1]["path"])
        return _pull(spec, project, to, on_progress)


def _pull(spec: JobSpec, project: Path, to: Path | None, on_progress: ProgressFn | None) -> Path:
    """:func:`pull`, its lock held."""
    root = (to if to is not None else runs_dir(project)).resolve()
    adopted = settle_interrupted_pull(root, spec.job_id, Registry(project))
    if adopted:
        return adopted[-1]
    transport = get_transport(spec.transport, spec.host_alias, project)
    # The stream that brings the files is started now: its handshake overlaps the look.
    with transport.warm_stream(ship_argv(spec.python, "send")):
        return _pull_from(transport, spec, project, root, on_progress)


def _pull_from(
    transport: Transport, spec: JobSpec, project: Path, root: Path, on_progress: ProgressFn | None
) -> Path:
    """:func:`pull` from its look on, over ``transport``."""
    ahead = read_ahead(transport, spec, listing_argv(spec))  # one round trip, not a dozen
    snap = observe(ahead.view, spec)
    drop_leftover_secrets(transport, spec, snap, Registry(project))
    if not snap.terminal:
        raise PullError(
            f"job {spec.job_id} is {snap.state}: wait for it to end "
            f"(`%watch {spec.name} --wait`), then pull"
        )
    control = spec.control_dir
    end_text = ahead.view.read_text(f"{control}/manifest.json")
    end_manifest = json.loads(end_text)["files"] if end_text else None
    listing = (
        parse_listing(spec, ahead.listing)
        if ahead.listing is not None
        else remote_listing(transport, spec)
    )
    files: dict[str, dict[str, Any]] = listing["files"]
    validate_listing(files, listing.get("refused", []))
    if not files:
        raise PullError(
            f"job {spec.job_id} wrote nothing to $RGT_OUT or its checkpoint dir: "
            "there is nothing to pull"
        )
    # One partial folder per job, beside the runs: an interrupted pull resumes from it.
    partial = partial_dir(root, spec.job_id)
    already = (
        sum(p.stat().st_size for p in partial.rglob("*") if p.is_file()) if partial.exists() else 0
    )
    total = sum(int(f["size"]) for f in files.values())
    check_space(root, max(0, total - already), len(files))
    try:
        with warm_loader() as loader:
            if to_check(files):
                loader.warm()  # its torch import overlaps the transfer
            return _land(
                spec,
                project,
                transport,
                ahead.view,
                snap.state,
                files,
                end_manifest,
                root,
                on_progress,
            )
    except OSError as exc:
        if exc.errno not in FULL_ERRNOS:
            raise
        raise _disk_filled(spec.job_id, root, files, exc) from exc


def _disk_filled(
    job_id: str, root: Path, files: dict[str, dict[str, Any]], exc: OSError
) -> PullError:
    """What a pull that ran out of room (bytes or inodes) midway says: what it still needs, what
    is free now, what is kept."""
    partial = partial_dir(root, job_id)
    need_bytes = need_files = 0
    for rel, entry in files.items():
        dest = partial / safe_relpath(rel)
        part = dest.with_name(dest.name + ".part")
        if dest.is_file():
            continue
        have = part.stat().st_size if part.is_file() else 0
        need_bytes += max(0, int(entry["size"]) - have)
        need_files += 0 if part.is_file() else 1
    kept = (
        sum(p.stat().st_size for p in partial.rglob("*") if p.is_file()) if partial.exists() else 0
    )
    total = sum(int(f["size"]) for f in files.values())
    existing = next(p for p in (root, *root.parents) if p.exists())
    st = os.statvfs(existing)
    return PullError(
        f"the disk under {root} filled up during the pull of {job_id} ({exc.strerror}): the "
        f"pull still needs {need_bytes} bytes and {need_files} inodes (files) there, and "
        f"{st.f_bavail * st.f_frsize} bytes and {st.f_favail} inodes are free now. Nothing was "
        f"verified or recorded; what landed ({kept} of {total} bytes) is kept in {partial} and "
        "is hashed again and resumed by the next pull. Free some space there and pull again, "
        "or pull elsewhere with --to DIR (from the start)."
    )


def _land(
    spec: JobSpec,
    project: Path,
    transport: Transport,
    records: Transport,
    state: str,
    files: dict[str, dict[str, Any]],
    end_manifest: dict[str, Any] | None,
    root: Path,
    on_progress: ProgressFn | None,
) -> Path:
    """Transfer, verify and record the run: assembled in the partial folder, renamed into a
    freshly claimed run dir, added to the registry. Returns the run dir."""
    control = spec.control_dir
    partial = partial_dir(root, spec.job_id)
    total = sum(int(f["size"]) for f in files.values())
    partial.mkdir(parents=True, exist_ok=True)
    try:
        moved = transfer(transport, spec, files, end_manifest, partial, on_progress)
    except TransportError as exc:
        kept = sum(p.stat().st_size for p in partial.rglob("*") if p.is_file())
        raise PullError(
            f"the pull of {spec.job_id} was interrupted ({exc}); {kept} of {total} bytes are "
            "kept and hashed again before they are trusted. Pull again to resume."
        ) from exc
    landed, mismatches = moved["landed"], moved["mismatches"]

    ckpts = [partial / rel for rel in to_check(e["path"] for e in landed)]
    checking = phase(f"checking that {len(ckpts)} checkpoint(s) load (a separate process)")
    with checking if ckpts else contextlib.nullcontext():
        loads = load_checkpoints(ckpts)
    load_report = [
        {"path": str(Path(k).relative_to(partial)), **v} for k, v in sorted(loads.items())
    ]
    checks = file_checks((e["path"] for e in landed), load_report)

    results_src = partial / "outputs" / "results.json"
    if results_src.exists():
        shutil.copyfile(results_src, partial / "results.json")
        landed.append(
            {
                "path": "results.json",
                "size": results_src.stat().st_size,
                "sha256": next(e["sha256"] for e in landed if e["path"] == "outputs/results.json"),
            }
        )
    verified = not mismatches and all(verdict(r) in PASSING for r in load_report) and bool(landed)
    verification = {
        "verified": verified,
        "checked_at": time.time(),
        "reference": (
            "end-of-job manifest written by the agent"
            if end_manifest is not None
            else "pull-time listing only: the job ended without an end-of-job manifest"
        ),
        "summary": (
            f"{len(landed)} files match, {len(mismatches)} mismatched, "
            f"{len(checks['loaded'])}/{len(load_report)} checkpoints load"
            + (f", {len(checks['pickled'])} pickled: not loaded" if checks["pickled"] else "")
            + f", {len(checks['hashed'])} only hashed"
        ),
        "mismatches": mismatches,
        "checkpoint_loads": load_report,
        "files": checks,
        "bytes_sent": moved["bytes_sent"],
        "bytes_total": total,
    }
    taken = {r["run_id"] for r in Registry(project).runs(spec.job_id)}
    run_id, final = claim_run_dir(root, spec.job_id, taken)
    try:
        _write_json(
            partial / "manifest.json",
            {
                "schema": "rgt-manifest/1",
                "run_id": run_id,
                "files": sorted(landed, key=lambda e: e["path"]),
                "totals": {"files": len(landed), "bytes": sum(e["size"] for e in landed)},
                "unverified": mismatches,
            },
        )
        _write_json(partial / "verification.json", verification)
        # The job's machine wrote these: one that cannot be read is left out, not trusted.
        exit_rec = read_record(records, f"{control}/exit.json")[0]
        env_rec = read_record(records, f"{control}/env.json")[0]
        torch_rec = read_record(records, f"{control}/torch.json")[0]
        config_path = partial / "outputs" / "config.json"
        found = read_record(records, f"{control}/findings.json")[0] or {}  # the probes' word
        run_json = build_run_json(
            run_id=run_id,
            spec=spec,
            exit_rec=exit_rec,
            env=env_rec,
            torch=torch_rec,
            config=json.loads(config_path.read_text()) if config_path.exists() else None,
            verification=verification,
            pulled_at=time.time(),
            findings=[f for f in found.get("findings") or [] if isinstance(f, dict)],
        )
        run_json["state_at_pull"] = state
        _write_json(partial / "run.json", run_json)
        fsync_dir(partial)
        os.rename(partial, final)  # replaces the empty folder that claimed the name
    except BaseException:
        with contextlib.suppress(OSError):
            final.rmdir()  # the empty folder that claimed the name, when the rename never came
        raise
    fsync_dir(root)
    Registry(project).add_run(run_id, spec.job_id, final, verified)
    return final
