"""Benchmark: how fast ``Job.pull`` brings a large output over SSH, against OpenSSH ``scp``.

In a temporary dir: starts a throwaway OpenSSH server on 127.0.0.1 (``tests/sshd.py``), sets up an
ssh_config, known_hosts and a project profile ``box`` as the tests do, and launches a job over SSH
that writes ``--size-mib`` MiB of random bytes to ``$RGT_OUT/random.bin``. Then, on the same
loopback server and file, ``--repeats`` times each, interleaved:

* ``rgt_pull``: ``Job.pull()`` (status, end-of-job manifest, remote listing with sha256 on the
  remote, SFTP stream, sha256 while writing, fsync, checkpoint loads, run folder, registry);
* ``scp``: OpenSSH ``scp`` of the file alone, forced to the cipher and MAC paramiko negotiated;
* ``paramiko_get``: plain ``paramiko.SFTPClient.get()`` on a warm connection.

Components, timed the same way, show where the pull's time goes: rgt's SFTP read path alone
(``transport.open_read``, read and dropped, in the pull's 1 MiB reads and in 32 KiB reads),
``paramiko_get`` with AES-GCM, ``scp`` with OpenSSH's own default cipher, the file streamed as
the stdout of ``tail -c +1`` on an exec channel of rgt's connection, local sha256, a local write
and fsync of the same size, and the
pull's phases (every ``Job.pull`` is timed through wrappers around its steps; their cost is a few
microseconds per MiB). Medians are reported; MB/s is 10^6 bytes per second. Writes
``bench/results/transfer.json`` (or ``--out``).

    python bench/transfer.py [--size-mib 1024] [--repeats 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _ssh_env import SshBox, machine_info, ssh_box, summarize  # noqa: E402

BLOCK = 16 << 20
JOB = """\
import os, rgt_jupyter.job as job
size = {size}
with open(os.path.join(os.environ["RGT_OUT"], "random.bin"), "wb") as fh:
    left = size
    while left:
        n = min(left, {block})
        fh.write(os.urandom(n))
        left -= n
job.save_results({{"bytes": size}})
"""
KEX_RE = re.compile(r"kex: server->client cipher: (\S+) MAC: (\S+)")


class PhaseClock:
    """Seconds spent in named steps, summed over calls. A step named ``fetch.*`` or ``other.*``
    is booked under ``fetch.`` while a ``fetch`` step runs, else under ``other.``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.in_fetch = False

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn``, timed under ``name``."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            key = name.replace("*", "fetch" if self.in_fetch else "other")
            outer = self.in_fetch
            self.in_fetch = outer or name == "fetch"
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[key] += time.perf_counter() - t0
                self.in_fetch = outer

        return timed


class _TimedFile:
    """A file object whose ``read`` / ``write`` are timed; everything else passes through."""

    def __init__(self, inner: Any, clock: PhaseClock, name: str) -> None:
        self._inner = inner
        self._clock = clock
        self._name = name

    def read(self, n: int = -1) -> bytes:
        t0 = time.perf_counter()
        try:
            return bytes(self._inner.read(n))
        finally:
            self._clock.seconds[self._name] += time.perf_counter() - t0

    def write(self, data: bytes) -> int:
        t0 = time.perf_counter()
        try:
            return int(self._inner.write(data))
        finally:
            self._clock.seconds[self._name] += time.perf_counter() - t0

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)

    def __enter__(self) -> _TimedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()


class _TimedSha:
    def __init__(self, clock: PhaseClock, data: bytes = b"") -> None:
        self._sha = hashlib.sha256(data)
        self._clock = clock

    def update(self, data: bytes) -> None:
        t0 = time.perf_counter()
        self._sha.update(data)
        self._clock.seconds["fetch.sha256"] += time.perf_counter() - t0

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


