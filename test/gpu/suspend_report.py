"""The report of test/gpu/suspend.sh.

  suspend_report.py TENANTS EVENTS APPS BORROW_GIB

TENANTS: the tenants' lines, labelled 'ref 0 …', 'borrower R …', 'owner-FW R
…' (suspend_trainer.py, suspend_owner.py) and the script's own 'rc' and
'restored_step_after_s' lines; EVENTS: vgpu node's events.jsonl; APPS:
'UNIX pid, used_mib' samples of nvidia-smi's compute processes ('UNIX end'
closes a sample). Prints per round and over rounds what the header of
suspend.sh lists, with PASS or FAIL per check; exits 1 on a FAIL."""
import datetime
import json
import re
import statistics as st
import sys

tenants, events_path, apps_path, borrow_gib = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])


def kv(fields):
    return dict(x.split("=", 1) for x in fields if "=" in x)


ref = {}
rounds = {}  # r -> {"steps": [(i, t, hex)], "ready": {}, "done": {}, "rc": int, "owners": {fw: {...}}}
for line in open(tenants):
    f = line.split()
    if len(f) < 3:
        continue
    who, r, rest = f[0], f[1], f[2:]
    if who == "ref":
        if rest[0] == "step" and len(rest) >= 4:
            ref[int(rest[1])] = rest[3]
        continue
    if who == "round":
        continue
    d = rounds.setdefault(r, {"steps": [], "ready": {}, "done": {}, "rc": None, "owners": {}})
    if who == "borrower":
        if rest[0] == "step" and len(rest) >= 4:
            d["steps"].append((int(rest[1]), float(rest[2]), rest[3]))
        elif rest[0] == "ready":
            d["ready"] = kv(rest[1:])
        elif rest[0] == "done":
            d["done"] = kv(rest[1:])
        elif rest[0] == "rc":
            d["rc"] = int(rest[1])
    elif who.startswith("owner-"):
        fw = who[len("owner-"):]
        o = d["owners"].setdefault(fw, {"allocs": [], "rc": None, "oom": None, "start": None, "exit": None, "restored": None})
        if rest[0] == "owner_alloc":
            a = kv(rest[1:])
            o["allocs"].append((float(a["s"]), float(a["t"])))
        elif rest[0] == "owner_start":
            o["start"] = float(kv(rest[1:])["t"])
        elif rest[0] == "owner_oom":
            o["oom"] = " ".join(rest[1:])
        elif rest[0] == "rc":
            o["rc"], o["exit"] = int(rest[1]), float(rest[2])
        elif rest[0] == "restored_step_after_s":
            o["restored"] = float(rest[1])

