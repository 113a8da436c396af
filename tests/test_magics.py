"""The magics, driven through an IPython shell: each works, --help works, mistakes are UsageErrors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from rgt_jupyter.api import Job, Run
from rgt_jupyter.errors import RemoteTraceback, SmokeFailed
from rgt_jupyter.store.registry import Registry
from rgt_jupyter.views.render import strip_ansi


def run(ip: Any, source: str) -> tuple[Any, str]:
    with capture_output() as out:
        result = ip.run_cell(source)
    shown = "\n".join(str(o.data.get("text/plain", "")) for o in out.outputs)
    return result, out.stdout + out.stderr + shown


def test_extension_registers_the_magics(ip: Any) -> None:
    magics = ip.magics_manager.magics
    assert "remote_run" in magics["cell"]
    assert {"watch", "pull"} <= set(magics["line"])


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("%%remote_run --help\nprint(1)\n", "--push PATH"),
        ("%watch --help", "--wait"),
        ("%pull --help", "--to DIR"),
    ],
)
def test_help(ip: Any, project: Path, source: str, expected: str) -> None:
    result, text = run(ip, source)
    assert result.error_in_exec is None and result.error_before_exec is None
    assert "usage:" in text and expected in text
    assert Registry(project).jobs() == []


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("%%remote_run --profile lcoal\nprint(1)\n", "Did you mean 'local'"),
        ("%%remote_run --nmae x\nprint(1)\n", "did you mean --name"),
        ("%%remote_run --name ok\n\n   \n", "the cell is empty"),
        ("%%remote_run --name ok --inputs nothere\nprint(1)\n", "no variable 'nothere'"),
        ("%%remote_run --name ok --env NOEQUALS\nprint(1)\n", "expected KEY=VALUE"),
        ("%%remote_run --name ok --env RGT_OUT=x\nprint(1)\n", "reserved"),
        ("%%remote_run --name ok --push missing.txt\nprint(1)\n", "no such file"),
        ("%%remote_run --name ok --host gpu1\nprint(1)\n", "use an ssh profile"),
        ("%%remote_run --name ok --gpus 'a;b'\nprint(1)\n", "--gpus"),
        ("%%remote_run --name 'a b'\nprint(1)\n", "not allowed"),
        ("%%remote_run --name 'unclosed\nprint(1)\n", "check the quotes"),
        ("%watch nosuchjob", "rgt jobs"),
        ("%pull nosuchjob", "rgt jobs"),
        ("%watch", "no jobs yet"),
        ("%watch --wait --timeout soon", "invalid float value"),
    ],
)
def test_mistakes_raise_usage_error(ip: Any, project: Path, source: str, message: str) -> None:
    result, text = run(ip, source)
    assert isinstance(result.error_in_exec, UsageError), (source, result.error_in_exec)
    assert message in str(result.error_in_exec)
    assert "Traceback" not in text
    assert Registry(project).jobs() == []


JOB = """\
import json, os, time
import rgt_jupyter.job as job
for step in range(1, 6):
    job.progress(step, 5, loss=1.0 / step)
    time.sleep(0.3)
with open("data.txt") as fh:
    pushed = fh.read()
job.save_results({"pushed": pushed, "lr": lr, "cfg": cfg, "env": os.environ.get("MODE"),
                  "smoke": os.environ.get("RGT_SMOKE"), "cwd_has": sorted(os.listdir("."))})