@contextlib.contextmanager
def timed_pull_steps(clock: PhaseClock, transport: Any) -> Iterator[None]:
    """Time the steps of ``rgt_jupyter.pull.pull`` while the block runs."""
    from rgt_jupyter import pull as pull_mod
    from rgt_jupyter import status as status_mod

    open_read = transport.open_read

    def timed_open_read(path: str, offset: int = 0) -> _TimedFile:
        return _TimedFile(open_read(path, offset), clock, "fetch.sftp_read")

    def timed_open(*args: Any, **kwargs: Any) -> _TimedFile:
        return _TimedFile(open(*args, **kwargs), clock, "fetch.local_write")

    shim = type(sys)("hashlib_timed")
    setattr(shim, "sha256", lambda data=b"": _TimedSha(clock, data))  # noqa: B010
    with contextlib.ExitStack() as stack:
        for target, attr, name in (
            (status_mod, "observe", "status"),
            (pull_mod, "remote_listing", "remote_listing"),
            (pull_mod, "_fetch", "fetch"),
            (pull_mod, "load_checkpoints", "checkpoint_loads"),
            (os, "fsync", "*.fsync"),
        ):
            stack.enter_context(
                mock.patch.object(target, attr, clock.wrap(name, getattr(target, attr)))
            )
        stack.enter_context(mock.patch.object(transport, "open_read", timed_open_read))
        stack.enter_context(mock.patch.object(pull_mod, "open", timed_open, create=True))
        stack.enter_context(mock.patch.object(pull_mod, "hashlib", shim))
        yield


