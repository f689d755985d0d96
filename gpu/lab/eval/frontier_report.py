"""The frontier's summary: per arm, quality against cost, paired with exact and
with POP native; the dominating points; paper 6.4's test; markdown, JSON and one PNG.

Reads only the harness's report (gpu.lab.eval.report: intervals resampled within task or
domain, non-inferiority bounds with the binomial floor) and the timing; measures nothing.
"""
from __future__ import annotations

import json
from pathlib import Path

from rfmodel.atomic import atomic_path, write_json, write_text

from .instruments import Arm
from .report import MARGIN_POP, ni_word
from .tiered import FINALISTS_FILE, MOONSHOT, finalists, freeze, resume_keep

# The rule for "at least as good as POP at no more cost", stated before any number:
# MAC share <= POP native's, retrieval non-inferior to POP native at the 3-point margin
# (one-sided 95% bound with the binomial floor), and key-token dNLL no higher than POP
# native's in point estimate (its paired interval is shown beside it).


def dominating(points: list[tuple[str, float, float]]) -> list[str]:
    """Names of the points (name, cost, quality) that no other point beats: none has lower
    or equal cost and higher or equal quality with one of the two strict; by cost."""
    out = []
    for n, c, q in points:
        if not any((c2 <= c and q2 >= q) and (c2 < c or q2 > q) for _, c2, q2 in points):
            out.append((c, -q, n))
    return [n for _, _, n in sorted(out)]


def _est(iv: dict | None) -> float | None:
    return None if not iv else iv.get("estimate")


def _rows(rep: dict, arms: list[Arm], timing: dict, pop: str, defaults: dict[str, str],
          headline: str) -> list[dict]:
    """One row per arm; ``defaults``: each decode-check arm's default-rows arm; a splice arm
    is paired with the ``headline`` arm it splices."""
    needles = rep.get("needles", {}).get("arms", {})
    docs = rep.get("documents", {}).get("arms", {})
    con = {(c["a"], c["b"]): c for c in rep.get("contrasts", [])}
    ni = {t["a"]: t for t in rep.get("noninferiority", []) if t["b"] == pop}
    times = timing.get("arms", {})
    t_exact = times.get("exact", {}).get("prefill")
    rows = []
    for a in arms:
        x, d, c, t = needles.get(a.name, {}), docs.get(a.name, {}), con.get((a.name, pop), {}), \
            times.get(a.name, {})
        macs = x.get("macs_share") if x.get("macs_share") is not None else t.get("macs_share")
        rows.append({
            "arm": a.name, "label": a.label, "fill": a.fill, "split": a.split, "tail": a.tail,
            "rows": a.rows, "rescale": a.rescale, "check": a.check, "values_fill": a.values_fill,
            "retrieval": x.get("score"), "n": x.get("n"), "vs_exact": x.get("vs_exact"),
            "vs_pop": c.get("retrieval"), "noninferior_pop": ni.get(a.name),
            "dnll_novel": d.get("dnll_novel"), "dnll_key": d.get("dnll_key"),
            "novel_vs_pop": c.get("dnll_novel"), "key_vs_pop": c.get("dnll_key"),
            "agreement": d.get("agreement"), "macs_share": macs,
            "exact_row_share": x.get("exact_row_share"),
            "check_needles": x.get("check"), "check_docs": d.get("check"),
            "vs_default_rows": con.get((a.name, defaults.get(a.name))),
            "splice": a.splice, "vs_unspliced": con.get((a.name, headline)) if a.splice else None,
            "prefill_seconds": t.get("prefill"),
            "speedup": (t_exact / t["prefill"]) if t_exact and t.get("prefill") else None,
            "mac_ceiling": (1.0 / macs) if macs else None})
    return rows


