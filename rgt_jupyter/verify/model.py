"""What the VERIFY checks read and what they say: :class:`RunData` (one pulled run and what its
job declared), :class:`Context` (the compared arms), :class:`Finding` (one verdict).

What a job can declare (written by :mod:`rgt_jupyter.job` helpers into ``$RGT_OUT``, so they land
in ``runs/<run-id>/outputs/`` when pulled):

=================================  ==============================================================
``verify/metric.json``             ``{"name", "direction": "max"|"min", "split", "fn"}`` (``fn``:
                                   how to re-derive it from predictions: accuracy, error_rate,
                                   mse, rmse, mae)
``config.json``                    the config (``job.save_config``; flattened to dotted keys)
``splits/<split>.ids``             one item id per line
``splits/<split>.sha256``          ``<sha256>  <id>`` per line: each item's content hash
``splits/<split>.sig``             JSON lines: a header with the parameters, then per item its
                                   near-duplicate signature (MinHash of text, dHash of an image,
                                   a rounded row's hash), group and time (``job.save_split(...,
                                   items=, groups=, times=)``; only signatures travel)
``predictions/<split>.jsonl``      ``{"id", "pred", "target"}`` per line
``verify/evals.jsonl``             ``{"split", "step", "purpose", "metrics"}`` per evaluation;
                                   purpose: report, early_stopping, checkpoint_selection, tuning
``verify/outputs/<split>.json``    ``{"ids": [...], "vectors": [[...], ...]}``: model outputs
``verify/shuffle.json``            ``{"metric", "real", "shuffled", "n"}``: the score on real
                                   inputs and on inputs shuffled across items
``verify/changed.json``            ``{"keys": [...]}``: the config keys this run means to change
``verify/search.json``             ``{"metric", "direction", "split", "trials": [{"config",
                                   "value"}, ...]}``: the tuning search behind the run (a failed
                                   trial has ``"value": null``)
``results.json: tasks``            ``{"tasks": {task: value}}`` or ``{task: {metric: value}}``:
                                   per-task scores for the multi-task comparison
=================================  ==============================================================

Anything missing makes the checks that need it ``not_checked``, and that is disclosed.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..store.fsutil import jsonl_records, sha256_file

#: Verdicts of the classification checks and of the integrity checks.
CLASSIFICATION = ("bug", "effect", "noise", "inconclusive")
INTEGRITY = ("pass", "finding", "not_checked")
DIRECTIONS = ("max", "min")


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict as dotted keys (``{"opt": {"lr": 0.1}}`` → ``{"opt.lr": 0.1}``); lists are
    compared whole."""
    if not isinstance(value, dict):
        return {prefix: value} if prefix else {}
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(item, dict) and item:
            out.update(flatten(item, name))
        else:
            out[name] = item
    return out


@dataclass
class Finding:
    """One check's verdict on some runs, with what it computed and the inputs it read."""

    check: str
    verdict: str
    disclosure: str
    run_ids: list[str]
    computed: dict[str, Any] = field(default_factory=dict)
    inputs: list[dict[str, str]] = field(default_factory=list)
    exp_id: str | None = None
    claim_id: str | None = None
    created: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.verdict not in CLASSIFICATION + INTEGRITY:
            raise ValueError(f"unknown verdict {self.verdict!r}")

    @property
    def is_problem(self) -> bool:
        """A ``bug`` or an integrity ``finding`` (an effect, noise or an inconclusive call is a
        classification, disclosed with the number, not a defect)."""
        return self.verdict in ("bug", "finding")

    def record(self) -> dict[str, Any]:
        """The finding as written to ``verify/findings.jsonl``."""
        out = asdict(self)
        out["targets"] = {
            "claim_id": out.pop("claim_id"),
            "exp_id": out.pop("exp_id"),
            "run_ids": out.pop("run_ids"),
        }
        return out


