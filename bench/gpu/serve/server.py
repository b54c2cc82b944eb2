#!/usr/bin/env python3
"""One inference server with its own load generator in the same process.

Phases, after the model is built and warm: (1) closed loop at saturation
(one client per slot) for --closed-s seconds, the first --warmup-s not
counted: throughput; (2) open loop, Poisson arrivals at --open-rate requests/s
(default: half of this server's own closed-loop rate, which is what the
dedicated run uses; run.sh passes the dedicated rate to every other run of the
round): TTFT and ITL of the first --requests requests. The servers of one
configuration start their phases together (files in --sync-dir) and keep
their load on until every one of them has its sample. Writes one JSON record
(--out); exit status 0 only when the sample is complete.

  python3 server.py --selfcheck                 # the serving path against transformers
  python3 server.py --config dedicated --server A --round 1 --out a.json
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine  # noqa: E402
import stats  # noqa: E402


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--selfcheck", action="store_true", help="compare the serving path with transformers, tiny model, then exit")
    p.add_argument("--config", default="dedicated")
    p.add_argument("--server", default="A")
    p.add_argument("--round", type=int, default=1)
    p.add_argument("--out", help="JSON record to write")
    p.add_argument("--sync-dir", help="directory the servers of one configuration meet in")
    p.add_argument("--peers", type=int, default=1, help="servers in this configuration, this one included")
    p.add_argument("--slots", type=int, default=32, help="continuous-batching slots (the decode graph's batch)")
    p.add_argument("--prompt", type=int, default=512, help="prompt tokens")
    p.add_argument("--new", type=int, default=128, help="new tokens per request")
    p.add_argument("--prefills-per-step", type=int, default=1)
    p.add_argument("--closed-s", type=float, default=7.0, help="closed-loop phase, its warm-up included")
    p.add_argument("--warmup-s", type=float, default=1.0, help="closed-loop start not counted (the slots filling)")
    p.add_argument("--open-rate", type=float, default=0.0, help="requests/s; 0: half this server's closed-loop rate")
    p.add_argument("--requests", type=int, default=200, help="requests in the open-loop sample")
    p.add_argument("--open-max-s", type=float, default=45.0, help="give up the open loop after this long")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fake", action="store_true", help="no torch: a model that sleeps (driver tests on a CPU)")
    p.add_argument("--fake-prefill-s", type=float, default=0.004)
    p.add_argument("--fake-decode-s", type=float, default=0.002)
    p.add_argument("--barrier-s", type=float, default=600.0, help="how long to wait for the peers to be ready")
    p.add_argument("--start-delay-s", type=float, default=0.3, help="the phases start this long after the last server is ready")
    p.add_argument("--hold", metavar="FILE", help="after the imports, wait for FILE before touching the GPU; "
                   "FILE holds JSON, its open_rate (if > 0) replaces --open-rate (run.sh starts the next "
                   "configuration's servers this way while the current one measures)")
    p.add_argument("--hold-s", type=float, default=600.0, help="how long to wait for --hold's file")
    a = p.parse_args(argv)
    if not a.selfcheck and not a.out:
        p.error("--out is required")
    if a.peers > 1 and not a.sync_dir:
        p.error("--peers %d needs --sync-dir" % a.peers)
    return a


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def marker(d, kind, server, content=""):
    write_json(os.path.join(d, "%s.%s" % (kind, server)), content)


def markers(d, kind):
    return [f for f in os.listdir(d) if f.startswith(kind + ".") and not f.endswith(".tmp")]


def barrier(d, server, peers, timeout, delay):
    """Every server writes its ready time; all start at the latest one plus `delay` (wall clock, the same for all)."""
    marker(d, "ready", server, time.time())
    t0 = time.time()
    while len(markers(d, "ready")) < peers:
        if os.path.exists(os.path.join(d, "abort")):
            raise SystemExit("server %s: a peer failed before the start" % server)
        if time.time() - t0 > timeout:
            raise SystemExit("server %s: only %d of %d servers ready after %.0f s" % (server, len(markers(d, "ready")), peers, timeout))
        time.sleep(0.05)
    readies = []
    for f in markers(d, "ready"):
        with open(os.path.join(d, f)) as fh:
            readies.append(float(json.load(fh)))
    return max(readies) + delay


def hold(path, sync, server, timeout):
    """Wait for run.sh's go file (JSON); returns its content. An abort in the sync dir ends the wait."""
    t0 = time.time()
    while not os.path.exists(path):
        if sync and os.path.exists(os.path.join(sync, "abort")):
            raise SystemExit("server %s: aborted while held (the configuration was not run)" % server)
        if time.time() - t0 > timeout:
            raise SystemExit("server %s: no go file %s after %.0f s" % (server, path, timeout))
        time.sleep(0.02)
    with open(path) as f:
        return json.load(f)


def preload(a):
    """The imports of the real model: CPU only, no CUDA call (torch initialises CUDA lazily)."""
    if a.fake:
        return
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: F401
    import model  # noqa: F401