def tiered(rep: dict, fr, arms: list[Arm], by: dict[str, dict]) -> dict | None:
    """Issue 57's tiered arms (``--tiered``), each with its configuration, its exact prefix
    rows, its MAC share and ceiling (the selection included: gpu.lab.eval.instruments.macs_share),
    its score, and its paired contrasts: against exact, against its dropped twin (fill none,
    the same selection) and against each reference (the other arms at POP's split: the
    advised fill), with the 3-point non-inferiority test there. None without tiered arms."""
    mine = [a for a in arms if fr.is_tiered(a)]
    if not mine:
        return None
    con = {(c["a"], c["b"]): c for c in rep.get("contrasts", [])}
    ni = {(t["a"], t["b"]): t for t in rep.get("noninferiority", [])}
    refs = fr.references(arms)
    rows = []
    for a in mine:
        r, o = by[a.name], dict(a.options)
        twin = fr.dropped_twin(a)
        rows.append({
            "arm": a.name, "split": a.split, "tail": a.tail, "share": o["share"],
            "complete": bool(o.get("complete")), "fill": a.fill, "values_fill": a.values_fill,
            "exact_row_share": r["exact_row_share"], "macs_share": r["macs_share"],
            "mac_ceiling": r["mac_ceiling"], "retrieval": r["retrieval"], "n": r["n"],
            "vs_exact": r["vs_exact"], "dropped": twin if a.fill != "none" else None,
            "vs_dropped": (con.get((a.name, twin)) or {}).get("retrieval")
            if a.fill != "none" else None,
            "vs_reference": {b: {"retrieval": (con.get((a.name, b)) or {}).get("retrieval"),
                                 "noninferior": ni.get((a.name, b))} for b in refs},
            "noninferior_exact": ni.get((a.name, "exact"))})
    out = {"references": {b: {k: by[b][k] for k in ("macs_share", "mac_ceiling", "retrieval",
                                                    "vs_exact")} for b in refs if b in by},
           "pop": {k: by[fr.pop_native][k] for k in ("macs_share", "mac_ceiling", "retrieval",
                                                     "vs_exact")},
           "pop_split": fr.pop, "rows": rows}
    if len(out["references"]) == 1 and not rep["partial"]:  # named once the screen is whole
        out["finalists"] = finalists(out, moonshot=rep["model"] == MOONSHOT)
    return out


def verdict_64(row: dict | None, margin: float = MARGIN_POP) -> str:
    """confirmed: the one-sided bound clears -margin; refuted: the whole two-sided interval
    lies below -margin; inconclusive otherwise (paper 3.4, as the study's findings)."""
    if not row or not row.get("noninferior_pop") or not row.get("vs_pop"):
        return "not measured"
    if row["noninferior_pop"]["passed"]:
        return "confirmed"
    hi = row["vs_pop"].get("high")
    return "refuted" if hi is not None and hi < -margin else "inconclusive"


def summarize(rep: dict, fr, arms: list[Arm], timing: dict, meta: dict) -> dict:
    """The frontier's summary dict (``fr``: gpu.lab.eval.frontier.Frontier)."""
    rows = _rows(rep, arms, timing, fr.pop_native, dict(fr.check_pairs(arms)), fr.headline)
    by = {r["arm"]: r for r in rows}
    pop = by[fr.pop_native]
    fronts = {}
    for q, sign in (("retrieval", 1.0), ("dnll_key", -1.0)):
        pts = [(r["arm"], r["macs_share"], sign * v) for r in rows
               if r["macs_share"] is not None and (v := (r[q] if q == "retrieval" else _est(r[q])))
               is not None]
        fronts[q] = dominating(pts)
    pop_macs, pop_key = pop["macs_share"], _est(pop["dnll_key"])
    equal_cost = [r["arm"] for r in rows if r["arm"] not in ("exact", fr.pop_native)
                  and r["macs_share"] is not None and pop_macs is not None
                  and r["macs_share"] <= pop_macs
                  and (r["noninferior_pop"] or {}).get("passed")
                  and _est(r["dnll_key"]) is not None and pop_key is not None
                  and _est(r["dnll_key"]) <= pop_key]
    head = by.get(fr.headline)
    cfg = rep["meta"]["config"]
    return {"model": rep["model"], "n_layers": fr.n_layers, "partial": rep["partial"],
            "partial_reasons": rep["partial_reasons"], "splits": list(fr.splits), "pop": fr.pop,
            "primary": fr.primary, "deep": fr.deep, "tails": list(fr.tails),
            "rows_settings": list(fr.rows), "cut": list(fr.cut), "checks": list(fr.checks),
            "needles": cfg["needles"], "samples": rep["counts"]["needle_samples"],
            "documents": rep["counts"]["documents"], "loss_length": cfg["loss_length"],
            "key_tokens": rep.get("documents", {}).get("key_tokens"),
            "docs_with_key_tokens": rep.get("documents", {}).get("docs_with_key_tokens"),
            "seed": meta["seed"], "command": meta["command"], "commands": rep["commands"],
            "suite": meta.get("suite", "needles"),
            "wall_seconds": rep["wall_seconds"], "timing": {k: v for k, v in timing.items()
                                                            if k != "arms"},
            "rows": rows, "dominating": fronts, "equal_cost_winners": equal_cost,
            "tiered": tiered(rep, fr, arms, by),
            "test_6_4": {"a": fr.headline, "b": fr.pop_native, "margin": MARGIN_POP,
                         "status": verdict_64(head), "noninferiority": (head or {}).get(
                             "noninferior_pop"), "retrieval": (head or {}).get("vs_pop"),
                         "novel": (head or {}).get("novel_vs_pop"),
                         "key": (head or {}).get("key_vs_pop"),
                         "macs_share": (head or {}).get("macs_share"), "pop_macs_share": pop_macs}}


