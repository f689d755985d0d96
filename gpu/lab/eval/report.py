"""Aggregation of the evaluation's records into report.json, report.md and plots (paper
section 3.4: paired intervals resampled within task or domain, the binomial floor,
non-inferiority against a margin fixed in advance).

Everything here reads only the journal's records, so a report can be rebuilt at any time
from ``records.jsonl``; nothing is measured.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from rfmath.stats import binomial_floor, noninferior
from rfmodel.atomic import write_json, write_text

from .loss_masks import key_token_mask
from .report_cost import estimate_hours
from .report_intervals import RESAMPLES, interval, jsonable, per_token

MARGIN_EXACT, MARGIN_POP = 2.0, 3.0   # points, fixed in advance (paper 3.4)


def _verdict(iv: dict | None, sign: int = 1) -> str:
    """confirmed when the interval excludes zero on the predicted side, refuted when it
    excludes zero on the other, else inconclusive."""
    if iv is None or iv["low"] is None:
        return "not measured"
    lo, hi = (iv["low"], iv["high"]) if sign > 0 else (-iv["high"], -iv["low"])
    return "confirmed" if lo > 0 else "refuted" if hi < 0 else "inconclusive"


def _by_arm(recs: list[dict]) -> dict[str, dict[str, dict]]:
    """Records as {arm: {unit: record}} (a later record of the same pair wins)."""
    by: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in recs:
        by[r["arm"]][r["unit"]] = r
    return by


# ----------------------------------------------------------------------------- needles
def _length_masks(strata: list[str]) -> dict[str, np.ndarray]:
    """Masks of the samples of each prompt length (strata are "task/length")."""
    lengths = np.array([s.rsplit("/", 1)[-1] for s in strata])
    return {n: lengths == n for n in sorted(set(lengths.tolist()), key=int)}


def _stratum_masks(strata: list[str]) -> dict[str, np.ndarray]:
    """Masks of the samples of each stratum (task/length)."""
    st = np.asarray(strata)
    return {s: st == s for s in sorted(set(strata))}


def _needles(recs: list[dict], arms: list[dict]) -> dict:
    by = _by_arm(recs)
    if "exact" not in by:
        return {}
    units = sorted(by["exact"])
    strata = {u: by["exact"][u]["stratum"] for u in units}

    def vec(arm, field="score", scale=100.0):
        return np.array([by[arm][u][field] * scale if u in by[arm] else np.nan for u in units])

    st = [strata[u] for u in units]
    out = {"units": len(units), "strata": sorted(set(st)), "arms": {}, "by_stratum": {}}
    ex = vec("exact")
    for a in arms:
        name = a["name"]
        if name not in by:
            continue
        v = vec(name)
        rows = [by[name][u] for u in units if u in by[name]]
        prefix = [r["filled"] + r["exact_prefix"] for r in rows]
        share = [r["exact_prefix"] / p for r, p in zip(rows, prefix) if p]
        cover = [r["needle_rows_exact"] for r in rows if r.get("needle_rows_exact") is not None]
        macs = [r["macs_share"] for r in rows if r.get("macs_share") is not None]
        out["arms"][name] = {
            "label": a["label"], "n": int(np.isfinite(v).sum()), "score": jsonable(np.nanmean(v)),
            "correct": jsonable(np.nanmean(vec(name, "correct"))),
            "vs_exact": interval(v, ex, st) if name != "exact" else None,
            "vs_exact_by_length": {n: interval(v[m], ex[m], np.array(st)[m])
                                   for n, m in _length_masks(st).items()}
            if name != "exact" else None,
            "vs_exact_by_stratum": {s: interval(v[m], ex[m], np.array(st)[m])
                                    for s, m in _stratum_masks(st).items()}
            if name != "exact" and len(set(st)) > 1 else None,
            "exact_row_share": jsonable(np.mean(share)) if share else None,
            "needle_rows_exact": jsonable(np.mean(cover)) if cover else None,
            "macs_share": jsonable(np.mean(macs)) if macs else None,
            "seconds": jsonable(np.mean([r["seconds"] for r in rows])),
            "check": check_stats(rows),
        }
        out["by_stratum"][name] = {s: jsonable(np.nanmean(v[np.array(st) == s]))
                                   for s in sorted(set(st))}
    out["_vec"], out["_strata"] = vec, st
    return out


def check_stats(rows: list[dict]) -> dict | None:
    """A decode-check arm's means per record (paper I.4): repairs, rows made exact, exact
    prefix rows after them, and the decoding-time overhead over the same prefill decoded
    without the check (needle answers: seconds per step, both timed)."""
    ch = [r["check"] for r in rows if r.get("check")]
    if not ch:
        return None
    out = {k: jsonable(np.mean([c[k] for c in ch]))
           for k in ("repairs", "rows_repaired", "exact_prefix_after", "steps")}
    plain = [c for c in ch if c.get("plain_seconds_per_step")]
    out["overhead"] = jsonable(np.mean([c["seconds_per_step"] for c in plain]) /
                               np.mean([c["plain_seconds_per_step"] for c in plain]) - 1
                               ) if plain else None
    return out


# ----------------------------------------------------------------------------- documents
def _docs(recs: list[dict], arms: list[dict]) -> dict:
    by = _by_arm(recs)
    if "exact" not in by:
        return {}
    units = sorted(by["exact"])
    domain = [by["exact"][u]["stratum"] for u in units]
    ex = {u: by["exact"][u] for u in units}
    masks = {}
    for u in units:
        e = ex[u]
        nll, cut = np.array(e["nll"]), np.array(e["nll_cut"])
        masks[u] = {"all": np.ones(len(nll), bool), "novel": np.array(e["novel"], bool),
                    "key": key_token_mask(nll, cut)}
    out = {"units": len(units), "domains": sorted(set(domain)), "arms": {},
           "key_tokens": int(sum(m["key"].sum() for m in masks.values())),
           "novel_tokens": int(sum(m["novel"].sum() for m in masks.values())),
           "scored_tokens": int(sum(len(m["all"]) for m in masks.values())),
           "docs_with_key_tokens": int(sum(m["key"].any() for m in masks.values()))}
    deltas: dict[str, dict[str, np.ndarray]] = {}
    keyd: dict[str, dict[int, np.ndarray]] = {}  # per arm, per document: each key token's dNLL
    for a in arms:
        name = a["name"]
        if name not in by:
            continue
        d = {k: np.full(len(units), np.nan) for k in ("all", "novel", "key", "agree", "kl")}
        keyd[name] = {}
        for i, u in enumerate(units):
            r = by[name].get(u)
            if r is None:
                continue
            diff = np.array(r["nll"]) - np.array(ex[u]["nll"])
            keyd[name][i] = diff[masks[u]["key"]]
            for k in ("all", "novel", "key"):
                m = masks[u][k]
                d[k][i] = diff[m].mean() if m.any() else np.nan
            if name == "exact":
                d["agree"][i], d["kl"][i] = 1.0, 0.0
            elif r.get("kl"):
                d["agree"][i], d["kl"][i] = np.mean(r["agree"]), np.mean(r["kl"])
        deltas[name] = d
        zero = np.zeros(len(units))
        out["arms"][name] = {
            "label": a["label"], "n": int(np.isfinite(d["all"]).sum()),
            **{f"dnll_{k}": interval(d[k], zero, domain) for k in ("all", "novel", "key")},
            "dnll_key_per_token": per_token(keyd[name], strata=domain),
            "agreement": (jsonable(np.nanmean(d["agree"])) if np.isfinite(d["agree"]).any()
                          else None),
            "kl_mean": jsonable(np.nanmean(d["kl"])) if np.isfinite(d["kl"]).any() else None,
            "kl_median": jsonable(np.nanmedian(d["kl"])) if np.isfinite(d["kl"]).any() else None,
            "seconds": jsonable(np.mean([r["seconds"] for r in by[name].values()])),
            "check": check_stats(list(by[name].values())),
        }
    out["_d"], out["_strata"], out["_keyd"] = deltas, domain, keyd
    return out


# ----------------------------------------------------------------------------- contrasts
def _names(meta):
    cfg = meta["config"]
    S = cfg["splits"][0]
    pop = next((a["name"] for a in meta["arms"] if a["name"].startswith("pop@")), None)
    return S, cfg["splits"][1:], pop


def contrasts(needles: dict, docs: dict, meta: dict) -> list[dict]:
    S, others, pop = _names(meta)
    r, i = f"ridge@{S}", f"identity@{S}"
    pairs = [(r, i), (r, pop), (r, f"nofill@{S}")]
    pairs += [(f"ridge@{s}", f"identity@{s}") for s in others]
    pairs += [(r, f"ridge@{s}") for s in others]
    for a in meta["arms"]:  # each selection against its controls and its plain fill
        if a["of"]:
            pairs.append((a["of"], a["name"]))
        elif a["blind"] and a["name"].endswith("/blind"):
            pairs.append((a["name"][: -len("/blind")], a["name"]))
        elif a["rows"] != "none" and not a["control"]:
            plain = next((b["name"] for b in meta["arms"] if b["fill"] == a["fill"]
                          and b["split"] == a["split"] and b["tail"] == a["tail"]
                          and b["rows"] == "none" and not b["splice"]), None)
            pairs.append((a["name"], plain))
    pairs += [tuple(p) for p in meta.get("pairs", ())]  # a custom grid's own (the frontier)
    out = []
    for a, b in pairs:
        if b is None:
            continue
        row = {"a": a, "b": b}
        if needles and a in needles["arms"] and b in needles["arms"]:
            va, vb, st = needles["_vec"](a), needles["_vec"](b), np.asarray(needles["_strata"])
            row["retrieval"] = interval(va, vb, st)
            if len(needles.get("strata", ())) > 1:  # each task family (and length) on its own
                row["retrieval_by_stratum"] = {s: interval(va[st == s], vb[st == s], st[st == s])
                                               for s in needles["strata"]}
        if docs and a in docs["_d"] and b in docs["_d"]:
            for k in ("novel", "key"):
                row[f"dnll_{k}"] = interval(docs["_d"][a][k], docs["_d"][b][k], docs["_strata"])
            row["kl"] = interval(docs["_d"][a]["kl"], docs["_d"][b]["kl"], docs["_strata"])
            row["dnll_key_per_token"] = per_token(docs["_keyd"][a], docs["_keyd"][b],
                                                 docs["_strata"])
        if len(row) > 2:
            out.append(row)
    return out


def noninferiority(needles: dict, meta: dict) -> list[dict]:
    """One-sided 95% bound on retrieval(a) - retrieval(b), the lower of the bootstrap bound
    and the binomial floor, against a margin fixed in advance (paper 3.4)."""
    S, _, pop = _names(meta)
    tests = [(f"ridge+attention@{S}", "exact", MARGIN_EXACT), (f"ridge+probe@{S}", "exact", MARGIN_EXACT),
             (f"ridge@{S}", "exact", MARGIN_EXACT), (f"ridge@{S}", pop, MARGIN_POP)]
    tests += [tuple(t) for t in meta.get("tests", ())]  # a custom grid's own (the frontier)
    out = []
    if not needles:
        return out
    strata = np.asarray(needles.get("_strata", ()))
    for a, b, margin in tests:
        if a not in needles["arms"] or b not in needles["arms"]:
            continue
        x, y = needles["_vec"](a), needles["_vec"](b)
        test = ni_test(x, y, strata, margin)
        if test is None:
            continue
        if len(needles.get("strata", ())) > 1:  # each task family (and length) on its own
            test["by_stratum"] = {s: ni_test(x[strata == s], y[strata == s],
                                                  strata[strata == s], margin)
                                  for s in needles["strata"]}
        out.append({"a": a, "b": b, **test})  # test holds its margin
    return out


def ni_test(x, y, strata, margin: float) -> dict | None:
    """The test of :func:`noninferiority` on the pairs where both are finite (None: none)."""
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() == 0:
        return None
    ni = noninferior(x[ok], y[ok], margin, strata=strata[ok], resamples=RESAMPLES, accuracy=False)
    floor = binomial_floor(int(ok.sum()))
    bound = min(ni.bootstrap_bound, floor)
    return {"margin": margin, "estimate": jsonable(ni.estimate),
            "bootstrap_bound": jsonable(ni.bootstrap_bound), "floor": jsonable(floor),
            "bound": jsonable(bound),
            "passed": bool(bound > -margin), "n": int(ok.sum())}


def ni_word(t: dict) -> str:
    """The verdict of a :func:`noninferiority` test in a word (paper 3.4): pass; n too small
    (the bootstrap bound clears -margin and only the binomial floor of n pairs does not); fail."""
    if t["passed"]:
        return "pass"
    return "n too small" if t["bootstrap_bound"] > -t["margin"] else "fail"


def splices(needles: dict, docs: dict, meta: dict) -> dict:
    """Share of RidgeFill's added novel-token loss each splice removes, and share of its
    retrieval gap to exact it closes (paper 6.6)."""
    S, _, _ = _names(meta)
    r = f"ridge@{S}"
    out = {}
    for w in ("keys", "values", "both"):
        name = f"{r}/splice-{w}"
        row = {}
        if docs and name in docs["_d"] and r in docs["_d"]:
            a, b = docs["_d"][r]["novel"], docs["_d"][name]["novel"]
            ok = np.isfinite(a) & np.isfinite(b)
            if ok.any() and abs(a[ok].mean()) > 1e-12:
                row["loss_removed"] = jsonable(1 - b[ok].mean() / a[ok].mean())
            row["removed_nats"] = interval(a, b, docs["_strata"])
        if needles and name in needles["arms"] and r in needles["arms"]:
            vec = needles["_vec"]
            e, f, s = vec("exact"), vec(r), vec(name)
            gap = np.nanmean(e) - np.nanmean(f)
            row["retrieval_gap"] = jsonable(gap)
            row["gap_closed"] = (jsonable((np.nanmean(s) - np.nanmean(f)) / gap)
                                 if abs(gap) > 1e-9 else None)
        if row:
            out[w] = row
    return out


def findings(con: list[dict], ni: list[dict], meta: dict) -> list[dict]:
    """The paper's findings to test, each confirmed / refuted / inconclusive with the
    interval it rests on."""
    S, others, _ = _names(meta)
    find = {(c["a"], c["b"]): c for c in con}
    out = []
    c = find.get((f"ridge@{S}", f"identity@{S}"), {})
    out.append({"finding": "the fitted map beats the identity fill on filled-region retrieval",
                "contrast": f"ridge@{S} - identity@{S}, retrieval points",
                "interval": c.get("retrieval"), "status": _verdict(c.get("retrieval"))})
    if others:
        c = find.get((f"ridge@{S}", f"ridge@{others[0]}"), {})
        out.append({"finding": "a shallow split hurts (RidgeFill at 3/8 has more novel-token "
                               "loss than at 1/2)",
                    "contrast": f"ridge@{S} - ridge@{others[0]}, novel-token dNLL",
                    "interval": c.get("dnll_novel"), "status": _verdict(c.get("dnll_novel"))})
    spl = meta.get("_splices", {})
    keys, vals = spl.get("keys", {}), spl.get("values", {})
    iv = None
    if "_docs" in meta and meta["_docs"]:
        d = meta["_docs"]["_d"]
        k, v = f"ridge@{S}/splice-keys", f"ridge@{S}/splice-values"
        if k in d and v in d:
            iv = interval(d[v]["novel"], d[k]["novel"], meta["_docs"]["_strata"])
    qk = "with" if meta.get("qk_norm") else "without"
    out.append({"finding": f"the error sits in the keys (model {qk} QK-norm): exact keys remove "
                           "more novel-token loss than exact values",
                "contrast": "dNLL(exact values) - dNLL(exact keys), novel tokens",
                "interval": iv, "status": _verdict(iv),
                "keys_removed": keys.get("loss_removed"), "values_removed": vals.get("loss_removed")})
    for rows in ("attention", "probe"):
        base = f"ridge+{rows}@{S}"
        c = find.get((base, f"{base}/random"), {})
        beat = _verdict(c.get("retrieval"))
        nt = next((t for t in ni if t["a"] == base and t["b"] == "exact"), None)
        vs = meta["_needles"]["arms"].get(base, {}).get("vs_exact") if meta.get("_needles") else None
        restore = ("not measured" if nt is None else "confirmed" if nt["passed"] else
                   "refuted" if vs and vs["high"] is not None and vs["high"] < -MARGIN_EXACT
                   else "inconclusive")
        status = ("confirmed" if beat == restore == "confirmed" else
                  "refuted" if "refuted" in (beat, restore) else
                  "not measured" if beat == restore == "not measured" else "inconclusive")
        out.append({"finding": f"{rows}-selected rows restore retrieval (non-inferior to exact at "
                               f"{MARGIN_EXACT:g} points) and beat count-matched random rows",
                    "contrast": f"{base} - {base}/random, retrieval points",
                    "interval": c.get("retrieval"), "beats_random": beat, "restores": restore,
                    "noninferiority": nt, "status": status})
    return out


# ----------------------------------------------------------------------------- report
def aggregate(records: list[dict], meta: dict) -> dict:
    arms = meta["arms"]
    nrec = [r for r in records if r["instrument"] == "needle"]
    drec = [r for r in records if r["instrument"] == "loss"]
    sess = [r for r in records if r["instrument"] == "session"]
    needles, docs = _needles(nrec, arms), _docs(drec, arms)
    con = contrasts(needles, docs, meta)
    ni = noninferiority(needles, meta)
    spl = splices(needles, docs, meta)
    fnd = findings(con, ni, {**meta, "_splices": spl, "_docs": docs, "_needles": needles})
    cfg, minimum = meta["config"], meta["config"]["minimum"]
    sets = meta.get("sample_sets", {})
    short = [k for k, v in sets.items() if k != "docs" and v["kept"] < minimum["samples"]]
    reasons = []
    if short:
        reasons.append(f"{len(short)} task/length cells under {minimum['samples']} samples")
    if "loss" in cfg["instruments"]:
        dk = sets.get("docs", {"kept": 0, "domains": []})
        if dk["kept"] < minimum["docs"] or len(dk["domains"]) < minimum["domains"]:
            reasons.append(f"{dk['kept']} documents in {len(dk['domains'])} domains (the study "
                           f"needs {minimum['docs']} in {minimum['domains']})")
    preset = meta.get("preset")
    if preset and {str(k) for k in preset["needles"]} != set(cfg["needles"]):
        reasons.append(f"needle lengths {sorted(cfg['needles'])} of {sorted(preset['needles'])}")
    if preset and "loss" in cfg["instruments"] and preset["loss_length"] != cfg["loss_length"]:
        reasons.append(f"documents of {cfg['loss_length']} tokens (the study: "
                       f"{preset['loss_length']})")
    if preset and set(preset["instruments"]) - set(cfg["instruments"]):
        reasons.append(f"instruments {cfg['instruments']} of {preset['instruments']}")
    for kind, got in (("needle_records", len(nrec)), ("loss_records", len(drec))):
        want = meta.get("expected", {}).get(kind, 0)
        if got < want:
            reasons.append(f"{got} of {want} {kind.replace('_', ' ')} measured (the run stopped "
                           "early; rerunning resumes it)")
    clean = lambda d: {k: v for k, v in d.items() if not k.startswith("_")}  # noqa: E731
    return {
        "model": meta["model"], "partial": bool(reasons), "partial_reasons": reasons,
        "meta": {k: v for k, v in meta.items() if not k.startswith("_")},
        "counts": {"records": len(nrec) + len(drec), "needle_records": len(nrec),
                   "loss_records": len(drec), "needle_samples": needles.get("units", 0),
                   "documents": docs.get("units", 0), "sessions": len(sess)},
        "wall_seconds": float(sum(r["wall_seconds"] for r in sess)),
        "record_seconds": float(sum(r["seconds"] for r in nrec + drec)),
        "commands": _commands(sess),
        "needles": clean(needles) if needles else {}, "documents": clean(docs) if docs else {},
        "contrasts": con, "noninferiority": ni, "splices": spl, "findings": fnd,
        "estimate_full_grid": estimate_hours(nrec, drec, meta),
    }


def _commands(sessions: list[dict]) -> list[dict]:
    """Each command that wrote to the journal, with its sessions and the runs they measured
    (records that later code superseded included), in order of first use."""
    out: dict[str, dict] = {}
    for r in sorted(sessions, key=lambda r: r.get("started", 0.0)):
        c = out.setdefault(r["command"], {"command": r["command"], "sessions": 0, "measured": 0})
        c["sessions"] += 1
        c["measured"] += int(r.get("measured", 0))
    return list(out.values())


def write(root: Path, records: list[dict], meta: dict) -> dict:
    from .report_md import markdown, plots

    rep = aggregate(records, meta)
    rep["plots"] = plots(rep, root)
    write_json(root / "report.json", rep)
    write_text(root / "report.md", markdown(rep))
    return rep
