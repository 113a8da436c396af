"""Malformed profiles reach a launch: each is refused with its file, line and field before
anything is registered, created or started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

from rgt_jupyter.store.registry import Registry

from ..conftest import run_cell
from .evidence import Evidence

BAD_PROFILES = {
    "not-a-number": ('extends = "local"\ngrace_s = "soon"\n', 2, "must be a number"),
    "misspelt": ('extends = "local"\ndurabel_dir = "/x"\n', 2, "did you mean 'durable_dir'"),
    "a-secret": ('extends = "local"\napi_key = "rpa_123"\n', 2, "never hold secrets"),
    "nested-secret": ('extends = "local"\n[up]\ntoken = "abc"\n', 3, "never hold secrets"),
    "bad-toml": ('extends = "local"\ngrace_s = [\n', None, "invalid TOML"),
    "wrong-kind": ('name = "bad"\nkind = 3\n', 2, "must be a string"),
    "bad-tier": (
        'extends = "local"\n[[tiers]]\npath = "/"\nlabel = "x"\nsurvives_stop = "yes"\n'
        "survives_destroy = false\n",
        5,
        "true or false",
    ),
}


@pytest.mark.fault(
    "B-profiles",
    asserts="a launch on a malformed profile is a UsageError naming the file, the line and "
    "what is wrong; no job is registered, no control dir or durable dir is created, nothing "
    "runs, the sentinel is untouched",
    mutation=(
        "rgt_jupyter/machines/profiles.py",
        "        if not _type_ok(kind, value):\n",
        "        if False:\n",
    ),
)
@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_a_malformed_profile_is_refused_before_anything_runs(
    ip: Any, project: Path, case: str, evidence: Evidence
) -> None:
    """The profile a cell names is broken in one of the ways users break them.

    Protection: rgt_jupyter/machines/profiles.py ``_check_keys``: every field's type is checked
    (``_type_ok``) when the profile loads; removed, a wrong type (a string for ``grace_s``, a
    number for ``kind``, a string for ``survives_stop``) passes and the launch goes on or fails
    later with a traceback, so the case fails for those inputs.
    """
    text, line, words = BAD_PROFILES[case]
    folder = project / ".rgt" / "profiles"
    folder.mkdir(parents=True)
    path = folder / "bad.toml"
    path.write_text(text)
    sentinel = evidence.sentinel(project.parent / "beside")
    program = "open('RAN', 'w').write('x')\n"
    result, _ = run_cell(ip, f"%%remote_run --profile bad --name p\n{program}")
    error = result.error_in_exec
    assert isinstance(error, UsageError), error
    message = str(error)
    assert str(path) in message and words in message, message
    if line is not None:
        assert f"{path}:{line}:" in message, message
    assert Registry(project).jobs() == []
    assert not (project / ".rgt" / "local").exists()
    assert not list(project.parent.rglob("RAN"))
    assert evidence.account(sentinel.parent) == 0
