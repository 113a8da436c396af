"""Benchmark: rgt's pulls and pushes over SSH, shape by shape, against scp, rsync and ``tar | ssh``,
on a near link (loopback) and a far one (a userspace link with a fixed one-way delay and a
bandwidth cap in front of the same server, ``tests/farlink.py``), in one run.

In a temporary dir: a throwaway OpenSSH server on 127.0.0.1 (``tests/sshd.py``), an ssh_config
with the alias ``testbox`` (direct) and ``farbox`` (through the far link), and a project profile
``box``. Three jobs write the pull shapes (one large file; many 4 KiB files; many 1 MiB files), and
a local tree is the push shape. Then, for each link and each shape, ``--repeats`` times,
interleaved (rgt, then each anchor, then rgt again...), every method from a cold start: rgt's
connections are closed before each sample, as each anchor opens its own.

* pulls: ``Job.pull()`` (state, listing with sha256, the transfer, fsync, checkpoint loads, run
  folder, registry), against ``scp``, ``rsync -a`` and ``ssh cat``/``ssh tar`` of the same files;
* pushes: :func:`rgt_jupyter.jobs.bundle.push_files` of the tree into a fresh job (the
  content-addressed store first empty, then holding the tree; with the configured interpreter
  and the one the host's audit found it to be, as a launch passes them), against ``rsync -a`` into a fresh
  folder and again into the same one, alternating; ``--push-rounds`` times a repeat on the near
  link (each takes seconds), once on the far one. A push ends when the job's files are in
  place; the spare the store then makes of each file a job took runs in the background, and
  the next sample starts once it ended (it is in neither side's figure: ``_settle``);
* resume: a pull cut once about half its bytes came (``tests/faultproxy.py``), then pulled again:
  the bytes sent again over the bytes that had landed, for the batched stream and for a large
  file over parallel streams.

Every anchor runs with the cipher rgt's stream negotiated (``-c``). Also the fixed costs a user
feels: a pull of a job with three small checkpoints, ``rgt jobs`` over 1,000 ended jobs, and
``rgt down`` re-checking a project whose job was pulled. Seconds are medians; ratios are rgt's
median over the anchor's. Writes ``bench/results/transfer.json`` (or ``--out``).

    python bench/transfer.py [--scale 1.0] [--repeats 3] [--push-rounds 3] [--delay-ms 40]
        [--rate-mbit 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _machine import machine  # noqa: E402
from _ssh_env import SshBox, _close_connections, ssh_box  # noqa: E402

from tests.storeprocs import refills  # noqa: E402 - _ssh_env put the repo root on sys.path

CIPHER = "aes128-gcm@openssh.com"
WRITER = """\
import os, rgt_jupyter.job as job
out = os.environ["RGT_OUT"]
count, size = {count}, {size}
for i in range(count):
    sub = os.path.join(out, "d%03d" % (i // 1000))
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "f%05d.bin" % i), "wb") as fh:
        left = size
        while left:
            n = min(left, 16 << 20)
            fh.write(os.urandom(n))
            left -= n
"""
CKPTS = """\
import torch, rgt_jupyter.job as job
for step in (1, 2, 3):
    job.save_checkpoint({"step": step, "w": torch.zeros(64, 64)}, step=step)
job.save_results({"steps": 3})
"""


def shapes(scale: float) -> dict[str, tuple[int, int]]:
    """Pull shapes: name -> (files, bytes each)."""
    return {
        "pull_one_large_file": (1, int((1 << 30) * scale)),
        "pull_many_4k_files": (max(10, int(10_000 * scale)), 4096),
        "pull_many_1m_files": (max(10, int(1_000 * scale)), 1 << 20),
    }


def _ssh_opts(box: SshBox, port: int) -> list[str]:
    return [*box.ssh_options(), "-p", str(port), "-c", CIPHER, "-o", "Compression=no"]


def _ssh_cmd(box: SshBox, port: int) -> str:
    """The ssh command line rsync runs (``-e``), with the same options."""
    return " ".join(["ssh", *_ssh_opts(box, port)])


def _run(argv: list[str], **kw: Any) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, timeout=3600, **kw)
    return time.perf_counter() - t0


def _installed_env() -> dict[str, str]:
    """The environment of a command as an installed package runs it: the package's bytecode
    compiled (as ``pip install`` does) and Python allowed to use it."""
    import compileall

    import rgt_jupyter

    compileall.compile_dir(Path(rgt_jupyter.__file__).parent, quiet=1)
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _settle() -> None:
    """The store's spares made (a push's background work) and dirty pages of the last sample
    written out, so no sample pays for another's."""
    deadline = time.monotonic() + 300
    while refills() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.sync()
    time.sleep(0.5)


