"""How a pull's files travel: each file into its ``.part``, hashed as it lands, fsynced, judged
against the listing and the end-of-job manifest, renamed into place. Over a transport that
carries bulk streams, every file comes over one stream (:mod:`.batch`), split across parallel
streams on a far link, and a large file over several byte ranges (:mod:`.ranges`); otherwise one
:meth:`~rgt_jupyter.transport.base.Transport.open_read` at a time."""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from ...errors import PullError
from ...jobs.spec import JobSpec
from ...store.fsutil import SyncBehind, UnconfirmedWrite, fsync_file, sha256_file
from ...store.hashcache import HashCache
from ...transport import Transport
from .batch import Fetched, Wanted, fetch_groups, prepare, split
from .ranges import fetch_ranged, record_path

ProgressFn = Callable[[int, int, str], None]
#: A write that failed for want of room (bytes or quota): said as such, the part kept.
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def safe_relpath(rel: str) -> PurePosixPath:
    """A manifest path as a relative path that cannot leave its folder; raises otherwise."""
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\x00" in rel:
        raise PullError(f"refusing manifest path {rel!r}: it would escape the run folder")
    path = PurePosixPath(rel)
    return path


def _sidecar_sha(transport: Transport, spec: JobSpec, rel: str) -> list[str] | None:
    """The sha256 values recorded by ``save_checkpoint`` for checkpoints/<name>, if any (two
    when the job was stopped while replacing a checkpoint of the same step)."""
    if not rel.startswith("checkpoints/") or rel.endswith(".sha256"):
        return None
    text = transport.read_text(f"{spec.ckpt_dir}/{rel[len('checkpoints/') :]}.sha256")
    shas = [line.split()[0] for line in (text or "").splitlines() if line.split()]
    return shas or None


