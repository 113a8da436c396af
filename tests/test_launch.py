"""Launch: the rendered launch line (golden), versioned inputs, registry, resume, CLI twins."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import shutil
import sqlite3
import struct
import subprocess
import sys
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import rgt_jupyter
from rgt_jupyter import remote, submit
from rgt_jupyter.api import Job
from rgt_jupyter.backends import observe
from rgt_jupyter.backends.detached import DetachedBackend
from rgt_jupyter.jobs.observe import agent_pid
from rgt_jupyter.jobs.observe import process_of as status_process
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.machines.profiles import ProfileError, load_profile, parse_profile
from rgt_jupyter.remote.probe import process_kind
from rgt_jupyter.transport.local import LocalTransport

from .conftest import control_json, rgt

GOLDEN = Path(__file__).parent / "golden"
PKG = Path(rgt_jupyter.__file__).parent


def test_launch_line_golden() -> None:
    """The exact line an SSH transport would send: every part quoted."""
    line = DetachedBackend().launch_line("/usr/bin/python3", "/srv/rgt jobs/it's $(x)")
    assert line + "\n" == (GOLDEN / "launch_line.txt").read_text()


def test_pushed_inputs_are_versioned_per_job(project: Path) -> None:
    data = project / "data.txt"
    data.write_text("v1")
    program = "import time\ntime.sleep(2)\nprint(open('data.txt').read())\n"
    first = submit(LaunchRequest(program=program, name="v", push=[str(data)]), project)
    data.write_text("v2")
    second = submit(LaunchRequest(program=program, name="w", push=[str(data)]), project)
    assert first.spec.code_dir != second.spec.code_dir
    assert first.wait(60) == "finished" and second.wait(60) == "finished"
    assert first.log().strip() == "v1" and second.log().strip() == "v2"
    assert (Path(first.spec.code_dir) / "data.txt").read_text() == "v1"
    assert first.spec.code_hash != second.spec.code_hash


def test_a_damaged_pushed_object_is_sent_again_whatever_its_mtime(project: Path) -> None:
    """An object of the push store is copied into a later job without being read again only
    while its stamp (size, mtime, ctime, inode at the time it was hashed) holds: bytes changed
    in the store, with the mtime put back, are hashed, refused, deleted and sent again."""
    data = project / "data.bin"
    data.write_bytes(os.urandom(300_000))
    sha = hashlib.sha256(data.read_bytes()).hexdigest()
    program = "import hashlib\nprint(hashlib.sha256(open('data.bin','rb').read()).hexdigest())\n"
    first = submit(LaunchRequest(program=program, name="s1", push=[str(data)]), project)
    assert first.wait(60) == "finished" and first.log().strip() == sha
    objects = Path(first.spec.control_dir).parent / ".objects"
    obj = objects / sha[:2] / sha
    stamp = json.loads((objects / sha[:2] / f"{sha}.ok").read_text())
    st = obj.stat()
    assert stamp == [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    second = submit(LaunchRequest(program=program, name="s2", push=[str(data)]), project)
    assert second.wait(60) == "finished" and second.log().strip() == sha  # by the stamp
    damaged = bytearray(obj.read_bytes())
    damaged[1000] ^= 0xFF
    obj.write_bytes(bytes(damaged))
    os.utime(obj, ns=(st.st_atime_ns, st.st_mtime_ns))  # the same size and mtime as stamped
    third = submit(LaunchRequest(program=program, name="s3", push=[str(data)]), project)
    assert third.wait(60) == "finished" and third.log().strip() == sha
    assert hashlib.sha256(obj.read_bytes()).hexdigest() == sha  # sent again, whole


def test_registry_is_wal_and_shared(project: Path) -> None:
    job = submit(LaunchRequest(program="print('x')\n", name="reg"), project)
    db = sqlite3.connect(project / ".rgt" / "registry.sqlite3")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
    assert job.wait(60) == "finished"
    # Another process (the CLI) sees the same job, by name and by id.
    out = rgt("jobs", cwd=project).stdout
    assert job.id in out and "finished" in out
    assert Job.from_registry("reg", project).id == job.id
    assert Job.from_registry(job.id, project).name == "reg"


FLAKY = """\
import os, rgt_jupyter.job as job
state = job.load_latest()
start = state["step"] if state else 0
print("resume", os.environ.get("RGT_RESUME"), "from", start)
for step in range(start + 1, 6):
    job.save_checkpoint({"step": step}, step=step)
    if step == 3 and os.path.exists(os.environ["FAIL_MARKER"]):
        raise RuntimeError("transient failure")
