"""B1, B2, B4, B6: splits that share items, by id, by content under another name or as near
duplicates; the same group in two splits; test items older than training items; and items
ingested twice under names that differ only in case.

Near duplicates are found from the signatures a job wrote beside its splits
(``splits/<split>.sig``, written by ``job.save_split(..., items=...)`` where the data lives; the
format is the job API's ``SIG_SCHEMA``): texts whose estimated Jaccard similarity of character
5-shingles is at least :data:`TEXT_MIN_JACCARD` (candidates from LSH banding), images whose dHash
differ in at most :data:`IMAGE_MAX_HAMMING` bits, rows whose rounded-row hashes are equal.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import numpy as np

from ..model import Context, Finding, RunData
from .common import EXAMPLES, SAVE_SPLIT, examples, is_test, per_run, run_finding

#: A text pair at or above this estimated Jaccard similarity (5-shingles) is a near duplicate.
TEXT_MIN_JACCARD = 0.5
#: An image pair whose 128-bit dHash (across and down) differ in at most this many bits is a
#: near duplicate.
IMAGE_MAX_HAMMING = 16
#: LSH banding of the 64 MinHash values: 21 bands of 3 (a pair at Jaccard 0.5 is a candidate
#: with probability 0.94, at 0.7 with 0.9999).
BANDS, BAND_ROWS = 21, 3
#: At most this many items of the other split are compared per bucket and focus item.
BUCKET_CAP = 64
#: The line that declares content, for the content hashes and the near-duplicate signatures.
DECLARE_CONTENT = 'job.save_split("test", ids, items=items)'
DECLARE_GROUPS = 'job.save_split("test", ids, groups=keys, times=times)'
_LATER = {"val": 1, "valid": 1, "validation": 1, "dev": 1}


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


# ----------------------------------------------------------------------------- signatures


def read_signatures(run: RunData, split: str) -> dict[str, Any] | None:
    """``splits/<split>.sig`` as ``{"head", "ids", "text", "image", "row", "group", "time"}``:
    per kind the ids that have one and their values (None when the file is absent)."""
    path = run.file(f"splits/{split}.sig")
    if path is None:
        return None
    lines = path.read_text().splitlines()
    head = json.loads(lines[0]) if lines else {}
    if not isinstance(head, dict) or not str(head.get("schema", "")).startswith("rgt-split-sig/"):
        raise ValueError(f"splits/{split}.sig has no rgt-split-sig header")
    text_ids: list[str] = []
    text_raw: list[bytes] = []
    out: dict[str, Any] = {"head": head}
    kinds: dict[str, tuple[list[str], list[Any]]] = {k: ([], []) for k in ("image", "row")}
    kinds.update(group=([], []), time=([], []))
    for line in lines[1:]:
        if not line.strip():
            continue
        rec = json.loads(line)
        item = str(rec.get("id"))
        if rec.get("text"):
            text_ids.append(item)
            text_raw.append(base64.b64decode(rec["text"]))
        for key, (keys, values) in kinds.items():
            if rec.get(key) is not None:
                keys.append(item)
                values.append(rec[key])
    width = int((head.get("text") or {}).get("bins") or 64)
    if text_raw and any(len(r) != 2 * width for r in text_raw):
        raise ValueError(f"splits/{split}.sig: text signatures are not {width} values")
    text = np.frombuffer(b"".join(text_raw), dtype=">u2").reshape(-1, width).astype(np.uint16)
    out["text"] = (text_ids, text) if head.get("text") else None
    img_ids, img = kinds["image"]
    if img and any(len(h) != 32 for h in img):
        raise ValueError(f"splits/{split}.sig: image signatures are not 128 bits")
    words = np.array([[int(h[:16], 16), int(h[16:], 16)] for h in img], dtype=np.uint64)
    out["image"] = (img_ids, words.reshape(-1, 2)) if head.get("image") else None
    out["row"] = kinds["row"] if head.get("row") else None
    out["group"] = kinds["group"] if head.get("group") else None
    out["time"] = (
        (kinds["time"][0], [float(t) for t in kinds["time"][1]]) if (head.get("time")) else None
    )
    return out


def _best(fi: np.ndarray, oi: np.ndarray, score: np.ndarray, high: bool) -> list[tuple[int, int]]:
    """(focus index, other index) of each focus item's best match."""
    if not fi.size:
        return []
    order = np.lexsort((-score if high else score, fi))
    fi, oi = fi[order], oi[order]
    first = np.ones(fi.size, dtype=bool)
    first[1:] = fi[1:] != fi[:-1]
    return list(zip(fi[first].tolist(), oi[first].tolist(), strict=True))


