"""A real one-node Slurm cluster on 127.0.0.1 for the tests: munged, slurmctld and slurmd of the
Debian packages (installed by scripts/setup.sh: slurm-wlm, munge), run as root.

The client commands (sbatch, squeue, scontrol, scancel) read the system file
/etc/slurm/slurm.conf and no SLURM_CONF variable, so they also work in the clean environment of
an SSH session. The fixture writes that file (marked by its first line) and removes it again;
it refuses to touch a slurm.conf that it did not write. State, spool, logs and pid files lie in
the session's own folder.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
MUNGED = "/usr/sbin/munged"
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_RUN = Path("/run/munge")
MARKER = "# rgt-jupyter test cluster"
PARTITION = "debug"
KILL_WAIT = 5
# How long a requeued job waits before it may start again (and the lifetime of job step
# credentials): Slurm's default is 120 s.
CRED_EXPIRE = 10
# States in which a job still holds (or waits for) the node.
ACTIVE_STATES = "PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING,REQUEUED,RESIZING,SIGNALING"


def _client_env() -> dict[str, str]:
    """The environment for client commands: no SLURM_* variable, so the system config is used."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


def _run(*cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=_client_env(), timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed (exit {proc.returncode}): {proc.stderr.strip()}"
        )
    return proc


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"--- {path}: missing"
    return f"--- {path} (last {lines} lines):\n" + "\n".join(text[-lines:])


@dataclass
class SlurmCluster:
    """A running one-node cluster."""

    conf: Path
    partition: str
    node: str
    log_dir: Path
    kill_wait: int
    cred_expire: int

    def squeue(self, *args: str) -> str:
        """The output of ``squeue ARGS`` (raises AssertionError when it fails)."""
        return _run("squeue", *args).stdout

    def scontrol(self, *args: str) -> str:
        """The output of ``scontrol ARGS`` (raises AssertionError when it fails)."""
        return _run("scontrol", *args).stdout

    def sbatch(self, *args: str) -> str:
        """Submit with ``sbatch --parsable ARGS``; the new job's id."""
        return _run("sbatch", "--parsable", *args).stdout.strip().split(";")[0]

    def job_state(self, job_id: str) -> str:
        """The job's state (``RUNNING``, ``COMPLETED``, ``TIMEOUT`` ...), or "" when unknown."""
        proc = _run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T", check=False)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def node_state(self) -> str:
        """The node's state as sinfo writes it (``idle``, ``mixed``, ``down*`` ...)."""
        return _run("sinfo", "-h", "-n", self.node, "-o", "%T").stdout.strip()

    def logs(self) -> str:
        """The tails of the daemons' logs (for failure messages)."""
        return "\n".join(_tail(p) for p in sorted(self.log_dir.glob("*.log")))

    def wait_idle(self, timeout: float = 60) -> None:
        """Wait until the node takes jobs (idle or mixed); a DOWN or DRAINED node is resumed."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = _run("sinfo", "-h", "-n", self.node, "-o", "%T", check=False).stdout.strip()
            if state in ("idle", "mixed"):
                return
            if state.startswith(("down", "drain")) and not state.endswith("*"):
                _run("scontrol", "update", f"nodename={self.node}", "state=resume", check=False)
            time.sleep(0.2)
        raise AssertionError(
            f"slurm node {self.node} not ready after {timeout} s (state {state!r})\n{self.logs()}"
        )

    def active_jobs(self) -> list[str]:
        """Ids of the jobs that are pending, running or completing."""
        out = self.squeue("-h", "-t", ACTIVE_STATES, "-o", "%i")
        return out.split()

    def cancel_all(self, timeout: float = 30) -> None:
        """scancel every job and wait until none holds the node any more."""
        jobs = self.active_jobs()
        if jobs:
            _run("scancel", *jobs, check=False)
        deadline = time.monotonic() + timeout
        while self.active_jobs():
            assert time.monotonic() < deadline, (
                f"jobs still active {timeout} s after scancel: {self.active_jobs()}\n{self.logs()}"
            )
            time.sleep(0.2)


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def _munge_works() -> bool:
    """True when ``munge -n | unmunge`` succeeds (a munged answers on the default socket)."""
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=10, check=False)
        if cred.returncode != 0:
            return False
        dec = subprocess.run(
            ["unmunge"], input=cred.stdout, capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return dec.returncode == 0


def _start_munged(log_dir: Path) -> subprocess.Popen[bytes] | None:
    """Start munged as the munge user, unless one already answers; None when none was started."""
    if _munge_works():
        return None
    munge_user = pwd.getpwnam("munge")
    uid, gid = munge_user.pw_uid, munge_user.pw_gid
    if not MUNGE_KEY.exists():
        MUNGE_KEY.parent.mkdir(mode=0o700, exist_ok=True)
        os.chown(MUNGE_KEY.parent, uid, gid)
        MUNGE_KEY.write_bytes(os.urandom(1024))
        os.chown(MUNGE_KEY, uid, gid)
        os.chmod(MUNGE_KEY, 0o400)
    for folder in (MUNGE_RUN, Path("/var/lib/munge"), Path("/var/log/munge")):
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.chown(folder, uid, gid)
    log = log_dir / "munged.log"
    with open(log, "wb") as fh:
        # -F: in the foreground, munged logs to stderr.
        proc = subprocess.Popen(
            [MUNGED, "-F"], stdout=fh, stderr=subprocess.STDOUT, user=uid, group=gid
        )
    deadline = time.monotonic() + 20
    while not _munge_works():
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise AssertionError(f"munged did not come up\n{_tail(log)}")
        time.sleep(0.1)
    return proc


def _write_conf(root: Path, node: str) -> str:
    ctld_port = 6817 if not _port_taken(6817) else _free_port()
    slurmd_port = 6818 if not _port_taken(6818) else _free_port()
    return f"""{MARKER} (written by tests/slurm_cluster.py; removed when the tests end)
