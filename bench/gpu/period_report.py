"""Summary of bench/gpu/period.sh: period.txt clocks.csv -> the table (medians, min..max, clocks)."""
import sys, statistics, collections, datetime
rates = collections.defaultdict(list); spans = []
cur = {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] in ("start", "stop"):
        if f[0] == "start": cur[(f[1], f[2])] = float(f[3])
        else: spans.append((f[1], f[2], cur[(f[1], f[2])], float(f[3])))
        continue
    if len(f) == 3 and f[1].endswith("_per_s"):
        rates[(f[0], f[1][:-6])].append(float(f[2]))
    else:
        print("  (output)", line.rstrip())
samples = []
for line in open(sys.argv[2]):
    p = [x.strip() for x in line.split(",")]
    try:
        t = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        samples.append((t, float(p[1].split()[0]), float(p[2].split()[0]), float(p[4].split()[0])))
    except Exception:
        pass
clk = collections.defaultdict(list)
for label, kind, a, b in spans:
    s = [x for x in samples if a + 3.5 < x[0] < b - 0.3 and x[3] > 0]  # skip torch start-up
    if s:
        clk[(label, kind)].append((statistics.mean(x[1] for x in s), statistics.mean(x[2] for x in s), statistics.mean(x[3] for x in s)))
print("%-12s %-7s %9s %8s %18s %8s %8s %6s" % ("run", "kind", "rate", "share%", "min..max", "MHz", "W", "util"))
for (label, kind), v in sorted(rates.items()):
    if ("unl", kind) not in rates: continue
    base = statistics.median(rates[("unl", kind)])
    m = statistics.median(v)
    c = clk.get((label, kind)) or [(0, 0, 0)]
    print("%-12s %-7s %9.2f %8.1f %8.2f..%-8.2f %8.0f %8.0f %6.0f" % (label, kind, m, 100 * m / base, min(v), max(v),
          statistics.mean(x[0] for x in c), statistics.mean(x[1] for x in c), statistics.mean(x[2] for x in c)))
for k in sorted({l[:-2] for l, _ in rates if l.endswith("pair30")}):
    a, b = statistics.median(rates[(k + "30", "matmul")]), statistics.median(rates[(k + "70", "matmul")])
    print("%s 30:70 -> %.1f : %.1f" % (k, 100 * a / (a + b), 100 * b / (a + b)))
for l, kind in sorted(rates):
    if "pool" in l:
        v = rates[(l, kind)]
        print("%s: %d rates, sum per round ~ %.1f%% of unlimited" % (l, len(v), 100 * sum(v) / len(v) * 2 / statistics.median(rates[("unl", kind)])))
if ("nat", "small") in rates and ("unl", "small") in rates:
    n, u = statistics.median(rates[("nat", "small")]), statistics.median(rates[("unl", "small")])
    print("no limit: small-kernel loop under the library at %.1f%% of native (medians %.0f / %.0f)" % (100 * u / n, u, n))