# ----------------------------------------------------------------------------- writing
def interval(iv, spec: str = "+.1f") -> str:
    """``estimate [low, high]`` of a paired interval, or "-" when there is none."""
    if not iv or iv.get("low") is None:
        return "-"
    return f"{iv['estimate']:{spec}} [{iv['low']:{spec}}, {iv['high']:{spec}}]"


def _n(x, spec: str = ".1f") -> str:
    return "-" if x is None else f"{x:{spec}}"


def _ceiling(x) -> str:
    return "-" if not x else f"{x:.2f}x"


def tiered_markdown(t: dict | None) -> list[str]:
    """The tiered arms' section of frontier.md, by split, fill, share, spans."""
    if not t:
        return []
    refs = list(t["references"])
    pop = t["pop"]
    L = ["", "## Tiered prefill", "",
         "An exact share of the prefix chosen by the attention selector (lower-layer attention "
         "from the last 64 rows), with whole spans (`c`) or without, every other prefix row "
         "filled or dropped (`none`); MAC share and ceiling from rfmath.cost with the exact rows "
         "it selected and the selector's scores charged; NI: the one-sided 95% bound (the "
         "lower of the bootstrap's and the binomial floor) against the margin in brackets. "
         "POP native: MAC ceiling "
         f"{_ceiling(pop['mac_ceiling'])}, score {_n(pop['retrieval'])}, vs exact "
         f"{interval(pop['vs_exact'])}"
         + "".join(f"; `{b}`: MAC ceiling {_ceiling(r['mac_ceiling'])}, score "
                   f"{_n(r['retrieval'])}, vs exact {interval(r['vs_exact'])}"
                   for b, r in t["references"].items()) + ".", "",
         "| arm | exact prefix rows | MAC share | MAC ceiling | score | n | vs exact (pts) "
         "| NI vs exact | filled - dropped (pts) | "
         + " | ".join(f"vs `{b}` (pts) | NI vs `{b}`" for b in refs) + " |",
         "|---|---|---|---|---|---|---|---|---|" + "---|---|" * len(refs)]
    order = sorted(t["rows"], key=lambda r: (r["split"], r["fill"], r["values_fill"] or "",
                                             r["share"], r["complete"]))
    def test(t: dict | None) -> str:
        return "-" if not t else f"{ni_word(t)} {_n(t['bound'], '+.1f')} ({t['margin']:g})"

    for r in order:
        cells = []
        for b in refs:
            v = r["vs_reference"].get(b) or {}
            cells += [interval(v.get("retrieval")), test(v.get("noninferior"))]
        share = r["exact_row_share"]
        row = [f"`{r['arm']}`", "-" if share is None else f"{100 * share:.1f}%",
               _n(r["macs_share"], ".3f"), _ceiling(r["mac_ceiling"]), _n(r["retrieval"]),
               str(r["n"] or "-"), interval(r["vs_exact"]), test(r.get("noninferior_exact")),
               interval(r["vs_dropped"]), *cells]
        L.append("| " + " | ".join(row) + " |")
    if t.get("finalists"):
        L += ["", "Finalists by the rule stated before the screen (docs/results-quality.md; "
              "gpu.lab.eval.tiered.finalists): "
              + "; ".join(f"{p}: " + (", ".join(f"`{a}`" for a in arms) or "none")
                          for p, arms in t["finalists"].items())
              + ". Resumed to 17 a task (`make tiered-finalists`): the screen's command with "
              "`--samples 17 --keep "
              + " ".join(f"'{a}'" for a in resume_keep(t["finalists"], *t["references"]))
              + "`."]
    return L