job.save_results({"started_from": start})
"""


def test_resume_from_cli_and_api(project: Path) -> None:
    marker = project / "fail-once"
    marker.write_text("")
    program = project / "flaky.py"
    program.write_text(FLAKY)
    rgt("run", "flaky.py", "--name", "flaky", "--env", f"FAIL_MARKER={marker}", cwd=project)
    first = Job.from_registry("flaky", project)
    assert first.wait(60) == "failed"
    marker.unlink()
    # A crash in the code itself is not resumed blindly: the same code would crash again.
    blind = rgt("resume", "flaky", cwd=project, check=False)
    assert blind.returncode == 2 and "--force" in blind.stderr
    assert Job.from_registry("flaky", project).id == first.id
    # Here the crash stood in for a transient fault (the marker is gone): resume anyway.
    out = rgt("resume", "flaky", "--force", cwd=project).stdout
    second = Job.from_registry("flaky", project)
    assert second.id != first.id and second.id in out
    assert second.wait(60) == "finished"
    assert second.spec.resume and second.spec.attempt == 2
    assert second.spec.ckpt_dir == first.spec.ckpt_dir
    assert second.result() == {"started_from": 3}
    assert "resume 1 from 3" in second.log()
    # --fresh starts over in a new checkpoint dir.
    third = second.resume(fresh=True)
    assert third.wait(60) == "finished"
    assert third.spec.ckpt_dir != second.spec.ckpt_dir and not third.spec.resume
    assert third.result() == {"started_from": 0}
    # A finished job has nothing to resume: said so, nothing launched.
    refused = rgt("resume", "flaky", cwd=project, check=False)
    assert refused.returncode == 2 and "nothing to resume" in refused.stderr
    assert Job.from_registry("flaky", project).id == third.id


def test_cli_run_watch_pull(project: Path) -> None:
    (project / "train.py").write_text(
        "import rgt_jupyter.job as job\nfor i in range(3):\n    job.progress(i + 1, 3)\n"
        "job.save_results({'done': True})\n"
    )
    rgt("run", "train.py", "--name", "cli", cwd=project)
    watched = rgt("watch", "cli", "--wait", "--timeout", "120", cwd=project)
    assert "finished" in watched.stdout
    pulled = rgt("pull", "cli", cwd=project)
    assert "verified: yes" in pulled.stdout
    assert list((project / "runs").glob("cli-*-r1/results.json"))


def test_cli_failure_exit_codes(project: Path) -> None:
    (project / "bad.py").write_text("x = 1\nraise ValueError('nope')\n")
    rgt("run", "bad.py", "--name", "bad", cwd=project)
    watched = rgt("watch", "bad", "--wait", cwd=project, check=False)
    assert watched.returncode == 1
    assert "Cell bad.py, line 2" in watched.stdout and "ValueError: nope" in watched.stdout
    missing = rgt("watch", "nosuch", cwd=project, check=False)
    assert missing.returncode == 2 and "rgt jobs" in missing.stderr
    bad_name = rgt("run", "bad.py", "--name", "a;b", cwd=project, check=False)
    assert bad_name.returncode == 2 and "not allowed" in bad_name.stderr


@pytest.mark.parametrize("cmd", ["run", "watch", "pull", "resume", "jobs", "profiles", "demo"])
def test_cli_help(project: Path, cmd: str) -> None:
    out = rgt(cmd, "--help", cwd=project).stdout
    assert out.startswith("usage: rgt") and cmd in out


def test_console_script_and_module_agree(project: Path) -> None:
    script = Path(sys.executable).parent / "rgt"
    assert script.exists()
    a = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=True)
    b = rgt("--help", cwd=project)
    assert a.stdout.replace(str(script), "rgt") == b.stdout


def test_profiles(project: Path, tmp_path: Path) -> None:
    assert "local" in rgt("profiles", cwd=project).stdout
    prof = load_profile("local", project)
    assert prof.transport == "local" and not prof.smoke_default
    bad = tmp_path / "broken.toml"
    bad.write_text('name = "broken"\nkind = 3\n')
    with pytest.raises(ProfileError, match="broken.toml"):
        parse_profile(bad)
    user = project / ".rgt" / "profiles"
    user.mkdir(parents=True)
    (user / "mine.toml").write_text(
        (Path(prof.source).read_text())
        .replace('name = "local"', 'name = "mine"')
        .replace("smoke_default = false", "smoke_default = true")
    )
    assert load_profile("mine", project).smoke_default


def _member_data(bundle: bytes, name: str) -> int:
    """Offset of the first byte of member ``name``'s data (as stored: deflated) in a zip."""
    with zipfile.ZipFile(io.BytesIO(bundle)) as zf:
        info = zf.getinfo(name)
    assert info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
    start = info.header_offset
    name_len, extra_len = struct.unpack("<HH", bundle[start + 26 : start + 30])
    return start + 30 + name_len + extra_len