def _fetch(
    transport: Transport,
    src: str,
    dest: Path,
    size: int,
    progress: Callable[[int], None] | None = None,
) -> tuple[str, int, int]:
    """Bring ``src`` to ``dest.part``, resuming from a part an interrupted pull left behind.

    Returns (sha256, size, bytes sent over the transport now). The part's bytes are re-hashed
    before they are trusted; a part longer than the source is discarded. ``progress`` hears the
    bytes of this file in hand after every chunk. A failed fsync (or background fdatasync)
    removes the part and raises :class:`UnconfirmedWrite`; a full disk leaves the part to resume.
    """
    part = dest.with_name(dest.name + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    if record_path(part).exists():  # begun by parallel streams: its bytes are no prefix
        part.unlink(missing_ok=True)
        record_path(part).unlink()
    sha = hashlib.sha256()
    have = 0
    if part.exists() and part.stat().st_size <= size:
        with open(part, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                sha.update(chunk)
                have += len(chunk)
    sent = 0
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    with transport.open_read(src, offset=have) as fin, open(part, "ab" if have else "wb") as out:
        behind = SyncBehind(out.fileno())
        try:
            try:
                while True:
                    count = fin.readinto(view)
                    if not count:
                        break
                    sha.update(view[:count])
                    sent += count
                    out.write(view[:count])
                    behind.wrote(count)
                    if progress is not None:
                        progress(have + sent)
                out.flush()
            finally:
                behind.close()
            fsync_file(out.fileno())
        except UnconfirmedWrite:
            part.unlink(missing_ok=True)  # never renamed, never resumed: see UnconfirmedWrite
            raise
    return sha.hexdigest(), have + sent, sent


def _judge(
    rel: str,
    got: str,
    size: int,
    entry: dict[str, Any],
    end_manifest: dict[str, Any] | None,
    recorded: list[str] | None,
) -> tuple[str | None, str]:
    """Why the bytes that arrived cannot be trusted (None when they can), and what was expected."""
    if (got != entry["sha256"] or size != int(entry["size"])) and entry.get("reused"):
        return (
            "altered or truncated at the source after the job wrote it (its bytes differ from "
            "the end-of-job manifest)",
            entry["sha256"],
        )
    if got != entry["sha256"] or size != int(entry["size"]):
        return "changed at the source during the pull (still being written?)", entry["sha256"]
    if end_manifest is not None and rel not in end_manifest:
        return "not in the end-of-job manifest: appeared after the job ended", entry["sha256"]
    if end_manifest is not None and end_manifest[rel]["sha256"] != got:
        return (
            "altered or truncated at the source after the job wrote it "
            f"({end_manifest[rel]['size']} bytes written, {size} now)",
            end_manifest[rel]["sha256"],
        )
    if recorded is not None and got not in recorded:
        return "does not match the sha256 recorded when it was saved", recorded[0]
    return None, got


def _file_progress(
    on_progress: ProgressFn | None, before: int, total: int, rel: str
) -> Callable[[int], None] | None:
    """Progress within one file, reported as progress of the whole pull."""
    if on_progress is None:
        return None
    report = on_progress
    return lambda in_file: report(before + in_file, total, rel)


#: Files from this size on may travel over several parallel streams (:mod:`.ranges`).
RANGED_MIN = 64 << 20
#: Small files that come to this much together are split over the parallel streams a far link
#: takes (one stream there is held to its window per round trip, however small its frames).
SPLIT_MIN = 8 << 20


def parallel_streams(transport: Transport) -> int:
    """How many parallel streams a large file takes: ``$RGT_PULL_STREAMS`` when set, else by the
    link's round trip (one stream is held to about its window per round trip: on a near link one
    is enough, on a far one several are needed to fill it)."""
    raw = os.environ.get("RGT_PULL_STREAMS", "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if not 1 <= value <= 32:
            raise PullError(f"RGT_PULL_STREAMS={raw!r}: give a number of streams from 1 to 32")
        return value
    if not transport.bulk:
        return 1
    rtt = transport.round_trip()
    return 1 if rtt < 0.005 else 4 if rtt < 0.03 else 8


def _source(spec: JobSpec, rel: str) -> str:
    prefix, _, sub = rel.partition("/")
    return f"{spec.out_dir if prefix == 'outputs' else spec.ckpt_dir}/{sub}"


def _unconfirmed(rel: str, partial: Path, exc: UnconfirmedWrite) -> BaseException:
    if exc.errno in FULL_ERRNOS:
        return exc  # the disk filled up: said as such by pull()
    return PullError(
        f"the disk did not confirm the write of {rel} ({exc.strerror}): once a "
        "flush to disk failed its bytes cannot be trusted, so they were discarded, "
        "never renamed into place. Nothing was verified or recorded; the files that "
        f"landed before it are kept in {partial} and resumed by the next pull. If "
        "this happens again the disk is failing: check it (dmesg), or pull elsewhere "
        "with --to DIR."
    )


def transfer(
    transport: Transport,
    spec: JobSpec,
    files: dict[str, dict[str, Any]],
    end_manifest: dict[str, Any] | None,
    partial: Path,
    on_progress: ProgressFn | None,
) -> dict[str, Any]:
    """Land every listed file in ``partial``; files already verified there are kept, parts are
    resumed. Returns landed files, mismatches and the bytes sent now.

    Over a transport that carries bulk streams, the files travel together over one stream
    (:mod:`.batch`) and large ones, on a far link, over several (:mod:`.ranges`); otherwise one
    by one. Checkpoints' ``.sha256`` records travel first: each checkpoint is judged against the
    record pulled beside it."""
    landed: list[dict[str, Any]] = []
    mismatches: list[dict[str, Any]] = []
    total = sum(int(f["size"]) for f in files.values())
    done = sent_now = 0
    todo: list[Wanted] = []
    for rel in sorted(files, key=lambda r: (not r.endswith(".sha256"), r)):
        entry = files[rel]
        dest = partial / safe_relpath(rel)
        if (
            dest.exists()
            and sha256_file(str(dest))[0] == entry["sha256"]
            and (end_manifest is None or end_manifest.get(rel, {}).get("sha256") == entry["sha256"])
        ):
            done += int(entry["size"])  # verified by an earlier attempt
            landed.append({"path": rel, "size": int(entry["size"]), "sha256": entry["sha256"]})
            continue
        todo.append(Wanted(rel, _source(spec, rel), dest, int(entry["size"])))

    def recorded(rel: str) -> list[str] | None:
        record = f"{rel}.sha256"
        if not rel.startswith("checkpoints/") or rel.endswith(".sha256"):
            return None
        here = partial / record
        if record in files and here.is_file():  # pulled and verified just before it
            shas = [ln.split()[0] for ln in here.read_text().splitlines() if ln.split()]
            return shas or None
        return _sidecar_sha(transport, spec, rel)

    def land(want: Wanted, got: str, size: int, sent: int) -> None:
        nonlocal done, sent_now
        rel = want.rel
        sent_now += sent
        reason, expected = _judge(rel, got, size, files[rel], end_manifest, recorded(rel))
        if reason is not None:
            mismatches.append(
                {
                    "path": rel,
                    "reason": reason,
                    "expected": expected,
                    "got": got,
                    "kept_as": str(want.part.relative_to(partial)),
                }
            )
            return
        os.replace(want.part, want.dest)
        cache.remember(want.dest, got)  # a gate's re-check need not read it again
        done += size
        if on_progress is not None:
            on_progress(done, total, rel)
        landed.append({"path": rel, "size": size, "sha256": got})

    def vanished(want: Wanted) -> None:
        mismatches.append({"path": want.rel, "reason": "vanished at the source during the pull"})

    with HashCache() as cache:
        _move(transport, spec, todo, land, vanished, on_progress, lambda: done, total, partial)
    if end_manifest is not None:
        for rel in sorted(set(end_manifest) - set(files)):
            mismatches.append(
                {"path": rel, "reason": "written by the job but missing at the source"}
            )
    return {"landed": landed, "mismatches": mismatches, "bytes_sent": sent_now}


def _move(
    transport: Transport,
    spec: JobSpec,
    todo: list[Wanted],
    land: Callable[[Wanted, str, int, int], None],
    vanished: Callable[[Wanted], None],
    on_progress: ProgressFn | None,
    done_now: Callable[[], int],
    total: int,
    partial: Path,
) -> None:
    """Bring ``todo`` (see :func:`transfer`), handing each file to ``land`` or ``vanished``."""
    # The link's round trip is asked only where parallel streams could pay.
    worth = sum(w.size for w in todo) >= SPLIT_MIN
    streams = parallel_streams(transport) if transport.bulk and worth else 1
    # A part that parallel streams began is resumed by them, whatever the link is now.
    ranged = [
        w
        for w in todo
        if transport.bulk
        and ((streams > 1 and w.size >= RANGED_MIN) or record_path(w.part).exists())
    ]
    chosen = {id(w) for w in ranged}
    single = [w for w in todo if id(w) not in chosen]
    try:
        if transport.bulk and single:
            batch = [prepare(w) for w in single]

            def moving(want: Wanted, in_file: int) -> None:
                if on_progress is not None:
                    on_progress(done_now() + in_file, total, want.rel)

            def handle(fetched: Fetched) -> None:
                if fetched.missing:
                    vanished(fetched.want)
                else:
                    land(fetched.want, fetched.sha256, fetched.size, fetched.sent)

            many = sum(w.size - w.have for w in batch) >= SPLIT_MIN
            groups = split(batch, streams if many else 1)
            fetch_groups(transport, spec.python, groups, handle, moving)
            single = []
        for want, by_ranges in [(w, True) for w in ranged] + [(w, False) for w in single]:
            try:
                if by_ranges:
                    got, size, sent = fetch_ranged(
                        transport,
                        spec.python,
                        want.src,
                        want.dest,
                        want.size,
                        streams,
                        _file_progress(on_progress, done_now(), total, want.rel),
                    )
                else:
                    got, size, sent = _fetch(
                        transport,
                        want.src,
                        want.dest,
                        want.size,
                        _file_progress(on_progress, done_now(), total, want.rel),
                    )
            except FileNotFoundError:
                vanished(want)
                continue
            except UnconfirmedWrite as exc:
                exc.rel = want.rel  # type: ignore[attr-defined]
                raise
            land(want, got, size, sent)
    except UnconfirmedWrite as exc:
        raise _unconfirmed(getattr(exc, "rel", "a file"), partial, exc) from exc
