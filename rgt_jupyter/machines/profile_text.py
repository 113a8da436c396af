"""A profile explained in plain words: what stop and destroy keep and lose, where checkpoints
must go, what keeps billing, and which facts are getting old."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from .durability import check, surviving_tiers
from .profiles import Profile, stale_facts


def _yes(flag: bool) -> str:
    return "kept" if flag else "LOST"


def explain(profile: Profile, project: Path, today: _dt.date | None = None) -> str:
    """``rgt profiles show NAME``."""
    ms = profile.meter_stop
    out = [f"{profile.name}: {profile.description}", f"  kind {profile.kind}; {profile.source}"]
    if profile.extends:
        out.append(f"  extends {profile.extends}")
    if not profile.metered:
        out.append("Meter: none. Nothing bills, so nothing is stopped or destroyed.")
    else:
        out.append(
            f"Meter-stop verb: {ms.verb} — "
            + (
                "IRREVERSIBLE: the machine and everything not on a surviving tier is destroyed."
                if ms.irreversible
                else "reversible: the machine can be started again."
            )
        )
        if ms.console:
            out.append(f"  how: {ms.console}")
        for other in ms.other_verbs:
            out.append(f"  other verb: {other}")
    # Paths as they are on the machine: ``~`` stands for the home dir there (unknown until a
    # job runs), the project's name is this project's.
    home = "~"

    def shown(template: str) -> str:
        return profile.expand(template, project, home)

    out.append("What survives (stop / destroy):")
    for tier in profile.tiers:
        need = f" [only with {tier.needs}]" if tier.needs else ""
        note = f" — {tier.note}" if tier.note else ""
        out.append(
            f"  {shown(tier.path):24} {tier.label}{need}: stop {_yes(tier.survives_stop)}, "
            f"destroy {_yes(tier.survives_destroy)}{note}"
        )
    durable = shown(profile.durable_dir)
    verdict = check(profile, durable, project, home)
    good = ", ".join(f"{shown(t.path)} ({t.label})" for t in surviving_tiers(profile)) or "none"
    out.append(f"Durable dir: {durable}")
    out.append(
        f"Checkpoints must go on: {good}. The durable dir "
        + ("passes: " if verdict.ok else "is REFUSED as it stands: ")
        + verdict.reason
        + "."
    )
    if profile.bucket.get("url"):
        b = profile.bucket
        out.append(
            f"Bucket: each checkpoint is also uploaded to {b['url']} "
            f"({b.get('endpoint') or 'AWS S3'}, credentials {b.get('credentials') or 'default'}); "
            "it counts as durable once its upload is verified, and outlives the machine "
            "(`rgt resume JOB --new-machine` continues from it)."
        )
    if profile.autostop:
        out.append(
            f"Autostop: {profile.autostop}: with `rgt autostop on {profile.name}` (a standing "
            f"approval), a machine's meter is stopped ({ms.verb}) once every job on it was "
            "pulled and verified and the teardown gate passed; otherwise it is kept and said so."
        )
    if profile.pull_before_teardown:
        out.append(
            "  Pull before teardown: checkpoints are safe only once pulled; `rgt down` refuses "
            "to stop the meter before that."
        )
    billing = list(ms.keeps_billing) + [n.text for n in profile.billing_traps]
    if billing:
        out.append("What keeps billing:")
        out += [f"  - {b}" for b in billing]
    if profile.danger_clocks:
        out.append("Danger clocks:")
        out += [f"  - {n.text}" for n in profile.danger_clocks]
    if profile.spot:
        spot = profile.spot
        out.append(
            "Spot: "
            + (
                f"yes, grace {spot.get('grace_s', '?')} s ({spot.get('signal', '')})"
                if spot.get("available")
                else "no"
            )
        )
    if profile.detach:
        out.append(f"Detach: {profile.detach.get('primitive')}")
    if profile.ssh:
        out.append(f"SSH: {profile.ssh.get('host_pattern', '')}")
        out += [f"  - {q}" for q in profile.ssh.get("quirks", [])]
    if profile.network.get("mirror_needed") or profile.network.get("proxy_hook"):
        out.append(
            f"Network: mirror needed; proxy hook {profile.network.get('proxy_hook') or '-'}; "
            f"HF endpoint {profile.network.get('hf_endpoint') or '-'}"
        )
    for key, fact in sorted(profile.facts.items()):
        out.append(f"  {key}: {fact.value}")
    if profile.provider:
        out.append(
            f"API: {profile.provider} (key from {profile.api_key_env or profile.api_key_file}); "
            "`rgt up`/`rgt down` call it"
        )
    elif profile.guided:
        out.append(f"No usable API: up and down are guided. Up: {profile.guided['up']}")
        out.append(f"  Down: {profile.guided['down']}")
    out.append(f"Facts verified {profile.verified} (per fact where it differs).")
    out += [f"WARNING: {s}" for s in stale_facts(profile, today)]
    return "\n".join(out)