def sha256_of(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def settle() -> None:
    """Flush dirty pages, so one measurement does not pay for the previous one's writes."""
    os.sync()
    time.sleep(0.2)


def scp_argv(box: SshBox, src: str, dest: Path, cipher: str | None, mac: str | None) -> list[str]:
    argv = ["scp", "-v", *box.ssh_options(), "-P", str(box.sshd.port)]
    if cipher:
        argv += ["-c", cipher]
    if mac and "gcm" not in (cipher or "") and "poly1305" not in (cipher or ""):
        argv += ["-o", f"MACs={mac}"]
    return [*argv, f"root@127.0.0.1:{src}", str(dest)]


def run_scp(argv: list[str]) -> tuple[float, dict[str, str]]:
    """Seconds for one scp, and the cipher and MAC it negotiated (from its ``-v`` output)."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"scp failed ({proc.returncode}): {proc.stderr[-2000:]}")
    found = KEX_RE.search(proc.stderr)
    if found is None:
        raise RuntimeError("scp -v did not report the negotiated cipher")
    return seconds, {"cipher": found.group(1), "mac": found.group(2)}


def plain_client(box: SshBox, prefer: str | None = None) -> Any:
    """A plain paramiko connection to the box (``prefer``: a cipher tried first)."""
    import paramiko

    def factory(sock: Any, **kwargs: Any) -> paramiko.Transport:
        transport = paramiko.Transport(sock, **kwargs)
        if prefer is not None:
            options = transport.get_security_options()
            options.ciphers = (prefer, *(c for c in options.ciphers if c != prefer))
        return transport

    client = paramiko.SSHClient()
    client.load_system_host_keys(str(box.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        "127.0.0.1",
        port=box.sshd.port,
        username="root",
        key_filename=str(box.sshd.user_key),
        look_for_keys=False,
        allow_agent=False,
        transport_factory=factory,
    )
    return client


def negotiated(client: Any) -> dict[str, str]:
    transport = client.get_transport()
    return {
        "cipher": transport.remote_cipher,
        "mac": transport.remote_mac,
        "local_cipher": transport.local_cipher,
        "local_mac": transport.local_mac,
    }


def time_get(client: Any, src: str, dest: Path) -> float:
    t0 = time.perf_counter()
    sftp = client.open_sftp()
    try:
        sftp.get(src, str(dest))
    finally:
        sftp.close()
    return time.perf_counter() - t0


def time_stream(transport: Any, src: str, read_size: int, size: int) -> float:
    """rgt's SFTP read path alone: ``open_read`` and read to the end, the bytes dropped."""
    t0 = time.perf_counter()
    got = 0
    with transport.open_read(src) as fh:
        while True:
            chunk = fh.read(read_size)
            if not chunk:
                break
            got += len(chunk)
    seconds = time.perf_counter() - t0
    if got != size:
        raise RuntimeError(f"open_read gave {got} bytes of {size}")
    return seconds


def time_exec_stream(transport: Any, src: str, size: int) -> float:
    """The file as the stdout of ``tail -c +1`` on an exec channel of rgt's connection, hashed
    with sha256 as it arrives (no SFTP requests; the SSH window is the only flow control)."""
    t0 = time.perf_counter()
    chan = transport.client().get_transport().open_session()
    try:
        chan.exec_command(shlex.join(["tail", "-c", "+1", src]))
        sha = hashlib.sha256()
        got = 0
        while True:
            chunk = chan.recv(1 << 20)
            if not chunk:
                break
            sha.update(chunk)
            got += len(chunk)
        code = chan.recv_exit_status()
    finally:
        chan.close()
    seconds = time.perf_counter() - t0
    if code != 0 or got != size:
        raise RuntimeError(f"tail exited {code} after {got} bytes of {size}")
    return seconds


def time_write_fsync(path: Path, size: int) -> tuple[float, float]:
    """Seconds to write ``size`` bytes to a new local file in 1 MiB writes, then to fsync it."""
    block = os.urandom(1 << 20)
    t0 = time.perf_counter()
    with open(path, "wb") as fh:
        left = size
        while left > 0:
            fh.write(block if left >= len(block) else block[:left])
            left -= len(block)
        fh.flush()
        t1 = time.perf_counter()
        os.fsync(fh.fileno())
        t2 = time.perf_counter()
    path.unlink()
    return t1 - t0, t2 - t1


def time_sha256(size: int) -> float:
    """sha256 over ``size`` bytes in memory, 1 MiB at a time (what the pull's hashing costs)."""
    block = os.urandom(1 << 20)
    sha = hashlib.sha256()
    t0 = time.perf_counter()
    left = size
    while left > 0:
        sha.update(block if left >= len(block) else block[:left])
        left -= len(block)
    return time.perf_counter() - t0


def run(size_mib: int, repeats: int, out: Path) -> dict[str, Any]:
    """Set up the box, launch the writer job, time every method, write the JSON to ``out``."""
    from rgt_jupyter.api import Job
    from rgt_jupyter.launch import LaunchRequest, launch
    from rgt_jupyter.transport.ssh import connect

    size = size_mib << 20
    with tempfile.TemporaryDirectory(prefix="rgt-bench-xfer-") as tmp_str:
        tmp = Path(tmp_str).resolve()
        with ssh_box(tmp) as box:
            t0 = time.perf_counter()
            row = launch(
                LaunchRequest(
                    program=JOB.format(size=size, block=BLOCK),
                    name="xfer",
                    profile=box.profile,
                    host=box.alias,
                    smoke=False,
                ),
                box.project,
            )
            job = Job(row, box.project)
            state = job.wait(timeout=1800)
            if state != "finished":
                raise RuntimeError(f"the writer job ended {state}:\n{job.log()}")
            writer_job_s = time.perf_counter() - t0
            src = f"{job.spec['out_dir']}/random.bin"
            transport = connect(box.alias, box.project)
            manifest = json.loads(transport.read_text(f"{job.spec['control_dir']}/manifest.json"))
            expected_sha = manifest["files"]["outputs/random.bin"]["sha256"]
            rgt_algos = negotiated(transport.client())
            plain = plain_client(box)
            gcm = plain_client(box, prefer="aes128-gcm@openssh.com")
            plain_algos, gcm_algos = negotiated(plain), negotiated(gcm)
            if (plain_algos["cipher"], plain_algos["mac"]) != (
                rgt_algos["cipher"],
                rgt_algos["mac"],
            ):
                raise RuntimeError(f"paramiko negotiated {plain_algos}, rgt {rgt_algos}")

            dest = tmp / "dest"
            dest.mkdir()
            samples: dict[str, list[float]] = defaultdict(list)
            phases: dict[str, list[float]] = defaultdict(list)
            scp_algos: dict[str, str] = {}
            scp_default_algos: dict[str, str] = {}
            handshake: list[float] = []

            def check_file(path: Path, what: str) -> None:
                if path.stat().st_size != size or sha256_of(path) != expected_sha:
                    raise RuntimeError(f"{what}: {path} is not the job's file")
                path.unlink()

            for _ in range(repeats):
                # (a) the rgt pull
                settle()
                clock = PhaseClock()
                with timed_pull_steps(clock, transport):
                    t0 = time.perf_counter()
                    pulled = job.pull(to=dest / "runs")
                    samples["rgt_pull"].append(time.perf_counter() - t0)
                if not pulled.verified:
                    raise RuntimeError(pulled.text())
                # The run folder stays (run ids are minted per folder); only the big file goes.
                check_file(pulled.outputs / "random.bin", "rgt pull")
                for name, seconds in clock.seconds.items():
                    phases[name].append(seconds)
                phases["total"].append(samples["rgt_pull"][-1])
                # (b) scp with paramiko's cipher and MAC
                settle()
                argv = scp_argv(box, src, dest / "scp.bin", rgt_algos["cipher"], rgt_algos["mac"])
                seconds, scp_algos = run_scp(argv)
                samples["scp"].append(seconds)
                check_file(dest / "scp.bin", "scp")
                # (c) plain paramiko get
                settle()
                samples["paramiko_get"].append(time_get(plain, src, dest / "get.bin"))
                check_file(dest / "get.bin", "paramiko get")
                # components
                settle()
                samples["rgt_read_1mib"].append(time_stream(transport, src, 1 << 20, size))
                samples["rgt_read_32kib"].append(time_stream(transport, src, 1 << 15, size))
                samples["paramiko_get_aes128_gcm"].append(time_get(gcm, src, dest / "gcm.bin"))
                check_file(dest / "gcm.bin", "paramiko get (gcm)")
                settle()
                seconds, scp_default_algos = run_scp(
                    scp_argv(box, src, dest / "scp-default.bin", None, None)
                )
                samples["scp_default_cipher"].append(seconds)
                check_file(dest / "scp-default.bin", "scp (default cipher)")
                samples["rgt_conn_exec_tail_sha256"].append(time_exec_stream(transport, src, size))
                samples["sha256_local"].append(time_sha256(size))
                settle()
                write_s, fsync_s = time_write_fsync(dest / "write.bin", size)
                samples["local_write"].append(write_s)
                samples["local_fsync"].append(fsync_s)
                t0 = time.perf_counter()
                subprocess.run(
                    ["ssh", *box.ssh_options(), "-p", str(box.sshd.port), "root@127.0.0.1", "true"],
                    check=True,
                    capture_output=True,
                    timeout=60,
                )
                handshake.append(time.perf_counter() - t0)
            plain.close()
            gcm.close()

    scp_median = statistics.median(samples["scp"])

    def method(name: str) -> dict[str, Any]:
        seconds = summarize(samples[name])
        return {
            "seconds": seconds,
            "mb_per_s": size / seconds["median"] / 1e6,
            "slowest_mb_per_s": size / seconds["max"] / 1e6,
            "ratio_vs_scp": scp_median / seconds["median"],
            "samples_s": samples[name],
        }

    phase_medians = {name: statistics.median(v) for name, v in sorted(phases.items())}
    fetch_parts = ("fetch.sftp_read", "fetch.sha256", "fetch.local_write", "fetch.fsync")
    report: dict[str, Any] = {
        "benchmark": "transfer",
        "description": "one job output of random bytes brought from a loopback OpenSSH server: "
        "rgt Job.pull vs OpenSSH scp vs paramiko SFTPClient.get, medians of the repeats",
        "size_mib": size_mib,
        "size_bytes": size,
        "size_note": "default size (1024 MiB)" if size_mib == 1024 else "reduced size",
        "repeats": repeats,
        "units": "seconds; MB/s = 10^6 bytes/s; ratio_vs_scp = scp median s / method median s",
        "writer_job_s": writer_job_s,
        "negotiated": {
            "rgt_paramiko": rgt_algos,
            "plain_paramiko": plain_algos,
            "scp": scp_algos,
            "scp_default": scp_default_algos,
            "paramiko_gcm": gcm_algos,
            "same_cipher_and_mac": (scp_algos.get("cipher"), scp_algos.get("mac"))
            == (rgt_algos["cipher"], rgt_algos["mac"]),
        },
        "methods": {
            "rgt_pull": method("rgt_pull"),
            "scp": method("scp"),
            "paramiko_get": method("paramiko_get"),
        },
        "components": {
            "rgt_read_1mib": {
                **method("rgt_read_1mib"),
                "what": "transport.open_read read to the end in 1 MiB reads (as the pull reads), "
                "no hash, no write",
            },
            "rgt_read_32kib": {
                **method("rgt_read_32kib"),
                "what": "the same in 32 KiB reads (paramiko's SFTP request size)",
            },
            "paramiko_get_aes128_gcm": {
                **method("paramiko_get_aes128_gcm"),
                "what": "paramiko get() with aes128-gcm@openssh.com preferred",
            },
            "scp_default_cipher": {
                **method("scp_default_cipher"),
                "what": "scp with OpenSSH's default cipher choice",
            },
            "rgt_conn_exec_tail_sha256": {
                **method("rgt_conn_exec_tail_sha256"),
                "what": "the file as stdout of `tail -c +1` on an exec channel of rgt's "
                "connection, sha256 as it arrives, no write",
            },
            "sha256_local": {
                **method("sha256_local"),
                "what": "hashlib.sha256 over the same number of bytes in memory, 1 MiB updates",
            },
            "local_write": {
                **method("local_write"),
                "what": "the same number of bytes written to a new local file in 1 MiB writes, "
                "nothing else running",
            },
            "local_fsync": {
                **method("local_fsync"),
                "what": "fsync of that file after the writes",
            },
            "ssh_handshake_s": summarize(handshake),
        },
        "rgt_pull_phases_median_s": {
            **phase_medians,
            "fetch.other": phase_medians.get("fetch", 0.0)
            - sum(phase_medians.get(k, 0.0) for k in fetch_parts),
            "outside_steps": phase_medians["total"]
            - sum(
                phase_medians.get(k, 0.0)
                for k in ("status", "remote_listing", "fetch", "checkpoint_loads")
            ),
        },
        "rgt_pull_phases_note": "status: job state check; remote_listing: the agent hashes the "
        "job's files on the remote; fetch: the SFTP stream with its parts (sftp_read: time the "
        "pull waited for bytes, sha256, local_write, fsync of the part); other.fsync: the "
        "fsyncs of the run folder's small files and dirs; outside_steps: run folder, "
        "manifest, registry",
        "scp_note": "OpenSSH scp (SFTP protocol since OpenSSH 9.0); its time includes starting "
        "the process and the SSH handshake (see components.ssh_handshake_s); it neither hashes "
        "nor fsyncs",
        **machine_info(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the benchmark, print a one-line summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="file size (default 1024)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per method (default 3)")
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results" / "transfer.json",
        help="where to write the JSON (default: bench/results/transfer.json)",
    )
    args = parser.parse_args(argv)
    if args.size_mib < 1 or args.repeats < 1:
        parser.error("--size-mib and --repeats must be at least 1")
    report = run(args.size_mib, args.repeats, args.out)
    m = report["methods"]
    cipher = report["negotiated"]["rgt_paramiko"]
    print(
        f"transfer {report['size_mib']} MiB x{report['repeats']} "
        f"({cipher['cipher']}/{cipher['mac']}): "
        f"rgt pull {m['rgt_pull']['mb_per_s']:.0f} MB/s "
        f"({m['rgt_pull']['ratio_vs_scp']:.2f}x scp), "
        f"scp {m['scp']['mb_per_s']:.0f} MB/s, "
        f"paramiko get {m['paramiko_get']['mb_per_s']:.0f} MB/s "
        f"({m['paramiko_get']['ratio_vs_scp']:.2f}x scp) -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
