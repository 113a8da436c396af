"""The rgt agent: supervises one job where it runs. Stdlib only, Python 3.8+, shipped as one file.

Subcommands::

    agent.py spawn CONTROL_DIR      start ``run`` detached (own session, stdin /dev/null), print its pid
    agent.py run CONTROL_DIR        supervise the job described by CONTROL_DIR/launch.json
    agent.py cell PROGRAM           run PROGRAM as __main__ (the job process itself)
    agent.py manifest [--reuse=M] NAME=DIR...  print a JSON manifest (path, size, sha256) of dirs
    agent.py audit DIR...           print a JSON audit of this machine (disks of DIR..., cgroup, GPU)
    agent.py place OBJDIR DEST      copy objects to DEST/<rel> for the {rel: sha256} on stdin;
                                    print the sha256s it lacks
    agent.py refill OBJDIR          give the store a spare of each object (sha256s on stdin) a
                                    job took out of it
    agent.py env                    print a JSON description of this interpreter and machine

A launch arrives as one zip bundle whose ``__main__.py`` unpacks it into CONTROL_DIR (the secrets,
if any, as ``secrets.json``, 0600) and then runs ``agent.py run CONTROL_DIR`` (or ``spawn``).
Before the job starts, ``run`` hashes every file named in ``launch.json``'s ``deployed`` and
compares it with what was sent; on any difference the job is not started and the agent writes
``error.json`` (kind ``not_deployed``) and ``exit.json`` (state ``failed``).

``run`` writes, in CONTROL_DIR: ``status.json`` (who and where), ``heartbeat.json`` (a counter, wall
and monotonic time, and this machine's boot-time clock with its boot id, every ``heartbeat_s``: an
observer ages it by this machine's uptime, whatever its own clock says), ``log`` (the job's
stdout and stderr), ``env.json``, ``manifest.json`` (sha256 of every output and checkpoint, taken
when the job ended) and, last, ``exit.json`` (exit code, signal, final state). While the job
reports no progress of its own (``job.progress``), ``run`` appends to ``progress.jsonl`` what its
tqdm bars and TensorBoard scalars say (:class:`ProgressInference`). SIGTERM, SIGUSR2 and SIGINT
are forwarded to the job's process group; after ``grace_s`` seconds a job that has not exited is
killed.

The final state is decided here from the process and artifacts: ``finished`` (exit 0),
``preempted`` (a preemption signal reached the job or the agent, or SIGTERM ended it),
``failed`` (anything else). A job whose agent vanished without ``exit.json`` is ``lost``; that is
decided by the watcher, from the process table.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

SCHEMA = "rgt-agent/1"
_FORWARDED = ("SIGTERM", "SIGUSR2", "SIGINT")
#: prctl(2): the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


def tie_to_parent(parent: int) -> Any:
    """The ``preexec_fn`` of the job's process: its own process group (signals reach all of it),
    and SIGTERM when the agent dies, however it dies (kill -9, the OOM killer), so the job
    never runs on unsupervised: it gets the same chance to save as a preemption. Where prctl is
    not to be had, the status rules still see a job whose agent is gone (``agent lost``)."""

    def preexec() -> None:
        os.setpgrp()
        # A warning (SIGUSR2) that lands before the job's code has set its handler must not
        # kill it: the job module catches up on it from signals.json when it is imported.
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the agent died before the tie was made
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _now() -> float:
    return time.time()


def write_json_atomic(path: str, obj: Any) -> None:
    """Write JSON to ``path`` via a temporary file, fsync and rename."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, ".%s.tmp-%d" % (os.path.basename(path), os.getpid()))
    with open(tmp, "w") as fh:
        fh.write(json.dumps(obj, indent=1, sort_keys=True, default=str))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def proc_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (field 22 of /proc/PID/stat), or None."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            data = fh.read()
    except OSError:
        return None
    return int(data[data.rindex(")") + 2 :].split()[19])


def uptime() -> Optional[float]:
    """Seconds since this machine booted, on the clock ``/proc/uptime`` reads (CLOCK_BOOTTIME:
    never set, never skewed, counting suspend), or None where there is none."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    if clock is None:
        return None
    try:
        return time.clock_gettime(clock)
    except OSError:
        return None


def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return None


# ----------------------------------------------------------------------------- manifest


def sha256_file(path: str) -> tuple[str, int]:
    sha = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(1 << 20)
            if not chunk:
                break
            sha.update(chunk)
            size += len(chunk)
    return sha.hexdigest(), size


def is_temporary(name: str) -> bool:
    """Files that are never part of a result: in-flight temporaries of atomic writes."""
    return name.startswith(".") and ".tmp-" in name


def stat_key(st: os.stat_result) -> List[int]:
    """What changes whenever a file's bytes do: size, mtime, ctime (no tool can set it back) and
    inode. A file with the same key as when it was hashed need not be hashed again."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def build_manifest(roots: Dict[str, str], reuse: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Manifest of ``{prefix: dir}``: ``{"prefix/rel": {"size", "sha256", "stat"}}``; symlinks
    refused. Entries of ``reuse`` (an earlier manifest) whose file has the same :func:`stat_key`
    keep their sha256 (marked ``"reused": true``) instead of being read again."""
    files = {}
    refused = []
    earlier = (reuse or {}).get("files", {})
    for prefix, root in sorted(roots.items()):
        if not os.path.isdir(root):
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                # A link to a folder is listed among the folders (and never entered): refuse it
                # like a link to a file, whether or not its target exists.
                dirnames.remove(name)
                rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                refused.append(prefix + "/" + rel)
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                if is_temporary(name):
                    continue
                if os.path.islink(full) or not os.path.isfile(full):
                    refused.append(prefix + "/" + rel)
                    continue
                key = prefix + "/" + rel
                before = stat_key(os.stat(full))
                known = earlier.get(key)
                if known is not None and known.get("stat") == before:
                    files[key] = {"size": before[0], "sha256": known["sha256"], "stat": before}
                    files[key]["reused"] = True
                    continue
                digest, size = sha256_file(full)
                after = stat_key(os.stat(full))
                entry: Dict[str, Any] = {"size": size, "sha256": digest}
                if after == before and after[0] == size:  # not written while it was read
                    entry["stat"] = after
                files[key] = entry
    return {"schema": SCHEMA, "created_at": _now(), "files": files, "refused": refused}


def manifest_command(args: List[str]) -> int:
    """``manifest [--reuse=MANIFEST.json] NAME=DIR...``: print the manifest as JSON."""
    reuse = None
    roots = {}
    for arg in args:
        if arg.startswith("--reuse="):
            try:
                with open(arg[len("--reuse=") :]) as fh:
                    reuse = json.load(fh)
            except (OSError, ValueError):
                reuse = None  # no earlier manifest (or a torn one): hash everything
        else:
            name, _, root = arg.partition("=")
            roots[name] = root
    sys.stdout.write(json.dumps(build_manifest(roots, reuse)))
    return 0


# ----------------------------------------------------------------------------- environment


def _run(argv: List[str], timeout: float) -> Optional[Dict[str, Any]]:
    try:
        out = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, text=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {"rc": out.returncode, "stdout": out.stdout, "stderr": out.stderr}


def nvidia_smi(full: bool = False) -> Optional[Dict[str, Any]]:
    """The GPU query (name, memory, driver, utilisation), and the full table if asked; None
    when there is no nvidia-smi."""
    query = _run(
        [
            "nvidia-smi",
            "--query-gpu=name,memory.total,memory.used,driver_version,utilization.gpu",
            "--format=csv,noheader",
        ],
        15,
    )
    if query is not None and full:
        table = _run(["nvidia-smi"], 15)
        query["full"] = table["stdout"] if table else None
    return query


def _cgroup_path(root: str, rel: str, probe: str) -> Optional[str]:
    """The folder under ``root`` of cgroup ``rel`` holding ``probe``: the longest tail of
    ``rel`` that exists there (a container sees its own cgroup as the root)."""
    parts = [p for p in rel.strip("/").split("/") if p]
    for i in range(len(parts) + 1):
        path = os.path.join(root, *parts[i:])
        if os.path.exists(os.path.join(path, probe)):
            return path
    return None


def cgroup_memory() -> Dict[str, Any]:
    """This process's memory cgroup (v2, else v1): use, limit and ``oom_kill`` counter (the
    processes the kernel's OOM killer ended there), each None when unreadable."""
    text = _read("/proc/self/cgroup") or ""
    v1 = v2 = None
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) == 3 and fields[0] == "0" and fields[1] == "":
            v2 = _cgroup_path("/sys/fs/cgroup", fields[2], "memory.events")
        elif len(fields) == 3 and "memory" in fields[1].split(","):
            v1 = _cgroup_path("/sys/fs/cgroup/memory", fields[2], "memory.oom_control")
    if v2:
        where, names = v2, ("memory.events", "memory.current", "memory.max")
    elif v1:
        where = v1
        names = ("memory.oom_control", "memory.usage_in_bytes", "memory.limit_in_bytes")
    else:
        return {"current": None, "max": None, "oom_kill": None}
    kills = None
    for line in (_read(os.path.join(where, names[0])) or "").splitlines():
        if line.startswith("oom_kill "):
            kills = int(line.split()[1])
    used, cap = _read(os.path.join(where, names[1])), _read(os.path.join(where, names[2]))
    return {
        "current": int(used) if used and used.isdigit() else None,
        # v1 writes "no limit" as a number near 2**63
        "max": int(cap) if cap and cap.isdigit() and int(cap) < 1 << 60 else None,
        "oom_kill": kills,
    }


