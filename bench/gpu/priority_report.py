"""The tables of bench/gpu/priority-probe.sh and bench/gpu/priority.sh.

  priority_report.py probe RESULTS CLOCKS   the light/flood settings
  priority_report.py colo RESULTS CLOCKS    a light tenant beside GPT-2 training
  priority_report.py req RESULTS CLOCKS     busy pairs with requests and priorities

RESULTS holds 'LABEL ROUND …' lines (prioprobe-lib.sh and priority.sh say
which); CLOCKS is nvidia-smi's 'timestamp, clocks.sm, clocks.max.sm,
power.draw' every 500 ms. Every figure is a median over rounds with its range
[min-max]; each setting's SM clock and power are the samples inside its
measuring windows."""
import datetime
import statistics as st
import sys


def num(pairs):
    out = {}
    for k, v in pairs:
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def read(path):
    rows = []
    for line in open(path):
        f = line.split()
        if len(f) >= 3:
            rows.append(f)
    return rows


def clocks(path):
    out = []  # (unix, sm MHz, max MHz, W)
    try:
        lines = open(path).readlines()
    except OSError:
        return out
    for line in lines:
        p = [x.strip() for x in line.split(",")]
        try:
            t = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((t, float(p[1]), float(p[2]), float(p[3])))
        except (ValueError, IndexError):
            pass
    return out


def spread(xs, fmt="%.2f"):
    xs = [x for x in xs if x == x]
    if not xs:
        return "-"
    return (fmt + " [" + fmt + "-" + fmt + "]") % (st.median(xs), min(xs), max(xs))


class Windows:
    def __init__(self, rows, samples):
        self.win, self.samples = {}, samples
        for f in rows:
            if f[2] == "window" and len(f) >= 5:
                self.win.setdefault(f[0], []).append((float(f[3]), float(f[4])))
            elif f[2] == "light_gpu_ms_mean" and len(f) >= 7:  # tenant.py's light
                self.win.setdefault(f[0], []).append((float(f[5]), float(f[6])))

    def clock(self, label):
        s = [(c, w) for (t, c, m, w) in self.samples for (a, b) in self.win.get(label, []) if a <= t <= b]
        if not s:
            return "-", "-"
        c = [x[0] for x in s]
        return "%.0f [%.0f-%.0f]" % (st.median(c), min(c), max(c)), "%.0f" % st.median([x[1] for x in s])

    def footer(self):
        m = sorted({x[2] for x in self.samples})
        return "SM clock max reported: %s MHz; %d samples of nvidia-smi" % (" ".join("%.0f" % v for v in m) or "-", len(self.samples))


def order_of(rows, kinds):
    seen = []
    for f in rows:
        if f[2] in kinds and f[0] not in seen:
            seen.append(f[0])
    return seen


def probe(rows, w):
    light, flood = {}, {}
    for f in rows:
        if f[2] == "light" and len(f) > 3 and f[3].startswith("n="):
            d = num(zip(f[4::2], f[5::2]))
            d["n"] = float(f[3][2:])
            light.setdefault(f[0], []).append(d)
        elif f[2] == "flood":
            d = num(zip(f[4::2], f[5::2]))
            if "active_pct" in d:
                flood.setdefault(f[0], []).append(d["active_pct"])
    print("light tenant: one kernel on every SM per request; ms as median [min-max] over rounds")
    print("start = launch call -> first block running; done = launch call -> wait returns;")
    print("x alone = start/done p99 over the same family's -alone setting (nat-, mps-, vg-)")
    print("%-13s %3s  %-20s %-20s %-20s %-20s %-6s %-6s %-17s %-4s %s" % (
        "setting", "n", "start p50", "start p99", "done p50", "done p99", "s99x", "d99x", "SM MHz", "W", "flood busy %"))
    for k in order_of(rows, ("light",)):
        xs = light[k]
        base = light.get(k.split("-")[0] + "-alone", [])

        def ratio(key):
            b = [x[key] for x in base]
            return "%.2f" % (st.median([x[key] for x in xs]) / st.median(b)) if b and st.median(b) > 0 else "-"
        c, pw = w.clock(k)
        print("%-13s %3d  %-20s %-20s %-20s %-20s %-6s %-6s %-17s %-4s %s" % (
            k, len(xs), spread([x["start_p50_ms"] for x in xs]), spread([x["start_p99_ms"] for x in xs]),
            spread([x["done_p50_ms"] for x in xs]), spread([x["done_p99_ms"] for x in xs]),
            ratio("start_p99_ms"), ratio("done_p99_ms"), c, pw, spread(flood.get(k, []), "%.1f")))
    cal = [x["calib_rtt_us"] for v in light.values() for x in v if "calib_rtt_us" in x]
    neg = sum(int(x.get("neg_start", 0)) for v in light.values() for x in v)
    short = ["%s r%d n=%d" % (k, i + 1, x["n"]) for k, v in light.items() for i, x in enumerate(v) if x.get("n", 0) < 100]
    if cal:
        print("clock calibration round trip: median %.1f us, max %.1f us (a start is within half of it); "
              "starts before their launch: %d" % (st.median(cal), max(cal), neg))
    if short:
        print("runs cut short by MAX_S (fewer than 100 requests): " + ", ".join(short))


def colo(rows, w):
    L, S, La, W = {}, {}, {}, {}
    for f in rows:
        k = (f[0], f[1])
        if f[2] == "light" and len(f) > 3 and f[3].startswith("n="):
            d = num(zip(f[4::2], f[5::2]))
            L.setdefault(k, {}).update(p50=d.get("p50_ms"), p99=d.get("p99_ms"))
        elif f[2] == "light_gpu_ms_mean":
            L.setdefault(k, {}).update(gpu=float(f[3]))
            W[k] = (float(f[5]), float(f[6]))
        elif f[2] == "launch":
            La[k] = float(f[3])
        elif f[2] == "steps" and len(f) == 5:
            S.setdefault(k, []).append((float(f[3]), int(f[4])))

    def rate(pts, a, b):
        inside = [p for p in pts if a <= p[0] <= b]
        if len(inside) < 2:
            return float("nan")
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
    labels = [x for x in order_of(rows, ("light",)) if x != "alone"]
    rounds = sorted({k[1] for k in L}, key=int)
    print("light tenant (bench/gpu/tenant.py light) beside GPT-2 training; median [min-max] over rounds")
    print("share = the light tenant's device time alone / its interval; train = steps/s beside it, and in %")
    print("of the native training alone x (1 - share) (item 1: >= 90); light p99 x alone (item 1: <= 1.5, stretch 1.3)")
    print("%-9s %-20s %-20s %-7s %-18s %-18s %-17s %s" % (
        "setting", "light p50 ms", "light p99 ms", "p99x", "train steps/s", "train % target", "SM MHz", "W"))
    alone99 = [L.get(("alone", r), {}).get("p99") for r in rounds]
    alone99 = [x for x in alone99 if x is not None]
    a50 = [L.get(("alone", r), {}).get("p50") for r in rounds]
    c, pw = w.clock("alone")
    print("%-9s %-20s %-20s %-7s %-18s %-18s %-17s %s" % ("alone", spread([x for x in a50 if x is not None]), spread(alone99), "1.00", "-", "-", c, pw))
    iv = float(__import__("os").environ.get("INTERVAL_MS", "8"))
    for lab in labels:
        p50, p99, tr, pct, ratio = [], [], [], [], []
        for r in rounds:
            x = L.get((lab, r), {})
            al = L.get(("alone", r), {})
            if x.get("p99") is None:
                continue
            p50.append(x["p50"])
            p99.append(x["p99"])
            if al.get("p99"):
                ratio.append(x["p99"] / al["p99"])
            share = al.get("gpu", float("nan")) / iv
            sn = S.get(("nat", r), [])
            alone = rate(sn, sn[0][0], La[("nat", r)]) if sn and ("nat", r) in La else float("nan")
            win = W.get((lab, r))
            pr = rate(S.get((lab, r), []), win[0], win[1]) if win else float("nan")
            tr.append(pr)
            pct.append(100 * pr / (alone * (1 - share)))
        c, pw = w.clock(lab)
        print("%-9s %-20s %-20s %-7s %-18s %-18s %-17s %s" % (
            lab, spread(p50), spread(p99), "%.2f" % st.median(ratio) if ratio else "-", spread(tr), spread(pct, "%.1f"), c, pw))
    # the training alone, before the light tenant starts, in each pair
    al = []
    for lab in labels:
        v = []
        for r in rounds:
            s = S.get((lab, r), [])
            if s and (lab, r) in La:
                v.append(rate(s, s[0][0], La[(lab, r)]))
        al.append("%s %s" % (lab, spread(v)))
    print("training alone before the light tenant starts, steps/s: " + "; ".join(al))
    sh = [L.get(("alone", r), {}).get("gpu", float("nan")) / iv * 100 for r in rounds]
    print("light tenant's native busy share: %s %%" % spread(sh, "%.1f"))