@contextlib.contextmanager
def far_alias(box: SshBox, delay_s: float, rate: float) -> Iterator[int]:
    """The alias ``farbox``: the same server behind the far link. Yields the link's port."""
    from tests.farlink import far_link_process

    with far_link_process(box.sshd.port, delay_s, rate) as port:
        known = box.known_hosts.read_text()
        box.known_hosts.write_text(known + f"[127.0.0.1]:{port} {box.sshd.host_pub}\n")
        config = box.ssh_config.read_text()
        box.ssh_config.write_text(
            config + f"\nHost farbox\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
            f"  IdentityFile {box.sshd.user_key}\n  UserKnownHostsFile {box.known_hosts}\n"
        )
        try:
            yield port
        finally:
            box.ssh_config.write_text(config)
            box.known_hosts.write_text(known)


def _launch(box: SshBox, program: str, name: str, host: str, python: str | None = None) -> Any:
    from rgt_jupyter import submit
    from rgt_jupyter.jobs.request import LaunchRequest

    request = LaunchRequest(
        program=program, name=name, profile=box.profile, host=host, smoke=False, python=python
    )
    job = submit(request, box.project)
    state = job.wait(timeout=3600)
    if state != "finished":
        raise RuntimeError(f"the job {name} ended {state}:\n{job.log()}")
    return job


def _as_host(job: Any, host: str) -> Any:
    """The same job seen through another alias (the same machine, the far link)."""
    import dataclasses

    from rgt_jupyter.api import Job

    clone = Job(job._row, job.project)
    clone.spec = dataclasses.replace(job.spec, host_alias=host)
    return clone


class Samples:
    """Seconds (and other figures) by link, shape and method."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(list))
        )

    def add(self, link: str, shape: str, method: str, value: float) -> None:
        self.data[link][shape][method].append(value)

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for link, by_shape in self.data.items():
            out[link] = {}
            for shape, by_method in by_shape.items():
                medians = {m: statistics.median(v) for m, v in by_method.items()}
                rgt = medians.get("rgt")
                out[link][shape] = {
                    "median_s": medians,
                    "samples_s": {m: list(v) for m, v in by_method.items()},
                    "rgt_over_anchor": {
                        m: rgt / s for m, s in medians.items() if m != "rgt" and rgt and s
                    },
                }
        return out


def _rsync(box: SshBox, port: int, src: str, dst: str) -> float:
    return _run(["rsync", "-a", "-s", "-e", _ssh_cmd(box, port), src, dst])


def _scp(box: SshBox, port: int, src: str, dst: Path) -> float:
    return _run(["scp", "-q", *box.ssh_options(), "-P", str(port), "-c", CIPHER, src, str(dst)])


def _remote(box: SshBox, port: int, command: str, local: str) -> float:
    """``ssh HOST COMMAND`` with its output piped into the local shell line ``local``."""
    ssh = f"ssh {shlex.join(_ssh_opts(box, port))} root@127.0.0.1 {shlex.quote(command)}"
    return _shell(f"{ssh} {local}")


def pull_samples(
    box: SshBox, link: str, alias: str, port: int, shape: str, job: Any, here: Path, add: Any
) -> str:
    """One sample of each method for one pull shape; returns how rgt's stream travelled."""
    from rgt_jupyter.transport.ssh import connect

    out_dir = job.spec.out_dir
    seen = _as_host(job, alias)

    def fresh(name: str) -> Path:
        _settle()
        folder = here / name
        folder.mkdir(parents=True)
        return folder

    def rgt() -> None:
        folder = fresh(f"rgt-{time.monotonic_ns()}")
        _close_connections()
        t0 = time.perf_counter()
        pulled = seen.pull(to=folder)
        add("rgt", time.perf_counter() - t0)
        if not pulled.verified:
            raise RuntimeError(pulled.text())
        shutil.rmtree(folder)

    rgt()
    if shape == "pull_one_large_file":
        big = f"{out_dir}/d000/f00000.bin"
        add("scp", _scp(box, port, f"root@127.0.0.1:{big}", fresh("scp") / "f.bin"))
        cat = fresh("cat")
        add("ssh_cat", _remote(box, port, f"cat {shlex.quote(big)}", f"> {cat}/f.bin"))
    add("rsync", _rsync(box, port, f"root@127.0.0.1:{out_dir}/", f"{fresh('rsync')}/"))
    if shape != "pull_one_large_file":
        tar = fresh("tar")
        add(
            "tar_ssh",
            _remote(
                box,
                port,
                f"tar -C {shlex.quote(out_dir)} -cf - .",
                f"| tar -xf - -C {shlex.quote(str(tar))}",
            ),
        )
    rgt()
    shutil.rmtree(here)
    return str(connect(alias, box.project).last_stream)


