"""The loader's rule for pickles it will not load, over pickles made to slip past it: a name hidden
behind a benign class, spelled through the memo, computed at load time, from Python 2's names,
in a protocol torch does not write. Each payload would create a marker file; none may appear."""

from __future__ import annotations

import collections
import copyreg
import functools
import io
import os
import pickle
import pickletools
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from rgt_jupyter.run.safe_load import acts, check


class Touch:
    """A payload: unpickled, it runs ``touch MARK`` through ``how``."""

    def __init__(self, mark: Path, how: str = "system") -> None:
        self.mark, self.how = str(mark), how

    def __reduce__(self) -> Any:
        if self.how == "popen":
            return (subprocess.Popen, (["touch", self.mark],))
        if self.how == "exec":
            return (exec, (f"open({self.mark!r}, 'w').close()",))
        if self.how == "partial":
            return (functools.partial(os.system, f"touch {self.mark}"), ())
        return (os.system, (f"touch {self.mark}",))


class Config:
    """A plain class of the job's own code."""

    def __init__(self) -> None:
        self.lr = 0.1


def _memo_laundered(mark: Path) -> bytes:
    """``os.system`` named by STACK_GLOBAL from strings fetched back out of the memo."""
    body = (
        b"\x80\x04"
        + b"\x8c\x05posix\x94"  # SHORT_BINUNICODE 'posix', MEMOIZE -> 0
        + b"\x8c\x06system\x94"  # -> 1
        + b"h\x00h\x01\x93"  # BINGET 0, BINGET 1, STACK_GLOBAL
        + b"\x8c"
        + bytes([len(f"touch {mark}")])
        + f"touch {mark}".encode()
        + b"\x85R."  # TUPLE1, REDUCE, STOP
    )
    return body


@pytest.mark.parametrize(
    "how", ["system", "popen", "exec", "partial", "benign-first", "memo", "protocol-4", "ext"]
)
def test_pickles_that_would_run_code_are_refused_and_never_run(tmp_path: Path, how: str) -> None:
    mark = tmp_path / "PWNED"
    path = tmp_path / "rng_state.pth"
    if how == "benign-first":
        torch.save({"cfg": Config(), "rng": Touch(mark)}, path)
    elif how == "memo":
        path.write_bytes(_memo_laundered(mark))
    elif how == "protocol-4":
        torch.save({"x": Touch(mark, "popen")}, path, pickle_protocol=4)
    elif how == "ext":
        copyreg.add_extension("posix", "system", 240)
        try:
            path.write_bytes(pickle.dumps(Touch(mark), protocol=2))
        finally:
            copyreg.remove_extension("posix", "system", 240)
        assert any(op.name == "EXT1" for op, _a, _p in pickletools.genops(path.read_bytes()))
    else:
        torch.save({"x": Touch(mark, how)}, path)
    result = check(path)
    assert result["verdict"] == "refused", result
    assert not result["ok"] and result["why"].startswith("refused: "), result
    assert "\n" not in result["why"]
    assert not mark.exists(), "a payload ran"


def test_plain_classes_are_pickled_not_loaded_and_data_types_load(tmp_path: Path) -> None:
    mark = tmp_path / "PWNED"
    cases = {
        "config.pt": lambda p: torch.save({"cfg": Config()}, p),
        "config-p0.pkl": lambda p: p.write_bytes(pickle.dumps(Config(), protocol=0)),
        "plain.pkl": lambda p: p.write_bytes(pickle.dumps({"a": [1, 2]})),
        "defaultdict.pt": lambda p: torch.save(
            {"d": collections.defaultdict(list, a=[1]), "c": collections.Counter("aab")}, p
        ),
        "legacy.pt": lambda p: torch.save(
            {"w": torch.zeros(2)}, p, _use_new_zipfile_serialization=False
        ),
    }
    said = {}
    for name, make in cases.items():
        make(tmp_path / name)
        said[name] = check(tmp_path / name)
    assert said["config.pt"]["verdict"] == "pickled", said["config.pt"]
    assert said["config.pt"]["names"] == ["tests.test_safe_load_rules.Config"]
    assert said["config-p0.pkl"]["verdict"] == "pickled", said["config-p0.pkl"]
    assert said["plain.pkl"]["verdict"] == "pickled", said["plain.pkl"]
    assert "plain pickle" in said["plain.pkl"]["why"]
    assert said["defaultdict.pt"]["verdict"] == "loaded", said["defaultdict.pt"]
    assert said["legacy.pt"]["verdict"] == "loaded", said["legacy.pt"]
    assert not mark.exists()


def test_damaged_files_fail_as_damaged(tmp_path: Path) -> None:
    good = tmp_path / "good.pt"
    torch.save({"cfg": Config(), "w": torch.zeros(1000)}, good)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good.read_bytes()[:400])
    noise = tmp_path / "noise.bin"
    noise.write_bytes(os.urandom(4096))
    stream = io.BytesIO()
    pickle.dump(Config(), stream, protocol=2)
    half = tmp_path / "half.pkl"
    half.write_bytes(stream.getvalue()[:-6])
    for path in (cut, noise, half):
        result = check(path)
        assert result["verdict"] == "failed", (path.name, result)


@pytest.mark.parametrize(
    ("module", "qual", "acting"),
    [
        ("posix", "system", True),
        ("subprocess", "Popen", True),
        ("builtins", "getattr", True),
        ("functools", "partial", True),
        ("pathlib", "Path.write_text", True),
        ("mypkg.models", "Net.__init__", True),
        ("mypkg.tools", "run", True),
        ("torch.hub", "load", True),
        ("transformers.training_args", "TrainingArguments", False),
        ("__main__", "Config", False),
        ("collections", "ChainMap", False),
        ("copyreg", "_reconstructor", False),
        ("mypkg", "Outer.Inner", False),
    ],
)
def test_the_rule_for_names(module: str, qual: str, acting: bool) -> None:
    assert acts(module, qual) is acting