"""


def test_remote_run_watch_pull(ip: Any, project: Path) -> None:
    (project / "data.txt").write_text("pushed bytes\n")
    ip.user_ns.update(lr=0.25, cfg={"depth": 3, "tags": ["a", "b"]})
    result, _ = run(
        ip, f"%%remote_run --name flow --push data.txt --env MODE=fast --inputs lr,cfg\n{JOB}"
    )
    assert result.error_in_exec is None, result.error_in_exec
    job = result.result
    assert isinstance(job, Job)
    # Control came back while the job runs (it needs more than a second).
    assert job.snapshot().state in ("queued", "running")
    from IPython.utils.capture import capture_output

    with capture_output() as shown:
        # The job shows itself (a display with an id, kept true as it runs): no result bundle.
        assert ip.display_formatter.format(job) == ({}, {})
    bundle = shown.outputs[-1].data
    assert {"text/plain", "text/html", "application/vnd.jupyter.widget-view+json"} <= set(bundle)
    assert "flow-" in bundle["text/plain"]

    # A second launch of a running name is refused, with the way forward.
    again, _ = run(ip, "%%remote_run --name flow\nprint(1)\n")
    assert isinstance(again.error_in_exec, UsageError)
    assert "still" in str(again.error_in_exec) and "%watch flow" in str(again.error_in_exec)

    result, text = run(ip, "%watch flow --wait --timeout 120")
    assert result.error_in_exec is None
    assert result.result.state == "finished"
    assert "step 5/5" in text

    result, text = run(ip, "%pull")
    assert result.error_in_exec is None
    pulled = result.result
    assert isinstance(pulled, Run) and pulled.verified
    assert pulled.path.parent == project / "runs"
    assert pulled.results["pushed"] == "pushed bytes\n"
    assert pulled.results["lr"] == 0.25 and pulled.results["cfg"] == {
        "depth": 3,
        "tags": ["a", "b"],
    }
    assert pulled.results["env"] == "fast" and pulled.results["smoke"] is None
    assert "data.txt" in pulled.results["cwd_has"]
    assert "verified: yes" in text
    # A tqdm bar: bytes, rate; the checkpoint check said apart from the transfer.
    assert "pulling flow: 100%" in text and "B/s" in text


def test_watch_without_wait_does_not_block(ip: Any) -> None:
    result, _ = run(ip, "%%remote_run --name slow\nimport time\ntime.sleep(3)\n")
    job = result.result
    result, _ = run(ip, "%watch slow")
    assert result.error_in_exec is None
    assert result.result.id == job.id
    assert result.result.snapshot().state in ("queued", "running")
    assert job.wait(60) == "finished"


def test_failed_job_shows_traceback_with_cell_line_numbers(ip: Any) -> None:
    body = "import os\nx = 1\n\ndef f(v):\n    return v / 0\n\nf(x)\n"
    result, _ = run(ip, f"%%remote_run --name boom\n{body}")
    job = result.result
    result, text = run(ip, "%watch boom --wait --timeout 60")
    assert isinstance(result.error_in_exec, RemoteTraceback)
    text = strip_ansi(text)
    # Line numbers count the notebook cell, whose first line is the magic.
    assert "Cell [remote_run], line 8" in text and "f(x)" in text
    assert "Cell [remote_run], line 6" in text and "return v / 0" in text
    assert "ZeroDivisionError: division by zero" in text
    assert job.state == "failed"
    snap = job.snapshot()
    assert snap.exit_code == 1 and "ZeroDivisionError" in (snap.diagnosis or "")


def test_syntax_error_cell(ip: Any) -> None:
    result, _ = run(ip, "%%remote_run --name syn\nx = 1\ny = (2 +\nprint(x)\n")
    job = result.result
    assert job.wait(60) == "failed"
    lines = strip_ansi("\n".join(job.traceback() or []))
    assert "SyntaxError" in lines
    assert "Cell [remote_run], line 3" in lines


def test_smoke_failure_blocks_launch(ip: Any, project: Path) -> None:
    body = (
        "import rgt_jupyter.job as job\n"
        "if job.is_smoke():\n"
        "    raise RuntimeError('seen in smoke')\n"
    )
    result, text = run(ip, f"%%remote_run --name sm --smoke\n{body}")
    assert isinstance(result.error_in_exec, SmokeFailed)
    text = strip_ansi(text)
    assert "seen in smoke" in text and "Cell [remote_run], line 4" in text
    assert Registry(project).jobs() == []


def test_smoke_pass_then_launch_without_smoke_flag(ip: Any) -> None:
    body = (
        "import os\nimport rgt_jupyter.job as job\n"
        "job.save_results({'smoke': os.environ.get('RGT_SMOKE')})\n"
    )
    result, _ = run(ip, f"%%remote_run --name sm2 --smoke --smoke-timeout 60\n{body}")
    assert result.error_in_exec is None
    job = result.result
    assert job.result(timeout=60) == {"smoke": None}
    assert job.spec.smoke is True


def test_smoke_time_budget(ip: Any, project: Path) -> None:
    result, _ = run(
        ip, "%%remote_run --name sm3 --smoke --smoke-timeout 1\nimport time\ntime.sleep(30)\n"
    )
    assert isinstance(result.error_in_exec, SmokeFailed)
    assert "budget" in str(result.error_in_exec)
    assert Registry(project).jobs() == []


def test_rerun_of_finished_name_starts_fresh(ip: Any) -> None:
    first = run(ip, "%%remote_run --name again\nprint('one')\n")[0].result
    assert first.wait(60) == "finished"
    second = run(ip, "%%remote_run --name again\nprint('two')\n")[0].result
    assert second.id != first.id
    assert second.spec.attempt == 1 and not second.spec.resume
    assert second.spec.ckpt_dir != first.spec.ckpt_dir
    assert second.wait(60) == "finished"


def test_config_trait_sets_default_profile(ip: Any) -> None:
    ip.run_line_magic("config", 'RgtMagics.default_profile = "nosuch"')
    try:
        result, _ = run(ip, "%%remote_run --name cfg\nprint(1)\n")
        assert isinstance(result.error_in_exec, UsageError)
        assert "unknown profile 'nosuch'" in str(result.error_in_exec)
    finally:
        ip.run_line_magic("config", 'RgtMagics.default_profile = "local"')


def test_registry_history_records_the_lifecycle(ip: Any, project: Path) -> None:
    job = run(ip, "%%remote_run --name hist\nprint('hi')\n")[0].result
    assert job.wait(60) == "finished"
    kinds = [e["kind"] for e in Registry(project).history(job.id)]
    assert kinds[:2] == ["created", "launched"]
    states = [e["state"] for e in Registry(project).history(job.id) if e["kind"] == "state"]
    assert states[-1] == "finished"
    launch = json.loads((Path(job.spec.control_dir) / "launch.json").read_text())
    assert launch["job_id"] == job.id