def oom_kills() -> Optional[int]:
    """The memory cgroup's ``oom_kill`` counter, if readable."""
    return cgroup_memory()["oom_kill"]


#: GPU utilisation samples ``resources.json`` keeps (``gpu_util_recent``) for the throughput
#: finding: what the GPUs did over the last minutes, not at one instant.
UTIL_KEEP = 30


def sample_resources() -> Dict[str, Any]:
    """GPU utilisation and memory (``nvidia-smi``, when there is one) and the cgroup's memory use,
    for the live view (run.md: OOM risk above 90 % of ``memory.max``)."""
    import shutil  # deferred: not every command needs it

    out: Dict[str, Any] = {"t": _now(), "gpus": None}
    if shutil.which("nvidia-smi"):
        done = _run(
            [
                "nvidia-smi",
                "--query-gpu=index,utilization.gpu,memory.used,memory.total",
                "--format=csv,noheader,nounits",
            ],
            15,
        )
        if done is not None and done["rc"] == 0:
            gpus = []
            for line in done["stdout"].splitlines():
                cells = [c.strip() for c in line.split(",")]
                if len(cells) == 4:
                    try:
                        gpus.append(
                            {
                                "index": int(cells[0]),
                                "util": float(cells[1]),
                                "mem_used_mib": float(cells[2]),
                                "mem_total_mib": float(cells[3]),
                            }
                        )
                    except ValueError:
                        continue
            out["gpus"] = gpus
    mem = cgroup_memory()
    out["memory"] = {"current": mem["current"], "max": mem["max"]}
    out["oom_kill"] = mem["oom_kill"]
    return out


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def disk_facts(dirs: List[str]) -> Dict[str, Dict[str, int]]:
    """Bytes and inodes of the filesystems holding ``dirs`` (those that can be read): how a full
    disk is told from one out of inodes, from the numbers rather than an error's words."""
    facts = {}
    for d in dirs:
        try:
            st = os.statvfs(d)
        except OSError:
            continue
        facts[d] = {
            "bytes_total": st.f_blocks * st.f_frsize,
            "bytes_free": st.f_bavail * st.f_frsize,
            "inodes_total": st.f_files,
            "inodes_free": st.f_favail,
        }
    return facts


def audit(args: List[str]) -> Dict[str, Any]:
    """Phase-0 audit of this machine in one call: disks (bytes and inodes, writable) of the
    given dirs, cgroup limits and OOM kills, GPUs, Python, and whether torch imports and sees
    CUDA (not with ``--no-torch``)."""
    import socket  # deferred: not every command needs it

    torch_probe = "--no-torch" not in args
    dirs = [a for a in args if a != "--no-torch"]
    disks = {}
    for d in dirs:
        entry: Dict[str, Any] = {"path": d}
        try:
            os.makedirs(d, exist_ok=True)
            st = os.statvfs(d)
            entry.update(
                bytes_total=st.f_blocks * st.f_frsize,
                bytes_free=st.f_bavail * st.f_frsize,
                inodes_total=st.f_files,
                inodes_free=st.f_favail,
            )
            probe = os.path.join(d, ".rgt-probe-%d" % os.getpid())
            with open(probe, "w") as fh:
                fh.write("probe")
            with open(probe) as fh:
                entry["writable"] = fh.read() == "probe"
            os.unlink(probe)
        except OSError as exc:
            entry["writable"] = False
            entry["error"] = str(exc)
        disks[d] = entry
    events = _read("/sys/fs/cgroup/memory.events") or ""
    oom = [line.split()[1] for line in events.splitlines() if line.startswith("oom_kill ")]
    import importlib.util

    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "disks": disks,
        "cgroup": {
            "memory_max": _read("/sys/fs/cgroup/memory.max")
            or _read("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
            "cpu_max": _read("/sys/fs/cgroup/cpu.max"),
            "oom_kill": int(oom[0]) if oom else None,
        },
        "nvidia_smi": nvidia_smi(),
        "torch_installed": importlib.util.find_spec("torch") is not None,
        "torch": probe_torch()
        if torch_probe and importlib.util.find_spec("torch") is not None
        else None,
    }


_TORCH_PROBE = (
    "import json, torch\n"
    "cuda = torch.cuda.is_available()\n"
    "print(json.dumps({'version': torch.__version__, 'cuda_available': cuda,\n"
    "    'cuda_version': torch.version.cuda, 'device_count': torch.cuda.device_count(),\n"
    "    'devices': [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}))\n"
)