def text_near(
    f: np.ndarray, o: np.ndarray, threshold: float = TEXT_MIN_JACCARD
) -> list[tuple[int, int]]:
    """Each focus text's most similar other text at estimated Jaccard ``>= threshold``:
    candidates share a band of :data:`BAND_ROWS` MinHash values, then the whole signatures are
    compared."""
    if not len(f) or not len(o):
        return []
    width = f.shape[1]
    chance = 2.0**-16
    hits: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for band in range(min(BANDS, width // BAND_ROWS)):
        cols = slice(band * BAND_ROWS, (band + 1) * BAND_ROWS)
        shift = np.array([32, 16, 0][-BAND_ROWS:], dtype=np.uint64)
        kf = (f[:, cols].astype(np.uint64) << shift).sum(axis=1, dtype=np.uint64)
        ko = (o[:, cols].astype(np.uint64) << shift).sum(axis=1, dtype=np.uint64)
        order = np.argsort(ko, kind="stable")
        ks = ko[order]
        lo = np.searchsorted(ks, kf, "left")
        cnt = np.minimum(np.searchsorted(ks, kf, "right") - lo, BUCKET_CAP)
        sel = np.nonzero(cnt)[0]
        if not sel.size:
            continue
        reps = cnt[sel]
        fi = np.repeat(sel, reps)
        offs = np.arange(fi.size) - np.repeat(np.cumsum(reps) - reps, reps)
        oi = order[lo[fi] + offs]
        for at in range(0, fi.size, 500_000):
            a, b = fi[at : at + 500_000], oi[at : at + 500_000]
            agree = (f[a] == o[b]).mean(axis=1)
            jac = np.maximum(0.0, (agree - chance) / (1 - chance))
            keep = jac >= threshold
            if keep.any():
                hits.append((a[keep], b[keep], jac[keep]))
    if not hits:
        return []
    fi, oi, jac = (np.concatenate(parts) for parts in zip(*hits, strict=True))
    return _best(fi, oi, jac, high=True)


def image_near(
    f: np.ndarray, o: np.ndarray, limit: int = IMAGE_MAX_HAMMING
) -> list[tuple[int, int]]:
    """Each focus image's closest other image with dHash (two 64-bit words per image) within
    ``limit`` bits (every pair is compared, in blocks)."""
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    if not len(f) or not len(o):
        return []
    step = max(1, 4_000_000 // len(o))
    for at in range(0, len(f), step):
        block = f[at : at + step, None, :] ^ o[None, :, :]
        dist = np.bitwise_count(block).sum(axis=2, dtype=np.int64)
        fi, oi = np.nonzero(dist <= limit)
        if fi.size:
            found.append((fi + at, oi, dist[fi, oi].astype(np.int64)))
    if not found:
        return []
    fi, oi, dist = (np.concatenate(parts) for parts in zip(*found, strict=True))
    return _best(fi, oi, dist, high=False)


def _rank(split: str, ctx: Context) -> int:
    """Which split must come later in time: test after val after train."""
    return 2 if is_test(split, ctx) else _LATER.get(split.lower(), 0)


def _signed_pair(
    focus: str, other: str, sigs: dict[str, dict[str, Any] | None], ctx: Context
) -> dict[str, Any]:
    """Near duplicates, shared groups and time order between two splits, from their
    signatures; each aspect ``None`` when one of them did not declare it."""
    fs, os_ = sigs[focus] or {}, sigs[other] or {}
    out: dict[str, Any] = {}
    near: dict[str, Any] = {}
    for kind, fn in (("text", text_near), ("image", image_near)):
        a, b = fs.get(kind), os_.get(kind)
        if a is None or b is None:
            continue
        pairs = fn(a[1], b[1])
        near[kind] = {
            "count": len(pairs),
            "n_focus": len(a[0]),
            "examples": [[a[0][i], b[0][j]] for i, j in sorted(pairs)[:EXAMPLES]],
        }
    if fs.get("row") is not None and os_.get("row") is not None:
        other_rows: dict[str, str] = {}
        for item, h in zip(*os_["row"], strict=True):
            other_rows.setdefault(h, item)
        pairs_r = [(i, other_rows[h]) for i, h in zip(*fs["row"], strict=True) if h in other_rows]
        near["row"] = {
            "count": len(pairs_r),
            "n_focus": len(fs["row"][0]),
            "examples": [list(p) for p in sorted(pairs_r)[:EXAMPLES]],
        }
    out["near_duplicates"] = near or None
    if fs.get("group") is not None and os_.get("group") is not None:
        shared = set(fs["group"][1]) & set(os_["group"][1])
        items = [i for i, g in zip(*fs["group"], strict=True) if g in shared]
        out["groups"] = {
            "shared_groups": len(shared),
            "count": len(items),
            "n_focus": len(fs["group"][0]),
            "examples": examples(shared),
            "example_items": examples(items),
        }
    else:
        out["groups"] = None
    out["temporal"] = None
    ranks = _rank(focus, ctx), _rank(other, ctx)
    if ranks[0] != ranks[1] and fs.get("time") is not None and os_.get("time") is not None:
        later, earlier = (fs, os_) if ranks[0] > ranks[1] else (os_, fs)
        names = (focus, other) if ranks[0] > ranks[1] else (other, focus)
        if later["time"][1] and earlier["time"][1]:
            newest = max(earlier["time"][1])
            old = [i for i, t in zip(*later["time"], strict=True) if t < newest]
            out["temporal"] = {
                "later": names[0],
                "earlier": names[1],
                "count": len(old),
                "n_later": len(later["time"][0]),
                "newest_earlier": newest,
                "oldest_later": min(later["time"][1]),
                "examples": examples(old),
            }
    return out


def _signed_text(pair: dict[str, Any]) -> list[str]:
    """The sentences of what the signatures found."""
    focus, other = pair["splits"]
    out = []
    words = {
        "text": f"text Jaccard >= {TEXT_MIN_JACCARD}",
        "image": f"image dHash within {IMAGE_MAX_HAMMING} bits",
        "row": "equal rounded rows",
    }
    for kind, near in (pair.get("near_duplicates") or {}).items():
        if near["count"]:
            eg = ", ".join(f"{a} ~ {b}" for a, b in near["examples"])
            out.append(
                f"{near['count']} of {near['n_focus']} {focus} items "
                f"({_pct(near['count'], near['n_focus'])}) have a near duplicate in {other} "
                f"({words[kind]}), e.g. {eg}."
            )
    groups = pair.get("groups")
    if groups and groups["count"]:
        out.append(
            f"{groups['count']} of {groups['n_focus']} {focus} items belong to "
            f"{groups['shared_groups']} groups also in {other} "
            f"(e.g. {', '.join(groups['examples'])}): the split is not grouped."
        )
    temporal = pair.get("temporal")
    if temporal and temporal["count"]:
        out.append(
            f"{temporal['count']} of {temporal['n_later']} {temporal['later']} items are older "
            f"than the newest {temporal['earlier']} item (e.g. {', '.join(temporal['examples'])}):"
            f" the model was trained on the future of what it is tested on."
        )
    return out


def _signed_leaks(pair: dict[str, Any]) -> int:
    near = sum(n["count"] for n in (pair.get("near_duplicates") or {}).values())
    return near + sum((pair.get(k) or {}).get("count", 0) for k in ("groups", "temporal"))


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
        (
            f"{pair['overlap']} of {pair['n_focus']} {focus} items "
            f"({_pct(pair['overlap'], pair['n_focus'])}) also appear in {other}"
            + (f" ({', '.join(how)})" if how else "")
            + f", e.g. {', '.join(pair['examples'])}."
        )
        if pair["overlap"]
        else ""
    )
    text = " ".join([text, *_signed_text(pair)]).strip()
    if is_test(focus, ctx):
        text += f" Every claim on the {focus} split is affected."
    elif {focus.lower(), other.lower()} & {"val", "valid", "validation", "dev"}:
        text += (
            " The validation split is not disjoint from training, so anything selected on it "
            "is unreliable."
        )
    text += " Make the splits disjoint, then retrain and re-evaluate."
    if not pair["content_compared"]:
        text += f" Content was not compared (not_checked): declare it with {DECLARE_CONTENT}."
    return text


_ASPECT_WORDS = {
    "near_duplicates": "near duplicates",
    "groups": "groups shared between splits",
    "time": "test items older than training items",
}


def _checked(
    pairs: list[dict[str, Any]], sigs: dict[str, dict[str, Any] | None], ctx: Context
) -> dict[str, dict[str, Any]]:
    """Each aspect of the leakage check: ``pass``/``finding`` where every pair could be
    compared on it, else ``not_checked`` with what to declare."""

    def verdict(ok: bool, leaks: int, reason: str) -> dict[str, Any]:
        if not ok:
            return {"verdict": "not_checked", "reason": reason}
        return {"verdict": "finding" if leaks else "pass", "leaks": leaks}

    unsigned = sorted(
        {
            f"{kind} of {s}: {why}"
            for s, sig in sigs.items()
            if sig
            for kind, why in (sig["head"].get("not_signed") or {}).items()
        }
    )
    no_sig = [
        s
        for s, sig in sigs.items()
        if not sig or not any(sig.get(k) for k in ("text", "image", "row"))
    ]
    near_reason = (
        f"no content signatures for {', '.join(no_sig)}: declare them with {DECLARE_CONTENT}"
        if no_sig
        else "the splits signed different kinds of items"
    )
    if unsigned:
        near_reason += "; " + "; ".join(unsigned)
    timed = [p for p in pairs if _rank(p["splits"][0], ctx) != _rank(p["splits"][1], ctx)]
    return {
        "ids": verdict(True, sum(p["overlap"] for p in pairs), ""),
        "content": verdict(
            all(p["content_compared"] for p in pairs),
            sum(p.get("renamed_same_content", 0) for p in pairs),
            f"no content hashes: declare them with {DECLARE_CONTENT}",
        ),
        "near_duplicates": verdict(
            all(p.get("near_duplicates") for p in pairs) and not unsigned,
            sum(n["count"] for p in pairs for n in (p.get("near_duplicates") or {}).values()),
            near_reason,
        ),
        "groups": verdict(
            all(p.get("groups") for p in pairs),
            sum((p.get("groups") or {}).get("count", 0) for p in pairs),
            f"no group keys: declare them with {DECLARE_GROUPS}",
        ),
        "time": verdict(
            bool(timed) and all(p.get("temporal") for p in timed),
            sum((p.get("temporal") or {}).get("count", 0) for p in timed),
            f"no times for both a test and a training split: declare them with {DECLARE_GROUPS}",
        ),
    }


def _leakage_run(run: RunData, ctx: Context) -> list[Finding]:
    names = run.splits()
    rels = [f"splits/{s}.{ext}" for ext in ("ids", "sha256", "sig") for s in names]
    ids = {s: run.split_ids(s) or [] for s in names}
    hashes = {s: run.split_hashes(s) for s in names}
    sigs = {s: read_signatures(run, s) for s in names}
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
        pair.update(_signed_pair(pair["splits"][0], pair["splits"][1], sigs, ctx))
    checked = _checked(pairs, sigs, ctx)
    for pair in pairs:
        if pair["overlap"] or _signed_leaks(pair):
            computed_leak = {"pair": pair, "checked": checked}
            text = _leak_text(pair, ctx)
            out.append(run_finding("leakage", "finding", run, text, computed_leak, rels))
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
        text += f" Content was not compared (not_checked): declare it with {DECLARE_CONTENT}."
    done = [k for k in ("near_duplicates", "groups", "time") if checked[k]["verdict"] == "pass"]
    if done:
        text += " No " + ", ".join(_ASPECT_WORDS[k] for k in done) + " either."
    missing = [k for k in ("near_duplicates", "groups", "time") if k not in done]
    if missing:
        text += (
            " Not checked: "
            + "; ".join(f"{_ASPECT_WORDS[k]} ({checked[k]['reason']})" for k in missing)
            + "."
        )
    computed = {
        "splits": {s: {"n": len(ids[s]), "hashes": hashes[s] is not None} for s in names},
        "pairs": pairs,
        "content_compared": compared,
        "checked": checked,
    }
    out = [run_finding("leakage", "pass", run, text, computed, rels)]
    if not compared:
        # Ids alone miss an item saved under another name: the content half is said apart.
        unhashed = [s for s in names if hashes[s] is None]
        out.append(
            run_finding(
                "leakage",
                "not_checked",
                run,
                f"Content of split(s) {', '.join(unhashed)} was not compared, so an item saved "
                f"under another name would not be found: declare it with {DECLARE_CONTENT}.",
                {"aspect": "content", "splits_without_hashes": unhashed},
                rels,
            )
        )
    return out


def leakage(ctx: Context) -> list[Finding]:
    """B1, B2, B4, B6: items shared between declared splits, by id and by content hash
    regardless of name (same name with different content is not a leak), near duplicates from
    the splits' signatures, groups in two splits, test items older than training items, and ids
    of one split that collide once case is folded. Each finding's ``computed["checked"]`` says
    per aspect (ids, content, near_duplicates, groups, time) ``pass``, ``finding`` or
    ``not_checked`` with what to declare."""
    return per_run("leakage", ctx, _leakage_run)