events = []
try:
    for line in open(events_path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        t = e.get("time", "")
        try:
            e["_t"] = datetime.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
        except ValueError:
            e["_t"] = 0.0
        events.append(e)
except OSError:
    pass

apps = []  # (t, {pid: MiB})
cur, cur_t = {}, None
try:
    for line in open(apps_path):
        f = line.split(None, 1)
        if len(f) < 2:
            continue
        t = float(f[0])
        if f[1].strip() == "end":
            apps.append((t, cur))
            cur = {}
            continue
        p = [x.strip() for x in f[1].split(",")]
        try:
            cur[int(p[0])] = float(p[1])
        except (ValueError, IndexError):
            pass
except OSError:
    pass

fails = []


def go_duration(text):
    """Seconds of a Go time.Duration string (1m2.5s, 850ms, 4.123s)."""
    unit = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    parts = re.findall(r"([0-9.]+)(h|ms|us|µs|ns|m|s)", text)
    return sum(float(v) * unit[u] for v, u in parts) if parts else None


def check(ok, what):
    if not ok:
        fails.append(what)
    return "PASS" if ok else "FAIL"


print("borrower: request 8 GiB / limit 40 GiB, holding %.0f GiB; reference: %d undisturbed steps" % (borrow_gib, len(ref)))
kills = [e for e in events if e.get("kind") == "kill"]
susp_ev = [e for e in events if "suspend" in e.get("kind", "") or "restore" in e.get("kind", "")]
summary = {}
for r in sorted(rounds, key=int):
    d = rounds[r]
    print("== round %s" % r)
    pid = int(d["ready"].get("pid", "0") or 0)
    # a kill of the borrower also empties its memory: that is no suspension
    killed = [e for e in kills if int(e.get("pid") or 0) == pid]
    # only samples that listed something (the holder always is): a failed
    # nvidia-smi call is no sign of a suspension
    series = [(t, s.get(pid)) for t, s in apps if s]
    full = max([m for _, m in series if m] or [0])
    steps = d["steps"]
    dt = [b[1] - a[1] for a, b in zip(steps, steps[1:])]
    norm = st.median(dt) if dt else 0.0
    gaps = [(a[1], b[1] - a[1] - norm) for a, b in zip(steps, steps[1:]) if b[1] - a[1] > max(0.25, 5 * norm)]
    mism = [i for i, _, h in steps if i in ref and ref[i] != h]
    beyond = [i for i, _, _ in steps if i not in ref]
    for fw, o in d["owners"].items():
        allocs = [a[0] for a in o["allocs"]]
        worst = max(allocs) if allocs else float("nan")
        # from nvidia-smi: the borrower's memory gone after the owner's slowest
        # allocation began to wait (the suspension, the node's round
        # included), and back after the owner left (the restore, likewise)
        t0 = o["start"] or 0
        t_exit = o["exit"] or 0
        slow = max(o["allocs"]) if o["allocs"] else None
        t_wait = slow[1] - slow[0] if slow else t0
        gone = [t for t, m in series if t_wait <= t <= t_exit and not m]
        back = [t for t, m in series if t > t_exit and m and m >= 0.9 * full]
        t_gone = gone[0] if gone and not killed else None
        susp_s = (t_gone - t_wait) if t_gone else None
        rest_s = (back[0] - t_exit) if back else None
        lost = sum(g for t, g in gaps if t0 - 2 <= t <= t_exit)
        ev = [e for e in susp_ev if t0 - 5 <= e["_t"] <= t_exit + 60]
        def gibs(kind):
            # vgpu node's 'suspended 36.0 GiB to host memory in 4.1s: …' /
            # 'restored … to the GPU in 2.5s after …': the bytes are the
            # event's used, the time Go's duration after ' in '
            out = []
            for e in ev:
                m = re.search(r" in ((?:[0-9.]+(?:h|m|s|ms|us|µs|ns))+)", e.get("detail", ""))
                secs = go_duration(m.group(1)) if m else None
                if e.get("kind") == kind and secs and e.get("used"):
                    out.append(float(e["used"]) / (1 << 30) / secs)
            return out
        rates, rrates = gibs("suspend"), gibs("restore")
        print("  owner %-5s rc %s, %d allocations of 1 GiB, slowest %.3f s (all: %s)%s" % (
            fw, o["rc"], len(allocs), worst, " ".join("%.3f" % a for a in allocs), "; OOM " + o["oom"] if o["oom"] else ""))
        print("    borrower: memory gone %s s after the slowest allocation began (suspend, >= %s GiB/s); back %s s after the owner's exit (restore, the node's round included)%s; next step %s s after the exit; lost %.2f s of steps" % (
            "%.2f" % susp_s if susp_s is not None else "-",
            "%.1f" % (borrow_gib / susp_s) if susp_s else "-",
            "%.2f" % rest_s if rest_s is not None else "-",
            ", %.1f GiB/s" % (borrow_gib / rest_s) if rest_s else "",
            "%.2f" % o["restored"] if o["restored"] is not None else "-", lost))
        for e in ev:
            print("    event %s %s container=%s pid=%s used=%s %s%s" % (
                e.get("time"), e.get("kind"), e.get("container"), e.get("pid"), e.get("used"), e.get("detail", ""),
                " error=" + e["error"] if e.get("error") else ""))
        suspended = bool(t_gone) or any("suspend" in e.get("kind", "") for e in ev)
        # the copy time: by the node's events' GiB/s, else nvidia-smi's; not
        # measured at all, the slowest allocation is held to 2 s
        copy = borrow_gib / st.median(rates) if rates else (susp_s if susp_s is not None else 0.0)
        bound = 2.0 + copy
        print("    %s allocations all succeeded, slowest %.3f s <= 2 s + copy time (%.2f s%s) = %.2f" % (
            check(o["rc"] == 0 and not o["oom"] and worst <= bound, "round %s %s: allocations" % (r, fw)), worst, copy,
            ", by events" if rates else ", by nvidia-smi" if susp_s is not None else ": not measured", bound))
        print("    %s borrower suspended while the owner ran; %s restored after it left" % (
            check(suspended, "round %s %s: not suspended" % (r, fw)),
            check(o["restored"] is not None and o["restored"] > 0, "round %s %s: not restored" % (r, fw))))
        s = summary.setdefault(fw, {"worst": [], "susp": [], "rest": [], "lost": [], "ev_rate": [], "ev_rrate": []})
        s["worst"].append(worst)
        s["lost"].append(lost)
        if susp_s:
            s["susp"].append(borrow_gib / susp_s)
        if rest_s:
            s["rest"].append(borrow_gib / rest_s)
        s["ev_rate"] += rates
        s["ev_rrate"] += rrates
    print("  borrower: %d steps, normal step %.1f ms, gaps %s; rc %s; %s" % (
        len(steps), 1e3 * norm, " ".join("%.2fs" % g for _, g in gaps) or "none", d["rc"], " ".join("%s=%s" % kv_ for kv_ in d["done"].items())))
    print("  %s no process killed (kill events: %d; borrower rc %s, owners rc %s)" % (
        check(not killed and d["rc"] == 0 and all(o["rc"] == 0 for o in d["owners"].values()), "round %s: a process killed or failed" % r),
        len(killed), d["rc"], ",".join(str(o["rc"]) for o in d["owners"].values())))
    print("  %s loss sequence equals the reference's: %d steps compared, %d differ%s%s" % (
        check(steps and not mism and not beyond and d["done"].get("ballast_intact") == "True", "round %s: loss sequence or ballast" % r),
        len(steps) - len(beyond), len(mism), " (first at step %d)" % mism[0] if mism else "",
        "; %d steps beyond the reference" % len(beyond) if beyond else ""))

print("== over rounds: median [min-max]")


def spread(xs, fmt="%.2f"):
    xs = [x for x in xs if x == x]
    return (fmt + " [" + fmt + "-" + fmt + "]") % (st.median(xs), min(xs), max(xs)) if xs else "-"


for fw, s in summary.items():
    print("  %-5s slowest allocation %s s; suspend >= %s GiB/s, restore >= %s GiB/s (nvidia-smi); by the events: suspend %s, restore %s GiB/s; borrower lost %s s" % (
        fw, spread(s["worst"], "%.3f"), spread(s["susp"], "%.1f"), spread(s["rest"], "%.1f"), spread(s["ev_rate"], "%.1f"),
        spread(s["ev_rrate"], "%.1f"), spread(s["lost"])))
if kills:
    print("kill events:")
    for e in kills:
        print("  " + json.dumps({k: v for k, v in e.items() if k != "_t"}))
kinds = sorted({str(e.get("kind")) for e in events})
print("events by kind: %s" % (", ".join("%s %d" % (k, sum(1 for e in events if str(e.get("kind")) == k)) for k in kinds) or "none"))
print("== result: %s" % ("PASS" if not fails else "FAIL (%s)" % "; ".join(fails)))
sys.exit(1 if fails else 0)
