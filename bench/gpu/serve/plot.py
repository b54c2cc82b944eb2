#!/usr/bin/env python3
"""Plot of a serving benchmark: plot.py summary.csv out.png (matplotlib).

Per configuration: throughput in % of dedicated and ITL p99 as a multiple of
dedicated; bars are the worst server's median over rounds, whiskers its
min..max, dots each server's median. Lines mark the goal (85 %, 1.3x).
"""
import csv
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot.py: needs matplotlib (python3 -m pip install matplotlib), or run it where it is installed")

import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import LABEL, ORDER  # noqa: E402


def main(src, dst):
    with open(src) as f:
        rows = list(csv.DictReader(f))
    num = lambda r, k: float(r[k])
    cfgs = [c for c in ORDER if any(r["config"] == c for r in rows)]
    cfgs += sorted({r["config"] for r in rows} - set(cfgs))
    def bar_row(c):  # the worst server, or the only one
        rs = [r for r in rows if r["config"] == c]
        w = [r for r in rs if r["server"] == "worst"]
        return (w or rs)[0], [r for r in rs if r["server"] != "worst"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.55 * len(cfgs) + 1.8))
    panels = [("tok_per_s_rel", 100.0, "throughput, % of dedicated (higher is better)", [(100, "-"), (85, "--")]),
              ("itl_p99_rel", 1.0, "ITL p99, × dedicated (lower is better)", [(1.0, "-"), (1.3, "--")])]
    ys = list(range(len(cfgs)))[::-1]
    for ax, (k, scale, title, lines) in zip(axes, panels):
        edge = lines[-1][0]
        for y, c in zip(ys, cfgs):
            w, each = bar_row(c)
            med, lo, hi = scale * num(w, k), scale * num(w, k + "_min"), scale * num(w, k + "_max")
            ax.barh(y, med, color="#4c72b0" if c != "dedicated" else "#999999", height=0.6)
            ax.errorbar(med, y, xerr=[[med - lo], [hi - med]], fmt="none", ecolor="black", capsize=3)
            dots = [scale * num(r, k) for r in each]
            for x in dots:
                ax.plot(x, y, "o", color="#dd8452", markersize=4)
            right = max([hi] + dots)
            edge = max(edge, right)
            ax.text(right, y, "  %.0f %%" % med if scale == 100.0 else "  %.2f×" % med, va="center", fontsize=8)
        for x, style in lines:
            ax.axvline(x, color="gray", linestyle=style, linewidth=0.8)
        ax.set_xlim(0, edge * 1.15)  # room for the labels
        ax.set_title(title, fontsize=10)
        ax.set_yticks(ys)
        ax.set_yticklabels([LABEL.get(c, c) for c in cfgs] if ax is axes[0] else [])
    rounds = max(int(r["rounds"]) for r in rows)
    fig.suptitle("Two ~1.2 B-parameter servers on one GPU: median of %d round(s), worst server (bar), each server (dot)" % rounds, fontsize=10)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)
    print("plot.py: wrote %s" % dst)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py summary.csv out.png")
    main(sys.argv[1], sys.argv[2])
