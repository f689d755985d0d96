"""The evaluation report as markdown and PNG plots (matplotlib, Agg), from the dict that
gpu.lab.eval.report.aggregate builds."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def _num(x, fmt="{:+.3f}"):
    return "-" if x is None else fmt.format(x)


def _iv(iv, fmt="{:+.3f}"):
    if not iv or iv.get("estimate") is None:
        return "-"
    star = "" if iv.get("stratified", True) else "*"
    return (f"{fmt.format(iv['estimate'])} [{fmt.format(iv['low'])}, "
            f"{fmt.format(iv['high'])}]{star}")


def _pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def markdown(rep: dict) -> str:
    m, cfg = rep["meta"], rep["meta"]["config"]
    L = []
    L.append(f"# RidgeFill evaluation: {rep['model']}\n")
    if rep["partial"]:
        L.append("> **PARTIAL RUN - not the study.** This report covers a reduced slice of the "
                 "grid: " + "; ".join(rep["partial_reasons"]) + ". Its numbers are a check that "
                 "the harness works, with wide intervals; do not quote them as the study's "
                 "results.\n")
    L.append("## Setup\n")
    for c in rep["commands"]:
        L.append(f"- command: `{c['command']}` ({c['sessions']} session(s), {c['measured']} runs "
                 "measured)")
    L.append(f"- model: {m['model']} ({m['n_layers']} layers, QK-norm: {m['qk_norm']}), "
             f"{m['dtype']} on {m['device']}, {m['torch_threads']} torch threads")
    L.append(f"- splits {cfg['splits']} (primary {cfg['splits'][0]}), tail {cfg['tail']}, "
             f"seed {cfg['seed']}, texts: {m['texts']}")
    L.append("- maps: " + ", ".join(f"split {s}: lambda {v['lambda']:.3g}, "
                                    f"{v['calibration_rows']} calibration rows"
                                    for s, v in m["maps"].items()))
    L.append(f"- needles: lengths/tasks {cfg['needles']}, {cfg['samples']} filled-region samples "
             f"per task and length wanted; kept/drawn: " + ", ".join(
                 f"{k} {v['kept']}/{v['drawn']}" for k, v in m["sample_sets"].items() if k != "docs"))
    if "docs" in m["sample_sets"]:
        d = m["sample_sets"]["docs"]
        L.append(f"- documents: {d['kept']} of {cfg['loss_length']} tokens in domains "
                 f"{', '.join(d['domains'])}; scored stretch: the last {cfg['score_tokens']} "
                 f"tokens (inside every arm's tail); key tokens: exact loss rises > 2 nats with "
                 f"the context cut to the last W = {cfg['key_window']} tokens before the stretch "
                 f"(the prefix removed); novel tokens: outside every 8-token run seen earlier; "
                 f"agreement over {cfg['continuation']} exact greedy tokens")
    c = rep["counts"]
    L.append(f"- records: {c['needle_records']} needle runs on {c['needle_samples']} samples, "
             f"{c['loss_records']} document runs on {c['documents']} documents; "
             f"{c['sessions']} session(s), wall time {rep['wall_seconds'] / 60:.1f} min (every "
             f"session of the journal, runs whose records later code superseded included); "
             f"the records here took {rep.get('record_seconds', 0.0) / 60:.1f} min")
    L.append("- intervals: 95% paired percentile bootstrap (10,000 resamples) within task/length "
             "or domain (pooled where a stratum holds a single pair, marked *); "
             "non-inferiority: one-sided 95% bound, the lower of bootstrap and binomial floor "
             "-100(1-0.05^(1/n))\n")

    nd = rep["needles"]
    if nd:
        L.append("## Filled-region retrieval (RULER string_match_all, points)\n")
        L.append("| arm | what | n | score | vs exact [95% CI] | exact rows of prefix | "
                 "needle rows exact | MAC share | s/run |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for name, a in nd["arms"].items():
            L.append(f"| `{name}` | {a['label'].strip()} | {a['n']} | {_num(a['score'], '{:.1f}')} | "
                     f"{_iv(a['vs_exact'], '{:+.1f}')} | {_pct(a['exact_row_share'])} | "
                     f"{_pct(a['needle_rows_exact'])} | {_num(a['macs_share'], '{:.3f}')} | "
                     f"{_num(a['seconds'], '{:.1f}')} |")
        strata = nd["strata"]
        L.append("\nBy task and length:\n")
        L.append("| arm | " + " | ".join(strata) + " |")
        L.append("|---|" + "---|" * len(strata))
        for name, row in nd["by_stratum"].items():
            L.append(f"| `{name}` | " + " | ".join(_num(row[s], "{:.0f}") for s in strata) + " |")
        L.append("")
    dc = rep["documents"]
    if dc:
        L.append("## Long-document loss and agreement (Delta NLL vs exact, nats/token)\n")
        L.append(f"{dc['units']} documents, {dc['scored_tokens']} scored tokens: "
                 f"{dc['novel_tokens']} novel, {dc['key_tokens']} key (in "
                 f"{dc['docs_with_key_tokens']} documents). Key tokens per document: the mean "
                 "over documents of each document's mean; per token: the mean over every key "
                 "token (a document with more weighs more; its interval resamples whole "
                 "documents).\n")
        L.append("| arm | what | docs | all | novel [95% CI] | key per document | key per token | "
                 "agreement | KL mean | KL median |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        for name, a in dc["arms"].items():
            L.append(f"| `{name}` | {a['label'].strip()} | {a['n']} | "
                     f"{_num((a['dnll_all'] or {}).get('estimate'))} | {_iv(a['dnll_novel'])} | "
                     f"{_iv(a['dnll_key'])} | {_iv(a['dnll_key_per_token'])} | "
                     f"{_pct(a['agreement'])} | "
                     f"{_num(a['kl_mean'], '{:.4f}')} | {_num(a['kl_median'], '{:.4f}')} |")
        L.append("")
    if rep["contrasts"]:
        L.append("## Paired contrasts (a - b)\n")
        L.append("| a | b | retrieval, points | novel dNLL | key dNLL | key dNLL per token | KL |")
        L.append("|---|---|---|---|---|---|---|")
        for r in rep["contrasts"]:
            L.append(f"| `{r['a']}` | `{r['b']}` | {_iv(r.get('retrieval'), '{:+.1f}')} | "
                     f"{_iv(r.get('dnll_novel'))} | {_iv(r.get('dnll_key'))} | "
                     f"{_iv(r.get('dnll_key_per_token'))} | {_iv(r.get('kl'), '{:+.4f}')} |")
        L.append("")
    if rep["noninferiority"]:
        L.append("## Non-inferiority on retrieval\n")
        L.append("| a | b | margin | estimate | bootstrap bound | floor | bound | passed | n |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for t in rep["noninferiority"]:
            L.append(f"| `{t['a']}` | `{t['b']}` | {t['margin']:g} | {_num(t['estimate'], '{:+.1f}')} | "
                     f"{_num(t['bootstrap_bound'], '{:+.1f}')} | {_num(t['floor'], '{:+.1f}')} | "
                     f"{_num(t['bound'], '{:+.1f}')} | {t['passed']} | {t['n']} |")
        L.append("")
    if rep["splices"]:
        L.append("## Splices at the primary split\n")
        L.append("| exact | novel loss removed | removed, nats [95% CI] | retrieval gap closed |")
        L.append("|---|---|---|---|")
        for w, s in rep["splices"].items():
            L.append(f"| {w} | {_pct(s.get('loss_removed'))} | {_iv(s.get('removed_nats'))} | "
                     f"{_pct(s.get('gap_closed'))} |")
        L.append("")
    L.append("## Findings of the paper, tested\n")
    for f in rep["findings"]:
        iv = f.get("interval")
        n = f", n = {iv['n']}" if iv else ""
        nt = f.get("noninferiority")
        vs_exact = (f" ({nt['a']} - exact {nt['estimate']:+.1f}, one-sided bound {nt['bound']:+.1f})"
                    if nt and nt["estimate"] is not None and nt["bound"] is not None else "")
        parts = (f"; beats random rows: {f['beats_random']}, restores retrieval: "
                 f"{f['restores']}{vs_exact}" if "restores" in f else "")
        L.append(f"- **{f['status']}** - {f['finding']} ({f['contrast']}: {_iv(iv)}{n}{parts})")
    L.append("")
    est = rep.get("estimate_full_grid")
    if est:
        L.append("## Time for the full grid\n")
        L.append(f"From the seconds per run measured here (on this machine, under its load), the "
                 f"preset grid at its minimum counts would take about **{est['hours']:.1f} h**:")
        for k, r in est["rows"].items():
            L.append(f"- {k}: {r['records']} runs x {r['seconds_per_record']:.1f} s"
                     f"{'' if r['measured'] else ' (scaled from another length)'}")
        L.append("")
    L.append("## Notes\n")
    L.append("- The exact arm is the stock forward. POP native is the identity fill at split "
             "L - floor(L/3) with a one-token tail; on documents its tail is widened to cover "
             "the scored stretch (the same computation as feeding the stretch as decoding "
             "steps), and its agreement is measured on its own one-token-tail prefill.")
    L.append("- Selectors on documents read the rows just before the scored stretch (paper 2.4); "
             "the question-blind control runs on needles only.")
    L.append("- Controls: `/random` keeps as many random prefix rows exact as its selection "
             "did (seeded per sample), `/tail` adds that many rows to the exact tail, `/blind` "
             "runs the selector without the question.")
    if rep.get("plots"):
        L.append("")
        for p in rep["plots"]:
            L.append(f"![{p}]({p})")
    return "\n".join(L) + "\n"


def plots(rep: dict, root: Path) -> list[str]:
    """split_curve.png, arms.png, splices.png (those with data)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    cfg = rep["meta"]["config"]
    S = cfg["splits"][0]
    nd, dc = rep["needles"], rep["documents"]

    def err(iv):
        if not iv or iv.get("estimate") is None:
            return np.nan, [[0], [0]]
        e = iv["estimate"]
        return e, [[e - iv["low"]], [iv["high"] - e]]

    # split curve
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    pop = next((a["name"] for a in rep["meta"]["arms"] if a["name"].startswith("pop@")), None)
    drew = False
    for fill, color in (("ridge", "C0"), ("identity", "C1")):
        xs = [s for s in cfg["splits"] if dc and f"{fill}@{s}" in dc["arms"]]
        for s in sorted(xs):
            e, yerr = err(dc["arms"][f"{fill}@{s}"]["dnll_novel"])
            axes[0].errorbar([s], [e], yerr=yerr, fmt="o", color=color, capsize=3)
            drew = True
        if xs:
            ys = [err(dc["arms"][f"{fill}@{s}"]["dnll_novel"])[0] for s in sorted(xs)]
            axes[0].plot(sorted(xs), ys, "-", color=color, label=fill)
        xs = [s for s in cfg["splits"] if nd and f"{fill}@{s}" in nd["arms"]]
        if xs:
            axes[1].plot(sorted(xs), [nd["arms"][f"{fill}@{s}"]["score"] for s in sorted(xs)],
                         "o-", color=color, label=fill)
            drew = True
    if pop and dc and pop in dc["arms"]:
        e, yerr = err(dc["arms"][pop]["dnll_novel"])
        axes[0].errorbar([int(pop.split("@")[1])], [e], yerr=yerr, fmt="s", color="C3",
                         capsize=3, label="POP native")
    if pop and nd and pop in nd["arms"]:
        axes[1].plot([int(pop.split("@")[1])], [nd["arms"][pop]["score"]], "s", color="C3",
                     label="POP native")
    if nd and "exact" in nd["arms"]:
        axes[1].axhline(nd["arms"]["exact"]["score"], color="k", ls="--", lw=1, label="exact")
    axes[0].axhline(0, color="k", ls="--", lw=1)
    axes[0].set(xlabel="split layer", ylabel="novel-token dNLL vs exact (nats)", title="Loss")
    axes[1].set(xlabel="split layer", ylabel="filled-region retrieval (points)", title="Retrieval")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(f"{rep['model']}: split curve" + (" (PARTIAL RUN)" if rep["partial"] else ""))
    fig.tight_layout()
    if drew:
        fig.savefig(root / "split_curve.png", dpi=110)
        out.append("split_curve.png")
    plt.close(fig)

    # arms at the primary split
    names = [a["name"] for a in rep["meta"]["arms"]
             if a["name"] == "exact" or (f"@{S}" in a["name"] and "splice" not in a["name"])
             or a["name"] == pop]
    panels = []
    if nd:
        panels.append(("retrieval vs exact (points)", [err((nd["arms"].get(n) or {}).get("vs_exact"))
                                                       if n != "exact" else (0.0, [[0], [0]])
                                                       for n in names]))
    if dc:
        for k in ("novel", "key"):
            panels.append((f"{k}-token dNLL (nats)", [err((dc["arms"].get(n) or {}).get(f"dnll_{k}"))
                                                     for n in names]))
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 0.35 * len(names) + 1.5),
                                 sharey=True, squeeze=False)
        y = np.arange(len(names))
        for ax, (title, vals) in zip(axes[0], panels):
            es = [v[0] for v in vals]
            lo = [v[1][0][0] for v in vals]
            hi = [v[1][1][0] for v in vals]
            ax.barh(y, es, xerr=[lo, hi], color="C0", capsize=2)
            ax.axvline(0, color="k", lw=1)
            ax.set_title(title, fontsize=9)
        axes[0][0].set_yticks(y, names, fontsize=7)
        axes[0][0].invert_yaxis()
        fig.suptitle(f"{rep['model']}: arms at split {S}" + (" (PARTIAL RUN)" if rep["partial"] else ""))
        fig.tight_layout()
        fig.savefig(root / "arms.png", dpi=110)
        plt.close(fig)
        out.append("arms.png")

    # splices
    spl = rep["splices"]
    if spl:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ws = list(spl)
        x = np.arange(len(ws))
        rem = [100 * (spl[w].get("loss_removed") or np.nan) for w in ws]
        gap = [100 * (spl[w].get("gap_closed") or np.nan) for w in ws]
        ax.bar(x - 0.2, rem, 0.4, label="novel loss removed (%)")
        ax.bar(x + 0.2, gap, 0.4, label="retrieval gap closed (%)")
        ax.set_xticks(x, [f"exact {w}" for w in ws])
        ax.axhline(0, color="k", lw=1)
        ax.axhline(100, color="k", lw=0.5, ls=":")
        ax.legend(fontsize=8)
        ax.set_title(f"{rep['model']}: splices at split {S}" + (" (PARTIAL)" if rep["partial"] else ""),
                     fontsize=10)
        fig.tight_layout()
        fig.savefig(root / "splices.png", dpi=110)
        plt.close(fig)
        out.append("splices.png")
    return out
