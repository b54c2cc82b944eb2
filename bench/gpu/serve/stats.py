"""Statistics of the serving benchmark, without torch or numpy.

One server's run gives a record (server.py): closed-loop throughput and the
open loop's TTFT and inter-token latency (ITL) percentiles. Each record is
set against the dedicated server's record of the same round (a ratio), and
the ratios of all rounds are summarised by median, min and max.
"""
import statistics

# The measured fields of a record, and which way is better.
THROUGHPUT = "tok_per_s"
LATENCIES = ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99")
FIELDS = (THROUGHPUT,) + LATENCIES
DEDICATED = "dedicated"
WORST = "worst"  # the summary row of a configuration: its worst server in each round


def percentile(values, q):
    """The q-th percentile (0..100) by linear interpolation between order statistics (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError("percentile: q must be in 0..100, got %r" % (q,))
    v = sorted(values)
    pos = (len(v) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def latency_summary(requests):
    """TTFT and ITL percentiles (seconds) of finished requests; ITL pools every gap of every request."""
    if not requests:
        raise ValueError("latency summary of no finished requests")
    ttft = [r.ttft for r in requests]
    itl = [g for r in requests for g in r.itls]
    out = {
        "n": len(requests),
        "ttft_p50": percentile(ttft, 50),
        "ttft_p99": percentile(ttft, 99),
        "ttft_mean": statistics.fmean(ttft),
    }
    if itl:
        out.update(itl_p50=percentile(itl, 50), itl_p99=percentile(itl, 99), itl_mean=statistics.fmean(itl), itl_n=len(itl))
    return out


# The open loop's figures of the model's steps and idle gaps (engine.step_summary, engine.idle_summary), by
# prefix: the server keeps them in its record, and each becomes a column of its row.
STEP_FIGURES = ("prefill_", "decode_", "idle_")


def flatten(record):
    """A server's JSON record (server.py) -> one row: round, config, server and FIELDS."""
    row = {"round": int(record["round"]), "config": record["config"], "server": record["server"]}
    row[THROUGHPUT] = float(record["closed"]["tok_per_s"])
    for k in LATENCIES:
        row[k] = float(record["open"][k])
    for k, v in record["open"].items():
        if k == "busy_share" or k.startswith(STEP_FIGURES):
            row[k] = float(v)
    return row


def relative(rows):
    """Each row's FIELDS divided by the dedicated row's of the same round.

    The dedicated row is the one of config 'dedicated' (one server). A round
    without one cannot be set in relation: its rows are returned in `orphans`."""
    ded = {}
    for r in rows:
        if r["config"] == DEDICATED:
            if r["round"] in ded:
                raise ValueError("round %d has two dedicated records" % r["round"])
            ded[r["round"]] = r
    rel, orphans = [], []
    for r in rows:
        d = ded.get(r["round"])
        if d is None:
            orphans.append(r)
            continue
        x = dict(r)
        for k in FIELDS:
            x[k + "_rel"] = r[k] / d[k] if d[k] else float("nan")
        rel.append(x)
    return rel, orphans


def worst_rows(rel):
    """Per round and configuration, its worst server: lowest throughput ratio, highest latency ratios (each field on its own)."""
    groups = {}
    for r in rel:
        groups.setdefault((r["round"], r["config"]), []).append(r)
    out = []
    for (rnd, cfg), rs in sorted(groups.items()):
        w = {"round": rnd, "config": cfg, "server": WORST, "servers": len(rs)}
        w[THROUGHPUT + "_rel"] = min(r[THROUGHPUT + "_rel"] for r in rs)
        w[THROUGHPUT] = min(r[THROUGHPUT] for r in rs)
        for k in LATENCIES:
            w[k + "_rel"] = max(r[k + "_rel"] for r in rs)
            w[k] = max(r[k] for r in rs)
        out.append(w)
    return out


def summarise(rel, order=None):
    """Median, min and max over rounds of every ratio, per (config, server), in `order` of configs."""
    groups = {}
    for r in rel:
        groups.setdefault((r["config"], r["server"]), []).append(r)
    def key(k):
        cfg, srv = k
        pos = order.index(cfg) if order and cfg in order else len(order or ())
        return (pos, cfg, srv == WORST, srv)
    out = []
    for (cfg, srv) in sorted(groups, key=key):
        rs = groups[(cfg, srv)]
        s = {"config": cfg, "server": srv, "rounds": len(rs)}
        for k in FIELDS:
            for suffix in ("", "_rel"):
                vals = [r[k + suffix] for r in rs]
                s[k + suffix] = statistics.median(vals)
                s[k + suffix + "_min"] = min(vals)
                s[k + suffix + "_max"] = max(vals)
        out.append(s)
    return out


def goal(summary_row, min_throughput=0.85, max_itl_p99=1.3):
    """The goal of a sharing mode on the median of its worst server: throughput and ITL p99 against dedicated."""
    return (summary_row[THROUGHPUT + "_rel"] >= min_throughput
            and summary_row["itl_p99_rel"] <= max_itl_p99)


VGPU_MODES = ("ts50", "req50", "spatial50", "spatial100")


def overlaps(a, b, k):
    """Whether two summary rows' [min..max] over rounds of field k overlap: within the run-to-run noise."""
    return a[k + "_min"] <= b[k + "_max"] and b[k + "_min"] <= a[k + "_max"]


def best_mode(worst_rows):
    """vgpu's best mode among the 'worst' summary rows given: one that meets the goal with the highest
    throughput, else the highest throughput."""
    modes = [r for r in worst_rows if r["config"] in VGPU_MODES]
    if not modes:
        return None
    return max(modes, key=lambda r: (goal(r), r[THROUGHPUT + "_rel"]))


def against(best, other):
    """How vgpu's best mode stands against another configuration (both 'worst' summary rows): ahead on
    throughput (higher median) and on ITL p99 (lower median), and within noise on each (ranges overlap)."""
    t, i = THROUGHPUT + "_rel", "itl_p99_rel"
    return {"ahead_throughput": best[t] > other[t], "ahead_itl_p99": best[i] < other[i],
            "noise_throughput": overlaps(best, other, t), "noise_itl_p99": overlaps(best, other, i)}
