"""The API's verbs (``submit``, ``find``), the typed job spec, and the backend registry."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import rgt_jupyter
from rgt_jupyter import Job, JobGroup, find, submit
from rgt_jupyter.backends import BACKENDS, get_backend
from rgt_jupyter.errors import JobNotFound, ProfileError, UsageError
from rgt_jupyter.jobs.spec import AGENT_FIELDS, JobSpec, check_fields

PROGRAM = "import rgt_jupyter.job as job\njob.save_results({'ok': 1})\n"


def test_submit_returns_a_job_and_find_finds_it_by_name_and_id(project: Path) -> None:
    job = submit(PROGRAM, project, name="verb", env=["A=1"])
    assert isinstance(job, Job) and job.name == "verb" and job.spec.env == {"A": "1"}
    assert job.wait(60) == "finished"
    assert find("verb", project).id == job.id
    assert find(job.id, project).id == job.id
    assert find(None, project).id == job.id  # the newest job
    assert rgt_jupyter.submit is submit and rgt_jupyter.find is find


def test_submit_with_seeds_returns_the_group_find_finds_it(project: Path) -> None:
    group = submit(PROGRAM, project, name="sweep", seeds="1-2")
    assert isinstance(group, JobGroup) and group.seeds == [1, 2]
    assert set(group.wait(120).values()) == {"finished"}
    found = find("sweep", project)
    assert isinstance(found, JobGroup) and [j.id for j in found.jobs] == [j.id for j in group.jobs]
    # A member's own name is a job, not the group.
    assert isinstance(find("sweep-s1", project), Job)


def test_find_says_what_to_do_when_nothing_has_the_name(project: Path) -> None:
    with pytest.raises(JobNotFound, match="rgt jobs"):
        find("nothing-of-that-name", project)


def test_submit_refuses_an_option_it_does_not_have(project: Path) -> None:
    with pytest.raises(UsageError, match="not options of a launch: gpu"):
        submit(PROGRAM, project, gpu="0")


def test_the_spec_round_trips_and_keeps_what_it_does_not_know() -> None:
    data = {"job_id": "j-1", "name": "j", "launcher": "sbatch", "from_a_newer_version": [1]}
    spec = JobSpec.from_dict(data)
    assert spec.launcher == "sbatch" and spec.extra == {"from_a_newer_version": [1]}
    assert JobSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert spec.to_dict()["from_a_newer_version"] == [1]
    with pytest.raises(TypeError, match="not fields of a job spec: lanucher"):
        check_fields({"lanucher": "x"})
    with pytest.raises(TypeError):
        spec.replace(lanucher="x")


def _keys_read(path: Path) -> set[str]:
    """The keys the shipped file reads of its ``spec`` (``spec["k"]``, ``spec.get("k")``)."""
    keys = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("spec"):
            if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                keys.add(node.slice.value)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and ast.unparse(node.func.value).endswith("spec")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            keys.add(node.args[0].value)
    return keys


def test_every_key_the_agent_reads_of_launch_json_is_a_spec_field() -> None:
    """The agent reads the serialized spec with its own keys (it travels alone): each is one of
    the declared agent fields, and those are fields of :class:`JobSpec`."""
    remote = Path(rgt_jupyter.__file__).parent / "remote"
    read = _keys_read(remote / "agent.py") | _keys_read(remote / "bundle_main.py")
    assert read and read <= AGENT_FIELDS, sorted(read - AGENT_FIELDS)
    fields = set(JobSpec.__dataclass_fields__)
    assert fields >= AGENT_FIELDS, sorted(AGENT_FIELDS - fields)


def test_every_backend_of_the_registry_is_found_by_its_name() -> None:
    for name in BACKENDS:
        backend = get_backend(name)
        assert backend.name == name and get_backend(name) is backend
    with pytest.raises(ProfileError, match="launcher 'pbs' is not available: use one of"):
        get_backend("pbs")


def test_a_profile_naming_no_backend_is_refused_with_the_choices(project: Path) -> None:
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "odd.toml").write_text('extends = "local"\nname = "odd"\nlauncher = "pbs"\n')
    with pytest.raises(ProfileError, match="detached, k8s-job, ray, sbatch, tmux"):
        submit(PROGRAM, project, name="x", profile="odd")
    (profiles / "kube.toml").write_text('extends = "local"\nname = "kube"\nlauncher = "k8s-job"\n')
    with pytest.raises(UsageError, match='Kubernetes needs transport = "kubernetes"'):
        submit(PROGRAM, project, name="y", profile="kube")
    (profiles / "pods.toml").write_text('extends = "k8s"\nname = "pods"\nlauncher = "detached"\n')
    with pytest.raises(ProfileError, match="runs over local or ssh, not transport 'kubernetes'"):
        submit(PROGRAM, project, name="z", profile="pods")