def _interpreters(box: SshBox, job: Any) -> tuple[str, str | None]:
    """The job's configured interpreter, and the one its host's audit resolved it to."""
    from rgt_jupyter.machines.profiles import load_profile
    from rgt_jupyter.run.audit import audit_cache, resolved_python
    from rgt_jupyter.transport.ssh import connect

    profile = load_profile(job.spec.profile, box.project)
    report = audit_cache(profile, connect(job.spec.host_alias, box.project), box.project)
    return job.spec.python, resolved_python(json.loads(report.read_text()))


def push_samples(
    box: SshBox,
    alias: str,
    port: int,
    pythons: tuple[str, str | None],
    pushed: list[tuple[Path, str]],
    tree: Path,
    remote: Path,
    add: Any,
) -> None:
    """rgt's push of the tree into a fresh job (store empty, then holding it), and rsync of the
    tree into a fresh folder, then again into the same one. ``pythons``: the configured
    interpreter and the one the audit resolved it to, as a launch passes them."""
    from rgt_jupyter.jobs.bundle import push_files
    from rgt_jupyter.remote import path as remote_path
    from rgt_jupyter.transport.ssh import connect

    def rgt(control: str, shape: str) -> None:
        setup = connect(alias, box.project)  # the job's control dir, as a launch's bundle has it
        setup.makedirs(control)
        setup.put(remote_path("agent.py"), f"{control}/agent.py")
        _close_connections()  # cold, as rsync starts: the connection is part of the figure
        _settle()
        t0 = time.perf_counter()
        host = connect(alias, box.project)
        push_files(host, pythons[0], control, f"{remote}/objects", pushed, pythons[1])
        add(shape, "rgt", time.perf_counter() - t0)

    rgt(f"{remote}/job1", "push_first")
    _settle()
    add("push_first", "rsync", _rsync(box, port, f"{tree}/", f"root@127.0.0.1:{remote}/rsync/"))
    rgt(f"{remote}/job2", "push_again")
    _settle()
    add("push_again", "rsync", _rsync(box, port, f"{tree}/", f"root@127.0.0.1:{remote}/rsync/"))
    shutil.rmtree(remote, ignore_errors=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every link, shape and method, interleaved; then the resume and fixed-cost figures."""
    scale, repeats = args.scale, args.repeats
    samples = Samples()
    extra: dict[str, Any] = {"rgt_streams_used": {}}
    with tempfile.TemporaryDirectory(prefix="rgt-bench-xfer-") as tmp_str:
        tmp = Path(tmp_str).resolve()
        with ssh_box(tmp) as box:
            jobs = {
                shape: _launch(
                    box, WRITER.format(count=count, size=size), shape.replace("_", "-"), box.alias
                )
                for shape, (count, size) in shapes(scale).items()
            }
            tree = tmp / "tree"
            for i in range(max(4, int(100 * scale))):
                (tree / f"part{i % 4}").mkdir(parents=True, exist_ok=True)
                (tree / f"part{i % 4}" / f"shard{i:03d}.bin").write_bytes(os.urandom(5_000_000))
            pushed = [
                (p, f"tree/{p.relative_to(tree).as_posix()}")
                for p in sorted(tree.rglob("*"))
                if p.is_file()
            ]
            python, resolved = _interpreters(box, jobs["pull_one_large_file"])
            dest = tmp / "dest"
            far = f"far_{args.delay_ms:g}ms_{args.rate_mbit:g}mbit"
            with far_alias(box, args.delay_ms / 1000, args.rate_mbit * 1e6 / 8) as far_port:
                links = {"near_0ms": (box.alias, box.sshd.port), far: ("farbox", far_port)}
                for rep in range(repeats):
                    for link, (alias, port) in links.items():
                        used = extra["rgt_streams_used"].setdefault(link, [])
                        for shape, job in jobs.items():

                            def add(
                                method: str, value: float, _s: str = shape, _l: str = link
                            ) -> None:
                                samples.add(_l, _s, method, value)

                            here = dest / f"{link}-{shape}-{rep}"
                            stream = pull_samples(box, link, alias, port, shape, job, here, add)
                            if stream not in used:
                                used.append(stream)
                        rounds = args.push_rounds if link == "near_0ms" else 1
                        for turn in range(rounds):  # a near push takes seconds: more samples
                            push_samples(
                                box,
                                alias,
                                port,
                                (python, resolved),
                                pushed,
                                tree,
                                box.remote_root / f"push-{link}-{rep}-{turn}",
                                lambda shape, method, value, _l=link: samples.add(
                                    _l, shape, method, value
                                ),
                            )
            extra["resume"] = resume_figures(box, jobs, dest, scale)
            extra["fixed_costs"] = fixed_costs(box, dest, repeats)
    return {"links": samples.report(), **extra}


def _shell(line: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        ["bash", "-c", f"set -o pipefail; {line}"], check=True, capture_output=True, timeout=3600
    )
    return time.perf_counter() - t0


def resume_figures(box: SshBox, jobs: dict[str, Any], dest: Path, scale: float) -> dict[str, Any]:
    """A pull cut once about half its bytes came, then pulled again: what was sent again."""
    from tests.faultproxy import FaultProxy

    out: dict[str, Any] = {}
    with FaultProxy(box.sshd.port) as proxy:
        known = box.known_hosts.read_text()
        config = box.ssh_config.read_text()
        box.known_hosts.write_text(known + f"[127.0.0.1]:{proxy.port} {box.sshd.host_pub}\n")
        box.ssh_config.write_text(
            config + f"\nHost cutbox\n  HostName 127.0.0.1\n  Port {proxy.port}\n  User root\n"
            f"  IdentityFile {box.sshd.user_key}\n  UserKnownHostsFile {box.known_hosts}\n"
        )
        cases = {
            "batched_stream": ("pull_many_1m_files", {}),
            "parallel_streams": ("pull_one_large_file", {"RGT_PULL_STREAMS": "4"}),
        }
        try:
            for case, (shape, env) in cases.items():
                job = _as_host(jobs[shape], "cutbox")
                total = sum(
                    size
                    for _ in range(shapes(scale)[shape][0])
                    for size in [shapes(scale)[shape][1]]
                )
                here = dest / f"resume-{case}"
                saved = {k: os.environ.get(k) for k in env}
                os.environ.update(env)
                try:
                    _close_connections()
                    proxy.arm(total // 2)
                    try:
                        job.pull(to=here)
                        cut = False
                    except Exception:  # noqa: BLE001 - the cut is the point
                        cut = True
                    proxy.disarm()
                    partial = next(here.glob(".partial-*"), None)
                    landed = _landed(partial) if partial else 0
                    _close_connections()
                    run = job.pull(to=here)
                    verification = json.loads((run.path / "verification.json").read_text())
                    out[case] = {
                        "shape": shape,
                        "cut": cut,
                        "bytes_total": total,
                        "bytes_landed_before": landed,
                        "bytes_sent_after": verification["bytes_sent"],
                        "bytes_resent": max(0, verification["bytes_sent"] - (total - landed)),
                        "resent_over_landed": max(0, verification["bytes_sent"] - (total - landed))
                        / landed
                        if landed
                        else None,
                        "verified": run.verified,
                    }
                finally:
                    for k, v in saved.items():
                        if v is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = v
                shutil.rmtree(here, ignore_errors=True)
        finally:
            box.ssh_config.write_text(config)
            box.known_hosts.write_text(known)
    return out


def _landed(partial: Path) -> int:
    """The bytes a cut pull left confirmed: a plain part's length (its bytes are a prefix), and
    for a part written by parallel streams (its full length from the start, with holes) the
    ranges its record says landed."""
    total = 0
    for path in partial.rglob("*"):
        if not path.is_file() or path.name.endswith(".ranges"):
            continue
        record = path.with_name(path.name + ".ranges")
        if record.exists():
            ranges = json.loads(record.read_text())["ranges"]
            total += sum(int(done) - int(start) for start, done, _ in ranges)
        else:
            total += path.stat().st_size
    return total


def fixed_costs(box: SshBox, dest: Path, repeats: int) -> dict[str, Any]:
    """A pull of three small checkpoints; ``rgt jobs`` over 1,000 ended jobs; ``rgt down``."""
    from rgt_jupyter.store.registry import Registry

    out: dict[str, Any] = {}
    installed = _installed_env()  # compiled first: the checkpoint loader's imports use it too
    job = _launch(box, CKPTS, "ckpts", box.alias, python=sys.executable)  # one with torch
    pulls = []
    for rep in range(repeats):
        _settle()
        _close_connections()
        t0 = time.perf_counter()
        run = job.pull(to=dest / f"ckpt-{rep}")
        pulls.append(time.perf_counter() - t0)
        if not run.verified:
            raise RuntimeError(run.text())
    out["pull_three_small_checkpoints_s"] = {
        "median": statistics.median(pulls),
        "samples": pulls,
        "what": "Job.pull of a job with three small torch checkpoints, one after another in one "
        "process, each from a cold SSH connection: the first also waits for the checkpoint "
        "loader's start and torch import, the later ones find that loader warm",
    }

    env = {**installed, "RGT_PROJECT": str(box.project)}
    rgt = [sys.executable, "-m", "rgt_jupyter"]
    out["rgt_down_recheck_s"] = {
        "ssh_project": _downs(rgt, env, box.project, "ckpts", repeats),
        "quickstart_project": _quickstart_downs(rgt, dest, repeats),
        "what": "rgt down JOB without --yes: the gate computed (every check, the checkpoint "
        "loads included), nothing stopped; on this bench's SSH project (its job with three "
        "checkpoints pulled) and on the project `rgt demo` leaves (the quickstart)",
    }

    listing = Path(tempfile.mkdtemp(prefix="rgt-bench-jobs-", dir=dest))
    reg = Registry(listing)
    spec = job.spec.to_dict()
    for i in range(1000):
        jid = f"ended-{i:04d}"
        reg.add_job(
            jid,
            jid,
            jid,
            1,
            job.profile,
            "testbox",
            {**spec, "job_id": jid, "name": jid, "lineage": jid},
            state="finished",
        )
    lists = []
    for _ in range(repeats):
        lists.append(_run([*rgt, "jobs"], env={**env, "RGT_PROJECT": str(listing)}, cwd=listing))
    startup = [_run([*rgt, "--help"], env=env) for _ in range(repeats)]
    out["rgt_jobs_1000_ended_s"] = {
        "median": statistics.median(lists),
        "samples": lists,
        "interpreter_and_import_s": statistics.median(startup),
    }
    return out


def _downs(rgt: list[str], env: dict[str, str], project: Path, job: str, repeats: int) -> Any:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()  # exit 0 or 1 (gate passes, or is refused): both computed it
        subprocess.run(
            [*rgt, "down", job],
            env=env,
            cwd=project,
            capture_output=True,
            timeout=600,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        samples.append(time.perf_counter() - t0)
    return {"median": statistics.median(samples), "samples": samples}


def _quickstart_downs(rgt: list[str], dest: Path, repeats: int) -> Any:
    """``rgt demo`` into a fresh folder (the quickstart job, run and pulled), then its gate."""
    project = dest / "quickstart"
    env = {k: v for k, v in _installed_env().items() if not k.startswith("RGT_")}
    subprocess.run(
        [*rgt, "demo", "--dir", str(project), "--timeout", "600"],
        env=env,
        cwd=dest,
        capture_output=True,
        timeout=900,
        check=True,
    )
    listed = subprocess.run(
        [*rgt, "jobs", "--json"], env=env, cwd=project, capture_output=True, check=True
    )
    name = json.loads(listed.stdout)["jobs"][0]["name"]
    return {"job": name, **_downs(rgt, env, project, name, repeats)}


def goals(report: dict[str, Any]) -> dict[str, Any]:
    """The goals, checked against the medians."""
    near = report["links"]["near_0ms"]
    far = next(v for k, v in report["links"].items() if k.startswith("far_"))
    out: dict[str, Any] = {}
    for shape, fig in near.items():
        ratio = fig["rgt_over_anchor"].get("rsync")
        out[f"near {shape}: rgt <= 1.0 x rsync"] = ratio is not None and ratio <= 1.0
    out["near pull_one_large_file: rgt <= 1.1 x scp"] = (
        near["pull_one_large_file"]["rgt_over_anchor"]["scp"] <= 1.1
    )
    out["far pull_one_large_file: rgt >= 2 x scp throughput"] = (
        far["pull_one_large_file"]["rgt_over_anchor"]["scp"] <= 0.5
    )
    out["far pull_many_4k_files: rgt <= 1.0 x rsync"] = (
        far["pull_many_4k_files"]["rgt_over_anchor"]["rsync"] <= 1.0
    )
    fixed = report["fixed_costs"]
    out["pull of three small checkpoints <= 2 s"] = (
        fixed["pull_three_small_checkpoints_s"]["median"] <= 2.0
    )
    out["rgt down on the quickstart project <= 3 s"] = (
        fixed["rgt_down_recheck_s"]["quickstart_project"]["median"] <= 3.0
    )
    out["rgt jobs, 1,000 ended jobs <= 0.5 s"] = fixed["rgt_jobs_1000_ended_s"]["median"] <= 0.5
    for case, fig in report["resume"].items():
        bound = max(8 << 20, 0.01 * fig["bytes_landed_before"])
        out[f"resume {case}: re-sent <= max(8 MiB, 1 %) of what landed"] = (
            fig["bytes_resent"] <= bound
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="shape sizes x this")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--push-rounds", type=int, default=3, help="push samples per repeat on the near link"
    )
    parser.add_argument("--delay-ms", type=float, default=40.0, help="far link, one way")
    parser.add_argument("--rate-mbit", type=float, default=1000.0, help="far link cap")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "transfer.json")
    args = parser.parse_args(argv)
    if shutil.which("rsync") is None:
        raise SystemExit("rsync is not installed: run scripts/setup.sh")
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "transfer",
        "description": __doc__.splitlines()[0],
        "parameters": {
            "scale": args.scale,
            "repeats": args.repeats,
            "far_link": {"one_way_delay_ms": args.delay_ms, "rate_mbit_s": args.rate_mbit},
            "cipher": CIPHER,
            "shapes": {
                k: {"files": c, "bytes_each": s} for k, (c, s) in shapes(args.scale).items()
            },
            "order": "per repeat and link, each pull shape: rgt, scp/ssh cat, rsync, tar|ssh, "
            "rgt again; pushes: rgt, rsync, alternating, --push-rounds times on the near link; "
            "every sample from a cold connection",
            "push_rounds_near": args.push_rounds,
        },
        "units": "seconds (medians); rgt_over_anchor = rgt median / anchor median (< 1: rgt "
        "faster)",
    }
    report.update(run(args))
    report["goals"] = goals(report)
    report["bench_s"] = time.perf_counter() - t0
    report["machine"] = machine()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(json.dumps(report["goals"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
