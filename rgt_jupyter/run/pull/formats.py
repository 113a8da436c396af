"""Which pulled files are load-checked, what the folders they sit in are, and how each file's
check is said: loaded, only hashed, ``pickled: not loaded`` (verified by sha256 only, disclosed)
or refused.

Recognised: Hugging Face Trainer checkpoints (a folder with ``trainer_state.json``: weights,
``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth``, ``training_args.bin``), Accelerate
``save_state`` folders (``random_states_N.pkl`` beside weights and ``optimizer.bin``), models
saved with ``save_pretrained`` (``config.json`` beside weights) and Lightning ``.ckpt`` files
(named so once loaded). Every checkpoint-like file under ``checkpoints/`` is load-checked, and
every weights, state and json file of a recognised folder wherever it lies.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

CKPT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".pkl")
#: The verdicts of a load check that leave a run verified: the second is disclosed.
PASSING = ("loaded", "pickled")
#: How each verdict is named to the user.
PICKLED_LINE = "pickled: not loaded, it would run code"
_ACCELERATE = re.compile(r"random_states_\d+\.pkl")
_WEIGHTS = re.compile(r"(model|pytorch_model|adapter_model)(-\d+-of-\d+)?\.(safetensors|bin)")


def is_checkpoint(rel: str) -> bool:
    """Whether a pulled file (path relative to the run) under ``checkpoints/`` is one to load."""
    return (
        rel.startswith("checkpoints/")
        and (rel.endswith(CKPT_SUFFIXES) or rel.rpartition("/")[2].startswith("ckpt-"))
        and not rel.endswith(".sha256")
    )


def _split(rel: str) -> tuple[str, str]:
    """(folder, name) of a relative POSIX path, as PurePosixPath gives them (``.``: none)."""
    folder, _, name = rel.rpartition("/")
    return folder or ".", name


def folders(paths: Iterable[str]) -> dict[str, str]:
    """The recognised folders among ``paths`` (relative to the run), by folder: what saved it."""
    names: dict[str, set[str]] = {}
    for rel in paths:  # plain string work: a pull may name 100,000 files
        folder, name = _split(rel)
        names.setdefault(folder, set()).add(name)
    out: dict[str, str] = {}
    for folder, here in sorted(names.items()):
        weights = any(_WEIGHTS.fullmatch(n) for n in here) or any(
            n.endswith((".safetensors.index.json", ".bin.index.json")) for n in here
        )
        if "trainer_state.json" in here:
            out[folder] = "HF Trainer checkpoint"
        elif any(_ACCELERATE.fullmatch(n) for n in here):
            out[folder] = "Accelerate state (save_state)"
        elif "config.json" in here and weights:
            out[folder] = "HF model (save_pretrained)"
    return out


def to_check(paths: Iterable[str]) -> list[str]:
    """The pulled files to load-check, in order: see the module docstring."""
    paths = sorted(paths)
    known = folders(paths)
    out = []
    for rel in paths:
        folder = _split(rel)[0]
        in_folder = folder in known and rel.endswith((*CKPT_SUFFIXES, ".json"))
        if is_checkpoint(rel) or in_folder:
            out.append(rel)
    return out


def verdict(result: dict[str, Any]) -> str:
    """A load result's verdict (results written before verdicts existed: by ``ok``)."""
    return str(result.get("verdict") or ("loaded" if result.get("ok") else "failed"))


def file_checks(paths: Iterable[str], loads: list[dict[str, Any]]) -> dict[str, Any]:
    """What was done to each pulled file: ``loaded``, ``pickled`` (hashed, not loaded),
    ``refused``, ``failed`` (load-checked, did not load) and ``hashed`` (hashed only); with the
    recognised ``formats``, folder by folder (and Lightning files by file)."""
    paths = sorted(paths)
    by_path = {r["path"]: verdict(r) for r in loads}
    out: dict[str, Any] = {k: [] for k in ("loaded", "pickled", "refused", "failed", "hashed")}
    for rel in paths:
        out[by_path.get(rel, "hashed")].append(rel)
    formats = [{"path": f + "/", "kind": kind} for f, kind in folders(paths).items()]
    formats += [
        {"path": r["path"], "kind": "Lightning checkpoint"}
        for r in loads
        if str(r.get("detail", "")).startswith("Lightning checkpoint")
    ]
    out["formats"] = sorted(formats, key=lambda f: f["path"])
    return out


def disclosures(loads: list[dict[str, Any]]) -> list[str]:
    """One line per file that stands verified by sha256 only because it is pickled."""
    return [
        f"{PICKLED_LINE}: {r['path']} (verified by sha256 only; "
        + (f"a pickled {r['names'][0]}" if r.get("names") else "a plain pickle")
        + ")"
        for r in loads
        if verdict(r) == "pickled"
    ]


def _some(paths: list[str], n: int = 6) -> str:
    more = f", +{len(paths) - n} more" if len(paths) > n else ""
    return ", ".join(paths[:n]) + more


def report_lines(verification: dict[str, Any]) -> list[str]:
    """The per-file lines of a pulled run's text: formats, what was loaded, what only hashed,
    the pickled files disclosed, and each file that did not load with why and what to do."""
    loads = verification.get("checkpoint_loads", [])
    checks = verification.get("files") or {}
    lines = [f"  {f['path']}: {f['kind']}" for f in checks.get("formats", [])]
    if checks.get("loaded"):
        lines.append(f"  load-checked ({len(checks['loaded'])}): {_some(checks['loaded'])}")
    if checks.get("hashed"):
        lines.append(f"  only hashed ({len(checks['hashed'])}): {_some(checks['hashed'])}")
    for r in loads:
        if verdict(r) == "pickled":
            why = str(r.get("why") or "").removeprefix(PICKLED_LINE + ": ")
            lines.append(f"  {PICKLED_LINE}: {r['path']}: {why or 'verified by sha256 only'}")
        elif verdict(r) not in PASSING:
            lines.append(f"  DOES NOT LOAD {r['path']}: {r.get('why') or r['detail']}")
    return lines