ClusterName=rgt
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire={CRED_EXPIRE}
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1,batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobRequeue=1
KillWait={KILL_WAIT}
MinJobAge=3600
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=30
MessageTimeout=10
InactiveLimit=0
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldLogFile={root}/logs/slurmctld.log
SlurmdLogFile={root}/logs/slurmd.log
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldDebug=info
SlurmdDebug=info
NodeName={node} NodeHostname={node} NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _running_slurmctld(conf_text: str) -> int | None:
    """The pid of the live slurmctld whose pid file the config names, or None."""
    for line in conf_text.splitlines():
        if line.startswith("SlurmctldPidFile="):
            try:
                pid = int(Path(line.partition("=")[2].strip()).read_text().strip())
                stat = Path(f"/proc/{pid}/stat").read_text()
            except (OSError, ValueError):
                return None
            comm, state = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2]
            return pid if comm.startswith("slurmctld") and state not in "ZX" else None
    return None


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _kill_stepds(since: float) -> None:
    """SIGKILL slurmstepd processes started after ``since`` (a time.time()), with their jobs."""
    boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        started = boot + int(stat[stat.rindex(")") + 2 :].split()[19]) / ticks
        if comm == "slurmstepd" and started >= since - 1:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), 9)


@contextlib.contextmanager
def start_slurm(root: Path) -> Iterator[SlurmCluster]:
    """Run munged (unless one runs already), slurmctld and slurmd, with state and logs in
    ``root`` (an empty, existing folder), until the block ends; raises AssertionError when a part
    is not installed or the node does not come up."""
    for binary in (SLURMCTLD, SLURMD, MUNGED):
        assert os.path.exists(binary), (
            f"{binary} is missing: scripts/setup.sh installs slurm-wlm and munge; run it first"
        )
    for tool in ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "munge", "unmunge"):
        assert shutil.which(tool), f"{tool} is missing (slurm-wlm / munge client)"
    assert os.geteuid() == 0, "the test Slurm cluster runs its daemons as root"
    if SYSTEM_CONF.exists():
        text = SYSTEM_CONF.read_text(errors="replace")
        assert text.startswith(MARKER), (
            f"{SYSTEM_CONF} exists and was not written by the tests (its first line is not "
            f"{MARKER!r}); refusing to overwrite it. Move it away to run the Slurm tests."
        )
        other = _running_slurmctld(text)
        assert other is None, (
            f"{SYSTEM_CONF} belongs to a test cluster that still runs (slurmctld pid {other}): "
            "another test session is using it; stop that one first"
        )
    node = socket.gethostname().split(".")[0]
    log_dir = root / "logs"
    for sub in ("state", "spool", "logs"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    started = time.time()
    munged = _start_munged(log_dir)
    procs: list[subprocess.Popen[bytes]] = []
    cluster: SlurmCluster | None = None
    try:
        SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
        SYSTEM_CONF.write_text(_write_conf(root, node))
        (root / "slurm.conf").write_text(SYSTEM_CONF.read_text())
        cluster = SlurmCluster(SYSTEM_CONF, PARTITION, node, log_dir, KILL_WAIT, CRED_EXPIRE)
        env = _client_env()
        with open(log_dir / "slurmctld.out", "wb") as fh:
            # -c: start from a clean state (no jobs of an earlier session); -D: foreground.
            procs.append(
                subprocess.Popen(
                    [SLURMCTLD, "-D", "-c"], stdout=fh, stderr=subprocess.STDOUT, env=env
                )
            )
        with open(log_dir / "slurmd.out", "wb") as fh:
            procs.append(
                subprocess.Popen(
                    [SLURMD, "-D", "-N", node], stdout=fh, stderr=subprocess.STDOUT, env=env
                )
            )
        deadline = time.monotonic() + 60
        while _run("sinfo", "-h", check=False).returncode != 0:
            for proc in procs:
                assert proc.poll() is None, (
                    f"{proc.args[0]} exited ({proc.returncode})\n{cluster.logs()}"
                    f"\n{_tail(log_dir / 'slurmctld.out')}\n{_tail(log_dir / 'slurmd.out')}"
                )
            assert time.monotonic() < deadline, f"slurmctld does not answer\n{cluster.logs()}"
            time.sleep(0.2)
        cluster.wait_idle(60)
        yield cluster
    finally:
        if cluster is not None:
            with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                cluster.cancel_all(timeout=KILL_WAIT + 15)
        for proc in reversed(procs):
            _stop(proc)
        _kill_stepds(started)
        _stop(munged)
        with contextlib.suppress(OSError):
            if SYSTEM_CONF.read_text(errors="replace").startswith(MARKER):
                SYSTEM_CONF.unlink()


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """Start the one-node Slurm cluster once for the session (fails loudly when a part is not
    installed); tests call ``cancel_all()`` to leave the node empty for the next one."""
    with start_slurm(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster
