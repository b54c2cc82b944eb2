#!/usr/bin/env python3
"""Tables of a serving benchmark run: report.py OUT [OUT2 ...] [--to DIR]

Reads every server record (OUT/r<round>/<config>/<server>.json) of one or
more run directories (rounds run in separate calls are joined here; a round
must not appear twice) and their status.tsv. Writes into --to (default: the
first OUT): results.csv (every server of every round, with its ratios to the
dedicated server of that round), summary.csv (median, min and max over
rounds, per configuration and server, and per configuration its worst
server), results.json (both, plus what failed) and report.md.
"""
import argparse
import csv
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine  # noqa: E402
import stats  # noqa: E402

ORDER = ["dedicated", "unlimited", "ts50", "req50", "spatial50", "mps50", "spatial100", "mps100", "hami50", "mpsalone50",
         "pacedalone50", "mixed", "mpsprio", "prio50", "prio0", "priospatial100"]
LABEL = {
    "dedicated": "dedicated (one server alone)",
    "unlimited": "both, no limit (hardware time slicing)",
    "ts50": "vgpu time slicing, limits 50/50",
    "req50": "vgpu requests 50/50, limits 100",
    "spatial50": "vgpu spatial 50/50",
    "mps50": "plain MPS 50/50",
    "spatial100": "vgpu spatial 100/100 (no SM cap)",
    "mps100": "plain MPS 100/100 (no SM cap)",
    "hami50": "HAMi-core 50/50",
    "mpsalone50": "bound: one server, MPS 50 %",
    "pacedalone50": "bound: one server, vgpu paced 50",
    # A in open loop beside B in closed loop: read A's latencies and B's throughput
    "mixed": "A open / B closed, no limit (hardware time slicing)",
    "mpsprio": "A open / B closed, plain MPS, client priority 0 / 1",
    "prio50": "A open / B closed, vgpu requests 50/50, priority high / low",
    "prio0": "A open / B closed, vgpu requests 50/0, priority high / low",
    "priospatial100": "A open / B closed, vgpu spatial 100/100, priority high / low",
}
MPS_CONFIGS = ("mps50", "mpsalone50", "spatial50")  # a client's share (below 100) shows in its SM count


def load(dirs):
    """(rows, problems, statuses): flattened complete records; lines about records that cannot count."""
    rows, problems, statuses, seen, sms = [], [], [], {}, {}
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "r*", "*", "*.json"))):
            with open(path) as f:
                rec = json.load(f)
            key = (int(rec["round"]), rec["config"], rec["server"])
            if key in seen:
                raise SystemExit("report: round %d %s %s is in both %s and %s; give each round once"
                                 % (key + (seen[key], path)))
            seen[key] = path
            if not rec["open"].get("complete") or "itl_p99" not in rec["open"]:
                problems.append("round %d %s %s: open-loop sample incomplete (%s of %s finished)"
                                % (key + (rec["open"].get("finished"), rec["open"].get("requests"))))
                continue
            row = stats.flatten(rec)
            row["open_rate"] = rec["open"]["rate"]
            row["sm_count"] = rec.get("sm_count", "")
            row["times"] = rec.get("times") or {}
            rows.append(row)
            sms[key] = rec.get("sm_count")
        st = os.path.join(d, "status.tsv")
        if os.path.exists(st):
            with open(st) as f:
                statuses += [r for r in csv.DictReader(f, delimiter="\t")]
    # Under MPS at 50 % a client sees fewer SMs; the full count means the share never took.
    for (rnd, cfg, srv), sm in sorted(sms.items()):
        full = sms.get((rnd, "dedicated", "A"))
        if cfg in MPS_CONFIGS and sm and full and sm >= full:
            problems.append("round %d %s %s: saw %s SMs, as many as dedicated: the MPS share was not in effect" % (rnd, cfg, srv, sm))
    return rows, problems, statuses


def pct(x):
    return "%.1f" % (100 * x)


def spread(s, k, f):
    return "%s [%s..%s]" % (f(s[k]), f(s[k + "_min"]), f(s[k + "_max"]))


