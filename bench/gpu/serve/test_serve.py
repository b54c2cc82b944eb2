"""CPU tests of the serving benchmark's scheduling, load generation, statistics and driver.

No torch: the model is fake.FakeModel on fake.FakeClock (time moves only
when the model spends it), so every figure below is exact. Run:
  python3 -m unittest discover -s bench/gpu/serve -p 'test_*.py'
"""
import contextlib
import csv
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import engine  # noqa: E402
import fake  # noqa: E402
import report  # noqa: E402
import stats  # noqa: E402

P, D = 0.004, 0.002  # the fake model's prefill and decode-step times


def make(slots=4, new=8, per_step=1, prefill_s=P, decode_s=D):
    clock = fake.FakeClock()
    m = fake.FakeModel(clock, prefill_s, decode_s)
    return engine.Engine(m, clock, slots=slots, new_tokens=new, prefills_per_step=per_step), m, clock


class EngineTest(unittest.TestCase):
    def test_every_request_gets_its_own_tokens(self):
        eng, m, clock = make(slots=4, new=8)
        reqs = [eng.submit(clock.now(), 1000 + i) for i in range(11)]
        engine.drain(eng)
        for r in reqs:
            self.assertEqual(r.tokens, [fake.token(r.prompt_seed, k) for k in range(8)], "request %d" % r.id)
            self.assertEqual(len(r.times), 8)
            self.assertTrue(all(b > a for a, b in zip(r.times, r.times[1:])))
        self.assertEqual(m.prefills, 11)
        self.assertLessEqual(max(m.batch_sizes), 4)
        self.assertEqual(eng.active, 0)

    def test_admission_is_fifo_and_bounded_per_step(self):
        eng, m, clock = make(slots=3, new=5, per_step=1)
        reqs = [eng.submit(clock.now(), i) for i in range(7)]
        engine.drain(eng)
        admitted = [r.admitted for r in reqs]
        self.assertEqual(admitted, sorted(admitted))
        self.assertEqual(len(set(admitted)), len(admitted), "one prefill per step")
        eng2, _, c2 = make(slots=3, new=5, per_step=3)
        rs = [eng2.submit(c2.now(), i) for i in range(3)]
        eng2.step()
        self.assertEqual([r.slot for r in rs], [0, 1, 2], "three prefills in one step when allowed")

    def test_latencies_alone_and_the_prefill_stall(self):
        eng, m, clock = make(slots=2, new=6)
        a = eng.submit(clock.now(), 1)
        eng.step()
        eng.step()
        b = eng.submit(clock.now(), 2)  # arrives while a is decoding
        engine.drain(eng)
        self.assertAlmostEqual(a.ttft, P, places=12)
        # a's gaps are one decode step each, except the step that admitted b: a prefill plus a decode
        self.assertEqual([round(g, 9) for g in a.itls], [D, D, round(P + D, 9), D, D])
        self.assertAlmostEqual(b.ttft, P, places=12)

    def test_ttft_counts_the_queue(self):
        eng, m, clock = make(slots=1, new=4)
        t0 = clock.now()
        a = eng.submit(t0, 1)
        b = eng.submit(t0, 2)
        engine.drain(eng)
        self.assertAlmostEqual(a.ttft, P, places=12)
        # b waits for all of a (prefill and 3 decode steps), then its own prefill
        self.assertAlmostEqual(b.ttft, (P + 3 * D) + P, places=12)

    def test_bad_sizes(self):
        with self.assertRaisesRegex(ValueError, "slots"):
            make(slots=0)


class ClosedLoopTest(unittest.TestCase):
    def test_throughput_is_the_analytic_rate(self):
        # one slot, 4 tokens: prefill + 3 decode steps per request = 4 tokens in P + 3D
        eng, m, clock = make(slots=1, new=4)
        res = engine.closed_loop(eng, clients=1, duration=10.0, warmup=1.0)
        want = 4 / (P + 3 * D)
        self.assertLess(abs(res["tok_per_s"] - want), 0.2, res)
        self.assertAlmostEqual(res["req_per_s"], res["tok_per_s"] / 4)

    def test_keeps_every_slot_busy(self):
        eng, m, clock = make(slots=4, new=16)
        engine.closed_loop(eng, clients=4, duration=2.0, warmup=0.5)
        self.assertEqual(m.batch_sizes[:4], [1, 2, 3, 4])
        self.assertEqual(set(m.batch_sizes[3:]), {4}, "a finished request is replaced before the next decode step")

    def test_window_must_fit(self):
        eng, _, _ = make()
        with self.assertRaisesRegex(ValueError, "warmup"):
            engine.closed_loop(eng, clients=1, duration=1.0, warmup=1.0)


