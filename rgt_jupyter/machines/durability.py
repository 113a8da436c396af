"""Where checkpoints may live: the profile's survival matrix applied to a checkpoint dir.

A job's checkpoint dir must be on a tier that survives the profile's meter-stop verb (its
``effect``: stop or destroy). Where the platform's own answer is "pull before teardown"
(``pull_before_teardown``), a tier that survives a stop is accepted, because the teardown gate
refuses to stop the meter before every checkpoint was pulled and verified. Anything else is
refused at launch unless the user overrides it; the override travels with the job into
``run.json``.
"""

from __future__ import annotations

import posixpath
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .profiles import Profile, Tier


@dataclass(frozen=True)
class Durability:
    """The verdict on one checkpoint dir."""

    ok: bool
    path: str
    tier: str
    tier_path: str
    effect: str
    verb: str
    reason: str
    overridden: bool = False

    def record(self) -> dict[str, Any]:
        """The JSON form kept in the job spec and ``run.json``."""
        return asdict(self)


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return root == "/" or path == root or path.startswith(root + "/")


def tier_of(profile: Profile, path: str, project: Path, home: str) -> Tier | None:
    """The tier holding ``path``: the longest matching prefix among the tiers in effect; of
    equal paths, one that needs a declared feature wins (it describes what is really there)."""
    path = posixpath.normpath(path)
    best: tuple[int, int, Tier] | None = None
    for tier in profile.tiers_in_effect():
        root = posixpath.normpath(profile.expand(tier.path, project, home))
        if _under(path, root):
            key = (len(root.rstrip("/")), 1 if tier.needs else 0)
            if best is None or key > best[:2]:
                best = (*key, tier)
    return best[2] if best else None


def check(profile: Profile, ckpt_dir: str, project: Path, home: str) -> Durability:
    """Whether checkpoints in ``ckpt_dir`` outlive the profile's meter-stop verb."""
    ms = profile.meter_stop
    tier = tier_of(profile, ckpt_dir, project, home)

    # The tier's path as it is on the machine (its ``{home}`` and ``{project_name}`` filled in).
    where = profile.expand(tier.path, project, home) if tier else ""

    def verdict(ok: bool, reason: str) -> Durability:
        label = tier.label if tier else "unknown"
        return Durability(ok, ckpt_dir, label, where, ms.effect, ms.verb, reason)

    if tier is None:
        return verdict(
            False,
            f"{ckpt_dir} is on no storage tier that profile {profile.name!r} describes, so "
            "nothing says it survives the end of the machine",
        )
    if tier.survives(ms.effect):
        kept = "stop" if ms.effect == "stop" else "destroy" if ms.effect == "destroy" else "end"
        return verdict(True, f"{tier.label} ({where}) survives {ms.verb} ({kept})")
    if profile.pull_before_teardown and tier.survives_stop:
        return verdict(
            True,
            f"{tier.label} ({where}) survives restarts but not {ms.verb}: checkpoints "
            "there are safe only once pulled, and `rgt down` refuses to stop the meter "
            "before they are pulled and verified",
        )
    lost_on = "a stop or restart" if not tier.survives_stop else ms.verb
    return verdict(
        False,
        f"{ckpt_dir} is on {tier.label} ({where}), which is lost on {lost_on}"
        + (f" ({tier.note})" if tier.note else ""),
    )


def surviving_tiers(profile: Profile) -> list[Tier]:
    """The tiers (in effect or needing a feature) where checkpoints would be accepted."""
    out = []
    for tier in profile.tiers:
        if tier.survives(profile.meter_stop.effect) or (
            profile.pull_before_teardown and tier.survives_stop
        ):
            out.append(tier)
    return out


def refusal_advice(profile: Profile, verdict: Durability, project: Path, home: str) -> str:
    """The consequence spelled out, and what to do instead (the tiers' paths as they are on the
    machine whose home dir is ``home``)."""
    where = surviving_options(profile, project, home)
    return (
        f"Refused: {verdict.reason}. If the job's checkpoints are lost there, a preempted or "
        f"interrupted run restarts from zero, and {profile.meter_stop.verb} destroys them. "
        f"Put the checkpoint dir on: {where}. To launch anyway, knowing this, pass "
        "--allow-ephemeral-ckpt (the override is recorded in the job and its run.json)."
    )


def surviving_options(profile: Profile, project: Path, home: str) -> str:
    """The tiers where checkpoints would be accepted, each with what makes it available."""
    good = surviving_tiers(profile)
    options = []
    for tier in good:
        need = (
            f" (declare it: a profile with extends = {profile.name!r} and "
            f'features = ["{tier.needs}"], once it is attached)'
            if tier.needs and tier.needs not in profile.features
            else ""
        )
        options.append(f"{profile.expand(tier.path, project, home)} ({tier.label}){need}")
    return "; ".join(options) or "no tier of this profile survives it"
