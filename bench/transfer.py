"""Benchmark: how fast ``Job.pull`` brings a large output over SSH, against OpenSSH ``scp``.

In a temporary dir: starts a throwaway OpenSSH server on 127.0.0.1 (``tests/sshd.py``), sets up an
ssh_config, known_hosts and a project profile ``box`` as the tests do, and launches a job over SSH
that writes ``--size-mib`` MiB of random bytes to ``$RGT_OUT/random.bin``. Then, on the same
loopback server and file, ``--repeats`` times each, interleaved:

* ``rgt_pull``: ``Job.pull()`` with the default settings: job state, end-of-job manifest, the
  remote listing (the agent's sha256 manifest), the stream with sha256 and write as bytes land,
  fsync, checkpoint loads, run folder, registry;
* ``rgt_pull_paramiko``: the same with ``RGT_SSH_TRANSFER=paramiko`` (the one transfer setting a
  user can change; ``openssh`` is what ``auto`` picks here);
* ``scp``: OpenSSH ``scp`` of the file alone, forced to the cipher rgt's stream negotiated;
* references: ``scp`` with OpenSSH's default cipher, plain ``paramiko.SFTPClient.get()``.

Also: the pull's phases (medians), local sha256, write and fsync of the same size, and an SSH
handshake. MB/s is 10^6 bytes per second; ratios are scp's median seconds over the method's.
Writes ``bench/results/transfer.json`` (or ``--out``).

    python bench/transfer.py [--size-mib 1024] [--repeats 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
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


@contextlib.contextmanager
def timed_phases(seconds: dict[str, float]) -> Iterator[None]:
    """Add the time spent in each step of ``rgt_jupyter.run.pull.pull`` to ``seconds``."""
    from rgt_jupyter.run import pull as pull_mod

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[name] += time.perf_counter() - t0

        return timed

    with contextlib.ExitStack() as stack:
        for target, attr, name in (
            (pull_mod, "observe", "status"),
            (pull_mod, "remote_listing", "remote_listing"),
            (pull_mod, "_fetch", "fetch"),
            (pull_mod, "load_checkpoints", "checkpoint_loads"),
        ):
            stack.enter_context(mock.patch.object(target, attr, wrap(name, getattr(target, attr))))
        yield


def sha256_of(path: Path) -> str:
    from rgt_jupyter.remote.agent import sha256_file

    return sha256_file(str(path))[0]


def settle() -> None:
    """Flush dirty pages, so one measurement does not pay for the previous one's writes."""
    os.sync()
    time.sleep(0.2)


