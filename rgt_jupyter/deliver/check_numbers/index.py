"""The numeric leaves of results.json files, indexed so that a shown number finds the values it
shows at its display rounding; and the format spec that would generate it."""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..numtext import PERCENT_SCALE, rounding_tolerance
from ..numtokens import MULTIPLIER, Token

_KEY_SPLIT = re.compile(r"[^a-z0-9]+")
_KEY_STOP = frozenset(
    """value values mean std count total avg min max final last config results result metrics
    metric data eval time seconds num per class all the and for with from""".split()
)
# The scales a number shown with a suffix is tried at: a percent (or points) or per mille of a
# fraction first, then the value as stored.
_SUFFIX_SCALES: dict[str, tuple[int, ...]] = {
    s: (f, 1) for s, f in {**PERCENT_SCALE, "pp": PERCENT_SCALE["%"]}.items()
}


#: At most this many runs of one key are paired for derived numbers (a difference or ratio).
DERIVED_MAX = 40
_RATIO_WORDS = frozenset("times faster slower speedup".split())


@dataclass(frozen=True, slots=True)
class Leaf:
    """One numeric leaf of one run's results.json."""

    run_id: str
    file: str
    sha256: str
    key: str
    raw: float | int
    words: frozenset[str]


class ResultsIndex:
    """Numeric leaves of results.json files, sorted by value (and by 100·v, 1000·v for
    fractions) so a shown number finds its candidates by bisection."""

    def __init__(
        self,
        leaves: list[Leaf],
        files: list[dict[str, str]],
        runs: dict[str, tuple[str, float]] | None = None,
    ) -> None:
        self.leaves = leaves
        self.files = files
        #: Each run's job name and time (when it ended, else was pulled or created), from its
        #: run.json: which run of a job is the newest.
        self.runs = runs or {}
        self._newest: dict[str, str] = {}
        for run_id, (job, _t) in sorted(self.runs.items(), key=lambda kv: (kv[1][1], kv[0])):
            self._newest[job] = run_id
        self._at = {(leaf.run_id, leaf.key): leaf for leaf in leaves}
        groups: dict[str, list[Leaf]] = {}
        for leaf in leaves:
            groups.setdefault(leaf.key, []).append(leaf)
        #: The leaves of one key across runs (for differences and ratios of two results).
        self._by_key = {k: g[:DERIVED_MAX] for k, g in groups.items() if len(g) >= 2}
        self._scaled: dict[int, tuple[list[float], list[int]]] = {}
        for scale in (1, *PERCENT_SCALE.values()):
            pairs = sorted(
                (float(leaf.raw) * scale, i)
                for i, leaf in enumerate(leaves)
                if scale == 1 or 0 <= leaf.raw <= 1
            )
            self._scaled[scale] = ([p[0] for p in pairs], [p[1] for p in pairs])
        words: set[str] = set()
        names: set[str] = set()
        for leaf in leaves:
            words |= leaf.words
            last = leaf.key.rsplit(".", 1)[-1].lower()
            if len(last) >= 3 and last not in _KEY_STOP and not last.isdigit():
                names.add(last)
        self.key_words = frozenset(words)
        self.leaf_names = frozenset(names)

    @classmethod
    def load(cls, run_folders: Iterable[Path], project: Path | None = None) -> ResultsIndex:
        """Index ``results.json`` (or ``outputs/results.json``) of each run folder; a path to a
        results.json file is taken as is."""
        leaves: list[Leaf] = []
        files: list[dict[str, str]] = []
        runs: dict[str, tuple[str, float]] = {}
        for folder in run_folders:
            path = folder if folder.is_file() else folder / "results.json"
            if not path.is_file() and folder.is_dir():
                path = folder / "outputs" / "results.json"
            if not path.is_file():
                continue
            run_id = (folder.parent if folder.is_file() else folder).name
            data = path.read_bytes()
            try:
                doc = json.loads(data)
            except ValueError:
                continue
            sha = hashlib.sha256(data).hexdigest()
            job = _job_of(folder if folder.is_dir() else folder.parent, path)
            if job is not None:
                runs[run_id] = job
            shown = _display_path(path, project)
            files.append({"path": shown, "sha256": sha, "run_id": run_id})
            for key, raw in _numeric_leaves(doc, ""):
                words = frozenset(
                    w
                    for w in _KEY_SPLIT.split(key.lower())
                    if len(w) >= 3 and not w.isdigit() and w not in _KEY_STOP
                )
                leaves.append(Leaf(run_id, shown, sha, key, raw, words))
        return cls(leaves, files, runs)

    @staticmethod
    def shows(tok: Token, leaf: Leaf, scale: int) -> bool:
        """Whether ``tok`` shows ``leaf`` (at ``scale``) at its display rounding."""
        if tok.value is None or tok.decimals is None:
            return False
        unit = 10.0 ** (tok.exponent + MULTIPLIER.get(tok.suffix, 0))
        tol = rounding_tolerance(10.0 ** (-tok.decimals) * unit, tok.value)
        return abs(float(leaf.raw) * scale - tok.value) <= tol

    def derived(self, tok: Token) -> dict[str, Any] | None:
        """The two results of one key (in two runs) whose difference or ratio ``tok`` shows at
        its display rounding (``+2.1`` points of two accuracies, ``1.8×``): ``{"kind", "of",
        "values", "scale"}``; None when no pair does."""
        if tok.value is None or tok.decimals is None or tok.sig == 0 or not self._by_key:
            return None
        ratio = tok.suffix in ("×", "x") or bool(tok.close & _RATIO_WORDS - {"faster", "slower"})
        unit = 10.0 ** (tok.exponent + MULTIPLIER.get(tok.suffix, 0))
        tol = rounding_tolerance(10.0 ** (-tok.decimals) * unit, tok.value)
        target = abs(tok.value)
        scales = (1,) if ratio else (1, 100)
        for key, group in self._by_key.items():
            for a in group:
                for b in group:
                    if a is b or not b.raw:
                        continue
                    for scale in scales:
                        shown = a.raw / b.raw if ratio else (a.raw - b.raw) * scale
                        if abs(abs(shown) - target) <= tol and shown:
                            return {
                                "kind": "ratio" if ratio else "difference",
                                "of": [f"{a.run_id}:{key}", f"{b.run_id}:{key}"],
                                "values": [a.raw, b.raw],
                                "scale": scale,
                            }
        return None

    def newer(self, leaf: Leaf) -> Leaf | None:
        """The same key in the newest run of ``leaf``'s job, when ``leaf`` is from an older run
        of that job and the newest run shows another value there (None otherwise)."""
        job = self.runs.get(leaf.run_id)
        newest = self._newest.get(job[0]) if job else None
        if newest is None or newest == leaf.run_id:
            return None
        current = self._at.get((newest, leaf.key))
        if current is not None and current.raw == leaf.raw:
            return None
        return current

    def newest_run(self, run_id: str) -> str | None:
        """The newest run of ``run_id``'s job (None when its job is not known)."""
        job = self.runs.get(run_id)
        return self._newest.get(job[0]) if job else None

    def lookup(self, tok: Token, anchored: bool) -> tuple[Leaf, int, int] | None:
        """The best leaf that ``tok`` shows at its display rounding (half-up or half-even at
        its decimals), the scale (1, or 100/1000 for ``%``/``‰`` of a fraction) and how many
        leaves it matched; None when none does."""
        if tok.value is None or tok.decimals is None or tok.sig == 0 or not self.leaves:
            return None
        value = tok.value
        unit = 10.0 ** (tok.exponent + MULTIPLIER.get(tok.suffix, 0))
        tol = rounding_tolerance(10.0 ** (-tok.decimals) * unit, value)
        scales = _SUFFIX_SCALES.get(tok.suffix, (1,))
        int_shown = tok.decimals == 0 and unit == 1.0
        found: list[tuple[int, float, int, int]] = []
        for rank, scale in enumerate(scales):
            vals, ids = self._scaled[scale]
            lo = bisect.bisect_left(vals, value - tol)
            hi = bisect.bisect_right(vals, value + tol)
            for j in range(lo, hi):
                leaf = self.leaves[ids[j]]
                raw = leaf.raw
                if int_shown and scale == 1 and not anchored:
                    if isinstance(raw, float) and not raw.is_integer():
                        continue
                overlap = len(tok.words & leaf.words)
                found.append((-overlap, abs(vals[j] - value), rank, ids[j]))
        if not found:
            return None
        best = min(found)
        scale = scales[best[2]]
        return self.leaves[best[3]], scale, len({f[3] for f in found})