def _rezip(bundle: bytes, name: str, change: Callable[[bytes], bytes]) -> bytes:
    """The bundle with member ``name`` replaced by ``change(data)``: a consistent zip (CRCs
    right) whose content differs from what ``launch.json``'s ``deployed`` says."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(bundle)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, change(data) if info.filename == name else data)
    return out.getvalue()


def _tamper_launches(monkeypatch: pytest.MonkeyPatch, tamper: Callable[[bytes], bytes]) -> None:
    """Every launch command's stdin (the bundle) goes through ``tamper`` on its way."""
    from rgt_jupyter.transport.local import LocalTransport

    real_exec = LocalTransport.exec

    def exec_(self: LocalTransport, argv: list[str], **kwargs: Any) -> Any:
        if argv[:2] == ["sh", "-c"] and kwargs.get("stdin"):
            kwargs["stdin"] = tamper(kwargs["stdin"])
        return real_exec(self, argv, **kwargs)

    monkeypatch.setattr(LocalTransport, "exec", exec_)


def _not_deployed(job: Job, sentinel: Path) -> str:
    """The job ended failed without running a line of the program; its diagnosis."""
    assert job.wait(60) == "failed"
    snap = job.snapshot()
    assert snap.diagnosis is not None and snap.diagnosis.startswith("NOT DEPLOYED"), snap
    assert not sentinel.exists()
    control = Path(job.spec.control_dir)
    assert not (control / "bundle.zip").exists() and not (control / "log").exists()
    assert "NOT DEPLOYED" in "\n".join(job.traceback() or [])
    return snap.diagnosis


def _sentinel_program(sentinel: Path) -> str:
    return f"open({str(sentinel)!r}, 'w').write('ran')\n"


