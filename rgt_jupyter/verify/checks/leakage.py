"""B1, B2: splits that share items, by id or by content under another name, and items ingested
twice under names that differ only in case."""

from __future__ import annotations

import os
from typing import Any

from ..model import Context, Finding, RunData
from .common import EXAMPLES, SAVE_SPLIT, examples, is_test, per_run, run_finding


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f} %" if whole else "n/a"


def _frac(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _fold(item: str) -> str:
    """An id as a case-insensitive file system sees it."""
    return os.path.normcase(item).casefold()


def _duplicates(split: str, ids: list[str]) -> dict[str, Any] | None:
    """Ids of one split that name the same item once case is folded (``Train/a.png`` and
    ``train/a.png``), or repeat exactly."""
    groups: dict[str, list[str]] = {}
    for item in ids:
        groups.setdefault(_fold(item), []).append(item)
    clashes = {key: names for key, names in groups.items() if len(names) > 1}
    if not clashes:
        return None
    extra = sum(len(names) - 1 for names in clashes.values())
    return {
        "split": split,
        "n_ids": len(ids),
        "n_unique_casefolded": len(groups),
        "n_duplicates": extra,
        "fraction": extra / len(ids),
        "examples": [sorted(names) for _, names in sorted(clashes.items())[:EXAMPLES]],
    }


def _pair(
    a: str,
    b: str,
    ids: dict[str, list[str]],
    hashes: dict[str, dict[str, str] | None],
    ctx: Context,
) -> dict[str, Any]:
    """What splits ``a`` and ``b`` share, measured on the focus split (the test split when one
    of them is, else the smaller)."""
    if is_test(b, ctx) and not is_test(a, ctx):
        a, b = b, a
    elif not is_test(a, ctx) and len(set(ids[b])) < len(set(ids[a])):
        a, b = b, a
    focus, other = a, b
    f_ids, o_ids = set(ids[focus]), set(ids[other])
    f_hash, o_hash = hashes[focus], hashes[other]
    shared = f_ids & o_ids
    out: dict[str, Any] = {"splits": [focus, other], "fraction_of": focus}
    if f_hash is not None and o_hash is not None:
        known = {i for i in shared if i in f_hash and i in o_hash}
        different = {i for i in known if f_hash[i] != o_hash[i]}
        by_id = shared - different
        o_digests = {o_hash[i] for i in o_ids if i in o_hash}
        by_content = {i for i in f_ids if i in f_hash and f_hash[i] in o_digests} - by_id
        out["content_compared"] = True
        out["same_name_same_content"] = len(shared & known) - len(different)
        out["same_name_unknown_content"] = len(shared - known)
        out["renamed_same_content"] = len(by_content)
        if different:
            out["same_names_different_content"] = {
                "count": len(different),
                "note": "same names, different content: not a leak",
                "examples": examples(different),
            }
    else:
        # Without hashes, ids equal once case is folded name one file on a case-insensitive
        # file system, so they count as shared too.
        o_folded = {_fold(i) for i in o_ids}
        case_only = {i for i in f_ids - shared if _fold(i) in o_folded}
        by_id, by_content = shared | case_only, set()
        out["content_compared"] = False
        out["case_only_matches"] = len(case_only)
    leaked = by_id | by_content
    out["shared_names"] = len(shared)
    out["overlap"] = len(leaked)
    out["n_focus"] = len(f_ids)
    out["fraction"] = _frac(len(leaked), len(f_ids))
    out["examples"] = examples(leaked)
    return out


def _leak_text(pair: dict[str, Any], ctx: Context) -> str:
    focus, other = pair["splits"]
    how = []
    if pair["content_compared"]:
        same = pair["overlap"] - pair["renamed_same_content"]
        if same:
            how.append(f"{same} by name")
        if pair["renamed_same_content"]:
            how.append(f"{pair['renamed_same_content']} by identical content under another name")
    elif pair["case_only_matches"]:
        how.append(f"{pair['case_only_matches']} by names that differ only in case")
    text = (
        f"{pair['overlap']} of {pair['n_focus']} {focus} items "
        f"({_pct(pair['overlap'], pair['n_focus'])}) also appear in {other}"
        + (f" ({', '.join(how)})" if how else "")
        + f", e.g. {', '.join(pair['examples'])}."
    )
    if is_test(focus, ctx):
        text += f" Every claim on the {focus} split is affected."
    elif {focus.lower(), other.lower()} & {"val", "valid", "validation", "dev"}:
        text += (
            " The validation split is not disjoint from training, so anything selected on it "
            "is unreliable."
        )
    text += " Make the splits disjoint, then retrain and re-evaluate."
    if not pair["content_compared"]:
        text += f" Content was not compared (give hashes to {SAVE_SPLIT})."
    return text


def _leakage_run(run: RunData, ctx: Context) -> list[Finding]:
    names = run.splits()
    rels = [f"splits/{s}.ids" for s in names] + [f"splits/{s}.sha256" for s in names]
    ids = {s: run.split_ids(s) or [] for s in names}
    hashes = {s: run.split_hashes(s) for s in names}
    out: list[Finding] = []
    for split in names:
        dup = _duplicates(split, ids[split])
        if dup:
            out.append(
                run_finding(
                    "leakage",
                    "finding",
                    run,
                    f"{dup['n_duplicates']} of {dup['n_ids']} ids of split {split} name items "
                    f"already in it once case is folded (e.g. {' / '.join(dup['examples'][0])}): "
                    "the same item was ingested more than once, as a case-insensitive file "
                    "system does with Train/ and train/. De-duplicate the split and re-evaluate.",
                    {"duplicate_ingestion": dup},
                    [f"splits/{split}.ids"],
                )
            )
    if len(names) < 2:
        out.append(
            run_finding(
                "leakage",
                "not_checked",
                run,
                (
                    f"Only split {names[0]} was declared, so it could not be compared with another."
                    if names
                    else "No splits were declared, so leakage between them was not checked."
                )
                + f" Declare every split (train, val, test) with {SAVE_SPLIT}; "
                "with hashes, leaks under another name are found too.",
                {"splits": names},
                rels,
            )
        )
        return out
    pairs = [_pair(a, b, ids, hashes, ctx) for i, a in enumerate(names) for b in names[i + 1 :]]
    for pair in pairs:
        if pair["overlap"]:
            out.append(
                run_finding("leakage", "finding", run, _leak_text(pair, ctx), {"pair": pair}, rels)
            )
    if out:
        return out
    compared = all(p["content_compared"] for p in pairs)
    notes = [
        f"{p['splits'][0]}/{p['splits'][1]}: {p['same_names_different_content']['count']} "
        "same names, different content (not a leak)"
        for p in pairs
        if "same_names_different_content" in p
    ]
    text = f"Splits {', '.join(names)} share no items (compared by id" + (
        " and by content hash)." if compared else ", case-folded)."
    )
    if notes:
        text += " " + "; ".join(notes) + "."
    if not compared:
        text += f" Content was not compared: declare hashes with {SAVE_SPLIT}."
    computed = {
        "splits": {s: {"n": len(ids[s]), "hashes": hashes[s] is not None} for s in names},
        "pairs": pairs,
        "content_compared": compared,
    }
    return [run_finding("leakage", "pass", run, text, computed, rels)]


def leakage(ctx: Context) -> list[Finding]:
    """B1, B2: items shared between declared splits, by id and by content hash regardless of
    name (same name with different content is not a leak), and ids of one split that collide
    once case is folded."""
    return per_run("leakage", ctx, _leakage_run)