def req(rows, w):
    act = {}
    for f in rows:
        if f[2] == "active_pct":
            act.setdefault(f[0], {})[f[1]] = float(f[3])
    rounds = sorted({r for v in act.values() for r in v}, key=int)
    nat = st.median([act["nat"][r] for r in rounds if r in act.get("nat", {})]) if "nat" in act else float("nan")
    print("busy tenants by device time counted on the device (bench/gpu/spin.cu active %%); native alone %.1f %%" % nat)
    print("%-8s %-24s %-24s %-14s %-10s %-17s %s" % ("pair", "first (req, prio) %", "second (req, prio) %", "split first", "sum % nat", "SM MHz", "check"))
    if "R1low" in act:
        v = [act["R1low"][r] for r in rounds if r in act["R1low"]]
        c, _ = w.clock("R1low")
        print("R1low: request 30, priority low, alone: %s %% = %.1f %% of native (>= 95) %s; SM MHz %s" % (
            spread(v, "%.1f"), 100 * st.median(v) / nat, "ok" if st.median(v) >= 0.95 * nat else "MISSED", c))
    pairs = sorted({k[:-1] for k in act if k.endswith("a") and k[:-1] + "b" in act})
    for p in pairs:
        a, b = act[p + "a"], act[p + "b"]
        rs = [r for r in rounds if r in a and r in b]
        sa, sb = [a[r] for r in rs], [b[r] for r in rs]
        split = [100 * x / (x + y) for x, y in zip(sa, sb) if x + y > 0]
        tot = [100 * (x + y) / nat for x, y in zip(sa, sb)]
        c, _ = w.clock(p + "a")
        meta = REQ_META.get(p, ("?", "?", "?", "?"))
        checks = []
        if meta[1] == meta[3]:  # equal priority: the spare split by request
            checks.append("37.5 +- 3 %s" % ("ok" if split and abs(st.median(split) - 37.5) <= 3 else "MISSED"))
        # each at least its request (of the native device time), within 3 points
        checks.append("requests %s" % ("ok" if sa and st.median(sa) >= float(meta[0]) * nat / 100 - 3 and st.median(sb) >= float(meta[2]) * nat / 100 - 3 else "MISSED"))
        checks.append("sum >= 97 %s" % ("ok" if tot and st.median(tot) >= 97 else "MISSED"))
        print("%-8s %-24s %-24s %-14s %-10s %-17s %s" % (
            p, "%s %s: %s" % (meta[0], meta[1], spread(sa, "%.1f")), "%s %s: %s" % (meta[2], meta[3], spread(sb, "%.1f")),
            spread(split, "%.1f"), spread(tot, "%.1f"), c, "; ".join(checks)))


# pair -> (first request, its priority, second request, its priority); priority.sh's PHASE=req
REQ_META = {"eq": ("30", "normal", "50", "normal"), "hl": ("30", "high", "50", "low"),
            "lh": ("30", "low", "50", "high"), "hh": ("30", "high", "50", "high")}

if __name__ == "__main__":
    mode, res, clk = sys.argv[1], sys.argv[2], sys.argv[3]
    rows = read(res)
    w = Windows(rows, clocks(clk))
    {"probe": probe, "colo": colo, "req": req}[mode](rows, w)
    print(w.footer())