def test_deployed_must_equal_intended(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A push that keeps arriving damaged blocks the launch; a bundle damaged on the way ends the
    job failed (NOT DEPLOYED) before a line of it runs; a clean launch then goes through."""
    from rgt_jupyter.errors import LaunchError
    from rgt_jupyter.store.registry import Registry
    from rgt_jupyter.transport.local import LocalTransport

    data = project / "weights.bin"
    data.write_bytes(b"\x00" * 4096)
    real_put = LocalTransport.put

    def torn_put(self: LocalTransport, local: Path, remote: str) -> None:
        real_put(self, local, remote)
        if "/.objects/" in remote:
            with open(remote, "r+b") as fh:  # every upload of the object arrives short
                fh.truncate(1000)

    sentinel = project / "ran"
    request = LaunchRequest(program=_sentinel_program(sentinel), name="torn", push=[str(data)])
    monkeypatch.setattr(LocalTransport, "put", torn_put)
    with pytest.raises(LaunchError, match="damaged"):
        submit(request, project)
    assert Registry(project).jobs() == []
    monkeypatch.setattr(LocalTransport, "put", real_put)

    def flip(bundle: bytes) -> bytes:
        at = _member_data(bundle, "code/rgt_cell.py")
        return bundle[:at] + bytes([bundle[at] ^ 0x20]) + bundle[at + 1 :]

    real_exec = LocalTransport.exec
    _tamper_launches(monkeypatch, flip)
    damaged = submit(request, project)
    diagnosis = _not_deployed(damaged, sentinel)
    assert diagnosis.startswith("NOT DEPLOYED: the launch bundle arrived damaged"), diagnosis
    assert not (Path(damaged.spec.code_dir) / "rgt_cell.py").exists()
    monkeypatch.setattr(LocalTransport, "exec", real_exec)
    job = submit(request, project)
    assert job.wait(60) == "finished" and sentinel.read_text() == "ran"
    assert job.spec.deployed["code/weights.bin"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert set(job.spec.deployed) >= {
        "code/rgt_cell.py",
        "code/weights.bin",
        "lib/rgt_jupyter/job.py",
    }


def test_the_agent_checks_deployed_against_intended_before_the_job(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files that land intact as a zip but differ from what launch.json says was sent (and a
    pushed file missing) stop the agent before the job process starts."""
    from rgt_jupyter.transport.local import LocalTransport

    sentinel = project / "ran"
    data = project / "data.txt"
    data.write_text("v1")
    request = LaunchRequest(program=_sentinel_program(sentinel), name="diff", push=[str(data)])
    real_exec = LocalTransport.exec

    def exec_(self: LocalTransport, argv: list[str], **kwargs: Any) -> Any:
        if argv[:2] == ["sh", "-c"] and kwargs.get("stdin"):
            Path(argv[4], "code", "data.txt").unlink()  # the pushed copy vanishes meanwhile
            kwargs["stdin"] = _rezip(
                kwargs["stdin"], "code/rgt_cell.py", lambda b: b.replace(b"'ran'", b"'RAN'")
            )
        return real_exec(self, argv, **kwargs)

    monkeypatch.setattr(LocalTransport, "exec", exec_)
    job = submit(request, project)
    diagnosis = _not_deployed(job, sentinel)
    assert diagnosis == (
        "NOT DEPLOYED: 2 file(s) differ from what was sent (code/data.txt, code/rgt_cell.py); "
        "nothing was run. Launch again to re-send them."
    )
    control = Path(job.spec.control_dir)
    exit_rec = json.loads((control / "exit.json").read_text())
    assert exit_rec["state"] == "failed" and exit_rec["exit_code"] is None


def test_resume_with_altered_stored_code_is_not_deployed(project: Path) -> None:
    """A resume reuses the stored program byte-identical; if it changed since, nothing runs."""
    sentinel = project / "ran"
    program = (
        "import rgt_jupyter.job as job\n"
        "if not job.is_resume():\n"
        "    raise RuntimeError('first attempt')\n" + _sentinel_program(sentinel)
    )
    first = submit(LaunchRequest(program=program, name="alt"), project)
    assert first.wait(60) == "failed"
    stored = Path(first.spec.program)
    stored.write_text(stored.read_text() + "# edited by hand\n")
    again = first.resume(force=True)  # the first attempt's crash is deliberate
    assert again.spec.code_dir == first.spec.code_dir
    assert "(code/rgt_cell.py)" in _not_deployed(again, sentinel)


def _count_calls(monkeypatch: pytest.MonkeyPatch, cls: type) -> Counter[str]:
    """Calls of the transport's remote operations (exec, writes, puts, dirs), counted."""
    calls: Counter[str] = Counter()
    for method in ("exec", "put", "write_bytes", "makedirs"):
        real = getattr(cls, method)

        def counted(self: Any, *args: Any, _real: Any = real, _m: str = method, **kw: Any) -> Any:
            calls[_m] += 1
            return _real(self, *args, **kw)

        monkeypatch.setattr(cls, method, counted)
    return calls


def test_a_launch_is_one_command(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the host's audit is cached, a launch without --push is one exec and nothing else;
    the pid it reports is the agent's, which has its own session."""
    from rgt_jupyter.transport.local import LocalTransport

    warm = submit(LaunchRequest(program="print(0)\n", name="warm"), project)
    calls = _count_calls(monkeypatch, LocalTransport)
    program = "import time\ntime.sleep(1)\nprint(x)\n"
    job = submit(LaunchRequest(program=program, name="one", inputs={"x": [1]}), project)
    assert calls == {"exec": 1}
    pid = job.spec.agent_pid
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert int(fields[3]) == pid  # setsid ran in place: the pid is the agent, a session leader
    assert job.wait(60) == "finished" and job.log().strip() == "[1]"
    assert control_json(job, "status.json")["agent_pid"] == pid  # type: ignore[index]
    assert warm.wait(60) == "finished"
    calls.clear()
    data = project / "d.txt"
    data.write_text("d")
    pushed = submit(
        LaunchRequest(program="print(open('d.txt').read())\n", name="p", push=[str(data)]), project
    )
    assert calls["exec"] == 3  # have, materialize, the launch
    assert pushed.wait(60) == "finished" and pushed.log().strip() == "d"


def test_launch_returns_before_the_remote_python_starts(project: Path, tmp_path: Path) -> None:
    """The interpreter waits for a file the test writes only after ``launch`` returned: a launch
    that waited for the remote python would return only when that wait ran out (and says so)."""
    gate, gave_up = tmp_path / "go", tmp_path / "gave up"
    slow = tmp_path / "slow python"
    slow.write_text(
        f"#!/bin/sh\nn=0\nwhile [ ! -e {shlex.quote(str(gate))} ]; do\n"
        f"  n=$((n + 1)); if [ $n -gt 1200 ]; then : >{shlex.quote(str(gave_up))}; break; fi\n"
        f'  sleep 0.1\ndone\nexec {shlex.quote(sys.executable)} "$@"\n'
    )
    slow.chmod(0o755)
    submit(LaunchRequest(program="print(0)\n", name="audit"), project).wait(60)
    job = submit(LaunchRequest(program="print('late')\n", name="slow", python=str(slow)), project)
    assert not gave_up.exists()
    assert job.snapshot().state == "queued"
    gate.touch()
    assert job.wait(60) == "finished" and job.log().strip() == "late"
    assert not gave_up.exists()


class _MidExec(LocalTransport):
    """This machine, except that a process's command line reads empty for its first ``looks``
    reads: what Linux answers while the process execs (new image in, arguments not yet)."""

    def __init__(self, looks: int) -> None:
        super().__init__()
        self.looks = looks
        self.empty = 0

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        if path.endswith("/cmdline") and self.empty < self.looks:
            self.empty += 1
            return b""
        return super().read_bytes(path, offset, length)


def test_an_agent_caught_mid_exec_is_not_taken_for_another_process(project: Path) -> None:
    """Just after a launch, the agent's pid may be between two programs (``setsid`` → python):
    its command line reads empty. It is looked at again, never called another process (which
    made a job that had just started ``lost``)."""
    program = "import time\ntime.sleep(3)\nprint('done')\n"
    job = submit(LaunchRequest(program=program, name="execing"), project)
    wait_until = time.monotonic() + 30
    while job.snapshot().state != "running" and time.monotonic() < wait_until:
        time.sleep(0.05)
    transport = _MidExec(looks=3)
    assert observe(transport, job.spec).state == "running"
    assert transport.empty == 3
    pid = agent_pid(LocalTransport(), job.spec)
    assert pid is not None
    assert process_kind(pid, None, job.spec.control_dir) == "agent"
    assert job.wait(60) == "finished" and job.log().strip() == "done"
    # Gone for good: an empty command line of a process that is not alive is no agent.
    assert observe(_MidExec(looks=1), job.spec).state == "finished"


def test_processes_that_exec_are_never_another_process_on_the_way(tmp_path: Path) -> None:
    """Real processes, looked at while they exec from one program into another, both naming the
    same control dir: every look says ``agent`` (or ``gone`` once it exited), never ``other``."""
    control = str(tmp_path / "ctl-execwindow")
    then = f"import os, sys; os.execv(sys.executable, [sys.executable, '-S', '-c', 'pass', {control!r}])"
    transport = LocalTransport()
    kinds: Counter[str] = Counter()
    for _ in range(150):
        child = subprocess.Popen([sys.executable, "-S", "-c", then, control])
        while child.poll() is None:
            kinds[status_process(transport, child.pid, None, control)] += 1
            kinds[process_kind(child.pid, None, control)] += 1
    assert kinds["agent"] > 0
    assert kinds["other"] == 0, kinds


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes()
        except OSError:
            continue
        if text.encode() in args:
            found.append(args.decode(errors="replace"))
    return found


def test_a_missing_interpreter_is_a_launch_error(project: Path) -> None:
    from rgt_jupyter.errors import LaunchError

    submit(LaunchRequest(program="print(0)\n", name="audit"), project).wait(60)
    request = LaunchRequest(program="print(1)\n", name="nopy", python="/nonexistent/python3")
    with pytest.raises(LaunchError, match="--python PATH") as info:
        submit(request, project)
    assert "/nonexistent/python3" in str(info.value)
    job = Job.from_registry("nopy", project)
    assert job._row["state"] == "failed"
    control = job.spec.control_dir
    assert not Path(control).exists()  # nothing was written, the bundle included
    assert _processes_mentioning(control) == []


def test_an_interpreter_that_cannot_start_is_lost_with_its_words(
    project: Path, tmp_path: Path
) -> None:
    """The agent never reports: the job is lost, and the diagnosis quotes agent.log."""
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'fatal: this interpreter is broken' >&2\nexit 3\n")
    broken.chmod(0o755)
    submit(LaunchRequest(program="print(0)\n", name="audit"), project).wait(60)
    job = submit(LaunchRequest(program="print(1)\n", name="br", python=str(broken)), project)
    assert job.wait(30) == "lost"
    diagnosis = job.snapshot().diagnosis or ""
    assert "agent.log ends with" in diagnosis and "this interpreter is broken" in diagnosis


@pytest.mark.parametrize("version", ["3.6", "3.7"])
def test_an_old_python_fails_with_what_to_do(project: Path, version: str) -> None:
    olds = sorted(Path("/root/.pyenv/versions").glob(f"{version}*/bin/python"))
    assert olds, f"no Python {version} under /root/.pyenv (this machine kind has it)"
    submit(LaunchRequest(program="print(0)\n", name="audit"), project).wait(60)
    job = submit(LaunchRequest(program="print(1)\n", name="old", python=str(olds[0])), project)
    assert job.wait(30) == "failed"
    diagnosis = job.snapshot().diagnosis or ""
    assert f"is Python {version}; the agent needs Python 3.8+" in diagnosis
    assert "--python PATH" in diagnosis


def test_without_setsid_the_bundle_spawns_the_agent(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine without setsid: the bundle's own spawn (double fork) starts the agent."""
    submit(LaunchRequest(program="print(0)\n", name="audit"), project).wait(60)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("sh", "cat", "mkdir"):
        found = shutil.which(tool)
        assert found is not None
        (bindir / tool).symlink_to(found)
    with monkeypatch.context() as patch:
        patch.setenv("PATH", str(bindir))
        job = submit(LaunchRequest(program="print('spawned')\n", name="ns"), project)
    assert job.wait(60) == "finished" and job.log().strip() == "spawned"
    status = control_json(job, "status.json")
    assert status is not None and status["agent_pid"] == job.spec.agent_pid


def _bundle_with(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("__main__.py", remote.source("bundle_main.py"))
        for name, data in members.items():
            zf.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize(
    "name", ["../escape.txt", "/tmp/abs.txt", "code/../../escape.txt", "link/x"]
)
def test_the_bundle_refuses_unsafe_member_names(tmp_path: Path, name: str) -> None:
    control = tmp_path / "control"
    control.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (control / "link").symlink_to(tmp_path / "elsewhere")
    bundle = control / "bundle.zip"
    bundle.write_bytes(_bundle_with({"agent.py": b"raise SystemExit(9)\n", name: b"x"}))
    proc = subprocess.run(
        [sys.executable, str(bundle), "run", str(control)], capture_output=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    error = json.loads((control / "error.json").read_text())
    assert error["kind"] == "not_deployed" and "NOT DEPLOYED" in error["message"]
    assert json.loads((control / "exit.json").read_text())["state"] == "failed"
    assert not bundle.exists() and not (control / "agent.py").exists()
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert not (tmp_path / "escape.txt").exists() and not Path("/tmp/abs.txt").exists()


def test_phase0_audit_is_recorded_once_and_disclosed(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RGT_AUDIT_TORCH", "1")
    program = "import rgt_jupyter.job as job\njob.save_results({'a': 1})\n"
    first = submit(LaunchRequest(program=program, name="a1"), project)
    cache = project / ".rgt" / "audit" / f"local-{first.spec.host}.json"
    assert cache.exists()
    facts = json.loads(cache.read_text())["facts"]
    assert facts["python"] == sys.version.split()[0]
    assert set(facts["disks"]) == {
        f"{project}/.rgt/local/durable",
        f"{project}/.rgt/local/scratch",
        f"{project}/.rgt/local/jobs",
    }
    assert all(d["writable"] and d["inodes_total"] > 0 for d in facts["disks"].values())
    assert "cgroup" in facts and "torch_installed" in facts
    import torch

    assert facts["torch"]["imports"] and facts["torch"]["version"] == torch.__version__
    assert facts["torch"]["cuda_available"] == torch.cuda.is_available()
    findings = first.spec.audit["findings"]
    assert any(f.startswith("durable dir:") for f in findings)
    assert any(f.startswith(f"torch {torch.__version__}") for f in findings)
    stamp = cache.stat().st_mtime_ns
    second = submit(LaunchRequest(program="print(2)\n", name="a2"), project)
    assert cache.stat().st_mtime_ns == stamp  # once per host
    assert second.spec.audit == first.spec.audit
    assert first.wait(60) == "finished"
    assert "machine: " in first._repr_mimebundle_()["text/plain"]
    assert first.pull().provenance["audit"]["findings"] == findings


def test_unwritable_durable_dir_blocks_the_launch(project: Path) -> None:
    from rgt_jupyter.errors import LaunchError
    from rgt_jupyter.store.registry import Registry

    (project / "blocker").write_text("a file where the durable dir should be")
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    local = load_profile("local", project)
    (profiles / "blocked.toml").write_text(
        Path(local.source)
        .read_text()
        .replace('name = "local"', 'name = "blocked"')
        .replace(
            'durable_dir = "{project}/.rgt/local/durable"',
            'durable_dir = "{project}/blocker/durable"',
        )
    )
    with pytest.raises(LaunchError, match="not writable"):
        submit(LaunchRequest(program="print(1)\n", name="b", profile="blocked"), project)
    assert Registry(project).jobs() == []