class OpenLoopTest(unittest.TestCase):
    def test_arrivals_are_seeded_poisson(self):
        take = lambda g, n: [next(g) for _ in range(n)]
        a = take(engine.poisson_arrivals(50.0, seed=7), 20000)
        self.assertEqual(a[:100], take(engine.poisson_arrivals(50.0, seed=7), 100))
        self.assertNotEqual(a[:100], take(engine.poisson_arrivals(50.0, seed=8), 100))
        gaps = [y - x for x, y in zip([0.0] + a, a)]
        mean = sum(gaps) / len(gaps)
        self.assertLess(abs(mean - 1 / 50.0) / (1 / 50.0), 0.03)
        # exponential gaps: the coefficient of variation is 1
        var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
        self.assertLess(abs(var ** 0.5 / mean - 1), 0.05)
        with self.assertRaisesRegex(ValueError, "rate"):
            next(engine.poisson_arrivals(0, seed=1))

    def test_light_load_sees_bare_latencies(self):
        eng, m, clock = make(slots=8, new=8)
        res = engine.open_loop(eng, rate=2.0, measured=50, seed=3, max_s=1000)
        self.assertTrue(res["complete"])
        s = stats.latency_summary(res["requests"])
        self.assertEqual(s["n"], 50)
        self.assertAlmostEqual(s["ttft_p50"], P, places=9)
        self.assertAlmostEqual(s["itl_p50"], D, places=9)

    def test_same_seed_same_run(self):
        runs = []
        for _ in range(2):
            eng, _, _ = make(slots=4, new=8)
            res = engine.open_loop(eng, rate=150.0, measured=100, seed=5, max_s=1000)
            runs.append(stats.latency_summary(res["requests"]))
        self.assertEqual(runs[0], runs[1])

    def test_overload_gives_up_and_says_so(self):
        eng, _, _ = make(slots=2, new=64)
        res = engine.open_loop(eng, rate=1000.0, measured=300, seed=1, max_s=1.0)
        self.assertFalse(res["complete"])
        self.assertLess(len(res["requests"]), 300)

    def test_busy_share_is_the_models_own_device_time(self):
        # light load: every request alone, a prefill and new-1 decode steps of its own
        eng, m, clock = make(slots=8, new=8)
        b0 = m.busy_s
        res = engine.open_loop(eng, rate=2.0, measured=50, seed=3, max_s=1000)
        spent = m.busy_s - b0
        self.assertAlmostEqual(res["busy_s"], spent, places=9)
        self.assertGreaterEqual(spent, 50 * (P + D) - 1e-9, "at least the sample's prefills and a decode step each")
        self.assertAlmostEqual(res["busy_share"], spent / res["duration_s"], places=9)
        self.assertLess(res["busy_share"], 0.1)  # 2 requests/s of 18 ms each: about 4 %
        # saturated: the fake model is busy whenever it is not waiting for an arrival
        eng, m, clock = make(slots=2, new=64)
        res = engine.open_loop(eng, rate=1000.0, measured=50, seed=1, max_s=1.0)
        self.assertGreater(res["busy_share"], 0.999)  # idle only until the first arrival
        # each step on the device and what it waited for besides (the fake's steps wait for nothing)
        eng, m, clock = make(slots=4, new=8)
        res = engine.open_loop(eng, rate=50.0, measured=40, seed=2, max_s=1000)
        self.assertEqual(res["prefill_n"], m.prefills)
        self.assertEqual(res["decode_n"], m.decodes)
        self.assertAlmostEqual(res["prefill_span_p50"], P, places=9)
        self.assertAlmostEqual(res["decode_span_p99"], D, places=9)
        self.assertAlmostEqual(res["decode_wait_p99"], 0.0, places=9)
        self.assertAlmostEqual(res["prefill_issue_p99"], 0.0, places=9)
        got = engine.step_summary([("decode", 0.001, 0.004, 0.0)] * 99 + [("decode", 0.003, 0.013, 0.002)])
        self.assertAlmostEqual(got["decode_wait_p50"], 0.003)
        self.assertAlmostEqual(got["decode_wait_p99"], 0.003 + 0.01 * 0.007)  # numpy's linear: index 98.01
        self.assertAlmostEqual(got["decode_span_p99"], 0.001 + 0.01 * 0.002)
        self.assertAlmostEqual(got["decode_issue_p50"], 0.0)
        self.assertAlmostEqual(got["decode_issue_p99"], 0.01 * 0.002)
        # a library that holds each step's launches: the hold is in the span (its first event comes before
        # the launches) and in the issue, not in the wait
        eng, m, clock = make(slots=4, new=8)
        m.hold_s = H = 0.0005
        res = engine.open_loop(eng, rate=50.0, measured=40, seed=2, max_s=1000)
        self.assertAlmostEqual(res["decode_span_p50"], H + D, places=9)
        self.assertAlmostEqual(res["prefill_issue_p50"], H, places=9)
        self.assertAlmostEqual(res["decode_issue_p99"], H, places=9)
        self.assertAlmostEqual(res["decode_wait_p99"], 0.0, places=9)
        # the device's idle gaps: before the first step, between steps, after the last; each gap's time past
        # the yield hold is what a lower tenant could start in
        h = engine.ORDER_YIELD_HOLD_S
        got = engine.idle_summary([("decode", 0.003, 0.0031, 0.0001, 10.0005), ("decode", 0.003, 0.0031, 0.0001, 10.0036),
                                   ("prefill", 0.004, 0.0041, 0.004, 10.0116)], 10.0, 10.0206)
        self.assertAlmostEqual(got["idle_gap_max"], 0.005, places=9)  # 10.0066 to 10.0116
        self.assertAlmostEqual(got["idle_gap_p50"], 0.00275, places=9)  # gaps 0.5, 0.1, 5 and 5 ms
        self.assertAlmostEqual(got["idle_past_hold_share"], 2 * (0.005 - h) / 0.0206, places=9)
        self.assertEqual(engine.idle_summary([("decode", 0.001, 0.001, 0.0)], 0.0, 1.0), {}, "steps without a start")
        # in a loop, all of the idle time is in the gaps
        eng, m, clock = make(slots=4, new=8)
        res = engine.open_loop(eng, rate=50.0, measured=40, seed=2, max_s=1000)
        self.assertGreater(res["idle_gap_max"], h)  # 50/s of about 30 ms each: gaps of many ms between requests
        self.assertLess(res["idle_past_hold_share"], 1 - res["busy_share"])
        self.assertGreater(res["idle_past_hold_share"], 1 - res["busy_share"] - 0.2)
        # a model that does not count: no figure rather than a wrong one
        eng, m, clock = make()
        eng.model = type("Uncounted", (), {"prefill": staticmethod(m.prefill), "decode": staticmethod(m.decode)})()
        self.assertNotIn("busy_share", engine.open_loop(eng, rate=2.0, measured=5, seed=3, max_s=1000))

    def test_load_stays_on_for_the_peers(self):
        eng, m, clock = make(slots=4, new=8)
        calls = {"done": 0, "keep": 0}
        def keep():
            calls["keep"] += 1
            return calls["keep"] < 200  # a peer still measuring
        res = engine.open_loop(eng, rate=100.0, measured=20, seed=2, max_s=1000, keep_going=keep,
                               done_cb=lambda: calls.__setitem__("done", calls["done"] + 1))
        self.assertTrue(res["complete"])
        self.assertEqual(calls["done"], 1)
        self.assertGreater(eng.next_id, 20, "arrivals went on after the sample")
        self.assertEqual(len(res["requests"]), 20)