class RunData:
    """One pulled run, read lazily; every file a check reads is recorded with its sha256."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not (self.path / "run.json").is_file():
            raise FileNotFoundError(f"{self.path} is not a run folder (no run.json)")
        self.run_id = self.path.name
        self.used: dict[str, str] = {}
        self._cache: dict[str, Any] = {}

    # -- reading, with the inputs recorded

    def file(self, rel: str) -> Path | None:
        """``rel`` under the run folder (also looked up under ``outputs/``), recorded as an input
        when it exists."""
        for candidate in (self.path / rel, self.path / "outputs" / rel):
            if candidate.is_file():
                key = str(candidate.relative_to(self.path))
                if key not in self.used:
                    self.used[key] = sha256_file(candidate)[0]
                return candidate
        return None

    def json(self, rel: str) -> Any:
        """A JSON file of the run, or None."""
        if rel not in self._cache:
            path = self.file(rel)
            self._cache[rel] = json.loads(path.read_text()) if path else None
        return self._cache[rel]

    def jsonl(self, rel: str) -> list[dict[str, Any]] | None:
        """A JSON-lines file of the run (lines that are not objects are skipped), or None."""

        path = self.file(rel)
        return None if path is None else jsonl_records(path.read_text())

    def inputs(self, *rels: str) -> list[dict[str, str]]:
        """``[{path, sha256}]`` of the named files (every file read so far when none named),
        with paths relative to the project when the run sits in one."""
        keys = rels or tuple(self.used)
        out, seen = [], set()
        for rel in keys:
            for key in (rel, f"outputs/{rel}"):  # named as file() finds it
                if key in self.used and key not in seen:
                    seen.add(key)
                    out.append({"path": str(self.path / key), "sha256": self.used[key]})
                    break
        return out

    # -- what the job declared

    @property
    def provenance(self) -> dict[str, Any]:
        """``run.json``."""
        value: dict[str, Any] = self.json("run.json") or {}
        return value

    @property
    def results(self) -> dict[str, Any]:
        """``results.json`` ({} when there is none)."""
        value: dict[str, Any] = self.json("results.json") or {}
        return value

    @property
    def config(self) -> dict[str, Any]:
        """The config, flattened to dotted keys ({} when none was saved)."""
        return flatten(self.provenance.get("config") or self.json("config.json") or {})

    @property
    def seed(self) -> Any:
        """The run's seed as recorded in ``run.json`` (None when unknown)."""
        return self.provenance.get("seed")

    @property
    def metric(self) -> dict[str, Any] | None:
        """``verify/metric.json``: the declared metric."""
        value = self.json("verify/metric.json")
        return value if isinstance(value, dict) else None

    def split_ids(self, split: str) -> list[str] | None:
        """The item ids of a split, as declared (None when not declared)."""
        path = self.file(f"splits/{split}.ids")
        if path is None:
            return None
        return [line.strip() for line in path.read_text().splitlines() if line.strip()]

    def split_hashes(self, split: str) -> dict[str, str] | None:
        """Item id → content sha256 of a split, when declared."""
        path = self.file(f"splits/{split}.sha256")
        if path is None:
            return None
        out = {}
        for line in path.read_text().splitlines():
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                out[parts[1]] = parts[0].lower()
        return out

    def splits(self) -> list[str]:
        """The names of the declared splits."""
        found = set()
        for base in (self.path / "splits", self.path / "outputs" / "splits"):
            if base.is_dir():
                found |= {p.stem for p in base.glob("*.ids")}
        return sorted(found)

    def predictions(self, split: str) -> list[dict[str, Any]] | None:
        """Saved per-item predictions of a split."""
        return self.jsonl(f"predictions/{split}.jsonl")

    @property
    def evals(self) -> list[dict[str, Any]] | None:
        """Every evaluation the job logged (``verify/evals.jsonl``)."""
        return self.jsonl("verify/evals.jsonl")

    def outputs(self, split: str) -> dict[str, Any] | None:
        """Saved model outputs of a split (``{"ids", "vectors"}``)."""
        value = self.json(f"verify/outputs/{split}.json")
        return value if isinstance(value, dict) else None

    @property
    def shuffle(self) -> dict[str, Any] | None:
        """The real-vs-shuffled-input scores, when saved."""
        value = self.json("verify/shuffle.json")
        return value if isinstance(value, dict) else None

    @property
    def changed(self) -> list[str] | None:
        """The config keys this run declared it changes (``verify/changed.json``)."""
        value = self.json("verify/changed.json")
        keys = value.get("keys") if isinstance(value, dict) else None
        return [str(k) for k in keys] if isinstance(keys, list) else None

    @property
    def manifest(self) -> dict[str, Any]:
        """``manifest.json``: every pulled file with its size and sha256."""
        value: dict[str, Any] = self.json("manifest.json") or {}
        return value

    def metric_value(self, name: str, split: str | None = None) -> float | None:
        """The reported value of ``name`` (on ``split``) from ``results.json``, in any of the
        shapes ``{split: {name: v}}``, ``{name: {split: v}}``, ``{name: v}`` or
        ``{"metrics": {name: {split: {"value": v}}}}``."""
        res = self.results
        candidates: list[Any] = []
        metrics = res.get("metrics")
        tables: list[dict[str, Any]] = [res] + ([metrics] if isinstance(metrics, dict) else [])
        for table in tables:
            if split is not None and isinstance(table.get(split), dict):
                candidates.append(table[split].get(name))
            entry = table.get(name)
            if isinstance(entry, dict) and split is not None:
                candidates.append(entry.get(split))
            candidates.append(entry)
        for value in candidates:
            if isinstance(value, dict) and "value" in value:
                value = value["value"]
            if isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
        return None

    def __repr__(self) -> str:
        return f"<RunData {self.run_id}>"


