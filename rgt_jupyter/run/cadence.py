"""Checkpoint cadence advice: the interval between checkpoints that loses the least time on a
machine reclaimed at random (Young 1974; Daly 2006, "A higher order estimate of the optimum
checkpoint interval for restart dumps"), from the save time the job measured
(``cadence.json``) and the profile's reclaim rate (``[spot] reclaims_per_day``).

With a mean time between reclaims ``M`` and a save taking ``C``, Daly's estimate is
``sqrt(2CM) * (1 + sqrt(C/2M)/3 + (C/2M)/9) - C`` for ``C < 2M`` (else ``M``). A platform that
gives a grace period long enough to save once more (``grace_s`` >= the save time) loses
nothing to a reclaim it announces: periodic checkpoints then guard against the unannounced
ends only, and the advice says so instead of asking for more frequent saves.
"""

from __future__ import annotations

import itertools
import math
import statistics
from typing import Any

#: How far (a factor either way) the job's interval may be from the optimum unremarked.
FAR = 2.0


def daly_interval(save_s: float, mtbf_s: float) -> float:
    """The optimum seconds between checkpoint starts for a save of ``save_s`` seconds and a
    mean time between failures of ``mtbf_s`` seconds (Daly's higher-order estimate)."""
    if save_s <= 0 or mtbf_s <= 0:
        raise ValueError("the save time and the mean time between reclaims must be positive")
    if save_s >= 2 * mtbf_s:
        return mtbf_s
    ratio = save_s / (2 * mtbf_s)
    return math.sqrt(2 * save_s * mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - save_s


def _minutes(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def launch_note(spot: dict[str, Any]) -> str | None:
    """What a launch says of the cadence before any save was timed (None without a rate)."""
    per_day = float(spot.get("reclaims_per_day") or 0.0)
    if per_day <= 0:
        return None
    mtbf = 86400.0 / per_day
    examples = ", ".join(
        f"a {c:.0f} s save: every {_minutes(daly_interval(c, mtbf))}" for c in (10.0, 60.0)
    )
    return (
        f"spot reclaims come about every {_minutes(mtbf)} on this profile: the checkpoint "
        f"interval that loses least is about sqrt(2 x save time x that) ({examples}); the view "
        "says so once the job's own saves are timed"
    )


def advice(cadence: dict[str, Any] | None, spot: dict[str, Any]) -> str | None:
    """A line for the view when the job's checkpoint interval is far from the optimum for its
    measured save time (None while it is near, or nothing is known yet)."""
    per_day = float(spot.get("reclaims_per_day") or 0.0)
    saves = [s for s in (cadence or {}).get("saves", []) if isinstance(s, dict)]
    if per_day <= 0 or len(saves) < 3:
        return None
    try:
        save_s = statistics.median(float(s["save_s"]) for s in saves)
        at = [float(s["at"]) for s in saves]
    except (KeyError, TypeError, ValueError):
        return None
    gaps = [b - a for a, b in itertools.pairwise(at) if b > a]
    if not gaps or save_s <= 0:
        return None
    interval = statistics.median(gaps)
    mtbf = 86400.0 / per_day
    best = daly_interval(save_s, mtbf)
    grace = float(spot.get("grace_s") or 0.0)
    measured = f"a save takes {save_s:.1f} s, one every {_minutes(interval)}"
    if grace >= save_s:
        if interval < best / FAR:
            return (
                f"checkpoint cadence: {measured}; a reclaim here is announced {grace:.0f} s "
                "ahead, enough to save then, so saves this frequent only cost time "
                f"(about every {_minutes(best)} guards against unannounced ends)"
            )
        return None
    if interval > best * FAR:
        lost = interval / 2
        return (
            f"checkpoint cadence: {measured}, so a reclaim (about every {_minutes(mtbf)}) "
            f"loses {_minutes(lost)} of work on average: save about every {_minutes(best)} "
            "(Young/Daly)"
        )
    if interval < best / FAR:
        share = save_s / interval * 100
        return (
            f"checkpoint cadence: {measured}, {share:.0f} % of the run spent saving: about "
            f"every {_minutes(best)} loses least to reclaims (about every {_minutes(mtbf)}; "
            "Young/Daly)"
        )
    return None