class StatsTest(unittest.TestCase):
    def test_percentile_is_numpys_linear(self):
        v = list(range(1, 101))
        self.assertAlmostEqual(stats.percentile(v, 50), 50.5)
        self.assertAlmostEqual(stats.percentile(v, 99), 99.01)
        self.assertAlmostEqual(stats.percentile([3, 1, 2], 0), 1)
        self.assertAlmostEqual(stats.percentile([3, 1, 2], 100), 3)
        self.assertAlmostEqual(stats.percentile([5.0], 99), 5.0)
        self.assertAlmostEqual(stats.percentile([1, 2, 3, 4], 25), 1.75)
        with self.assertRaises(ValueError):
            stats.percentile([], 50)

    @staticmethod
    def row(rnd, cfg, srv, thr, itl99, ttft99=0.1):
        return {"round": rnd, "config": cfg, "server": srv, "tok_per_s": thr, "ttft_p50": 0.05,
                "ttft_p99": ttft99, "itl_p50": 0.01, "itl_p99": itl99}

    def test_ratios_use_the_same_rounds_dedicated(self):
        rows = [self.row(1, "dedicated", "A", 1000, 0.02), self.row(2, "dedicated", "A", 2000, 0.04),
                self.row(1, "mps50", "A", 800, 0.03), self.row(2, "mps50", "A", 800, 0.03),
                self.row(3, "mps50", "A", 800, 0.03)]
        rel, orphans = stats.relative(rows)
        by = {(r["round"], r["config"]): r for r in rel}
        self.assertAlmostEqual(by[(1, "mps50")]["tok_per_s_rel"], 0.8)
        self.assertAlmostEqual(by[(2, "mps50")]["tok_per_s_rel"], 0.4)
        self.assertAlmostEqual(by[(1, "mps50")]["itl_p99_rel"], 1.5)
        self.assertAlmostEqual(by[(2, "mps50")]["itl_p99_rel"], 0.75)
        self.assertEqual([(o["round"], o["config"]) for o in orphans], [(3, "mps50")])
        with self.assertRaisesRegex(ValueError, "two dedicated"):
            stats.relative(rows + [self.row(1, "dedicated", "A", 1, 1)])

    def test_worst_server_and_spread_over_rounds(self):
        rows = []
        for rnd, (a, b) in enumerate([(900, 700), (850, 950), (600, 800)], start=1):
            rows += [self.row(rnd, "dedicated", "A", 1000, 0.010),
                     self.row(rnd, "ts50", "A", a, 0.010 * rnd), self.row(rnd, "ts50", "B", b, 0.020)]
        rel, _ = stats.relative(rows)
        worst = stats.worst_rows([r for r in rel if r["config"] != "dedicated"])
        self.assertEqual([w["tok_per_s_rel"] for w in worst], [0.7, 0.85, 0.6])
        self.assertEqual([w["itl_p99_rel"] for w in worst], [2.0, 2.0, 3.0])
        summary = {(s["config"], s["server"]): s for s in stats.summarise(rel + worst, ["dedicated", "ts50"])}
        w = summary[("ts50", "worst")]
        self.assertAlmostEqual(w["tok_per_s_rel"], 0.7)
        self.assertAlmostEqual(w["tok_per_s_rel_min"], 0.6)
        self.assertAlmostEqual(w["tok_per_s_rel_max"], 0.85)
        self.assertAlmostEqual(w["itl_p99_rel"], 2.0)
        self.assertEqual(w["rounds"], 3)
        self.assertAlmostEqual(summary[("ts50", "A")]["tok_per_s_rel"], 0.85)
        self.assertFalse(stats.goal(w))
        self.assertEqual(list(summary)[0], ("dedicated", "A"), "in the order given")

    def test_best_mode_and_how_it_stands(self):
        row = lambda cfg, t, tlo, thi, i, ilo, ihi: {
            "config": cfg, "server": "worst", "tok_per_s_rel": t, "tok_per_s_rel_min": tlo, "tok_per_s_rel_max": thi,
            "itl_p99_rel": i, "itl_p99_rel_min": ilo, "itl_p99_rel_max": ihi}
        ts = row("ts50", 0.61, 0.60, 0.66, 2.8, 2.2, 7.8)
        sp = row("spatial50", 0.84, 0.80, 0.88, 1.2, 1.1, 1.3)
        req = row("req50", 0.90, 0.88, 0.92, 1.5, 1.4, 1.6)  # more throughput, but misses the ITL goal
        self.assertIs(stats.best_mode([ts, sp, req, row("mps50", 0.9, 0.9, 0.9, 1, 1, 1)]), req)
        ok = row("spatial50", 0.86, 0.85, 0.88, 1.2, 1.1, 1.3)
        self.assertIs(stats.best_mode([ts, ok, req]), ok, "one that meets the goal first")
        self.assertIsNone(stats.best_mode([row("mps50", 0.9, 0.9, 0.9, 1, 1, 1)]))
        mps = row("mps50", 0.87, 0.76, 0.93, 1.1, 0.95, 1.2)
        self.assertEqual(stats.against(ok, mps), {"ahead_throughput": False, "ahead_itl_p99": False,
                                                  "noise_throughput": True, "noise_itl_p99": True})
        unl = row("unlimited", 0.74, 0.73, 0.75, 1.35, 1.3, 1.4)
        a = stats.against(ok, unl)
        self.assertEqual((a["ahead_throughput"], a["ahead_itl_p99"], a["noise_throughput"]), (True, True, False))
        self.assertTrue(a["noise_itl_p99"], "1.1..1.3 touches 1.3..1.4")

    def test_goal(self):
        ok = {"tok_per_s_rel": 0.85, "itl_p99_rel": 1.3}
        self.assertTrue(stats.goal(ok))
        self.assertFalse(stats.goal(dict(ok, tok_per_s_rel=0.84)))
        self.assertFalse(stats.goal(dict(ok, itl_p99_rel=1.31)))


def record(rnd, cfg, srv, thr, itl99, complete=True, sm=132, ttft99=0.1, busy=None):
    op = {"rate": 10.0, "requests": 200, "finished": 200 if complete else 150, "complete": complete}
    if complete:
        op.update(ttft_p50=0.05, ttft_p99=ttft99, itl_p50=0.01, itl_p99=itl99)
    if busy is not None:
        op["busy_share"] = busy
    return {"round": rnd, "config": cfg, "server": srv, "closed": {"tok_per_s": thr}, "open": op, "sm_count": sm}