@dataclass
class Context:
    """What ``%verify`` compares: the runs of the variant (one per seed) and of the baseline,
    the metric, its direction and split, and the config keys meant to differ."""

    runs: list[RunData]
    baselines: list[RunData] = field(default_factory=list)
    metric: str | None = None
    direction: str | None = None
    split: str = "test"
    changed: list[str] = field(default_factory=list)
    #: Config keys that may differ without confounding (names, paths, tracker ids).
    ignore: list[str] = field(default_factory=lambda: ["name", "run_name", "output_dir", "out_dir"])

    @property
    def everything(self) -> list[RunData]:
        """Variant and baseline runs."""
        return self.runs + self.baselines

    def values(self, runs: list[RunData]) -> list[float]:
        """The finite reported values of the metric in ``runs``."""
        if self.metric is None:
            return []
        out = []
        for run in runs:
            value = run.metric_value(self.metric, self.split)
            if value is not None and math.isfinite(value):
                out.append(value)
        return out


def inputs_of(*runs: RunData, rels: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """The inputs the runs' checks read (all of them, or only ``rels``)."""
    out: list[dict[str, str]] = []
    for run in runs:
        out += run.inputs(*rels)
    return out


def finding_key(rec: dict[str, Any]) -> str:
    """What makes two recorded findings the same: the check, the runs it is about, the sha256 of
    every input it read, the claim, and what it said (one check may say several things about the
    same files). A finding whose key is already in the log is not appended again."""
    targets = rec.get("targets") or {}
    runs = sorted(str(r) for r in targets.get("run_ids") or [])
    shas = sorted(str(i.get("sha256")) for i in rec.get("inputs") or [] if isinstance(i, dict))
    key = [rec.get("check"), runs, shas, targets.get("claim_id"), rec.get("disclosure")]
    return json.dumps(key, sort_keys=True, default=str)


def read_findings(project: Path) -> list[dict[str, Any]]:
    """The recorded findings of ``verify/findings.jsonl``, the newest of each
    :func:`finding_key` only, oldest first (unreadable lines are skipped)."""
    path = project / "verify" / "findings.jsonl"
    if not path.is_file():
        return []
    newest: dict[str, dict[str, Any]] = {}
    for rec in jsonl_records(path.read_text()):
        key = finding_key(rec)
        if key not in newest or float(rec.get("created") or 0) >= float(
            newest[key].get("created") or 0
        ):
            newest.pop(key, None)
            newest[key] = rec
    return sorted(newest.values(), key=lambda r: float(r.get("created") or 0))


def findings_by_run(project: Path) -> dict[str, list[dict[str, Any]]]:
    """Every recorded ``%verify`` finding of each run, oldest first, each once (see
    :func:`read_findings`)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for rec in read_findings(project):
        for run_id in (rec.get("targets") or {}).get("run_ids") or []:
            out.setdefault(str(run_id), []).append(rec)
    return out


def findings_by_claim(project: Path) -> dict[str, list[dict[str, Any]]]:
    """Every recorded finding of each claim id, oldest first, each once; findings recorded
    without a claim are under ``""``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for rec in read_findings(project):
        claim = (rec.get("targets") or {}).get("claim_id")
        out.setdefault(str(claim or ""), []).append(rec)
    return out


def open_problems(project: Path) -> dict[str, list[str]]:
    """Each run's open problems, as ``check: disclosure``: the newest finding of each check on
    the run, where it is a ``bug`` or an integrity ``finding`` (a later pass closes it)."""
    out: dict[str, list[str]] = {}
    for run_id, records in findings_by_run(project).items():
        newest: dict[str, dict[str, Any]] = {}
        for rec in records:
            check = str(rec.get("check"))
            if check not in newest or float(rec.get("created") or 0) >= float(
                newest[check].get("created") or 0
            ):
                newest[check] = rec
        problems = [
            f"{check}: {rec.get('disclosure')}"
            for check, rec in sorted(newest.items())
            if rec.get("verdict") in ("bug", "finding")
        ]
        if problems:
            out[run_id] = problems
    return out