def probe_torch(timeout: float = 120.0) -> Dict[str, Any]:
    """Whether torch imports in this interpreter and sees CUDA (in a child process: a broken
    CUDA install may hang or crash it)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _TORCH_PROBE],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
            universal_newlines=True,
        )
    except subprocess.TimeoutExpired:
        return {"imports": False, "error": "import torch took over %d s" % timeout}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
        return {"imports": False, "error": tail[-300:]}
    try:
        facts = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"imports": False, "error": "unexpected output: %r" % proc.stdout[-200:]}
    facts["imports"] = True
    return facts


def describe_env() -> dict[str, Any]:
    """This interpreter and machine: python, platform, packages, CPUs, GPUs (nvidia-smi)."""
    import platform  # deferred: not every command needs it
    import socket  # deferred: not every command needs it

    info: Dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "packages": {},
        "nvidia_smi": None,
    }
    try:
        from importlib import metadata

        for dist in metadata.distributions():
            name = dist.metadata["Name"]
            if name:
                info["packages"][name] = dist.version
    except Exception as exc:  # noqa: BLE001 - recorded, not fatal
        info["packages_error"] = repr(exc)
    info["nvidia_smi"] = nvidia_smi(full=True)
    return info


# ----------------------------------------------------------------------------- the job process


def _load_inputs(directory: str | None) -> dict[str, Any]:
    import pickle  # deferred: not every command needs it

    values: Dict[str, Any] = {}
    if not directory or not os.path.isdir(directory):
        return values
    for name in sorted(os.listdir(directory)):
        stem, ext = os.path.splitext(name)
        path = os.path.join(directory, name)
        if ext == ".json":
            with open(path) as fh:
                values[stem] = json.load(fh)
        elif ext == ".pkl":
            with open(path, "rb") as fh:
                values[stem] = pickle.load(fh)  # noqa: S301 - the user's own notebook variables
    return values


def _error_record(exc: BaseException, program: str) -> dict[str, Any]:
    import traceback  # deferred: not every command needs it

    frames = []
    for fs in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(fs.filename) == os.path.abspath(__file__):
            continue
        frames.append({"file": fs.filename, "line": fs.lineno, "name": fs.name, "text": fs.line})
    record: Dict[str, Any] = {
        "type": type(exc).__name__,
        "message": str(exc),
        "program": program,
        "frames": frames,
        "formatted": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    }
    if isinstance(exc, SyntaxError):
        record["syntax"] = {
            "file": exc.filename,
            "line": exc.lineno,
            "offset": exc.offset,
            "text": exc.text,
            "msg": exc.msg,
        }
    return record


def _atomic_torch_save(torch: Any) -> None:
    """Make ``torch.save(obj, path)`` write a temporary sibling and rename it once whole.

    A save that raises (an object that cannot be pickled, a full disk) or is killed leaves no
    file under its name, only a ``.NAME.tmp-PID`` that no manifest lists, so a half-written
    save is never pulled as a corrupt checkpoint. File objects and non-regular targets pass
    through unchanged; the bytes written are those ``torch.save`` writes.
    """
    original = getattr(torch, "save", None)
    if original is None or getattr(original, "_rgt_atomic", False):
        return

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(f, (str, bytes, os.PathLike)):
            return original(obj, f, *args, **kwargs)
        path = os.path.abspath(os.fsdecode(os.fspath(f)))
        if os.path.exists(path) and not os.path.isfile(path):
            return original(obj, f, *args, **kwargs)
        directory, base = os.path.split(path)
        tmp = os.path.join(directory, ".%s.tmp-%d" % (base, os.getpid()))
        try:
            result = original(obj, tmp, *args, **kwargs)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return result

    save.__doc__ = original.__doc__
    save.__wrapped__ = original  # type: ignore[attr-defined]
    save._rgt_atomic = True  # type: ignore[attr-defined]
    torch.save = save


class _AfterImport(object):
    """An import hook that runs ``then(module)`` once ``name`` has been imported for real (the
    job's own import of torch), without importing it before the job does."""

    def __init__(self, name: str, then: Any) -> None:
        self.name = name
        self.then = then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once, and not for the look-up below
        import importlib.util

        spec = importlib.util.find_spec(fullname)
        loader: Any = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec
        then = self.then

        def run(module: Any) -> None:
            exec_module(module)
            try:
                then(module)
            except Exception as exc:  # noqa: BLE001 - the job runs on with the plain function
                sys.stderr.write("[rgt] could not make torch.save atomic: %r\n" % (exc,))

        loader.exec_module = run  # this spec's own loader object: nothing else sees it
        return spec


def run_cell(program: str) -> int:
    """Run ``program`` as ``__main__``; on an exception write ``error.json`` and exit 1.

    The program gets a module of its own registered as ``sys.modules["__main__"]``, as under
    ``python program.py``: a class defined in it pickles as ``__main__.Name`` (``torch.save``
    of a model, multiprocessing) and loads wherever that name is importable, a notebook
    defining the same class included.
    """
    import traceback  # deferred: not every command needs it
    import types  # deferred: not every command needs it

    program = os.path.abspath(program)
    sys.argv = [program]
    sys.path.insert(0, os.getcwd())
    main = types.ModuleType("__main__")
    main.__dict__.update({"__file__": program, "__builtins__": builtins, "__spec__": None})
    namespace = main.__dict__
    agent = sys.modules.get("__main__")  # noqa: F841 - this module, kept alive
    sys.modules["__main__"] = main
    if "torch" in sys.modules:
        _atomic_torch_save(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _AfterImport("torch", _atomic_torch_save))
    control = os.environ.get("RGT_CONTROL_DIR")
    try:
        namespace.update(_load_inputs(os.environ.get("RGT_INPUTS_DIR")))
        with open(program, encoding="utf-8") as fh:
            source = fh.read()
        code = compile(source, program, "exec")
        exec(code, namespace)  # noqa: S102 - this is the job
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - recorded for the notebook, then exit 1
        if control:
            write_json_atomic(os.path.join(control, "error.json"), _error_record(exc, program))
        # The job's own traceback on its stderr (its log), without this file's frames.
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb)
        sys.stderr.flush()
        return 1
    return 0


# ----------------------------------------------------------------------------- inferred progress
#
# A script that never calls job.progress still shows progress: the agent reads the tqdm bars in
# its log and the TensorBoard scalars under $RGT_OUT, and appends what they say to the same
# progress.jsonl the view reads (each record marked with its "source"). The first record the job
# writes itself ends the inference: job.progress always wins.

_SCALE = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
#: A tqdm bar with a total: ``desc: 45%|####5     | 45/100 [00:03<00:04, 12.3it/s, loss=0.5]``.
_TQDM_TOTAL = re.compile(
    r"(?:^|[\s|])(\d+(?:\.\d+)?)([kMGT]?)/(\d+(?:\.\d+)?)([kMGT]?)\s*"
    r"\[([0-9:]+)<([0-9:?]+)(?:,\s*([^\]]*))?\]\s*$"
)
#: A tqdm counter without a total: ``desc: 45it [00:03, 12.3it/s, loss=0.5]``.
_TQDM_COUNT = re.compile(
    r"(?:^|[\s:])(\d+(?:\.\d+)?)([kMGT]?)[A-Za-z]*\s*\[([0-9:]+)(?:,\s*([^\]<]*))?\]\s*$"
)
_TQDM_DESC = re.compile(r"^(.*?)(?:\s*\d+%\|.*)?$")


def _tqdm_number(digits: str, scale: str) -> int:
    return int(round(float(digits) * _SCALE.get(scale, 1.0)))


def _postfix(text: Optional[str]) -> Dict[str, float]:
    """The numbers of a tqdm postfix (``12.3it/s, loss=0.5, lr=1e-3``): ``{"loss": 0.5, ...}``."""
    metrics: Dict[str, float] = {}
    for part in (text or "").split(", "):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            continue
        try:
            number = float(value.strip())
        except ValueError:
            continue
        if number == number and number not in (float("inf"), float("-inf")):
            metrics[key.strip()] = number
    return metrics


def parse_tqdm(segment: str) -> Optional[Dict[str, Any]]:
    """One tqdm update (a ``\r``- or newline-separated segment of the log) as ``{"desc",
    "step", "total", "metrics"}``; None when the segment is not a tqdm bar."""
    text = segment.strip()
    if "[" not in text or not text.endswith("]"):
        return None
    m = _TQDM_TOTAL.search(text)
    if m is not None:
        step, total = _tqdm_number(m.group(1), m.group(2)), _tqdm_number(m.group(3), m.group(4))
        head, tail = text[: m.start()], m.group(7)
    else:
        m = _TQDM_COUNT.search(text)
        if m is None:
            return None
        step, total, head, tail = (
            _tqdm_number(m.group(1), m.group(2)),
            None,
            text[: m.start()],
            m.group(4),
        )
    desc_m = _TQDM_DESC.match(head)
    desc = (desc_m.group(1) if desc_m else head).strip().rstrip(":").strip()
    return {"desc": desc, "step": step, "total": total, "metrics": _postfix(tail)}