def write_run(d, recs):
    for r in recs:
        p = os.path.join(d, "r%d" % r["round"], r["config"])
        os.makedirs(p, exist_ok=True)
        with open(os.path.join(p, r["server"] + ".json"), "w") as f:
            json.dump(r, f)


def report_of(test, d, recs):
    """report.md of a run of recs written to d (report.py exits 0)."""
    write_run(d, recs)
    with contextlib.redirect_stdout(io.StringIO()):
        test.assertEqual(report.main([d]), 0)
    with open(os.path.join(d, "report.md")) as f:
        return f.read()


class ReportTest(unittest.TestCase):
    def test_tables_and_what_does_not_count(self):
        with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
            write_run(d1, [record(1, "dedicated", "A", 1000, 0.02), record(1, "mps50", "A", 900, 0.024, sm=66),
                           record(1, "mps50", "B", 880, 0.026, sm=66), record(1, "hami50", "A", 500, 0.05, complete=False)])
            # a second call's round, joined in the report
            write_run(d2, [record(2, "dedicated", "A", 1000, 0.02), record(2, "mps50", "A", 950, 0.022, sm=132),
                           record(2, "mps50", "B", 860, 0.030, sm=132)])
            with open(os.path.join(d2, "status.tsv"), "w") as f:
                f.write("round\tconfig\tstatus\tseconds\tnote\n2\tts50\tfailed\t30\tservers: A(exit 1)\n")
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(report.main([d1, d2, "--to", d1]), 0)
            with open(os.path.join(d1, "summary.csv")) as f:
                summary = {(r["config"], r["server"]): r for r in csv.DictReader(f)}
            w = summary[("mps50", "worst")]
            self.assertEqual(w["rounds"], "2")
            self.assertAlmostEqual(float(w["tok_per_s_rel"]), (0.88 + 0.86) / 2)
            self.assertAlmostEqual(float(w["itl_p99_rel"]), (1.3 + 1.5) / 2)
            with open(os.path.join(d1, "report.md")) as f:
                md = f.read()
            self.assertIn("plain MPS 50/50 | worst | 87.0 [86.0..88.0]", md)
            self.assertIn("round 1 hami50 A: open-loop sample incomplete", md)
            self.assertIn("round 2 mps50 A: saw 132 SMs, as many as dedicated", md)
            self.assertIn("round 2 ts50: failed", md)
            self.assertNotIn("## Against the goal", md, "no vgpu mode measured")
            with open(os.path.join(d1, "results.json")) as f:
                self.assertEqual(len(json.load(f)["rows"]), 6)
            # the same round twice is refused
            write_run(d2, [record(1, "dedicated", "A", 1000, 0.02)])
            with self.assertRaisesRegex(SystemExit, "round 1 dedicated A is in both"):
                report.main([d1, d2])


    def test_yield_hold_is_the_orders(self):
        # the report's ceiling for a batch server is computed at the order's own hold
        with open(os.path.join(HERE, "..", "..", "..", "internal", "arbiter", "order.go")) as f:
            m = re.search(r"^\s*OrderYieldHold\s*=\s*([0-9_]+)\s*// ns$", f.read(), re.M)
        self.assertIsNotNone(m, "OrderYieldHold's line in internal/arbiter/order.go")
        self.assertEqual(int(m.group(1).replace("_", "")), round(engine.ORDER_YIELD_HOLD_S * 1e9))

    def test_priority_item_against_the_busy_share(self):
        with tempfile.TemporaryDirectory() as d:
            # round 1: A busy 30 %, so B is owed 0.9 x 70 % = 63 %
            ded = record(1, "dedicated", "A", 1000, 0.02, busy=0.3)
            ded["open"].update(idle_gap_p50=0.001, idle_gap_p99=0.0045, idle_gap_max=0.2, idle_past_hold_share=0.125)
            md = report_of(self, d, [ded,
                                     record(1, "prio0", "A", 700, 0.023, ttft99=0.14), record(1, "prio0", "B", 640, 0.05),
                                     record(1, "prio50", "A", 700, 0.03, ttft99=0.14), record(1, "prio50", "B", 640, 0.05),
                                     record(1, "mpsprio", "A", 700, 0.02, ttft99=0.1), record(1, "mpsprio", "B", 620, 0.05),
                                     # round 3's dedicated server has no busy share (an older record): no row
                                     record(3, "dedicated", "A", 1000, 0.02), record(3, "prio0", "A", 700, 0.02),
                                     record(3, "prio0", "B", 900, 0.05),
                                     record(2, "dedicated", "A", 1000, 0.02, busy=0.4), record(2, "prio0", "A", 700, 0.02),
                                     record(2, "prio0", "B", 900, 0.05)])
            self.assertIn("## A priority between servers (item 2)", md)
            rows = [l for l in md.split("## A priority between servers")[1].splitlines() if l.startswith("| A open / B closed")]
            # every bound from both sides: TTFT 1.4 and ITL 1.15 within, B 64 % at 63 % owed: met
            self.assertIn("requests 50/0, priority high / low | 1 | 30.0 | 4.50 | 12.50 | 1.40 | 1.15 | 64.0 | 63.0 | yes |", md)
            # ITL 1.5x: not met
            self.assertIn("requests 50/50, priority high / low | 1 | 30.0 | 4.50 | 12.50 | 1.40 | 1.50 | 64.0 | 63.0 | no |", md)
            # B 62 % below its 63: not met
            self.assertIn("client priority 0 / 1 | 1 | 30.0 | 4.50 | 12.50 | 1.00 | 1.00 | 62.0 | 63.0 | no |", md)
            # a dedicated record from before the idle gaps were kept: '-' there
            self.assertIn("requests 50/0, priority high / low | 2 | 40.0 | - | - |", md)
            self.assertEqual(len(rows), 4, rows)
            with open(os.path.join(d, "results.csv")) as f:
                got = {(r["round"], r["config"], r["server"]): r["busy_share"] for r in csv.DictReader(f)}
            self.assertEqual(got[("1", "dedicated", "A")], "0.3")
            self.assertNotIn("## Server A's steps on the device", md, "no record has its steps")

    def test_server_a_steps_on_the_device(self):
        steps = lambda span, wait: {"decode_span_p50": span, "decode_span_p99": 2 * span, "decode_wait_p99": wait,
                                    "decode_issue_p99": 2 * wait, "prefill_span_p50": 3 * span,
                                    "prefill_span_p99": 4 * span, "prefill_issue_p50": 3 * wait,
                                    "prefill_issue_p99": 4 * wait}
        with tempfile.TemporaryDirectory() as d:
            recs = [record(1, "dedicated", "A", 1000, 0.02), record(1, "prio0", "A", 700, 0.03),
                    record(1, "prio0", "B", 600, 0.05), record(2, "dedicated", "A", 1000, 0.02),
                    record(2, "prio0", "A", 700, 0.03), record(2, "prio0", "B", 600, 0.05)]
            for r, st in zip(recs, [steps(0.001, 0.0001), steps(0.002, 0.001), steps(0.009, 0.009),
                                    steps(0.001, 0.0003), steps(0.004, 0.003), steps(0.009, 0.009)]):
                r["open"].update(st)
            md = report_of(self, d, recs).split("## Server A's steps on the device")[1]
            self.assertIn("| dedicated (one server alone) | 1.00 | 2.00 | 0.20 | 0.40 | 3.00 | 4.00 | 0.60 | 0.80 | 2 |", md)
            # A's own rows, medians of rounds 1 and 2; B's are not A's
            self.assertIn("requests 50/0, priority high / low | 3.00 | 6.00 | 2.00 | 4.00 | 9.00 | 12.00 | 6.00 | 8.00 | 2 |", md)

    def test_steps_from_before_the_issue_was_kept(self):
        # run 38's records have no issue figures: their rows show '-' there, not no row
        with tempfile.TemporaryDirectory() as d:
            recs = [record(1, "dedicated", "A", 1000, 0.02), record(1, "req50", "A", 700, 0.03),
                    record(1, "req50", "B", 700, 0.03)]
            for r in recs:
                r["open"].update({"decode_span_p50": 0.003, "decode_span_p99": 0.004, "decode_wait_p99": 0.0001,
                                  "prefill_span_p50": 0.012, "prefill_span_p99": 0.023})
            md = report_of(self, d, recs).split("## Server A's steps on the device")[1]
            self.assertIn("| dedicated (one server alone) | 3.00 | 4.00 | 0.10 | - | 12.00 | 23.00 | - | - | 1 |", md)