def markdown(summary, problems, statuses, rounds):
    ratio = lambda x: "%.2f" % x
    out = ["# Two inference servers on one GPU", "",
           "Median over %d round(s) [min..max]; each figure relative to the dedicated server of its round."
           % len(rounds), "Throughput: closed loop at saturation. Latency: open loop, Poisson arrivals at half the"
           " dedicated saturated rate. Per configuration, 'worst' takes each round's worst server.", "",
           "| configuration | server | throughput % of dedicated | TTFT p50 × | TTFT p99 × | ITL p50 × | ITL p99 × | rounds | goal (≥ 85 %, ITL p99 ≤ 1.3×) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        g = ("yes" if stats.goal(s) else "no") if s["server"] == stats.WORST and s["config"] != stats.DEDICATED else ""
        out.append("| %s | %s | %s | %s | %s | %s | %s | %d | %s |" % (
            LABEL.get(s["config"], s["config"]), s["server"], spread(s, "tok_per_s_rel", pct),
            spread(s, "ttft_p50_rel", ratio), spread(s, "ttft_p99_rel", ratio),
            spread(s, "itl_p50_rel", ratio), spread(s, "itl_p99_rel", ratio), s["rounds"], g))
    ded = [s for s in summary if s["config"] == stats.DEDICATED and s["server"] == "A"]
    if ded:
        d = ded[0]
        out += ["", "Dedicated, absolute: %.0f tokens/s [%.0f..%.0f]; ITL p50 %.2f ms, p99 %.2f ms; TTFT p50 %.1f ms, p99 %.1f ms."
                % (d["tok_per_s"], d["tok_per_s_min"], d["tok_per_s_max"], 1e3 * d["itl_p50"], 1e3 * d["itl_p99"],
                   1e3 * d["ttft_p50"], 1e3 * d["ttft_p99"])]
    bad = [s for s in statuses if s.get("status") != "ok"]
    if bad or problems:
        out += ["", "## Not counted", ""]
        out += ["- round %s %s: %s %s" % (s["round"], s["config"], s["status"], s.get("note", "")) for s in bad]
        out += ["- " + p for p in problems]
    return "\n".join(out) + "\n"


TIMES = ("imports_s", "held_s", "build_s", "warm_s", "barrier_s", "closed_s", "open_s")


def seconds(rows, statuses):
    """Where a configuration's seconds go: its servers' phases (median over rounds, the slowest server of each
    round) and its whole time in status.tsv (start of its servers or their go, to its teardown)."""
    per, total = {}, {}
    for r in rows:
        t = per.setdefault(r["config"], {}).setdefault(r["round"], {})
        for k, v in r.get("times", {}).items():
            t[k] = max(t.get(k, 0.0), float(v))
    for s in statuses:
        if s.get("status") == "ok":
            total.setdefault(s["config"], []).append(float(s["seconds"]))
    if not per:
        return ""
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    out = ["", "## Where the seconds go", "",
           "Median over rounds of each phase of the slowest server (held: waiting, imports done, for the previous"
           " configuration to end; not device time). Whole: the configuration in status.tsv, from its go to its"
           " teardown.", "",
           "| configuration | " + " | ".join(k[:-2] for k in TIMES) + " | whole |", "|---|" + "---|" * (len(TIMES) + 1)]
    for cfg in [c for c in ORDER if c in per] + sorted(set(per) - set(ORDER)):
        rounds = per[cfg].values()
        cells = ["%.1f" % med([t[k] for t in rounds if k in t]) if any(k in t for t in rounds) else "-" for k in TIMES]
        out.append("| %s | %s | %s |" % (cfg, " | ".join(cells), "%.0f" % med(total.get(cfg, [])) if cfg in total else "-"))
    return "\n".join(out) + "\n"


def goal_section(summary):
    """The issue's goal, read off the summary: vgpu's best mode against the goal, plain MPS, HAMi-core and
    the unlimited pair (each configuration by its worst server; noise = the ranges over rounds overlap)."""
    worst = {s["config"]: s for s in summary if s["server"] == stats.WORST}
    best = stats.best_mode(list(worst.values()))
    if best is None:
        return ""
    yes = lambda b: "yes" if b else "no"
    t, i = best["tok_per_s_rel"], best["itl_p99_rel"]
    out = ["", "## Against the goal", "",
           "vgpu's best mode here: **%s** (worst server, median of %d round(s)): throughput %.1f %% of dedicated"
           " (≥ 85 %%: %s), ITL p99 %.2f× (≤ 1.3×: %s)." % (LABEL[best["config"]], best["rounds"], 100 * t, yes(t >= 0.85),
                                                             i, yes(i <= 1.3))]
    # plain MPS at the best mode's own share: spatial100 against mps100
    mps = "mps100" if best["config"] == "spatial100" else "mps50"
    for cfg, want in ((mps, "within noise"), ("hami50", "ahead"), ("unlimited", "ahead")):
        o = worst.get(cfg)
        if o is None:
            out.append("- against %s: not measured" % LABEL[cfg])
            continue
        a = stats.against(best, o)
        out.append("- against %s (%.1f %%, %.2f×), %s asked: throughput %s, ITL p99 %s" % (
            LABEL[cfg], 100 * o["tok_per_s_rel"], o["itl_p99_rel"], want,
            "ahead" if a["ahead_throughput"] else "behind", "ahead" if a["ahead_itl_p99"] else "behind")
            + "; within noise: throughput %s, ITL p99 %s" % (yes(a["noise_throughput"]), yes(a["noise_itl_p99"])))
    return "\n".join(out) + "\n"


# A in open loop beside B in closed loop (run.sh's MIXED)
MIXED = ("mixed", "mpsprio", "prio50", "prio0", "priospatial100")


def priority_section(rel):
    """The issue's item 2 per A-open / B-closed configuration and round: A's TTFT p99 (<= 1.5x) and ITL p99
    (<= 1.2x) against dedicated, and B's throughput against what it is owed, 0.9 x (1 - A's busy share): the
    dedicated server's busy share in its open loop of the same round (its own device time, CUDA events). Beside
    it, where its records have them, the p99 of A's idle gaps and the share of its loop past the order's yield
    hold in each: the most the order lets B start in while A is busy (records from before: '-')."""
    ded = {r["round"]: r for r in rel if r["config"] == stats.DEDICATED}
    per = {}
    for r in rel:
        if r["config"] in MIXED:
            per.setdefault(r["config"], {}).setdefault(r["round"], {})[r["server"]] = r
    out = []
    for cfg in [c for c in MIXED if c in per]:
        for rnd, srv in sorted(per[cfg].items()):
            a, b, d = srv.get("A"), srv.get("B"), ded.get(rnd)
            if a is None or b is None or d is None or "busy_share" not in d:
                continue
            owed = 0.9 * (1 - d["busy_share"])
            met = a["ttft_p99_rel"] <= 1.5 and a["itl_p99_rel"] <= 1.2 and b["tok_per_s_rel"] >= owed
            gap = "%.2f" % (1e3 * d["idle_gap_p99"]) if "idle_gap_p99" in d else "-"
            past = "%.2f" % (100 * d["idle_past_hold_share"]) if "idle_past_hold_share" in d else "-"
            out.append("| %s | %d | %.1f | %s | %s | %.2f | %.2f | %.1f | %.1f | %s |" % (
                LABEL.get(cfg, cfg), rnd, 100 * d["busy_share"], gap, past, a["ttft_p99_rel"], a["itl_p99_rel"],
                100 * b["tok_per_s_rel"], 100 * owed, "yes" if met else "no"))
    if not out:
        return ""
    return "\n".join(["", "## A priority between servers (item 2)", "",
                      "A's busy share: the dedicated server's own device time over its open loop, same round; B is owed"
                      " 0.9 × (1 − that) of its dedicated throughput. Met: A's TTFT p99 ≤ 1.5×, ITL p99 ≤ 1.2×, and B"
                      " at least what it is owed. A's idle gaps, from the same dedicated loop: their p99, and the share"
                      " of the loop past the order's yield hold (%g ms) in each, the time B may start in while A"
                      " serves." % (1e3 * engine.ORDER_YIELD_HOLD_S), "",
                      "| configuration | round | A's busy share % | A idle gap p99 ms | A idle past the hold % |"
                      " A TTFT p99 × | A ITL p99 × | B throughput % | B owed % | met |",
                      "|---|---|---|---|---|---|---|---|---|---|"] + out) + "\n"


IDLE = ("idle_gap_p50", "idle_gap_p99", "idle_gap_max", "idle_past_hold_share")
STEPS = ("decode_span_p50", "decode_span_p99", "decode_wait_p99", "decode_issue_p99", "prefill_span_p50",
         "prefill_span_p99", "prefill_issue_p50", "prefill_issue_p99")


def steps_section(rel):
    """Server A's steps per configuration (median over rounds, ms): a decode step's and a prefill's span (CUDA
    events, the first recorded before the step's launches), what the step waited for besides (its call's wall
    time less the span) and the host's time to issue its launches. Against dedicated: a longer span is the GPU
    given to another context inside A's step or a launch the library held; a longer issue is a hold (the
    library's pacer or the order), which time slicing does not lengthen. Records from before a figure was
    kept show it as '-'."""
    per = {}
    for r in rel:
        if r["server"] == "A" and "decode_span_p50" in r:
            per.setdefault(r["config"], []).append(r)
    if not per:
        return ""
    out = ["", "## Server A's steps on the device", "",
           "Median over rounds, ms. Span: from an event recorded before the step's launches to one after them, so"
           " it holds the GPU given to another context inside the step and any launch the library held (its pacer,"
           " the order). Wait: the call's wall time less the span (the copy back). Issue: the host's time to issue"
           " the step's launches, where a hold of the library shows and time slicing does not.", "",
           "| configuration | " + " | ".join(k.replace("_", " ") for k in STEPS) + " | rounds |",
           "|---|" + "---|" * (len(STEPS) + 1)]

    def cell(rs, k):
        vals = [r[k] for r in rs if r.get(k) is not None]
        return "%.2f" % (1e3 * statistics.median(vals)) if vals else "-"

    for cfg in [c for c in ORDER if c in per] + sorted(set(per) - set(ORDER)):
        rs = per[cfg]
        out.append("| %s | %s | %d |" % (LABEL.get(cfg, cfg), " | ".join(cell(rs, k) for k in STEPS), len(rs)))
    return "\n".join(out) + "\n"


def write_csv(path, rows, fields):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dirs", nargs="+")
    p.add_argument("--to")
    a = p.parse_args(argv)
    to = a.to or a.dirs[0]
    rows, problems, statuses = load(a.dirs)
    rel, orphans = stats.relative(rows)
    problems += ["round %d %s %s: no dedicated record in that round, so no ratio" % (r["round"], r["config"], r["server"]) for r in orphans]
    worst = stats.worst_rows([r for r in rel if r["config"] != stats.DEDICATED])
    summary = stats.summarise(rel + worst, ORDER)
    rounds = sorted({r["round"] for r in rel})
    os.makedirs(to, exist_ok=True)
    base = ["round", "config", "server"]
    per = [k + s for k in stats.FIELDS for s in ("", "_rel")]
    write_csv(os.path.join(to, "results.csv"), sorted(rel, key=lambda r: (r["round"], ORDER.index(r["config"]) if r["config"] in ORDER else 99, r["server"])),
              base + per + ["open_rate", "sm_count", "busy_share"] + list(STEPS) + list(IDLE))
    write_csv(os.path.join(to, "summary.csv"), summary,
              ["config", "server", "rounds"] + [k + s for k in per for s in ("", "_min", "_max")])
    with open(os.path.join(to, "results.json"), "w") as f:
        json.dump({"rows": rel, "summary": summary, "problems": problems, "status": statuses}, f, indent=1, sort_keys=True)
    md = markdown(summary, problems, statuses, rounds) + goal_section(summary) + priority_section(rel) + steps_section(rel) + seconds(rows, statuses)
    with open(os.path.join(to, "report.md"), "w") as f:
        f.write(md)
    sys.stdout.write(md)
    if not rel:
        print("report: no complete record with a dedicated one in its round", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