def build(a):
    """(model, clock, facts about the device)"""
    if a.fake:
        import fake
        clock = fake.HostClock()
        return fake.FakeModel(clock, a.fake_prefill_s, a.fake_decode_s), clock, {"device": "fake"}
    import torch
    import transformers
    import model as mdl
    m = mdl.Model(slots=a.slots, max_len=a.prompt + a.new, prompt_len=a.prompt, seed=a.seed)
    props = torch.cuda.get_device_properties(0)
    facts = {
        "device": props.name,
        # under MPS with an active thread percentage this is the client's share
        "sm_count": props.multi_processor_count,
        "params": m.params,
        "setup_s": m.setup_s,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "graph": m.graph is not None,
    }
    return m, mdl.CudaClock(), facts


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    if a.selfcheck:
        import model as mdl
        n = mdl.selfcheck()
        print("selfcheck ok: %d requests through continuous batching and the CUDA graph match transformers" % n)
        k = mdl.graphcheck()
        print("selfcheck ok: %d bf16 decode steps replayed from the graph match the eager ones" % k)
        return 0
    t_start = time.time()
    times = {}  # where a configuration's seconds go, from this process's start
    sync = a.sync_dir
    if sync:
        os.makedirs(sync, exist_ok=True)
    preload(a)
    times["imports_s"] = time.time() - t_start
    if a.hold:
        t = time.time()
        got = hold(a.hold, sync, a.server, a.hold_s)
        if float(got.get("open_rate") or 0) > 0:
            a.open_rate = float(got["open_rate"])
        times["held_s"] = time.time() - t
    t = time.time()
    m, clock, facts = build(a)
    times["build_s"] = time.time() - t
    t = time.time()
    eng = engine.Engine(m, clock, slots=a.slots, new_tokens=a.new, prefills_per_step=a.prefills_per_step)
    # warm: the first prefill and decode steps pay for library start-up
    eng.submit(clock.now(), 0)
    engine.drain(eng)
    times["warm_s"] = time.time() - t
    t = time.time()
    if sync:
        go = barrier(sync, a.server, a.peers, a.barrier_s, a.start_delay_s)
        clock.sleep_until(clock.now() + (go - time.time()))
    times["barrier_s"] = time.time() - t
    t = time.time()
    closed = engine.closed_loop(eng, clients=a.slots, duration=a.closed_s, warmup=a.warmup_s, seed=a.seed)
    engine.drain(eng)
    times["closed_s"] = time.time() - t
    t = time.time()
    rate = a.open_rate if a.open_rate > 0 else 0.5 * closed["req_per_s"]
    peers_left = lambda: bool(sync) and not os.path.exists(os.path.join(sync, "abort")) and len(markers(sync, "done")) < a.peers
    done_cb = (lambda: marker(sync, "done", a.server)) if sync else (lambda: None)
    res = engine.open_loop(eng, rate, a.requests, a.seed + 17, a.open_max_s, keep_going=peers_left, done_cb=done_cb)
    if sync and not res["complete"]:
        done_cb()  # do not hold the peers' load on for a sample that will not come
    times["open_s"] = time.time() - t
    opened = {"rate": rate, "requests": a.requests, "finished": len(res["requests"]),
              "complete": res["complete"], "duration_s": res["duration_s"]}
    opened.update({k: v for k, v in res.items() if k in ("busy_s", "busy_share") or k.startswith(stats.STEP_FIGURES)})
    if res["requests"]:
        opened.update(stats.latency_summary(res["requests"]))
    rec = {
        "config": a.config, "server": a.server, "round": a.round, "pid": os.getpid(),
        "slots": a.slots, "prompt": a.prompt, "new": a.new, "prefills_per_step": a.prefills_per_step,
        "closed": closed, "open": opened, "started": t_start, "wall_s": time.time() - t_start, "times": times,
        "env": {k: os.environ[k] for k in ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_CLIENT_PRIORITY",
                                            "CUDA_DEVICE_SM_LIMIT", "LD_PRELOAD", "CUDA_VISIBLE_DEVICES")
                if k in os.environ},
    }
    rec.update(facts)
    write_json(a.out, rec)
    print("server %s %s round %d: %.0f tok/s closed; open %.2f req/s: %d/%d finished, TTFT p99 %s, ITL p99 %s; "
          "seconds: %s"
          % (a.server, a.config, a.round, closed["tok_per_s"], rate, opened["finished"], a.requests,
             "%.1f ms" % (1e3 * opened["ttft_p99"]) if "ttft_p99" in opened else "-",
             "%.1f ms" % (1e3 * opened["itl_p99"]) if "itl_p99" in opened else "-",
             " ".join("%s %.1f" % (k[:-2], v) for k, v in times.items())), flush=True)
    return 0 if res["complete"] else 3


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Without the interpreter's teardown (torch's, seconds with a model on the GPU): the record is written,
    # and the driver frees the process's context at its exit.
    os._exit(code)
