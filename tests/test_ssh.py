"""The SSH transport against a real OpenSSH server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.store.registry import Registry
from rgt_jupyter.transport.ssh import SSHError, connect
from rgt_jupyter.views.render import strip_ansi

from .conftest import run_cell, wait_for
from .faultproxy import FaultProxy
from .sshbox import close_connections, cutbox
from .sshd import Sshd

JOB = """\
import random, time, rgt_jupyter.job as job
random.seed(7)
state = job.load_latest()
start = state["step"] if state else 0
total = 0.0
for step in range(start + 1, 6):
    total += sum(random.random() for _ in range(1000))
    job.progress(step, 5, running_sum=total)
    job.save_checkpoint({"step": step, "total": total}, step=step)
    time.sleep(0.2)
job.save_results({"total": total, "steps": 5})
"""


def test_the_whole_arc_over_ssh_matches_local(ip: Any, project: Path, box: Path) -> None:
    result, _ = run_cell(ip, f"%%remote_run --profile box --host testbox --name arc\n{JOB}")
    assert result.error_in_exec is None, result.error_in_exec
    job = result.result
    assert job.spec.transport == "ssh" and job.spec.host_alias == "testbox"
    assert job.spec.python == "python3"
    audit = json.loads((project / ".rgt" / "audit" / "box-testbox.json").read_text())["facts"]
    assert audit["python"] == job.spec.audit["python"]
    assert all(d["writable"] for d in audit["disks"].values())
    assert any("durable dir" in f for f in job.spec.audit["findings"])
    result, text = run_cell(ip, "%watch arc --wait --timeout 120")
    assert result.error_in_exec is None, text
    assert result.result.state == "finished"
    result, text = run_cell(ip, "%pull arc")
    assert result.error_in_exec is None, text
    remote_run = result.result
    assert remote_run.verified, remote_run.text()
    assert remote_run.provenance["host"] == "testbox"
    # The same program on this machine gives the same results.
    result, _ = run_cell(ip, f"%%remote_run --name arc-local\n{JOB}")
    local_job = result.result
    assert local_job.wait(60) == "finished"
    assert local_job.pull().results == remote_run.results
    assert {f["path"] for f in remote_run.manifest["files"]} >= {
        "checkpoints/ckpt-0000000005.json",
        "outputs/results.json",
    }


def test_resume_over_ssh_uses_the_same_remote_checkpoints(project: Path, box: Path) -> None:
    failing = JOB.replace(
        "    time.sleep(0.2)\n",
        "    time.sleep(0.2)\n    if step == 3 and not job.is_resume():\n"
        "        raise RuntimeError('crash')\n",
    )
    job = submit(LaunchRequest(program=failing, name="rs", profile="box", host="testbox"), project)
    assert job.wait(60) == "failed"
    assert "RuntimeError: crash" in strip_ansi("\n".join(job.traceback() or []))
    again = job.resume(force=True)  # the crash stands in for an interruption
    assert again.spec.ckpt_dir == job.spec.ckpt_dir and again.spec.resume
    assert again.wait(60) == "finished", again.log()
    assert again.result()["steps"] == 5


def test_unknown_host_is_refused_before_login(
    ip: Any, project: Path, box: Path, sshd: Sshd
) -> None:
    box.write_text("")
    logins = sshd.accepted()
    result, _ = run_cell(ip, "%%remote_run --profile box --host testbox --name unk\nprint(1)\n")
    assert isinstance(result.error_in_exec, UsageError)
    message = str(result.error_in_exec)
    assert "host_key_unknown" in message and "SHA256:" in message
    assert "rgt trust-host testbox" in message
    assert sshd.accepted() == logins  # nothing past key exchange
    assert Registry(project).jobs() == []


def _trust(project: Path, answer: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rgt_jupyter", "trust-host", "testbox"],
        input=answer,
        capture_output=True,
        text=True,
        cwd=project,
        env=dict(os.environ),
        timeout=60,
        check=False,
    )


def test_trust_host_asks_records_and_then_works(project: Path, box: Path, sshd: Sshd) -> None:
    box.write_text("")
    refused = _trust(project, "no\n")
    assert refused.returncode == 2 and "SHA256:" in refused.stdout
    assert not (project / ".rgt" / "known_hosts").exists()
    accepted = _trust(project, "yes\n")
    assert accepted.returncode == 0, accepted.stderr
    assert "trusted testbox" in accepted.stdout
    record = (project / ".rgt" / "trusted_hosts.jsonl").read_text()
    assert '"trusted_by"' in record and '"fingerprint": "SHA256:' in record
    assert sshd.host_pub.split()[1] in (project / ".rgt" / "known_hosts").read_text()
    assert "already trusted" in _trust(project, "").stdout
    job = submit(
        LaunchRequest(program="print('over ssh')\n", name="tr", profile="box", host="testbox"),
        project,
    )
    assert job.wait(60) == "finished" and "over ssh" in job.log()


def test_proxyjump_and_error_classes(
    project: Path, box: Path, sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = connect("jumpbox", project).exec(["echo", "via jump; $(not run)"])
    assert out.returncode == 0 and out.stdout == b"via jump; $(not run)\n"
    config = Path(os.environ["RGT_SSH_CONFIG"])
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    config.write_text(
        config.read_text()
        + f"\nHost badkey\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
        f"  IdentityFile {wrong}\n  UserKnownHostsFile {box}\n"
        "\nHost closed\n  HostName 127.0.0.1\n  Port 1\n"
    )
    with pytest.raises(SSHError) as info:
        connect("badkey", project).exec(["true"])
    assert info.value.kind == "auth_failed" and "authorized_keys" in str(info.value)
    with pytest.raises(SSHError) as info:
        connect("closed", project).exec(["true"])
    assert info.value.kind == "connection_refused"


def test_proxyjump_hops_written_out_and_chains_go_through_every_hop(
    project: Path, box: Path, sshd: Sshd, tmp_path: Path
) -> None:
    """``ProxyJump user@host:port`` (and ``ssh://``) is a hop, not an alias; ``a,b`` reaches b
    through a and the target through b, as OpenSSH does; ``none`` means direct; a loop ends with
    an error that says so."""
    config = Path(os.environ["RGT_SSH_CONFIG"])
    target = (
        f"  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
        f"  IdentityFile {sshd.user_key}\n  UserKnownHostsFile {box}\n"
    )
    with FaultProxy(sshd.port) as first, FaultProxy(sshd.port) as second:
        box.write_text(
            box.read_text()
            + "".join(f"[127.0.0.1]:{p.port} {sshd.host_pub}\n" for p in (first, second))
        )
        config.write_text(
            config.read_text()
            + f"\nHost written\n{target}  ProxyJump root@127.0.0.1:{first.port}\n"
            + f"\nHost uri\n{target}  ProxyJump ssh://root@127.0.0.1:{second.port}\n"
            + f"\nHost chain\n{target}  ProxyJump root@127.0.0.1:{first.port},"
            f"127.0.0.1:{second.port}\n"
            + f"\nHost direct\n{target}  ProxyJump none\n"
            + "\nHost loop\n  HostName 127.0.0.1\n  ProxyJump loop\n"
            # the hops written out take their key and known hosts from their host's block
            + f"\nHost 127.0.0.1\n  IdentityFile {sshd.user_key}\n  UserKnownHostsFile {box}\n"
        )
        out = connect("written", project).exec(["echo", "one hop"])
        assert out.returncode == 0 and out.stdout == b"one hop\n"
        assert (first.accepted, second.accepted) == (1, 0)
        assert connect("uri", project).exec(["true"]).returncode == 0
        assert (first.accepted, second.accepted) == (1, 1)
        close_connections(project)
        out = connect("chain", project).exec(["echo", "two hops"])
        assert out.returncode == 0 and out.stdout == b"two hops\n"
        assert (first.accepted, second.accepted) == (2, 2)  # second reached through first
        assert connect("direct", project).exec(["true"]).returncode == 0
        assert (first.accepted, second.accepted) == (2, 2)
        with pytest.raises(SSHError) as info:
            connect("loop", project).exec(["true"])
        assert info.value.kind == "usage" and "hops" in str(info.value)
        close_connections(project)


def test_a_kept_connection_dead_on_the_path_is_opened_anew_and_the_command_runs_once(
    project: Path,
    box: Path,
    sshd: Sshd,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A connection kept between calls can die on the path while idle (a NAT or a rebooted
    middlebox forgets it and answers the next packet with RST): it looks open until something
    is sent. A command that finds it so opens a fresh connection and runs, exactly once; a bulk
    stream over a paramiko channel does the same."""
    monkeypatch.setenv("RGT_SSH_TRANSFER", "paramiko")
    caplog.set_level(logging.DEBUG, logger="rgt_jupyter.transport.ssh")
    marks = tmp_path / "marks"
    with cutbox(sshd, box) as proxy:
        host = connect("cutbox", project)
        assert host.exec(["true"]).returncode == 0
        proxy.forget()
        out = host.exec(["sh", "-c", f"echo ran >> {shlex.quote(str(marks))}; echo ok"])
        assert out.returncode == 0 and out.stdout == b"ok\n"
        assert marks.read_text() == "ran\n"  # once: the dead connection never carried it
        assert (proxy.accepted, proxy.resets) == (2, 1)
        assert "the kept connection was dead" in caplog.text
        caplog.clear()
        proxy.forget()
        with host.exec_stream(["printf", "streamed"]) as reader:
            assert reader.read() == b"streamed"
        assert host.last_stream == "paramiko"
        assert (proxy.accepted, proxy.resets) == (3, 2)
        assert "the kept connection was dead" in caplog.text
        # the same through a hop whose connection died: both are opened anew
        hopped = connect("hopped", project)
        assert hopped.exec(["true"]).returncode == 0
        proxy.forget()
        out = hopped.exec(["sh", "-c", f"echo hop >> {shlex.quote(str(marks))}; echo ok"])
        assert out.returncode == 0 and out.stdout == b"ok\n"
        assert marks.read_text() == "ran\nhop\n"
        assert (proxy.accepted, proxy.resets) == (4, 3)
        close_connections(project)


def test_a_hop_whose_own_connection_broke_first_closes_cleanly_and_both_open_anew(
    project: Path, box: Path, sshd: Sshd, tmp_path: Path
) -> None:
    """A connection made through a ProxyJump hop is closed by a message on the hop's connection.
    When that connection broke first (its sends fail; its reader has not heard of it yet),
    closing still ends cleanly, and the next command opens both anew and runs once."""
    marks = tmp_path / "marks"
    with cutbox(sshd, box) as proxy:
        hopped = connect("hopped", project)
        assert hopped.exec(["true"]).returncode == 0
        jump = connect("cutbox", project).client().get_transport()
        assert jump is not None and jump.is_active()
        proxy.stall()  # the proxy holds the end of the stream too: the hop's reader waits on
        jump.sock._sock.shutdown(socket.SHUT_WR)  # the hop's sends fail from now on
        hopped.close()
        assert jump.is_active()  # the break was met by the close, not noticed before it
        proxy.release()
        out = hopped.exec(["sh", "-c", f"echo hop >> {shlex.quote(str(marks))}; echo ok"])
        assert out.returncode == 0 and out.stdout == b"ok\n"
        assert marks.read_text() == "hop\n"
        assert proxy.accepted == 2
        close_connections(project)


def test_ssh_profile_needs_a_host(ip: Any, project: Path) -> None:
    result, _ = run_cell(ip, "%%remote_run --profile ssh --no-smoke --name nohost\nprint(1)\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert "--host ALIAS" in str(result.error_in_exec)


@pytest.mark.parametrize("where", ["box", "local"])
def test_secret_never_leaks(
    ip: Any, project: Path, box: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A --secret reaches the job through a 0600 file only: never in ps, an environment, a log,
    run.json, the registry or the notebook's output."""
    import secrets as pysecrets
    import threading

    value = "s3cr3t-" + pysecrets.token_hex(12)
    monkeypatch.setenv("TEST_TOKEN", value)
    snapshots: list[str] = []
    stop = threading.Event()

    def watch_ps() -> None:
        while not stop.is_set():
            ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=False)
            snapshots.append(ps.stdout)
            time.sleep(0.002)

    body = (
        "import hashlib, os, stat, rgt_jupyter.job as job\n"
        "v = job.secret('TEST_TOKEN')\n"
        "mode = stat.S_IMODE(os.stat(os.environ['RGT_SECRETS_FILE']).st_mode)\n"
        "environ = open('/proc/self/environ', 'rb').read().decode(errors='replace')\n"
        "print('using the token')\n"
        "job.save_results({'sha': hashlib.sha256(v.encode()).hexdigest(), 'mode': mode,\n"
        "                  'env_clean': v not in environ and 'TEST_TOKEN' not in environ})\n"
    )
    target = "--profile box --host testbox" if where == "box" else "--profile local"
    watcher = threading.Thread(target=watch_ps)
    watcher.start()
    try:
        result, text = run_cell(
            ip, f"%%remote_run {target} --name sec --secret TEST_TOKEN --smoke\n{body}"
        )
        assert result.error_in_exec is None, text
        job = result.result
        assert job.wait(60) == "finished", job.log()
    finally:
        stop.set()
        watcher.join()
    result, more = run_cell(ip, "%watch sec --wait\nr = %pull sec\nprint(r.results, r.provenance)")
    text += more
    results = job.result()
    assert results["sha"] == hashlib.sha256(value.encode()).hexdigest()
    assert results["mode"] == 0o600 and results["env_clean"] is True
    assert job.spec.secret_names == ["TEST_TOKEN"]
    assert len(snapshots) > 10 and not any(value in s for s in snapshots)
    assert value not in text
    for root in (project, tmp_path / "remote home"):
        for path in root.rglob("*"):
            if path.is_file():
                assert value.encode() not in path.read_bytes(), path
    assert not (Path(job.spec.control_dir) / "secrets.json").exists()


def test_missing_secret_is_a_usage_error(ip: Any, project: Path) -> None:
    result, _ = run_cell(ip, "%%remote_run --name ms --secret NOT_SET_ANYWHERE\nprint(1)\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert "no environment variable NOT_SET_ANYWHERE" in str(result.error_in_exec)
    assert Registry(project).jobs() == []


def test_repush_of_an_unchanged_tree_sends_almost_nothing(
    project: Path, box: Path, sshd: Sshd, tmp_path: Path
) -> None:
    tree = tmp_path / "data tree"
    for i in range(40):
        sub = tree / f"part{i % 4}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"shard {i}.bin").write_bytes(os.urandom(512 << 10))
    size = sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
    program = (
        "import os, hashlib, rgt_jupyter.job as job\n"
        "h = hashlib.sha256()\n"
        "for root, dirs, files in sorted(os.walk('data tree')):\n"
        "    for f in sorted(files):\n"
        "        h.update(open(os.path.join(root, f), 'rb').read())\n"
        "job.save_results({'sha': h.hexdigest()})\n"
    )
    with cutbox(sshd, box) as proxy:
        sent = []
        jobs = []
        for name in ("first", "second"):
            before = proxy.bytes_up
            request = LaunchRequest(
                program=program, name=name, profile="box", host="cutbox", push=[str(tree)]
            )
            jobs.append(submit(request, project))
            sent.append(proxy.bytes_up - before)
        for job in jobs:
            assert job.wait(60) == "finished", job.log()
        assert jobs[0].result() == jobs[1].result()
        assert jobs[0].spec.code_dir != jobs[1].spec.code_dir
        assert sent[0] >= size
        assert sent[1] <= size // 100, (sent, size)


def test_openssh_stream_trusts_exactly_the_known_hosts_it_is_given(
    box: Path, sshd: Sshd, tmp_path: Path
) -> None:
    """The ssh client that carries large reads checks the host key against the files rgt uses
    and nothing else: an unknown or changed key is refused before a byte of the file comes, and
    no known_hosts file is written."""
    from rgt_jupyter.transport.ssh import stream
    from rgt_jupyter.transport.ssh.hosts import ssh_config_path

    ssh = stream.openssh_binary()
    assert ssh is not None, "the OpenSSH client is part of the test setup"
    data = os.urandom(3 << 20)
    src = tmp_path / "a file with 'quotes' $(x).bin"
    src.write_bytes(data)

    def read_all(known: list[Path], offset: int = 0) -> bytes:
        argv = stream.openssh_argv(
            ssh, "testbox", ssh_config_path(), known, stream.read_command(str(src), offset)
        )
        with stream.OpenSSHStream(argv, str(src)) as reader:
            return b"".join(iter(lambda: reader.read(1 << 20), b""))

    assert read_all([box]) == data
    assert read_all([tmp_path / "missing", box], offset=12345) == data[12345:]
    far = 3 * (1 << 17) + 7  # whole 128 KiB blocks and then bytes are skipped
    assert read_all([box], offset=far) == data[far:]
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    pub = (tmp_path / "other_key.pub").read_text().split()
    changed = tmp_path / "changed_known_hosts"
    changed.write_text(f"[127.0.0.1]:{sshd.port} {pub[0]} {pub[1]}\n")
    for known in (empty, changed):
        before = known.read_text()
        logins = sshd.accepted()
        with pytest.raises(stream.StreamError, match="Host key verification failed"):
            read_all([known])
        assert known.read_text() == before
        assert sshd.accepted() == logins
    missing = tmp_path / "gone.bin"
    argv = stream.openssh_argv(
        ssh, "testbox", ssh_config_path(), [box], stream.read_command(str(missing), 0)
    )
    with pytest.raises(FileNotFoundError), stream.OpenSSHStream(argv, str(missing)) as reader:
        reader.read(1 << 20)


def _counting(calls: list[str], name: str, real: Any) -> Any:
    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return real(self, *args, **kwargs)

    return counted


def test_a_launch_over_ssh_is_one_command(
    project: Path, box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the host's audit is cached, a launch without --push is one exec (the bundle on its
    stdin): no SFTP write, put or mkdir, no second command."""
    from rgt_jupyter.transport.ssh import SSHTransport

    def run(name: str) -> Job:
        request = LaunchRequest(
            program=f"print({name!r})\n", name=name, profile="box", host="testbox"
        )
        return submit(request, project)

    first = run("first")
    calls: list[str] = []
    with monkeypatch.context() as patch:
        for method in ("exec", "put", "write_bytes", "makedirs"):
            patch.setattr(
                SSHTransport, method, _counting(calls, method, getattr(SSHTransport, method))
            )
        second = run("second")
    assert calls == ["exec"]
    for job in (first, second):
        assert job.wait(60) == "finished", job.log()
        assert job.log().strip() == job.name
    status = connect("testbox", project).read_text(f"{second.spec.control_dir}/status.json")
    assert json.loads(status or "{}")["agent_pid"] == second.spec.agent_pid


def test_remote_run_cell_returns_after_one_command_and_shows_it_queued(
    ip: Any, project: Path, box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``%%remote_run`` (launch and the status view it displays) costs the notebook's thread one
    exec and no other request to the host: on a real link every request is a round trip. The
    view starts as queued and the watcher brings it up to date."""
    import threading

    from rgt_jupyter.transport.ssh import SSHTransport

    target = "--profile box --host testbox"
    result, _ = run_cell(ip, f"%%remote_run {target} --name warm\nprint(0)\n")
    assert result.error_in_exec is None
    main = threading.current_thread()
    calls: list[str] = []

    def on_main(name: str, real: Any) -> Any:
        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is main:
                calls.append(name)
            return real(self, *args, **kwargs)

        return counted

    with monkeypatch.context() as patch:
        for method in ("exec", "read_bytes", "stat", "listdir", "put", "write_bytes", "makedirs"):
            patch.setattr(SSHTransport, method, on_main(method, getattr(SSHTransport, method)))
        result, shown = run_cell(ip, f"%%remote_run {target} --name quick\nprint('q')\n")
    assert result.error_in_exec is None, shown
    assert calls == ["exec"]
    assert "queued" in strip_ansi(shown)
    job = Job.from_registry("quick", project)
    assert job.wait(60) == "finished", job.log()
    assert job.log().strip() == "q"


def test_the_watcher_asks_an_ssh_host_once_per_look_for_all_its_jobs(
    project: Path, box: Path, sshd: Sshd, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three jobs on one host: each watcher look is one command on the open connection (no
    SFTP read per file, no new connection); their logs stream whole; a cut connection shows as
    'cannot observe', never as a failed job, and the next look reconnects."""
    from rgt_jupyter.run.watch.watcher import Watcher
    from rgt_jupyter.transport.ssh import SSHTransport

    program = (
        "import time, rgt_jupyter.job as job\nfor i in range(1, 31):\n"
        "    print('row', i, flush=True)\n    job.progress(i, 30)\n    time.sleep(0.1)\n"
    )
    with cutbox(sshd, box) as proxy:
        jobs = [
            submit(
                LaunchRequest(program=program, name=f"w{i}", profile="box", host="cutbox"), project
            )
            for i in range(3)
        ]
        calls: list[str] = []
        for method in ("exec", "read_bytes", "stat", "listdir"):
            monkeypatch.setattr(
                SSHTransport, method, _counting(calls, method, getattr(SSHTransport, method))
            )
        watcher = Watcher(min_interval=0.3, max_interval=0.6)
        lines: dict[str, list[str]] = {job.id: [] for job in jobs}
        states: dict[str, list[str]] = {job.id: [] for job in jobs}
        diagnoses: list[str] = []
        for job in jobs:
            watcher.subscribe(
                job,
                lambda snap, j=job.id: (
                    states[j].append(snap.state),
                    diagnoses.append(snap.diagnosis or ""),
                ),
                on_lines=lambda new, _offset, j=job.id: lines[j].extend(new),
                from_offset=0,
            )
        wait_for(lambda: watcher.ticks >= 3, 30, "three looks")
        connections = proxy.accepted
        proxy.cut(refuse=True)  # the connection dies under the watcher; the host is unreachable
        wait_for(lambda: any("cannot observe the job" in d for d in diagnoses), 30, "the gap")
        proxy.admit()
        wait_for(lambda: all(s and s[-1] == "finished" for s in states.values()), 120, "the ends")
        assert not any("failed" in s or "lost" in s for s in states.values())
        assert proxy.accepted == connections + 1  # one new connection after the gap, no more
        ticks = watcher.ticks
        watcher.stop()
    for job in jobs:
        assert lines[job.id] == [f"row {i}" for i in range(1, 31)]
    # Each look asked once (an exec) for all three jobs; reads only where a view caught up.
    assert calls.count("exec") <= ticks + 1
    assert calls.count("read_bytes") + calls.count("stat") <= 3 * 3
