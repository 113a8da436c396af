"""Seed groups on a profile without job arrays: one job per seed, one experiment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter.api import JobGroup, config_differences
from rgt_jupyter.errors import UsageError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.jobs.spec import JobSpec
from rgt_jupyter.run.seeds import group_differences, launch_seeds
from rgt_jupyter.store.names import parse_seeds

from .conftest import rgt, run_cell

PROGRAM = (
    "import rgt_jupyter.job as job\n"
    "job.save_config({'lr': 0.1, 'seed': job.seed(-1)})\n"
    "job.save_results({'seed': job.seed(-1)})\n"
)


def test_seed_ranges() -> None:
    assert parse_seeds("0-2,7") == [0, 1, 2, 7]
    assert parse_seeds("3,1,1") == [1, 3]
    for bad in ("a", "3-1", "0-5000", "-1", "1,,2"):
        with pytest.raises(UsageError):
            parse_seeds(bad)


def test_group_members_may_differ_only_in_the_seed() -> None:
    base = {"code_hash": "h", "deployed": {"code/a.py": "1"}, "env": {"LR": "0.1"}, "python": "p"}
    members = [
        JobSpec.from_dict(
            {**base, "env": {"LR": "0.1", "RGT_SEED": str(s)}, "job_id": f"j{s}", "name": "n"}
        )
        for s in range(3)
    ]
    assert group_differences(members) == []
    members[2] = members[2].replace(env={"LR": "0.2", "RGT_SEED": "2"}, code_hash="other")
    assert group_differences(members) == ["code_hash", "env"]


def test_config_differences_besides_the_seed_are_named() -> None:
    same = [{"lr": 0.1, "seed": s} for s in range(3)]
    assert config_differences(same) == []
    assert config_differences([*same, {"lr": 0.2, "seed": 3, "bs": 8}]) == ["bs", "lr"]


def test_seeds_are_separate_jobs_grouped_in_the_magics_and_the_cli(ip: Any, project: Path) -> None:
    result, text = run_cell(ip, f"%%remote_run --name loc --seeds 4-5\n{PROGRAM}")
    assert result.error_in_exec is None, text
    group = result.result
    assert isinstance(group, JobGroup) and group.seeds == [4, 5]
    assert [j.name for j in group.jobs] == ["loc-s4", "loc-s5"]
    assert [j.spec.env["RGT_SEED"] for j in group.jobs] == ["4", "5"]
    assert len({j.spec.group["id"] for j in group.jobs}) == 1
    assert sum(j.spec.smoke for j in group.jobs) <= 1  # the smoke runs once, if at all
    watched = rgt("watch", "loc", "--wait", "--timeout", "120", cwd=project, check=False)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "seed 4:" in watched.stdout and "[finished]" in watched.stdout
    result, text = run_cell(ip, "%pull loc")
    assert result.error_in_exec is None, text
    runs = result.result
    assert [r.results["seed"] for r in runs] == [4, 5] and all(r.verified for r in runs)
    assert runs.differences == [] and "configs differ only in the seed" in text
    assert {r.provenance["group"]["id"] for r in runs} == {group.id}
    pulled = rgt("pull", "loc", cwd=project, check=False)
    assert pulled.returncode == 0 and pulled.stdout.count("verified: yes") == 2, pulled.stdout
    assert json.loads((runs[0].path / "run.json").read_text())["seed"] == 4


def test_launch_of_a_group_through_the_api(project: Path) -> None:
    rows = launch_seeds(LaunchRequest(program=PROGRAM, name="api", seeds=[1, 2, 3]), project)
    group = JobGroup.from_registry("api", project)
    assert [r["name"] for r in rows] == ["api-s1", "api-s2", "api-s3"]
    assert set(group.wait(60).values()) == {"finished"}