class DriverTest(unittest.TestCase):
    """run.sh: its checks before any device work, its order, and a whole run with the fake model."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.bin = os.path.join(self.tmp.name, "bin")
        self.lib = os.path.join(self.tmp.name, "lib")
        os.makedirs(self.bin)
        os.makedirs(self.lib)
        open(os.path.join(self.lib, "libvgpu-cuda.so"), "w").close()
        self.mps = os.path.join(self.bin, "nvidia-cuda-mps-control")
        self.vgpu_log = os.path.join(self.tmp.name, "vgpu.log")
        self.fake_vgpu(request_flag=True)
        # MPS's control program as the harness uses it: -d starts a daemon for
        # the pipe directory; 'quit' ends it; get_server_list answers while it is up
        with open(self.mps, "w") as f:
            f.write('#!/bin/sh\nd=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}\n'
                    'if [ "$1" = -d ]; then touch "$d/up"; exit 0; fi\nread cmd\n'
                    'case $cmd in quit) rm -f "$d/up";; get_server_list) [ -e "$d/up" ] || [ -S "$d/control" ];; esac\n')
        os.chmod(self.mps, 0o755)

    def fake_vgpu(self, request_flag, node_fails=False, priority_flag=True):
        """vgpu as the harness uses it: exec runs the command (and logs the config and whether a node is up),
        node keeps a heartbeat until SIGTERM (and on a [spatial] config an MPS control socket), status reads it."""
        p = os.path.join(self.bin, "vgpu")
        flags = "--compute-limit value\n--compute-request value\n" if request_flag else "--compute-limit value\n"
        flags += "--priority value\n" if priority_flag else ""
        up = os.path.join(self.tmp.name, "node.up")
        with open(p, "w") as f:
            f.write("""#!/bin/sh
state=$(sed -n 's/^state_dir = "\\(.*\\)"/\\1/p' "${VGPU_CONFIG:-/dev/null}")
case "$1" in
exec)
  if [ "$2" = --help ]; then printf -- '%(flags)s'; exit 0; fi
  echo "exec config=${VGPU_CONFIG:-none} node=$(cat %(up)s 2>/dev/null || echo none) $*" >> %(log)s
  while [ $# -gt 0 ] && [ "$1" != -- ]; do shift; done
  shift; exec "$@";;
node)
  %(fail)s
  echo "node config=${VGPU_CONFIG:-none} at $(date +%%s.%%N)" >> %(log)s
  if grep -q '^\\[spatial\\]' "$VGPU_CONFIG"; then
    mkdir -p "$state/.mps/GPU-fake/pipe"
    %(py)s -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$state/.mps/GPU-fake/pipe/control"
  fi
  echo "${VGPU_CONFIG:-none}" > %(up)s
  trap 'rm -f %(up)s; echo "node stopped at $(date +%%s.%%N)" >> %(log)s; exit 0' TERM
  while :; do sleep 0.05; done;;