#: Run under the job's own interpreter (``python -c``, with the dir to read and this agent's
#: pid): the latest value of every TensorBoard scalar written under the dir, one JSON line
#: per pass over its event files.
_TB_READER = r"""
import json, os, sys, time
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util
root, agent = sys.argv[1], int(sys.argv[2])
loaders, latest = {}, {}
while os.getppid() == agent:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if "tfevents" in name and path not in loaders:
                loaders[path] = EventFileLoader(path)
    for path in sorted(loaders):
        for event in loaders[path].Load():
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                if kind == "simple_value":
                    number = float(value.simple_value)
                elif kind == "tensor" and value.metadata.plugin_data.plugin_name == "scalars":
                    number = float(tensor_util.make_ndarray(value.tensor).item())
                else:
                    continue
                latest[value.tag] = [int(event.step), number]
    sys.stdout.write(json.dumps(latest) + "\n")  # each pass: the agent counts them
    sys.stdout.flush()
    time.sleep(0.5)
"""


class ProgressInference(object):
    """Progress of a job that does not report it: its tqdm bars and TensorBoard scalars.

    tqdm is read from the job's log here, with the standard library. TensorBoard event files
    are read by TensorBoard's own event reader, in a child process under the job's interpreter
    (``launch.json``'s ``python``), started only once an event file appears under ``$RGT_OUT``:
    that interpreter is the one that wrote them (``torch.utils.tensorboard`` needs the package
    there), while this agent stays on the standard library and never imports it; a reader
    that fails (no ``tensorboard`` there, a crash) leaves the agent untouched, and the
    progress comes from tqdm alone. Once the job writes a record of its own (``job.progress``),
    nothing more is inferred.
    """

    def __init__(self, control: str, out_dir: str, python: str) -> None:
        self.log_path = os.path.join(control, "log")
        self.progress_path = os.path.join(control, "progress.jsonl")
        self.out_dir = out_dir
        self.python = python
        self.offset = self._size(self.log_path)
        self.base = self._size(self.progress_path)
        self.written = 0
        self.tail = ""
        self.bars: Dict[str, Dict[str, Any]] = {}
        self.seq = 0
        self.tb: Dict[str, List[float]] = {}
        self.tb_passes = 0
        self.tb_proc: Optional["subprocess.Popen[bytes]"] = None
        self.tb_failed = False
        self.next_scan = 0.0
        self.last: Optional[Dict[str, Any]] = None
        self.stopped = False

    @staticmethod
    def _size(path: str) -> int:
        try:
            return os.path.getsize(path)
        except OSError:
            return 0

    def job_reports(self) -> bool:
        """Whether the job itself wrote progress since the agent started."""
        return self._size(self.progress_path) > self.base + self.written

    def read_log(self) -> None:
        size = self._size(self.log_path)
        if size <= self.offset:
            return
        start = max(self.offset, size - (1 << 20))  # a burst of output: only its end matters
        with open(self.log_path, "rb") as fh:
            fh.seek(start)
            data = fh.read(size - start)
        self.offset = start + len(data)
        text = self.tail + data.decode("utf-8", errors="replace")
        segments = re.split(r"[\r\n]", text)
        self.tail = segments[-1][-4096:]
        for segment in segments:
            bar = parse_tqdm(segment)
            if bar is not None:
                self.seq += 1
                bar["seq"] = self.seq
                self.bars[bar["desc"]] = bar

    def read_tensorboard(self) -> None:
        if self.tb_proc is None and not self.tb_failed and time.monotonic() >= self.next_scan:
            self.next_scan = time.monotonic() + 2.0
            if _has_event_file(self.out_dir):
                try:
                    self.tb_proc = subprocess.Popen(
                        [self.python, "-c", _TB_READER, self.out_dir, str(os.getpid())],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                    )
                except OSError:
                    self.tb_failed = True
                    return
                threading.Thread(target=self._tb_lines, args=(self.tb_proc,), daemon=True).start()
        if self.tb_proc is not None and self.tb_proc.poll() not in (None, 0):
            self.tb_failed = True  # no tensorboard under the job's interpreter: tqdm alone

    def _tb_lines(self, proc: "subprocess.Popen[bytes]") -> None:
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            try:
                latest = json.loads(line.decode("utf-8", errors="replace"))
            except ValueError:
                continue
            if isinstance(latest, dict):
                self.tb = latest
                self.tb_passes += 1

    def record(self) -> Optional[Dict[str, Any]]:
        """What the bars and scalars say now: the bar with the largest total (the run's, not
        an evaluation's), the newest on a tie; TensorBoard's scalars as metrics."""
        record: Dict[str, Any] = {}
        sources = []
        if self.bars:
            bar = max(self.bars.values(), key=lambda b: (b["total"] or -1, b["seq"]))
            record.update(bar["metrics"])
            record["step"] = bar["step"]
            if bar["total"] is not None:
                record["total"] = bar["total"]
            sources.append("tqdm")
        scalars = dict(self.tb)
        if scalars:
            for tag, (_step, value) in sorted(scalars.items()):
                record[tag] = value
            record.setdefault("step", int(max(step for step, _ in scalars.values())))
            sources.append("tensorboard")
        if not sources:
            return None
        record["source"] = "+".join(sources)
        return record

    def poll(self) -> None:
        """Read what is new and append a record when it says something new."""
        if self.stopped:
            return
        if self.job_reports():
            self.stop()
            return
        try:
            self.read_log()
            self.read_tensorboard()
        except OSError:
            return
        record = self.record()
        if record is None or record == self.last:
            return
        self.last = dict(record)
        record["t"] = _now()
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        fd = os.open(self.progress_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        self.written += len(line)

    def finish(self, wait_s: float = 20.0) -> None:
        """The job ended: one last read (its final bar, its last scalars), then stop. Event
        files the job wrote are read to their end first: two passes of the reader that began
        after the job's end (it is started now if it was not yet)."""
        if not self.stopped and not self.job_reports():
            self.next_scan = 0.0
            self.read_tensorboard()
            passes = self.tb_passes
            deadline = time.monotonic() + wait_s
            while (
                self.tb_proc is not None
                and self.tb_proc.poll() is None
                and self.tb_passes < passes + 2
                and time.monotonic() < deadline
            ):
                time.sleep(0.1)
        self.poll()
        self.stop()

    def stop(self) -> None:
        self.stopped = True
        if self.tb_proc is not None and self.tb_proc.poll() is None:
            self.tb_proc.terminate()
            try:
                self.tb_proc.wait(10)
            except subprocess.TimeoutExpired:
                self.tb_proc.kill()


def _has_event_file(root: str, limit: int = 10000) -> bool:
    """Whether a TensorBoard event file lies under ``root`` (looking at ``limit`` names)."""
    seen = 0
    for _dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            if "tfevents" in name:
                return True
        seen += len(filenames)
        if seen > limit:
            return False
    return False


# ----------------------------------------------------------------------------- supervision


_DEPLOYED_ROOTS = {"code": "code_dir", "lib": "lib_dir", "inputs": "inputs_dir"}


def deployed_path(spec: Dict[str, Any], key: str) -> Optional[str]:
    """The file a ``deployed`` key (``code/...``, ``lib/...``, ``inputs/...``) names, or None."""
    prefix, _, rel = key.partition("/")
    root = spec.get(_DEPLOYED_ROOTS.get(prefix, ""))
    parts = rel.split("/")
    if not root or any(p in ("", ".", "..") for p in parts):
        return None
    return os.path.join(root, *parts)


def undeployed(spec: Dict[str, Any]) -> List[str]:
    """The ``deployed`` entries of ``spec`` whose file is missing or holds other bytes."""
    bad = []
    for key, sha in sorted((spec.get("deployed") or {}).items()):
        path = deployed_path(spec, key)
        try:
            ok = path is not None and sha256_file(path)[0] == sha
        except OSError:
            ok = False
        if not ok:
            bad.append(key)
    return bad


def not_deployed_message(bad: List[str]) -> str:
    """What the watcher shows when deployed files differ from what was sent."""
    names = ", ".join(bad[:5]) + (", ..." if len(bad) > 5 else "")
    return (
        "NOT DEPLOYED: %d file(s) differ from what was sent (%s); nothing was run. Launch again "
        "to re-send them." % (len(bad), names)
    )


def record_not_deployed(control: str, message: str) -> None:
    """``error.json`` (kind ``not_deployed``) and ``exit.json`` (``failed``) of a job that was
    never started. The bundle's ``__main__.py`` writes the same records the same way."""
    now = _now()
    write_json_atomic(
        os.path.join(control, "error.json"),
        {
            "type": "NotDeployed",
            "kind": "not_deployed",
            "message": message,
            "program": None,
            "frames": [],
            "formatted": message + "\n",
        },
    )
    write_json_atomic(
        os.path.join(control, "exit.json"),
        {
            "exit_code": None,
            "signal": None,
            "state": "failed",
            "agent_signals": [],
            "started_at": now,
            "ended_at": now,
        },
    )


class Supervisor:
    """Runs the job process, heartbeats, forwards signals, records the end."""

    def __init__(self, control: str) -> None:
        self.control = os.path.abspath(control)
        with open(os.path.join(self.control, "launch.json")) as fh:
            self.spec = json.load(fh)
        self.child: subprocess.Popen[bytes] | None = None
        self.signals: list[dict[str, Any]] = []
        self.kill_deadline: float | None = None
        self.started_at = _now()
        self.seq = 0
        self.mono0 = time.monotonic()
        self.boot = boot_id()
        self.resume = bool(self.spec.get("resume"))
        self.restart = 0
        self.slurm = slurm_facts()
        self.oom_kill_start = oom_kills()
        self.budget_hit: Optional[Dict[str, Any]] = None

    def path(self, name: str) -> str:
        return os.path.join(self.control, name)

    def status(self, **extra: Any) -> None:
        import socket  # deferred: not every command needs it

        record = {
            "schema": SCHEMA,
            "job_id": self.spec["job_id"],
            "agent_pid": os.getpid(),
            "agent_start_ticks": proc_start_ticks(os.getpid()),
            "boot_id": boot_id(),
            "host": socket.gethostname(),
            "job_pid": self.child.pid if self.child else None,
            "job_start_ticks": proc_start_ticks(self.child.pid) if self.child else None,
            "started_at": self.started_at,
            "restart": self.restart,
            "oom_kill_start": self.oom_kill_start,
        }
        if self.slurm:
            record["slurm"] = self.slurm
        record.update(extra)
        write_json_atomic(self.path("status.json"), record)

    def on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        self.signals.append({"signal": name, "time": _now()})
        if self.child is not None and self.child.poll() is None:
            try:
                write_json_atomic(
                    self.path("signals.json"), {"pgid": self.child.pid, "signals": self.signals}
                )
            except OSError:
                pass  # the forwarded signal itself still reaches the job
            try:
                os.killpg(self.child.pid, signum)
            except ProcessLookupError:
                pass
            # Under Slurm, SIGUSR2 is the walltime warning (--signal=B:USR2@lead): the job may
            # use the time left; Slurm itself ends it at the limit.
            warning = bool(self.slurm) and name == "SIGUSR2"
            if self.kill_deadline is None and not warning:
                self.kill_deadline = time.monotonic() + float(self.spec.get("grace_s", 30))

    def check_budget(self) -> None:
        """At the first budget reached (the job's, its machine's), tell the job to save and
        stop, as a preemption does (it ends ``preempted``, with reason ``budget``)."""
        if self.budget_hit is not None:
            return
        now = _now()
        for budget in self.spec.get("budgets") or []:
            rate = float(budget.get("rate") or 0.0) / 3600.0
            if budget.get("of") == "machine":
                spent = (now - float(budget.get("since") or now)) * rate
            else:
                spent = float(budget.get("spent_usd") or 0.0) + (now - self.started_at) * rate
            if spent >= float(budget["usd"]):
                self.budget_hit = dict(budget, spent_usd=round(spent, 4), at=now)
                sys.stderr.write(
                    "agent: the %s's budget of $%.2f is reached ($%.2f spent): the job is "
                    "told to save and stop\n" % (budget.get("of", "job"), budget["usd"], spent)
                )
                try:
                    write_json_atomic(self.path("budget.json"), self.budget_hit)
                except OSError:
                    pass
                self.on_signal(signal.SIGTERM, None)
                return

    def heartbeat(self) -> None:
        self.seq += 1
        write_json_atomic(
            self.path("heartbeat.json"),
            {
                "seq": self.seq,
                "wall": _now(),
                "mono": time.monotonic() - self.mono0,
                "uptime": uptime(),
                "boot_id": self.boot,
                "agent_pid": os.getpid(),
            },
        )

    def sample_loop(self) -> None:
        """Write ``resources.json`` (GPU and memory use) every ``resources_s`` seconds while the
        job runs (on its own thread: ``nvidia-smi`` may take a while to answer)."""
        every = float(self.spec.get("resources_s", 10.0))
        recent = []  # type: List[float]
        while self.child is not None and self.child.poll() is None:
            try:
                sample = sample_resources()
                gpus = sample.get("gpus") or []
                if gpus:  # the mean utilisation of the job's GPUs, the newest samples
                    recent = (recent + [sum(g["util"] for g in gpus) / len(gpus)])[-UTIL_KEEP:]
                    sample["gpu_util_recent"] = recent
                write_json_atomic(self.path("resources.json"), sample)
            except OSError:
                pass  # a full disk must not end the job; the log says why elsewhere
            time.sleep(every)

    def infer_loop(self, infer: ProgressInference) -> None:
        """Progress read from the job's tqdm bars and TensorBoard scalars, every second, while
        it runs and does not report its own."""
        while self.child is not None and self.child.poll() is None and not infer.stopped:
            try:
                infer.poll()
            except Exception as exc:  # noqa: BLE001 - inferred progress must not end the job
                sys.stderr.write("agent: progress inference stopped: %r\n" % (exc,))
                infer.stop()
                return
            time.sleep(1.0)

    def infer_end(self, infer: ProgressInference) -> None:
        try:
            infer.finish()
        except Exception as exc:  # noqa: BLE001 - the job's end is recorded regardless
            sys.stderr.write("agent: progress inference stopped: %r\n" % (exc,))

    def job_env(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in self.spec.get("secret_names", []):
            env.pop(name, None)  # secrets reach the job only through its 0600 file
        env.update(self.spec.get("env", {}))
        lib = self.spec["lib_dir"]
        env["PYTHONPATH"] = lib + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        env["RGT_JOB_ID"] = self.spec["job_id"]
        env["RGT_OUT"] = self.spec["out_dir"]
        env["RGT_CKPT_DIR"] = self.spec["ckpt_dir"]
        env["RGT_CONTROL_DIR"] = self.control
        env["RGT_INPUTS_DIR"] = self.spec.get("inputs_dir") or ""
        env["RGT_SECRETS_FILE"] = self.path("secrets.json")  # a path; the values stay in the file
        env.pop("RGT_SMOKE", None)
        distributed = self.spec.get("distributed") or {}
        if distributed:
            # A dead rank must end the job, not hang it for the default 30 minutes.
            env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
            env["RGT_PG_TIMEOUT_S"] = str(distributed.get("pg_timeout_s", 600))
        if self.resume:
            env["RGT_RESUME"] = "1"
        else:
            env.pop("RGT_RESUME", None)
        return env

    def walltime_warned(self) -> bool:
        """Under Slurm, SIGUSR2 is the warning ``--signal=B:USR2@lead`` sends before --time ends."""
        return bool(self.slurm) and any(s["signal"] == "SIGUSR2" for s in self.signals)

    def final_state(self, rc: int) -> str:
        if self.walltime_warned() and not any(s["signal"] == "SIGTERM" for s in self.signals):
            return "failed"  # the walltime, not a preemption: resuming needs a new --time
        if os.path.exists(self.path("preempt.json")) or any(
            s["signal"] in ("SIGTERM", "SIGUSR2") for s in self.signals
        ):
            return "preempted"
        if rc == 0:
            return "finished"
        if rc == -signal.SIGTERM:
            return "preempted"
        return "failed"

    def drop_secrets(self, state: str = "") -> None:
        """Delete the secrets file (a relaunch sends the secrets again); kept only when a
        scheduler may run this control dir again (a preempted Slurm job with --requeue)."""
        if state == "preempted" and self.slurm and self.spec.get("requeue"):
            return
        if os.path.exists(self.path("secrets.json")):
            os.unlink(self.path("secrets.json"))

    def refuse_undeployed(self) -> bool:
        """True (and the job recorded failed, never started) when deployed != intended."""
        bad = undeployed(self.spec)
        if not bad:
            return False
        self.drop_secrets()
        message = not_deployed_message(bad)
        sys.stderr.write("agent: %s\n" % message)
        record_not_deployed(self.control, message)
        self.status(state="failed", ended_at=_now(), exit_code=None)
        return True

    def archive_attempt(self) -> None:
        """A scheduler ran this control dir again (Slurm requeue, a new Kubernetes pod): keep
        the earlier attempt's records under ``attempts/N/`` and resume from the checkpoint."""
        names = ("status.json", "exit.json", "heartbeat.json", "manifest.json", "error.json")
        if not any(os.path.exists(self.path(n)) for n in names):
            return
        attempts = self.path("attempts")
        os.makedirs(attempts, exist_ok=True)
        self.restart = len(os.listdir(attempts)) + 1
        target = os.path.join(attempts, str(self.restart))
        os.makedirs(target)
        for name in names + ("preempt.json", "signals.json"):
            if os.path.exists(self.path(name)):
                os.replace(self.path(name), os.path.join(target, name))
        self.resume = True
        if self.slurm.get("restart_count") is not None:
            self.restart = int(self.slurm["restart_count"])
        sys.stderr.write("agent: restart %d of this job; resuming\n" % self.restart)

    def child_argv(self) -> List[str]:
        """The job's command: the cell under this interpreter, or one torchrun per node."""
        argv = [self.spec["python"], "-u", os.path.abspath(__file__), "cell", self.spec["program"]]
        distributed = self.spec.get("distributed") or {}
        if not distributed:
            return argv
        env = dict(os.environ, RGT_PYTHON=self.spec["python"])
        nodes = int(distributed["nodes"])
        nproc = int(distributed.get("nproc_per_node", 1))
        prefix = [
            "srun",
            "--kill-on-bad-exit=1",
            "--nodes=%d" % nodes,
            "--ntasks-per-node=1",
            env["RGT_PYTHON"],
            "-m",
            "torch.distributed.run",
            "--nnodes=%d" % nodes,
            "--nproc-per-node=%d" % nproc,
            "--rdzv-backend=c10d",
            "--rdzv-endpoint=%s:%s"
            % (env.get("MASTER_ADDR", "localhost"), env.get("MASTER_PORT", "29500")),
            "--rdzv-id=%s" % env.get("SLURM_JOB_ID", "0"),
        ]
        return prefix + argv[2:]

    def run(self) -> int:
        self.started_at = _now()
        self.archive_attempt()
        if self.refuse_undeployed():
            return 1
        for name in _FORWARDED:
            signal.signal(getattr(signal, name), self.on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        for d in (self.spec["out_dir"], self.spec["ckpt_dir"]):
            os.makedirs(d, exist_ok=True)
        log = open(self.path("log"), "ab")
        # In a Kubernetes pod the log on the claim is out of the notebook's reach: the job's
        # output also goes to the container's stdout, which the API serves.
        mirror = os.environ.get("RGT_K8S") == "1"
        self.child = subprocess.Popen(
            self.child_argv(),
            cwd=self.spec["cwd"],
            env=self.job_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if mirror else log,
            stderr=subprocess.STDOUT,
            preexec_fn=tie_to_parent(os.getpid()),
        )
        tee = None
        if mirror:
            tee = threading.Thread(target=_tee, args=(self.child.stdout, log), daemon=True)
            tee.start()
        self.status(state="running")
        self.heartbeat()
        env_thread = threading.Thread(target=self.record_env, daemon=True)
        env_thread.start()
        interval = float(self.spec.get("heartbeat_s", 1.0))
        next_beat = time.monotonic() + interval
        sampler = threading.Thread(target=self.sample_loop, daemon=True)
        sampler.start()
        infer = None
        if self.spec.get("infer_progress", True):
            infer = ProgressInference(self.control, self.spec["out_dir"], self.spec["python"])
            inferring = threading.Thread(target=self.infer_loop, args=(infer,), daemon=True)
            inferring.start()
        while True:
            rc = self.child.poll()
            if rc is not None:
                break
            now = time.monotonic()
            if self.kill_deadline is not None and now >= self.kill_deadline:
                try:
                    os.killpg(self.child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.kill_deadline = None
            if now >= next_beat:
                self.heartbeat()
                self.check_budget()
                next_beat = now + interval
            time.sleep(min(0.05, interval))
        if tee is not None:
            tee.join(30)
        log.close()
        if infer is not None:
            inferring.join(10)
            self.infer_end(infer)
        env_thread.join(60)  # provenance of a short job must not be lost to its quick end
        state = self.final_state(rc)
        requeue = state == "failed" and self.walltime_warned() and self.requeues_left()
        if requeue:
            state = "preempted"  # it runs again, in a new allocation, from its checkpoint
        self.drop_secrets(state)
        manifest = build_manifest(
            {"outputs": self.spec["out_dir"], "checkpoints": self.spec["ckpt_dir"]}
        )
        write_json_atomic(self.path("manifest.json"), manifest)
        ended = _now()
        write_json_atomic(
            self.path("exit.json"),
            {
                "exit_code": rc,
                "signal": signal.Signals(-rc).name if rc < 0 else None,
                "state": state,
                "agent_signals": self.signals,
                "started_at": self.started_at,
                "ended_at": ended,
                "restart": self.restart,
                "reason": ("walltime, requeued" if requeue else "walltime")
                if self.walltime_warned()
                else ("budget" if self.budget_hit else None),
                "budget": self.budget_hit,
                "checkpoints": sum(1 for k in manifest["files"] if k.startswith("checkpoints/")),
                "oom_kill_start": self.oom_kill_start,
                "oom_kill": oom_kills(),
                "disks": disk_facts([self.spec["out_dir"], self.spec["ckpt_dir"]]),
            },
        )
        self.status(state=state, ended_at=ended, exit_code=rc)
        self.heartbeat()
        if requeue:
            self.requeue_self()
        return 0

    def requeues_left(self) -> bool:
        """Whether the profile's ``[sbatch] timeout_requeues`` allows one more run after a
        walltime warning (submitit's pattern for jobs longer than the partition's limit)."""
        allowed = int((self.spec.get("slurm") or {}).get("timeout_requeues", 0))
        return bool(self.spec.get("requeue")) and self.slurm.get("restart_count", 0) < allowed

    def requeue_self(self) -> None:
        """``scontrol requeue`` this job; Slurm then ends this run (SIGTERM) and starts it again."""
        job = self.slurm.get("job_id") or ""
        if self.slurm.get("array_task_id"):
            job = "%s_%s" % (self.slurm["array_job_id"], self.slurm["array_task_id"])
        done = _run(["scontrol", "requeue", job], 60)
        if done is None or done["rc"] != 0:
            sys.stderr.write("agent: scontrol requeue %s failed: %s\n" % (job, done))

    def record_env(self) -> None:
        try:
            write_json_atomic(self.path("env.json"), describe_env())
        except Exception as exc:  # noqa: BLE001 - provenance is best effort, and says so
            write_json_atomic(self.path("env.json"), {"error": repr(exc)})


def _tee(source: Any, log: Any) -> None:
    """Copy the job's output to its log file and to this process's stdout, line by line."""
    out = getattr(sys.stdout, "buffer", sys.stdout)
    for chunk in iter(source.readline, b""):
        log.write(chunk)
        log.flush()
        out.write(chunk)
        out.flush()


def slurm_facts() -> Dict[str, Any]:
    """The Slurm job this agent runs in (empty outside Slurm), and the NCCL settings it has."""
    if not os.environ.get("SLURM_JOB_ID"):
        return {}
    env = os.environ
    facts: Dict[str, Any] = {
        "job_id": env.get("SLURM_JOB_ID"),
        "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
        "array_task_id": env.get("SLURM_ARRAY_TASK_ID"),
        "node": env.get("SLURMD_NODENAME"),
        "nodelist": env.get("SLURM_JOB_NODELIST"),
        "partition": env.get("SLURM_JOB_PARTITION"),
        "restart_count": int(env.get("SLURM_RESTART_COUNT") or 0),
        "nccl": {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")},
    }
    return facts


def _object_path(objdir: str, sha: str) -> str:
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise ValueError("not a sha256: %r" % sha)
    return os.path.join(objdir, sha[:2], sha)


def _stamp(st: os.stat_result) -> List[int]:
    """What a verified object's stamp records: it is unchanged while these are."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


#: A stamp is written over the old one in place, padded to this many bytes.
STAMP_WIDTH = 128


def _note_stamp(src: str, stamp: List[int]) -> None:
    """Write ``src``'s stamp (``<sha>.ok``) over the old one, in place and without fsync (the
    store lock held). A stamp is trusted only where it equals the object's stat now: one lost or
    torn in a crash matches nothing and costs a hash, and one that survives a change of the
    object cannot match it (its ctime moved). A rename each would cost more than the push's
    own work (a new inode and a freed one in the store's folder, for every object)."""
    data = json.dumps(stamp).ljust(STAMP_WIDTH).encode()
    fd = os.open(src + ".ok", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
        if os.fstat(fd).st_size > len(data):  # a longer stamp written another way
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _stamp_ok(src: str) -> bool:
    """Whether ``src`` is unchanged since it was last hashed and found to match its name."""
    try:
        with open(src + ".ok") as fh:
            return bool(json.load(fh) == _stamp(os.stat(src)))
    except (OSError, ValueError):
        return False


#: Copies of held objects for a job are made O_DIRECT from buffers this large, aligned, on this
#: many threads at once.
COPY_CHUNK = 4 << 20
COPY_THREADS = 3
_ALIGN = 4096


def _direct_copy(src: str, tmp: str, view: memoryview) -> bool:
    """Copy ``src`` to ``tmp`` writing O_DIRECT (straight to the disk, past the page cache: no
    dirty pages the kernel would throttle the copy on, nothing left for a flush to write) through
    the aligned buffer ``view``; a tail that is not a whole block goes through the page cache.
    False, with nothing made, where the filesystem has no O_DIRECT."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flag, 0o644)
    except OSError as exc:
        if exc.errno == 22:  # EINVAL: no O_DIRECT here
            return False
        raise
    try:
        fin = os.open(src, os.O_RDONLY)
        try:
            pos, direct = 0, True
            while True:
                n = os.readv(fin, [view])
                if not n:
                    break
                pos, direct = _write_direct(out, view[:n], pos, direct)
        finally:
            os.close(fin)
    finally:
        os.close(out)
    return True


def _write_direct(fd: int, view: memoryview, pos: int, direct: bool) -> Tuple[int, bool]:
    """Write ``view`` at ``pos``: its whole blocks O_DIRECT while ``direct``, the rest (and all
    of it once O_DIRECT refused an alignment) through the page cache. Returns the position after
    it and whether ``fd`` is still O_DIRECT."""
    while view:
        take = len(view) - len(view) % _ALIGN if direct else len(view)
        if take:
            try:
                wrote = os.pwrite(fd, view[:take], pos)
            except OSError as exc:
                if exc.errno != 22 or not direct:
                    raise
                take = 0
        if not take:  # a tail that is not a whole block, or an alignment refused
            import fcntl  # deferred: POSIX only

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
            direct = False
            continue
        pos += wrote
        view = view[wrote:]
    return pos, direct


def _clone(src: str, tmp: str, view: memoryview) -> None:
    """Copy ``src`` to ``tmp``: a reflink where the filesystem shares blocks (btrfs, XFS), else
    O_DIRECT writes (:func:`_direct_copy`), else ``copy_file_range``, else
    :func:`shutil.copyfile`."""
    import shutil  # deferred: not every command needs it

    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        try:
            import fcntl  # deferred: POSIX only

            fcntl.ioctl(fout.fileno(), 0x40049409, fin.fileno())  # FICLONE
            return
        except (ImportError, OSError):
            pass
    if _direct_copy(src, tmp, view):
        return
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        copy_range = getattr(os, "copy_file_range", None)
        try:
            while copy_range is not None and copy_range(fin.fileno(), fout.fileno(), 1 << 30):
                pass
            if copy_range is not None:
                return
        except OSError:
            fout.seek(0)
            fout.truncate()
    shutil.copyfile(src, tmp)


def _copy_all(copies: List[Any]) -> None:
    """Make every ``(src, tmp, target)`` copy and rename it into place, on
    :data:`COPY_THREADS` threads (each with an aligned buffer of its own); the first failure is
    raised once all stopped."""
    import mmap  # deferred: only copies need aligned buffers

    todo = list(reversed(copies))
    lock = threading.Lock()
    errors: List[BaseException] = []

    def work() -> None:
        buf = mmap.mmap(-1, COPY_CHUNK)
        view = memoryview(buf)
        try:
            while not errors:
                with lock:
                    if not todo:
                        return
                    src, tmp, target = todo.pop()
                _clone(src, tmp, view)
                os.chmod(tmp, os.stat(src).st_mode & 0o777)
                os.replace(tmp, target)
        except BaseException as exc:  # noqa: BLE001 - raised below, once every thread ended
            errors.append(exc)
        finally:
            view.release()
            buf.close()

    threads = [threading.Thread(target=work) for _ in range(min(COPY_THREADS, len(copies)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _sha256_of(src: str) -> str:
    digest = hashlib.sha256()
    with open(src, "rb") as fin:
        for chunk in iter(lambda: fin.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def place(objdir: str, dest: str) -> int:
    """Copy objects into DEST for the ``{rel: sha256}`` on stdin; print the sha256s it could
    not place (``{"missing": [...]}``): see :func:`place_entries`."""
    entries = json.loads(sys.stdin.read())
    sys.stdout.write(json.dumps({"missing": place_entries(objdir, dest, entries)}))
    return 0


def place_entries(objdir: str, dest: str, entries: Dict[str, str]) -> List[str]:
    """Place the objects of ``{rel: sha256}`` into DEST; return the sha256s it could not place
    (not held, or held with bytes that do not match their name: deleted, so they are sent
    again).

    An object is hashed first unless its stamp (``<sha>.ok``: size, mtime, ctime and inode,
    written once it was hashed and matched) says it has not changed since. A job takes the
    store's own file while no other job holds it (a hard link: nothing is copied), and then,
    after this command answered, the store makes itself a spare of it in the background
    (:func:`refill`, from :data:`SPARE_MIN` bytes on), so the next job again takes a file no
    job holds; a job that finds the store's file held gets a copy of its own (:func:`_clone`,
    several at once). So no two jobs ever share a file, and a job that writes to its inputs changes only its own (and the
    object's stamp no longer holds: it is hashed again, found changed, and sent again). The
    agent hashes every deployed file again before the job starts."""
    missing = []
    copies = []
    taken = []
    with _store_lock(objdir) as locked:
        for rel, sha in sorted(entries.items()):
            parts = rel.split("/")
            if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
                raise ValueError("unsafe path %r" % rel)
            src = _object_path(objdir, sha)
            if not os.path.isfile(src):
                missing.append(sha)
                continue
            target = os.path.join(dest, *parts)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            tmp = target + ".tmp-%d" % os.getpid()
            if not _stamp_ok(src):
                before = os.stat(src)
                if _sha256_of(src) != sha:
                    os.unlink(src)
                    missing.append(sha)
                    continue
                if _stamp(os.stat(src)) != _stamp(before):  # written to while it was read
                    missing.append(sha)
                    continue
                _note_stamp(src, _stamp(before))
            st = os.stat(src)
            if locked and st.st_nlink == 1 and _take(src, tmp, target):
                if st.st_size >= SPARE_MIN:  # a small file is copied at once: no spare needed
                    taken.append(sha)
                continue
            copies.append((src, tmp, target))
    _copy_all(copies)
    if taken:
        _start_refill(objdir, taken)
    return sorted(set(missing))


def _take(src: str, tmp: str, target: str) -> bool:
    """Give ``target`` the store's own file ``src`` (a hard link); False where links fail
    (another filesystem, or links not allowed): a copy then."""
    try:
        os.link(src, target)  # a fresh job's code dir: the name is free
    except FileExistsError:  # placed again: the old file is replaced whole
        try:
            os.link(src, tmp)
        except OSError:
            return False
        os.replace(tmp, target)
    except OSError:
        return False
    _note_stamp(src, _stamp(os.stat(src)))  # a link moves the ctime
    return True


class _store_lock:  # noqa: N801 - used as a context manager, named as one
    """``flock(2)`` on the file ``OBJDIR.lock`` beside the store while held: taking a file out
    of the store and renaming a spare into it happen one process at a time, so a file no job
    holds is taken by one job only. Entered, it says whether the lock is held (False where the
    filesystem has no locks: then nothing is taken out of the store or renamed into it)."""

    def __init__(self, objdir: str) -> None:
        self.path = os.path.normpath(objdir) + ".lock"
        self.fd: Optional[int] = None

    def __enter__(self) -> bool:
        try:
            import fcntl  # deferred: POSIX only

            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except (ImportError, OSError):
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            return False
        return True

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the lock
            self.fd = None


#: A spare is made only while its filesystem keeps at least this much free after it, and a
#: tenth of its blocks and of its inodes: a job's own writes come first.
SPARE_FREE_MIN = 1 << 30
#: Objects from this size on get a spare; a smaller one costs a job less to copy than the
#: spare's flushes cost the disk.
SPARE_MIN = 1 << 20


def _start_refill(objdir: str, shas: List[str]) -> None:
    """Start ``refill OBJDIR`` for ``shas`` in a session of its own, tied to nothing of this
    command (its output goes nowhere): the push has its answer before any spare is made."""
    try:
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "refill", objdir],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(shas).encode())
        proc.stdin.close()
    except OSError:  # no spare: the next job gets a copy, as it would without one
        pass


def refill(objdir: str, shas: List[str]) -> int:
    """Give the store a spare of each object in ``shas`` that a job took: a copy no job holds,
    written whole and flushed, renamed over the store's name only if the object did not change
    while it was copied (its stamp, which a write or a link moves) and still matches its stamp
    of when it was hashed. Best effort: an object it leaves alone is copied for the next job
    at its launch, as without spares."""
    import mmap  # deferred: only copies need aligned buffers

    buf = mmap.mmap(-1, COPY_CHUNK)
    view = memoryview(buf)
    try:
        for sha in shas:
            try:
                if not _spare(objdir, sha, view):
                    break
            except (OSError, ValueError):
                continue
    finally:
        view.release()
        buf.close()
    return 0


def _spare(objdir: str, sha: str, view: memoryview) -> bool:
    """Make ``sha``'s spare (see :func:`refill`); False once the filesystem has no room."""
    src = _object_path(objdir, sha)
    before = os.stat(src)
    if before.st_nlink < 2 or not _stamp_ok(src):
        return True  # no job holds it, or it changed since it was hashed: nothing to spare
    if not _room_to_spare(objdir, before.st_size):
        return False
    tmp = os.path.join(os.path.dirname(src), ".%s.spare.tmp-%d" % (sha, os.getpid()))
    try:
        _clone(src, tmp, view)
        os.chmod(tmp, before.st_mode & 0o777)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        with _store_lock(objdir) as locked:
            if locked and _stamp(os.stat(src)) == _stamp(before) and _stamp_ok(src):
                os.replace(tmp, src)
                write_json_atomic(src + ".ok", _stamp(os.stat(src)))  # fsyncs the folder too
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return True


def _room_to_spare(objdir: str, size: int) -> bool:
    st = os.statvfs(objdir)
    free = st.f_bavail * st.f_frsize - size
    keep = max(SPARE_FREE_MIN, st.f_blocks * st.f_frsize // 10)
    return free >= keep and (st.f_files == 0 or st.f_favail > st.f_files // 10)


def spawn(control: str) -> int:
    """Double-fork ``run CONTROL`` into its own session so it outlives its caller; print its pid."""
    control = os.path.abspath(control)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        os.setsid()
        grandchild = os.fork()
        if grandchild == 0:
            os.close(write_end)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            log = os.open(
                os.path.join(control, "agent.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
            )
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.execv(
                sys.executable, [sys.executable, "-u", os.path.abspath(__file__), "run", control]
            )
        os.write(write_end, str(grandchild).encode())
        os._exit(0)
    os.close(write_end)
    data = os.read(read_end, 64)
    os.close(read_end)
    os.waitpid(child, 0)
    if not data:
        sys.stderr.write("agent: could not start the supervisor\n")
        return 1
    sys.stdout.write(json.dumps({"agent_pid": int(data), "boot_id": boot_id()}) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        sys.stderr.write(__doc__ or "")
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "spawn" and len(rest) == 1:
        return spawn(rest[0])
    if cmd == "run" and len(rest) == 1:
        return Supervisor(rest[0]).run()
    if cmd == "cell" and len(rest) == 1:
        return run_cell(rest[0])
    if cmd == "manifest":
        return manifest_command(rest)
    if cmd == "audit":
        sys.stdout.write(json.dumps(audit(rest)))
        return 0
    if cmd == "place" and len(rest) == 2:
        return place(rest[0], rest[1])
    if cmd == "refill" and len(rest) == 1:
        return refill(rest[0], [str(sha) for sha in json.loads(sys.stdin.read())])
    if cmd == "env":
        sys.stdout.write(json.dumps(describe_env()))
        return 0
    sys.stderr.write(
        "usage: agent.py spawn|run CONTROL_DIR | cell PROGRAM | manifest NAME=DIR... | env\n"
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