def _job_of(folder: Path, results: Path) -> tuple[str, float] | None:
    """A run's job name and time from its ``run.json`` (the time it ended, else was pulled or
    created, else the results file's mtime); None without a readable run.json."""
    try:
        record = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("name"), str):
        return None
    found = record.get("times")
    times: dict[str, Any] = found if isinstance(found, dict) else {}
    for key in ("ended", "pulled", "created"):
        t = times.get(key)
        if isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t):
            return record["name"], float(t)
    try:
        return record["name"], results.stat().st_mtime
    except OSError:
        return None


def _numeric_leaves(value: Any, prefix: str) -> Iterable[tuple[str, float | int]]:
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        if isinstance(value, int) or math.isfinite(value):
            if not isinstance(value, int) or abs(value) < 1 << 1000:
                yield prefix, value
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _numeric_leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numeric_leaves(v, f"{prefix}.{i}" if prefix else str(i))


def _display_path(path: Path, project: Path | None) -> str:
    if project is not None:
        try:
            return path.resolve().relative_to(project.resolve()).as_posix()
        except ValueError:
            pass
    return str(path)


def fmt_for(tok: Token, leaf: Leaf, scale: int) -> tuple[str, str] | None:
    """The format spec that shows ``leaf.raw`` the way ``tok`` shows it, and the text that
    stays after the placeholder (``%`` when results.json stores the percent itself); None when
    no format spec reproduces it (K/M/B suffixes, per mille, points of a fraction)."""
    d = tok.decimals or 0
    if tok.suffix in MULTIPLIER or scale == 1000 or (tok.suffix == "pp" and scale == 100):
        return None
    sign = "+" if tok.text.startswith("+") else ""
    if tok.exponent:
        return f"{sign}.{d}e", ""
    if tok.suffix == "%" and scale == 100:
        return f"{sign}.{d}%", ""
    comma = "," if tok.thousands else ""
    after = tok.text[len(core(tok)) :]
    if d == 0 and isinstance(leaf.raw, int):
        return f"{sign}{comma}d", after
    return f"{sign}{comma}.{d}f", after


def core(tok: Token) -> str:
    """The text of ``tok`` without its suffix (``91.2`` of ``91.2%``)."""
    if tok.suffix and tok.text.endswith(tok.suffix):
        return tok.text[: -len(tok.suffix)].strip()
    return tok.text