def stream_cipher(alias: str, project: Path) -> dict[str, str]:
    """The cipher and MAC the OpenSSH stream of rgt negotiates with the box (``ssh -v``)."""
    from rgt_jupyter.transport.ssh import stream
    from rgt_jupyter.transport.ssh.hosts import resolve, ssh_config_path

    binary = stream.openssh_binary()
    assert binary is not None
    argv = stream.openssh_argv(
        binary, alias, ssh_config_path(), resolve(alias, project).known_hosts, "true"
    )
    argv = [a.replace("LogLevel=ERROR", "LogLevel=DEBUG1") for a in argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    found = KEX_RE.search(proc.stderr)
    if not found:
        raise RuntimeError("ssh -v did not report the negotiated cipher")
    return {"cipher": found.group(1), "mac": found.group(2)}


def scp_argv(box: SshBox, src: str, dest: Path, cipher: str | None) -> list[str]:
    argv = ["scp", "-v", *box.ssh_options(), "-P", str(box.sshd.port)]
    if cipher:
        argv += ["-c", cipher]
    return [*argv, f"root@127.0.0.1:{src}", str(dest)]


def run_scp(argv: list[str]) -> tuple[float, dict[str, str]]:
    """Seconds for one scp, and the cipher and MAC it negotiated (from its ``-v`` output)."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"scp failed ({proc.returncode}): {proc.stderr[-2000:]}")
    found = KEX_RE.search(proc.stderr)
    if not found:
        raise RuntimeError("scp -v did not report the negotiated cipher")
    return seconds, {"cipher": found.group(1), "mac": found.group(2)}


def time_get(box: SshBox, src: str, dest: Path) -> float:
    """A plain paramiko ``SFTPClient.get()`` (defaults, fresh client, handshake not timed)."""
    import paramiko

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
    )
    try:
        sftp = client.open_sftp()
        t0 = time.perf_counter()
        sftp.get(src, str(dest))
        return time.perf_counter() - t0
    finally:
        client.close()


def time_write_fsync(path: Path, size: int) -> tuple[float, float]:
    """Seconds to write ``size`` bytes in 1 MiB writes, and to fsync them."""
    block = os.urandom(1 << 20)
    t0 = time.perf_counter()
    with open(path, "wb") as fh:
        left = size
        while left:
            fh.write(block[: min(left, len(block))])
            left -= min(left, len(block))
        fh.flush()
        t1 = time.perf_counter()
        os.fsync(fh.fileno())
    t2 = time.perf_counter()
    path.unlink()
    return t1 - t0, t2 - t1


def time_sha256(size: int) -> float:
    block = os.urandom(1 << 20)
    sha = hashlib.sha256()
    t0 = time.perf_counter()
    for _ in range(size >> 20):
        sha.update(block)
    return time.perf_counter() - t0


def run(size_mib: int, repeats: int, out: Path) -> dict[str, Any]:
    """Set up the box, launch the writer job, time every method, write the JSON to ``out``."""
    from rgt_jupyter import submit
    from rgt_jupyter.jobs.request import LaunchRequest
    from rgt_jupyter.transport.ssh import connect

    size = size_mib << 20
    with tempfile.TemporaryDirectory(prefix="rgt-bench-xfer-") as tmp_str:
        tmp = Path(tmp_str).resolve()
        with ssh_box(tmp) as box:
            t0 = time.perf_counter()
            job = submit(
                LaunchRequest(
                    program=JOB.format(size=size, block=BLOCK),
                    name="xfer",
                    profile=box.profile,
                    host=box.alias,
                    smoke=False,
                ),
                box.project,
            )
            state = job.wait(timeout=1800)
            if state != "finished":
                raise RuntimeError(f"the writer job ended {state}:\n{job.log()}")
            writer_job_s = time.perf_counter() - t0
            src = f"{job.spec.out_dir}/random.bin"
            transport = connect(box.alias, box.project)
            manifest = json.loads(transport.read_text(f"{job.spec.control_dir}/manifest.json"))
            expected_sha = manifest["files"]["outputs/random.bin"]["sha256"]
            rgt_stream = stream_cipher(box.alias, box.project)
            client_transport = transport.client().get_transport()
            assert client_transport is not None
            rgt_paramiko = {
                "cipher": client_transport.remote_cipher,
                "mac": "<implicit>"
                if "gcm" in client_transport.remote_cipher
                else client_transport.remote_mac,
            }

            dest = tmp / "dest"
            dest.mkdir()
            samples: dict[str, list[float]] = defaultdict(list)
            phases: dict[str, dict[str, list[float]]] = {
                "rgt_pull": defaultdict(list),
                "rgt_pull_paramiko": defaultdict(list),
            }
            streams: dict[str, set[str]] = defaultdict(set)
            negotiated: dict[str, dict[str, str]] = {}
            handshake: list[float] = []

            def check_file(path: Path, what: str) -> None:
                if path.stat().st_size != size or sha256_of(path) != expected_sha:
                    raise RuntimeError(f"{what}: {path} is not the job's file")
                path.unlink()

            def time_pull(name: str, method: str) -> None:
                settle()
                seconds: dict[str, float] = defaultdict(float)
                with (
                    mock.patch.dict(os.environ, {"RGT_SSH_TRANSFER": method}),
                    timed_phases(seconds),
                ):
                    t0 = time.perf_counter()
                    pulled = job.pull(to=dest / "runs")
                    samples[name].append(time.perf_counter() - t0)
                if not pulled.verified:
                    raise RuntimeError(pulled.text())
                streams[name].add(str(transport.last_stream))
                # The run folder stays (run ids are minted per folder); only the big file goes.
                check_file(pulled.outputs / "random.bin", name)
                for phase, value in seconds.items():
                    phases[name][phase].append(value)
                phases[name]["total"].append(samples[name][-1])

            for _ in range(repeats):
                time_pull("rgt_pull", "auto")
                settle()
                argv = scp_argv(box, src, dest / "scp.bin", rgt_stream["cipher"])
                seconds, negotiated["scp"] = run_scp(argv)
                samples["scp"].append(seconds)
                check_file(dest / "scp.bin", "scp")
                time_pull("rgt_pull_paramiko", "paramiko")
                settle()
                seconds, negotiated["scp_default"] = run_scp(
                    scp_argv(box, src, dest / "scp-default.bin", None)
                )
                samples["scp_default_cipher"].append(seconds)
                check_file(dest / "scp-default.bin", "scp (default cipher)")
                settle()
                samples["paramiko_get"].append(time_get(box, src, dest / "get.bin"))
                check_file(dest / "get.bin", "paramiko get")
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

    scp_median = statistics.median(samples["scp"])
    default_median = statistics.median(samples["rgt_pull"])

    def method(name: str, what: str) -> dict[str, Any]:
        seconds = summarize(samples[name])
        return {
            "what": what,
            "seconds": seconds,
            "mb_per_s": size / seconds["median"] / 1e6,
            "slowest_mb_per_s": size / seconds["max"] / 1e6,
            "ratio_vs_scp": scp_median / seconds["median"],
            "samples_s": samples[name],
        }

    def phase_medians(name: str) -> dict[str, float]:
        medians = {k: statistics.median(v) for k, v in sorted(phases[name].items())}
        medians["outside_steps"] = medians["total"] - sum(
            medians.get(k, 0.0) for k in ("status", "remote_listing", "fetch", "checkpoint_loads")
        )
        return medians

    same_cipher = negotiated["scp"]["cipher"] == rgt_stream["cipher"] == rgt_paramiko["cipher"]
    report: dict[str, Any] = {
        "benchmark": "transfer",
        "description": "one job output of random bytes brought from a loopback OpenSSH server: "
        "rgt Job.pull vs OpenSSH scp on the same cipher, medians of the repeats",
        "size_mib": size_mib,
        "size_bytes": size,
        "size_note": "default size (1024 MiB)" if size_mib == 1024 else "reduced size",
        "repeats": repeats,
        "units": "seconds; MB/s = 10^6 bytes/s; ratio_vs_scp = scp median s / method median s",
        "writer_job_s": writer_job_s,
        "negotiated": {
            "rgt_stream_openssh": rgt_stream,
            "rgt_connection_paramiko": rgt_paramiko,
            **negotiated,
            "same_cipher_both_sides": same_cipher,
        },
        "goal": "rgt_pull (default settings) >= 1.0x scp; every transfer setting >= 0.5x the "
        "default",
        "goal_met": scp_median / default_median >= 1.0,
        "methods": {
            "rgt_pull": method("rgt_pull", "Job.pull, default settings (RGT_SSH_TRANSFER=auto)"),
            "scp": method("scp", "OpenSSH scp of the file alone, the cipher of rgt's stream"),
            "rgt_pull_paramiko": method(
                "rgt_pull_paramiko", "Job.pull with RGT_SSH_TRANSFER=paramiko"
            ),
        },
        "settings": {
            "RGT_SSH_TRANSFER": {
                "auto": {"stream": sorted(streams["rgt_pull"]), "ratio_vs_default": 1.0},
                "paramiko": {
                    "stream": sorted(streams["rgt_pull_paramiko"]),
                    "ratio_vs_default": default_median
                    / statistics.median(samples["rgt_pull_paramiko"]),
                },
                "openssh": {
                    "stream": ["openssh"],
                    "note": "what auto picked on this machine (see auto.stream): the same path",
                },
            },
            "all_at_least_half_of_default": default_median
            / statistics.median(samples["rgt_pull_paramiko"])
            >= 0.5,
        },
        "references": {
            "scp_default_cipher": method(
                "scp_default_cipher", "scp with OpenSSH's default cipher choice"
            ),
            "paramiko_get": method("paramiko_get", "plain paramiko SFTPClient.get(), defaults"),
        },
        "components": {
            "sha256_local_s": summarize(samples["sha256_local"]),
            "local_write_s": summarize(samples["local_write"]),
            "local_fsync_s": summarize(samples["local_fsync"]),
            "ssh_handshake_s": summarize(handshake),
        },
        "rgt_pull_phases_median_s": phase_medians("rgt_pull"),
        "rgt_pull_paramiko_phases_median_s": phase_medians("rgt_pull_paramiko"),
        "phases_note": "status: job state check; remote_listing: the agent's manifest of the "
        "job's files (hashes of files untouched since the job ended are reused); fetch: the "
        "stream, sha256, write and fsync of each file; outside_steps: run folder, manifest, "
        "registry",
        "scp_note": "OpenSSH scp (SFTP protocol since OpenSSH 9.0); its time includes starting "
        "the process and the SSH handshake (see components.ssh_handshake_s); it neither hashes "
        "nor fsyncs. Loopback: the server and the client share this machine's CPUs",
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
    print(
        f"transfer {report['size_mib']} MiB x{report['repeats']} "
        f"({report['negotiated']['rgt_stream_openssh']['cipher']}): "
        f"rgt pull {m['rgt_pull']['mb_per_s']:.0f} MB/s "
        f"({m['rgt_pull']['ratio_vs_scp']:.2f}x scp), "
        f"scp {m['scp']['mb_per_s']:.0f} MB/s, "
        f"rgt pull via paramiko {m['rgt_pull_paramiko']['mb_per_s']:.0f} MB/s "
        f"({m['rgt_pull_paramiko']['ratio_vs_scp']:.2f}x scp) -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
