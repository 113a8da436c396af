"""Connection faults on the real loopback sshd: a connection cut mid-pull (at 10, 50 and 99 %,
both ways a large file travels), mid-watch and mid-run; a changed host key."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.errors import PullError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.store.registry import Registry
from rgt_jupyter.transport.ssh import SSHError, connect

from ..conftest import wait_for
from ..sshbox import cutbox
from ..sshd import Sshd
from .evidence import Evidence

#: Takes reconnection away: the first connection of a transport is its last.
RECONNECT = (
    "rgt_jupyter/transport/ssh/__init__.py",
    "            self._client = self._connect()\n            return self._client",
    '            if getattr(self, "_connected_once", False):\n'
    '                raise SSHError("transport_unavailable", "no reconnection")\n'
    "            self._connected_once = True\n"
    "            self._client = self._connect()\n            return self._client",
)

BIG = """\
import os, rgt_jupyter.job as job
rng = __import__("random").Random(3)
with open(os.path.join(os.environ["RGT_OUT"], "big.bin"), "wb") as fh:
    for _ in range(64):
        fh.write(rng.randbytes(1 << 20))
job.save_results({"ok": True})
"""


@pytest.mark.fault(
    "F1-pull-cut",
    asserts="after each cut the next pull resumes, re-sends only what had not landed (the wire "
    "agrees) and ends verified with every byte of the job's files home",
    mutation=(
        "rgt_jupyter/run/pull/batch.py",
        "    if st.st_size > want.size:",
        "    if True:",
    ),
)
@pytest.mark.parametrize("method", ["auto", "paramiko"])
def test_pull_cut_at_10_50_99_percent_resumes(
    project: Path,
    box: Path,
    sshd: Sshd,
    method: str,
    monkeypatch: pytest.MonkeyPatch,
    evidence: Evidence,
) -> None:
    """The connection is cut for real (a proxy drops it) during the pull; the next pull resumes
    from what already landed and ends with every hash matching. Both ways a large file travels:
    the OpenSSH client (the default here) and a paramiko channel.

    Protection: rgt_jupyter/run/pull/batch.py ``prepare``: a ``.part`` left by an interrupted pull is
    re-hashed and the stream asks only for the rest of it; with every part discarded instead,
    each pull starts the file again and the bytes re-sent exceed what had not landed, so the
    case fails.
    """
    monkeypatch.setenv("RGT_SSH_TRANSFER", method)
    with cutbox(sshd, box) as proxy:
        job = submit(LaunchRequest(program=BIG, name="big", profile="box", host="cutbox"), project)
        assert job.wait(120) == "finished", job.log()
        evidence.keep(job.spec.out_dir, job.spec.ckpt_dir)
        total = 64 << 20
        for fraction in (0.10, 0.50, 0.99):
            proxy.arm(int(total * fraction))
            with pytest.raises(PullError, match="interrupted"):
                job.pull()
            proxy.disarm()
            partial = project / "runs" / f".partial-{job.id}"
            landed = sum(p.stat().st_size for p in partial.rglob("*") if p.is_file())
            assert 0 < landed < total
            wire_before = proxy.bytes_down
            run = job.pull()
            assert run.verified, run.text()
            sent = run.verification["bytes_sent"]
            # Only what had not landed is sent again (nothing of what landed is re-sent) ...
            resent = sent - (total - landed)
            assert resent <= max(8 << 20, landed // 100), (fraction, landed, sent)
            # ... and the wire agrees, SSH framing and the listing included.
            assert proxy.bytes_down - wire_before <= (total - landed) * 1.05 + (8 << 20)
            assert not partial.exists()
            # The rest travels by the OpenSSH client, started while the pull looked at the job
            # (its handshake costs no wait), however small the rest.
            assert connect("cutbox", project).last_stream == (
                "openssh" if method == "auto" else "paramiko"
            )
        assert proxy.cuts == 3
        assert len(job.runs()) == 3
        for pulled in job.runs():
            assert evidence.account(pulled.path) == 0


@pytest.mark.fault(
    "F1-watch-cut",
    asserts="the TCP connection dies under the watcher; the next look reconnects and the job "
    "finishes with its results, never noticing",
    mutation=RECONNECT,
)
def test_watch_reconnects_after_the_connection_drops(
    project: Path, box: Path, evidence: Evidence
) -> None:
    """The socket under an open SSH connection is closed while the job runs.

    Protection: rgt_jupyter/transport/ssh/__init__.py ``SSHTransport.client``: a connection that is no
    longer active (or was closed after a failed call) is replaced by a new one
    (``self._client = self._connect()``); with no second connection, every later look fails and
    the case fails.
    """
    program = (
        "import time, rgt_jupyter.job as job\nfor i in range(20):\n    job.progress(i)\n"
        "    time.sleep(0.1)\njob.save_results({'ok': 1})\n"
    )
    job = submit(
        LaunchRequest(program=program, name="drop", profile="box", host="testbox"), project
    )
    assert job.snapshot().state in ("queued", "running")
    transport = connect("testbox", project)
    ssh_transport = transport.client().get_transport()
    assert ssh_transport is not None
    ssh_transport.sock.close()  # the TCP connection dies under us
    assert job.wait(60) == "finished"  # the next look reconnects; the job never noticed
    assert job.result() == {"ok": 1}
    evidence.keep(job.spec.out_dir)
    assert evidence.account(job.pull().path) == 0
    assert transport.client().get_transport() is not ssh_transport


@pytest.mark.fault(
    "F1-watch-cut",
    asserts="the proxy drops every connection mid-run: the job goes on, the next look "
    "reconnects, the job finishes and its outputs come home verified",
    mutation=RECONNECT,
)
def test_job_survives_the_connection_cut_mid_run(
    project: Path, box: Path, sshd: Sshd, evidence: Evidence
) -> None:
    """The SSH connection is cut for real by the proxy while the job runs: the job goes on and
    the next look reconnects.

    Protection: rgt_jupyter/transport/ssh/__init__.py ``SSHTransport.client``: a dropped connection is
    replaced on the next use; removed, the watcher cannot look again and the case fails.
    """
    program = (
        "import time, rgt_jupyter.job as job\n"
        "for i in range(1, 31):\n"
        "    job.progress(i, 30)\n"
        "    time.sleep(0.1)\n"
        "job.save_results({'steps': 30})\n"
    )
    with cutbox(sshd, box) as proxy:
        request = LaunchRequest(program=program, name="cut", profile="box", host="cutbox")
        job = submit(request, project)
        wait_for(lambda: (job.snapshot().progress or {}).get("step", 0) >= 3, 30, "progress")
        proxy.arm(0)  # every open connection is dropped at the next byte from the server
        time.sleep(0.5)
        assert job.wait(60) == "finished"
        assert proxy.cuts == 1
        assert job.result() == {"steps": 30}
        evidence.keep_prefix(Path(job.spec.control_dir) / "log")
        evidence.keep(job.spec.out_dir)
        assert evidence.account(job.pull().path, job.spec.control_dir) == 0


@pytest.mark.fault(
    "F11-host-key",
    asserts="a server presenting another key than known_hosts holds is refused before login: "
    "the error says the key changed, nothing is sent, no job registered",
    mutation=(
        "rgt_jupyter/transport/ssh/__init__.py",
        "client.load_system_host_keys(str(path))",
        "pass",
    ),
)
def test_changed_host_key_is_refused_loudly(
    project: Path, box: Path, sshd: Sshd, tmp_path: Path, evidence: Evidence
) -> None:
    """known_hosts holds another key for the server (a re-created machine, or someone between).

    Protection: rgt_jupyter/transport/ssh/__init__.py ``SSHTransport._connect``: the known_hosts files
    are loaded before connecting, so a different key is a ``BadHostKeyException``; removed, the
    changed key is not recognised as changed and the case fails.
    """
    sentinel = tmp_path / "sentinel" / "keep.txt"
    sentinel.parent.mkdir()
    sentinel.write_text("the user's work beside the project\n")
    evidence.keep(sentinel)
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    pub = (tmp_path / "other_key.pub").read_text().split()
    box.write_text(f"[127.0.0.1]:{sshd.port} {pub[0]} {pub[1]}\n")
    logins = sshd.accepted()
    with pytest.raises(SSHError) as info:
        submit(
            LaunchRequest(program="print(1)\n", name="chg", profile="box", host="testbox"), project
        )
    assert info.value.kind == "host_key_mismatch"
    assert "HAS CHANGED" in str(info.value) and "Nothing was sent" in str(info.value)
    assert sshd.accepted() == logins
    assert Registry(project).jobs() == []
    assert evidence.account(sentinel.parent) == 0