status) if [ -e %(up)s ]; then echo "host enforcement: on"; else echo "host enforcement: off"; fi;;
*) printf -- '%(flags)s';;
esac
""" % {"flags": flags, "up": up, "log": self.vgpu_log, "py": sys.executable,
       "fail": 'echo "node: config: unknown key spatial" >&2; exit 1' if node_fails else ""})
        os.chmod(p, 0o755)

    def run_sh(self, **env):
        e = dict(os.environ, VGPU=os.path.join(self.bin, "vgpu"), LIBDIR=self.lib, MPS_CONTROL=self.mps,
                 OUT=os.path.join(self.tmp.name, "out"), PY=sys.executable)
        e.pop("HAMI_SRC", None)
        e.update(env)
        return subprocess.run(["bash", os.path.join(HERE, "run.sh")], env=e, capture_output=True, text=True, timeout=300)

    def statuses(self):
        with open(os.path.join(self.tmp.name, "out", "status.tsv")) as f:
            return [(s["round"], s["config"], s["status"]) for s in csv.DictReader(f, delimiter="\t")]

    def rec(self, rnd, cfg, srv):
        with open(os.path.join(self.tmp.name, "out", "r%d" % rnd, cfg, srv + ".json")) as f:
            return json.load(f)

    def test_request_flag_missing_is_one_clear_line(self):
        self.fake_vgpu(request_flag=False)
        p = self.run_sh(CONFIGS="dedicated req50", PLAN="1")
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("req50: '%s exec' has no --compute-request flag" % os.path.join(self.bin, "vgpu"), p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "out")), "nothing ran")
        self.fake_vgpu(request_flag=True)
        self.assertEqual(self.run_sh(CONFIGS="dedicated req50", PLAN="1").returncode, 0)

    def test_priority_flag_missing_is_one_clear_line(self):
        self.fake_vgpu(request_flag=True, priority_flag=False)
        p = self.run_sh(CONFIGS="dedicated prio50", PLAN="1")
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("prio50, prio0, priospatial100: '%s exec' has no --priority flag" % os.path.join(self.bin, "vgpu"), p.stderr)
        self.assertEqual(self.run_sh(CONFIGS="dedicated mixed mpsprio", PLAN="1").returncode, 0)
        self.fake_vgpu(request_flag=True)
        p = self.run_sh(CONFIGS="dedicated mixed prio50", PLAN="1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("serve: round 1: dedicated mixed prio50", p.stdout)

    def test_mixed_configurations_roles_and_priorities(self):
        cfgs = ["mixed", "mpsprio", "prio50", "prio0", "priospatial100"]
        p = self.run_sh(CONFIGS="dedicated " + " ".join(cfgs), ROUNDS="1", SERVER_ARGS=self.FAST, COMPUTE_PERIOD="100",
                        MIXED_A_CLOSED_S="0.4", MIXED_A_WARM="0.1", MIXED_B_S="1.5", MIXED_B_WARM="0.3")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual([(c, s) for _, c, s in self.statuses()], [(c, "ok") for c in ["dedicated"] + cfgs])
        for cfg in cfgs:
            a, b = self.rec(1, cfg, "A"), self.rec(1, cfg, "B")
            # A: a short closed stretch, then its open-loop sample; B: the long closed window, one open request
            self.assertAlmostEqual(a["closed"]["window_s"], 0.3, places=6)
            self.assertAlmostEqual(b["closed"]["window_s"], 1.2, places=6)
            self.assertEqual(b["open"]["requests"], 1)
            self.assertGreater(a["open"]["requests"], 1)
            self.assertAlmostEqual(a["open"]["rate"], self.rec(1, "dedicated", "A")["open"]["rate"], places=3)
        with open(self.vgpu_log) as f:
            execs = [l for l in f.read().splitlines() if l.startswith("exec ")]
        for cfg in ("prio50", "prio0", "priospatial100"):
            got = sorted((l.split("--server ")[1].split()[0], l.split("--priority ")[1].split()[0])
                         for l in execs if "--config %s " % cfg in l)
            self.assertEqual(got, [("A", "high"), ("B", "low")], execs)
        self.assertTrue(all("--compute-request 50 --compute-limit 100" in l for l in execs if "--config prio50 " in l))
        # COMPUTE_PERIOD reaches every vgpu exec
        self.assertTrue(execs and all(" --compute-period 100ms " in l for l in execs), execs)
        # prio0: the batch server B has no request, so it takes only what A leaves
        got = sorted((l.split("--server ")[1].split()[0], "--compute-request 50 --compute-limit 100" in l,
                      "--compute-request" in l or "--compute-limit" in l)
                     for l in execs if "--config prio0 " in l)
        self.assertEqual(got, [("A", True, True), ("B", False, False)], execs)
        self.assertEqual(self.rec(1, "mpsprio", "A")["env"]["CUDA_MPS_CLIENT_PRIORITY"], "0")
        self.assertEqual(self.rec(1, "mpsprio", "B")["env"]["CUDA_MPS_CLIENT_PRIORITY"], "1")
        self.assertNotIn("CUDA_MPS_CLIENT_PRIORITY", self.rec(1, "mixed", "A")["env"])

    def test_compute_period_must_be_ms(self):
        p = self.run_sh(CONFIGS="dedicated req50", COMPUTE_PERIOD="100ms", PLAN="1")
        self.assertEqual(p.returncode, 2)
        self.assertIn("COMPUTE_PERIOD must be a whole number of ms, got '100ms'", p.stderr)

    def test_unknown_and_missing_fail_clearly(self):
        p = self.run_sh(CONFIGS="dedicated mps5O", PLAN="1")
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown configuration 'mps5O'", p.stderr)
        p = self.run_sh(CONFIGS="ts50", PLAN="1", VGPU="/nonexistent/vgpu")
        self.assertIn("VGPU: no vgpu binary at '/nonexistent/vgpu'", p.stderr)
        p = self.run_sh(CONFIGS="spatial50", PLAN="1", MPS_CONTROL="/nonexistent/mps")
        self.assertEqual(p.returncode, 2)
        self.assertIn("MPS_CONTROL: no nvidia-cuda-mps-control at '/nonexistent/mps'", p.stderr)

    def test_hami_without_source_is_skipped_loudly(self):
        p = self.run_sh(CONFIGS="dedicated hami50 mps50", PLAN="1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("SKIPPING hami50", p.stderr)
        self.assertNotIn("hami50", p.stdout)

    def test_order_dedicated_first_others_rotated(self):
        p = self.run_sh(PLAN="1", ROUNDS="3", FIRST_ROUND="1", HAMI_SRC=self.tmp.name + "/nohami")
        self.assertEqual(p.returncode, 0, p.stderr)
        rounds = [l.split(": ", 2)[2].split() for l in p.stdout.splitlines() if l.startswith("serve: round ")]
        others = ["unlimited", "ts50", "req50", "spatial50", "mps50", "spatial100", "mps100", "mpsalone50", "pacedalone50"]
        self.assertEqual(rounds[0], ["dedicated"] + others)
        self.assertEqual(rounds[1], ["dedicated"] + others[1:] + others[:1])
        self.assertEqual(rounds[2], ["dedicated"] + others[2:] + others[:2])
        p = self.run_sh(PLAN="1", CONFIGS="mps50", ROUNDS="1", FIRST_ROUND="3")
        self.assertIn("adding 'dedicated'", p.stdout)
        self.assertIn("serve: round 3: dedicated mps50", p.stdout)

    def test_whole_run_with_the_fake_model(self):
        out = os.path.join(self.tmp.name, "out")
        p = self.run_sh(CONFIGS="dedicated unlimited", ROUNDS="2",
                        SERVER_ARGS="--fake --closed-s 0.6 --warmup-s 0.1 --requests 20 --slots 4 --new 8 --open-max-s 60")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        with open(os.path.join(out, "status.tsv")) as f:
            st = list(csv.DictReader(f, delimiter="\t"))
        self.assertEqual([(s["round"], s["config"], s["status"]) for s in st],
                         [("1", "dedicated", "ok"), ("1", "unlimited", "ok"), ("2", "dedicated", "ok"), ("2", "unlimited", "ok")])
        with open(os.path.join(out, "results.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([(r["round"], r["config"], r["server"]) for r in rows],
                         [("1", "dedicated", "A"), ("1", "unlimited", "A"), ("1", "unlimited", "B"),
                          ("2", "dedicated", "A"), ("2", "unlimited", "A"), ("2", "unlimited", "B")])
        # every open loop of a round ran at the dedicated server's rate
        ded = {r["round"]: float(r["open_rate"]) for r in rows if r["config"] == "dedicated"}
        for r in rows:
            self.assertAlmostEqual(float(r["open_rate"]), ded[r["round"]], places=3)
        with open(os.path.join(out, "r1", "unlimited", "B.json")) as f:
            rec = json.load(f)
        self.assertEqual(rec["open"]["finished"], 20)
        self.assertEqual(rec["closed"]["clients"], 4)
        self.assertTrue(os.path.exists(os.path.join(out, "r1", "unlimited", "sync", "done.A")))
        with open(os.path.join(out, "report.md")) as f:
            md = f.read()
        self.assertIn("| both, no limit (hardware time slicing) | worst |", md)
        self.assertIn("## Where the seconds go", md)
        self.assertNotIn("## Against the goal", md)
        self.assertIn("round 1 took", p.stdout)
        self.assertRegex(p.stdout, r"round 2: estimated \d+ s")

    FAST = "--fake --closed-s 0.4 --warmup-s 0.1 --requests 20 --slots 4 --new 8 --open-max-s 60"

    def test_no_sm_cap_configurations(self):
        p = self.run_sh(CONFIGS="spatial50 spatial100 mps100", ROUNDS="1", SERVER_ARGS=self.FAST)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(self.statuses(), [("1", c, "ok") for c in ("dedicated", "spatial50", "spatial100", "mps100")])
        self.assertEqual(self.rec(1, "mps100", "A")["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "100")
        with open(self.vgpu_log) as f:
            execs = [l for l in f.read().splitlines() if l.startswith("exec ")]
        # each spatial configuration with its own share, host config and node (so its own MPS daemon)
        for cfg, share in (("spatial50", "50"), ("spatial100", "100")):
            mine = [l for l in execs if "--config %s " % cfg in l]
            self.assertEqual(len(mine), 2, execs)
            for l in mine:
                self.assertIn("--compute-limit %s --" % share, l)
                self.assertIn("/%s-1.toml" % cfg, l.split()[1])
                self.assertNotEqual(l.split()[2], "node=none", "a spatial server starts once its node is up")
        with open(os.path.join(self.tmp.name, "out", "report.md")) as f:
            md = f.read()
        self.assertIn("| vgpu spatial 100/100 (no SM cap) | worst |", md)

    def test_every_configuration_with_vgpu_node_and_mps(self):
        out = os.path.join(self.tmp.name, "out")
        p = self.run_sh(CONFIGS="dedicated unlimited ts50 req50 spatial50 mps50 mpsalone50 pacedalone50", ROUNDS="1",
                        SERVER_ARGS=self.FAST)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual([(c, s) for _, c, s in self.statuses()],
                         [(c, "ok") for c in ["dedicated", "unlimited", "ts50", "req50", "spatial50", "mps50",
                                              "mpsalone50", "pacedalone50"]])
        with open(self.vgpu_log) as f:
            log = f.read().splitlines()
        execs = {}
        for line in log:
            if line.startswith("exec "):
                cfg = line.split("--config ")[1].split()[0]
                execs.setdefault(cfg, set()).add(tuple(w.split("=", 1)[1] for w in line.split()[1:3]))
        # each vgpu configuration has a host config (so a state dir) of its own
        for cfg in ("ts50", "req50", "spatial50", "pacedalone50"):
            (conf, _), = {(c, None) for c, _ in execs[cfg]}
            self.assertTrue(conf.endswith("/%s-1.toml" % cfg), execs)
        # spatial50's containers are made once its node (and the node's MPS daemon) is up
        self.assertEqual({n for _, n in execs["spatial50"]}, {next(iter(execs["spatial50"]))[0]})
        self.assertEqual({n for _, n in execs["ts50"]}, {"none"})
        # req50's node, of req50's config, runs from before its servers' go to after their end
        nodes = [l.split() for l in log if l.startswith("node ")]
        self.assertEqual([n[1].split("/")[-1] for n in nodes if n[1].startswith("config=")], ["req50-1.toml", "spatial50-1.toml"])
        self.assertEqual(sum(n[1] == "stopped" for n in nodes), 2, "each node is stopped after its configuration")
        i = next(k for k, n in enumerate(nodes) if n[1].endswith("req50-1.toml"))
        up, down = float(nodes[i][-1]), float(nodes[i + 1][-1])
        for srv in "AB":
            r = self.rec(1, "req50", srv)
            self.assertLess(up, r["started"] + r["times"]["imports_s"] + r["times"]["held_s"])
            self.assertGreater(down, r["started"] + r["wall_s"])
        # plain MPS: a daemon of its own per configuration, quit after it
        a = self.rec(1, "mps50", "A")
        self.assertEqual(a["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50")
        pipe = a["env"]["CUDA_MPS_PIPE_DIRECTORY"]
        self.assertEqual(pipe, self.rec(1, "mps50", "B")["env"]["CUDA_MPS_PIPE_DIRECTORY"])
        self.assertNotEqual(pipe, self.rec(1, "mpsalone50", "A")["env"]["CUDA_MPS_PIPE_DIRECTORY"])
        self.assertFalse(os.path.exists(pipe), "the temp dir is gone after the run")
        # overlap: unlimited's and ts50's servers started while the previous configuration ran (and waited
        # for their go); spatial50's only after the previous one (req50) ended
        end = lambda r: r["started"] + r["wall_s"]
        ded, unl, ts = self.rec(1, "dedicated", "A"), self.rec(1, "unlimited", "A"), self.rec(1, "ts50", "A")
        self.assertLess(unl["started"], end(ded))
        self.assertGreater(unl["times"]["held_s"], 0)
        self.assertLess(ts["started"], end(unl))
        sp = self.rec(1, "spatial50", "A")
        self.assertGreater(sp["started"], max(end(self.rec(1, "req50", s)) for s in "AB"))
        with open(os.path.join(out, "report.md")) as f:
            md = f.read()
        self.assertIn("## Against the goal", md)
        self.assertIn("- against HAMi-core 50/50: not measured", md)
        self.assertRegex(md, r"- against plain MPS 50/50 \([0-9.]+ %, [0-9.]+×\), within noise asked: throughput (ahead|behind)")
        # every open loop at the dedicated server's rate, the prestarted ones' too (from their go file)
        with open(os.path.join(out, "results.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), 13)
        for r in rows:
            self.assertAlmostEqual(float(r["open_rate"]), float(rows[0]["open_rate"]), places=3)

    def test_a_configuration_that_cannot_start_is_reported_and_the_rest_runs(self):
        self.fake_vgpu(request_flag=True, node_fails=True)
        p = self.run_sh(CONFIGS="dedicated spatial50 mps50", ROUNDS="1", SERVER_ARGS=self.FAST)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertEqual(self.statuses(), [("1", "dedicated", "ok"), ("1", "spatial50", "failed"), ("1", "mps50", "ok")])
        self.assertIn("spatial50 round 1: vgpu node with GPU 0 spatial did not start (node.log: node: config: unknown key spatial", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "out", "r1", "spatial50", "A.json")))
        with open(os.path.join(self.tmp.name, "out", "report.md")) as f:
            self.assertIn("round 1 spatial50: failed vgpu node with GPU 0 spatial did not start", f.read())

    def test_hami_that_does_not_build_is_reported_and_the_rest_runs(self):
        src = os.path.join(self.tmp.name, "HAMi-core", "src")
        os.makedirs(src)
        with open(os.path.join(src, "libvgpu.c"), "w") as f:
            f.write("#error not HAMi-core\n")
        p = self.run_sh(CONFIGS="dedicated hami50 mps50", ROUNDS="1", HAMI_SRC=os.path.dirname(src), SERVER_ARGS=self.FAST)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("SKIPPING hami50: HAMi-core did not build", p.stderr)
        self.assertEqual(self.statuses(), [("1-1", "hami50", "failed"), ("1", "dedicated", "ok"), ("1", "mps50", "ok")])
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "out", "r1", "hami50")))

    def test_hami_build_refuses_what_is_not_its_source(self):
        p = subprocess.run(["bash", os.path.join(HERE, "hami-build.sh"), self.tmp.name, os.path.join(self.tmp.name, "h")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("is not a HAMi-core source tree (no src/libvgpu.c)", p.stderr)

    def test_budget_stops_before_a_configuration_would_overrun(self):
        # dedicated starts within the budget (3 s of slack) and alone outlasts it
        p = self.run_sh(CONFIGS="dedicated unlimited", ROUNDS="1", BUDGET_S="3",
                        SERVER_ARGS="--fake --closed-s 3.5 --warmup-s 0.1 --requests 10 --slots 4 --new 8")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("BUDGET_S=3: not starting round 1 unlimited", p.stderr)
        with open(os.path.join(self.tmp.name, "out", "status.tsv")) as f:
            st = [(s["config"], s["status"]) for s in csv.DictReader(f, delimiter="\t")]
        self.assertEqual(st, [("dedicated", "ok"), ("unlimited", "not-run")])
        # its servers had started during dedicated (their imports) and were let go unrun
        with open(os.path.join(self.tmp.name, "out", "r1", "unlimited", "A.log")) as f:
            self.assertIn("server A: aborted while held", f.read())
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "out", "r1", "unlimited", "A.json")))

    def test_failed_server_is_reported_and_its_peer_released(self):
        out = os.path.join(self.tmp.name, "out")
        py = os.path.join(self.bin, "py")
        with open(py, "w") as f:  # server A of 'unlimited' dies at start; everything else is python
            f.write('#!/bin/sh\ncase " $* " in *" --config unlimited --server A "*) echo "A broke" >&2; exit 1;; esac\n'
                    'exec %s "$@"\n' % sys.executable)
        os.chmod(py, 0o755)
        p = self.run_sh(CONFIGS="dedicated unlimited", ROUNDS="1", PY=py,
                        SERVER_ARGS="--fake --closed-s 0.5 --warmup-s 0.1 --requests 20 --slots 4 --new 8")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("unlimited round 1 FAILED: A(exit 1) B(exit 1)", p.stderr)
        with open(os.path.join(out, "r1", "unlimited", "B.log")) as f:
            self.assertIn("server B: a peer failed before the start", f.read())
        with open(os.path.join(out, "status.tsv")) as f:
            st = list(csv.DictReader(f, delimiter="\t"))
        self.assertEqual([(s["config"], s["status"]) for s in st], [("dedicated", "ok"), ("unlimited", "failed")])
        # B was let go by A's failure, not by its 600 s wait for peers
        self.assertLess(int(st[1]["seconds"]), 60)
        with open(os.path.join(out, "report.md")) as f:
            self.assertIn("round 1 unlimited: failed servers: A(exit 1) B(exit 1)", f.read())


if __name__ == "__main__":
    unittest.main()