def markdown(s: dict) -> str:
    t = s["test_6_4"]
    ni = t["noninferiority"] or {}
    L = [f"# RidgeFill frontier: {s['model']}{' — PARTIAL RUN' if s['partial'] else ''}", ""]
    if s["partial"]:
        L += ["> Partial: " + "; ".join(s["partial_reasons"]) + ". Rerun the command to "
              "resume; quote these numbers only with the sample count they rest on.", ""]
    what = ("RULER samples, every one scored (per task: ruler.md)" if s.get("suite") == "ruler"
            else "filled-region needle samples")
    L += [f"Command: `{s['command']}` (seed {s['seed']}); {s['samples']} {what} "
          f"({s['needles']}), "
          + (f"{s['documents']} documents of {s['loss_length']} tokens" if s["documents"]
             else "no loss documents (needles only)")
          + (f" (key-token contrasts rest on {s['key_tokens']} key tokens in "
             f"{s['docs_with_key_tokens']} documents)" if s.get("key_tokens") is not None else "")
          + "; "
          f"wall time {s['wall_seconds'] / 60:.0f} min over {len(s['commands'])} command(s). "
          f"Splits {s['splits']} of {s['n_layers']} layers (POP's split {s['pop']}), tails "
          f"{s['tails']}, rows {s['rows_settings']}; rescales at split {s['primary']}"
          + (f"; arms cut to fit: {', '.join(s['cut'])}" if s["cut"] else "") + ".", "",
          "## Paper 6.4: RidgeFill at 5/8 depth vs POP native", "",
          f"`{t['a']}` - `{t['b']}`: non-inferiority on filled-region retrieval at a "
          f"{t['margin']:g}-point margin is **{t['status']}** (one-sided 95% bound "
          f"{_n(ni.get('bound'), '+.1f')} points = min(bootstrap {_n(ni.get('bootstrap_bound'), '+.1f')}, "
          f"binomial floor {_n(ni.get('floor'), '+.1f')}); retrieval {interval(t['retrieval'])} points, "
          f"novel-token dNLL {interval(t['novel'], '+.3f')}, key-token dNLL {interval(t['key'], '+.3f')} "
          f"nats; MAC share {_n(t['macs_share'], '.3f')} vs POP's {_n(t['pop_macs_share'], '.3f')}.",
          "", "## At no more cost than POP native", "",
          "Rule (stated in gpu/lab/eval/frontier_report.py before any number): MAC share <= POP "
          "native's, retrieval non-inferior to POP at 3 points, key-token dNLL no higher than "
          "POP's. Arms that meet it: " + (", ".join(f"`{a}`" for a in s["equal_cost_winners"])
                                          or "none") + ".", "",
          "Dominating points (no arm costs no more and scores at least as well): retrieval "
          + ", ".join(f"`{a}`" for a in s["dominating"]["retrieval"]) + "; key-token dNLL "
          + ", ".join(f"`{a}`" for a in s["dominating"]["dnll_key"]) + ".", "",
          "## Every arm, by MAC share", "",
          "| arm | MAC share | speedup / ceiling | retrieval | vs exact (pts) | vs POP (pts) "
          "| NI vs POP | novel dNLL | key dNLL | key vs POP | agreement |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(s["rows"], key=lambda r: (r["macs_share"] is None, r["macs_share"] or 0)):
        sp = (f"{r['speedup']:.2f}x / {r['mac_ceiling']:.2f}x" if r["speedup"] and r["mac_ceiling"]
              else "-")
        nip = r["noninferior_pop"]
        L.append(f"| `{r['arm']}` | {_n(r['macs_share'], '.3f')} | {sp} | {_n(r['retrieval'])} | "
                 f"{interval(r['vs_exact'])} | {interval(r['vs_pop'])} | "
                 f"{'-' if not nip else ni_word(nip) + ' ' + _n(nip['bound'], '+.1f')} | "
                 f"{interval(r['dnll_novel'], '+.3f')} | {interval(r['dnll_key'], '+.3f')} | "
                 f"{interval(r['key_vs_pop'], '+.3f')} | {_n(r['agreement'], '.2f')} |")
    spliced = [r for r in s["rows"] if r["splice"]]
    if spliced:
        L += ["", f"## Which component carries the error of `{t['a']}` (paper 6.6)", "",
              "Exact keys or exact values spliced into its filled rows (from exact's cache); "
              "a contrast is spliced - unspliced.", "",
              "| splice | retrieval | vs unspliced (pts) | novel dNLL vs unspliced | key dNLL vs "
              "unspliced |", "|---|---|---|---|---|"]
        for r in spliced:
            c = r["vs_unspliced"] or {}
            L.append(f"| exact {r['splice']} | {_n(r['retrieval'])} | {interval(c.get('retrieval'))} | "
                     f"{interval(c.get('dnll_novel'), '+.3f')} | {interval(c.get('dnll_key'), '+.3f')} |")
    checks = [r for r in s["rows"] if r["check"] is not None]
    if checks:
        L += ["", "## Decode-time check (paper Appendix I.4) against the default rows", "",
              "| arm | retrieval | vs default rows (pts) | key dNLL vs default rows | repairs per "
              "answer | rows repaired per answer | decoding overhead | repairs per document |",
              "|---|---|---|---|---|---|---|---|"]
        for r in checks:
            cn, cd, vs = r["check_needles"] or {}, r["check_docs"] or {}, r["vs_default_rows"] or {}
            L.append(f"| `{r['arm']}` | {_n(r['retrieval'])} | {interval(vs.get('retrieval'))} | "
                     f"{interval(vs.get('dnll_key'), '+.3f')} | {_n(cn.get('repairs'), '.2f')} | "
                     f"{_n(cn.get('rows_repaired'), '.1f')} | {_n(cn.get('overhead'), '+.0%')} | "
                     f"{_n(cd.get('repairs'), '.2f')} |")
    L += tiered_markdown(s.get("tiered"))
    L += ["", "Intervals: paired 95% bootstrap (within task for retrieval, within domain for "
          "documents); NI: the one-sided bound vs POP native (pass when above -3 points; n too "
          "small when only the binomial floor of n pairs keeps it below). MAC "
          "share: rfmath.cost, every sweep charged (a probe's first sweep included); speedup: "
          f"exact prefill time / the arm's, alone, at {s['timing'].get('length', '-')} tokens "
          f"({s['timing'].get('units', 0)} samples, best of 2; {s['timing'].get('threads', '-')} "
          "torch threads).", ""]
    return "\n".join(L)


def plot(s: dict, path: Path) -> None:
    """Retrieval and key-token dNLL against MAC share; POP native starred, exact a square,
    the dominating points joined."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {r["arm"]: r for r in s["rows"]}
    pop = f"pop@{s['pop']}"
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, q, label in ((axes[0], "retrieval", "filled-region retrieval (points)"),
                         (axes[1], "dnll_key", "key-token dNLL vs exact (nats)")):
        val = (lambda r: r["retrieval"]) if q == "retrieval" else (lambda r: _est(r["dnll_key"]))
        for fill, color in (("ridge", "tab:blue"), ("identity", "tab:orange"),
                            ("anchored", "tab:green"), ("kv", "tab:purple"),
                            ("two sources", "tab:grey"), ("exact", "black")):
            pts = [(r["macs_share"], val(r)) for r in s["rows"]
                   if (r["fill"] if not r.get("values_fill") else "two sources") == fill
                   and r["arm"] != pop and r["macs_share"] is not None and val(r) is not None]
            if pts:
                ax.scatter(*zip(*pts), s=18, color=color, alpha=0.7,
                           marker="s" if fill == "exact" else "o", label=fill)
        front = [(by[a]["macs_share"], val(by[a])) for a in s["dominating"][q]]
        if front:
            ax.plot(*zip(*front), color="grey", lw=1.0, label="dominating")
        p = by.get(pop)
        if p and p["macs_share"] is not None and val(p) is not None:
            ax.scatter([p["macs_share"]], [val(p)], s=120, marker="*", color="red",
                       label="POP native", zorder=3)
        ax.set_xlabel("MAC share of exact prefill")
        ax.set_ylabel(label)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(f"{s['model']}: frontier (n={s['samples']} needles, {s['documents']} documents, "
                 f"seed {s['seed']}){' PARTIAL' if s['partial'] else ''}", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def write(root: Path, s: dict) -> None:
    """frontier.json / .md / .png; the tiered finalists are frozen in FINALISTS_FILE by the
    first whole run that names them (the screen), and every later summary (the finalists'
    own resumed run) names those."""
    t, frozen = s.get("tiered"), root / FINALISTS_FILE
    if t and t.get("finalists") and not frozen.is_file():
        write_json(frozen, freeze(s))
    if t and frozen.is_file():
        t["finalists"] = json.loads(frozen.read_text())["finalists"]
    write_json(root / "frontier.json", s)
    write_text(root / "frontier.md", markdown(s))
    plot(s, root / "frontier.png")
