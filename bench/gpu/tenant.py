"""One tenant of bench/gpu/latency.sh and bench/gpu/shares.sh.

  tenant.py light REQS [READY]  every 20 ms one request, two bf16 4096^3
      matmuls, timed from its scheduled start to its end (open loop: a late
      request makes the next one late too); after a warm-up (and, with READY,
      once that file exists: the busy tenant is running) REQS requests; prints
      'light n=.. p50_ms .. p99_ms .. max_ms ..'.
  tenant.py busy SECS [READY]   bf16 8192^3 matmuls back to back for SECS
      (after the warm-up; LOOP_AT, Unix time, starts the timing there); writes
      READY after the warm-up; prints 'pid N' at once, and at the end
      'window T0 T1' (Unix times of the timed stretch) and 'busy_per_s R'. SIGTERM ends it early, printing what it did.
  tenant.py train READY         a GPT-2 training loop (transformers
      GPT2LMHeadModel, random init, a fixed batch of random tokens, AdamW,
      bf16 autocast; nothing downloaded) until SIGTERM; writes READY after
      the warm-up; prints 'steps T N' (Unix time, steps so far) every
      TICK_S (default 0.25) and at the end.
INTERVAL_MS (default 20) is the light tenant's request interval, LIGHT_MATMULS
(default 2) its matmuls per request; it also prints 'light_gpu_ms_mean G
window T0 T1': the device time of a request (CUDA events) and the Unix times
of its counted requests.
  tenant.py kernels              what bounds a light tenant's wait beside the
      training: the training's kernels (torch.profiler, PROFILE_STEPS steps,
      default 3, after the warm-up) and the light tenant's request, each
      kernel's device time; prints 'kernels' lines (count, per-step device
      time, quantiles by count and by device time, the longest) and 'remain
      p50/p90/p99': the running kernel's remaining time at a random instant
      of the training's busy time (what a waking tenant waits for at the
      least, with nothing queued behind that kernel).
TRAIN_BATCH (default 8) x TRAIN_SEQ (default 1024) tokens a step; TRAIN_VOCAB
(default GPT-2's 50257, whose LM head runs sm75 align1 GEMMs of 4-7 ms on an
H100; 50304, a multiple of 64 as nanoGPT pads it, gets aligned ones and its
longest kernel is the loss's softmax, about 2 ms)."""
import os, signal, sys, time, torch


def kernel_durations(fn, n):
    """Each kernel's device time (us), in launch order, of n calls of fn."""
    import json, tempfile
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        ev = json.load(open(f.name)).get("traceEvents", [])
    k = sorted((e["ts"], float(e["dur"]), e.get("name", "?")) for e in ev if e.get("cat") == "kernel" and "dur" in e)
    return k


def light_request():
    """The light tenant's request: LIGHT_MATMULS chained bf16 4096^3 matmuls."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    nmm = int(os.environ.get("LIGHT_MATMULS", "2"))

    def request():
        x = a
        for _ in range(nmm):
            x = x @ b
        return x
    return request


def kernel_report(step, n):
    for label, fn, calls in (("train", step, n), ("light", light_request(), 20)):
        k = kernel_durations(fn, calls)
        if not k:
            print("kernels %s none seen" % label, flush=True)
            continue
        d = sorted(x[1] for x in k)
        tot = sum(d)
        span = k[-1][0] + k[-1][1] - k[0][0]
        q = lambda f: d[min(len(d) - 1, int(f * len(d)))]
        acc, bytime = 0.0, {}
        for x in d:  # the kernel length below which the fraction f of device time lies
            acc += x
            for f in (0.5, 0.9, 0.99):
                if f not in bytime and acc >= f * tot:
                    bytime[f] = x
        print("kernels %s n=%d per_call=%.1f device_ms_per_call=%.3f busy_pct=%.1f p50_us %.1f p90_us %.1f p99_us %.1f max_us %.1f"
              " by_time_p50_us %.1f p90_us %.1f p99_us %.1f" % (
                  label, len(d), len(d) / calls, tot / calls / 1000, 100 * tot / span,
                  q(0.5), q(0.9), q(0.99), d[-1], bytime[0.5], bytime[0.9], bytime[0.99]), flush=True)
        # remaining time of the running kernel at a random busy instant:
        # a kernel of length L is hit with weight L and leaves U(0, L)
        import random
        rng = random.Random(0)
        rem = sorted(x * rng.random() for x in rng.choices(d, weights=d, k=20000))
        print("remain %s p50_us %.1f p90_us %.1f p99_us %.1f" % (
            label, rem[len(rem) // 2], rem[int(0.9 * len(rem))], rem[int(0.99 * len(rem))]), flush=True)
        top = sorted(k, key=lambda x: -x[1])[:8]
        for ts, dur, name in top:
            print("kernels %s top %.1f us %s" % (label, dur, name[:100]), flush=True)


mode = sys.argv[1]
print("pid %d" % os.getpid(), flush=True)
if mode == "light":
    reqs = int(sys.argv[2])
    ready = sys.argv[3] if len(sys.argv) > 3 else ""
    every = float(os.environ.get("INTERVAL_MS", "20")) / 1000
    request = light_request()
    for _ in range(20):
        request()
    torch.cuda.synchronize()
    t_wait = time.time()
    while ready and not os.path.exists(ready):
        if time.time() - t_wait > 120:
            sys.exit("light: %s never appeared" % ready)
        time.sleep(0.05)
    for _ in range(50):  # settle beside the busy tenant; not counted
        request()
        torch.cuda.synchronize()
        time.sleep(every)
    lat, gpu = [], []
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reqs)]
    w0 = time.time()
    t0 = time.perf_counter()
    for k in range(reqs):
        at = t0 + k * every
        d = at - time.perf_counter()
        if d > 0:
            time.sleep(d)
        ev[k][0].record()
        request()
        ev[k][1].record()
        torch.cuda.synchronize()
        lat.append((time.perf_counter() - at) * 1000)
    w1 = time.time()
    gpu = [s.elapsed_time(e) for s, e in ev]
    lat.sort()
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))]
    print("light n=%d p50_ms %.3f p99_ms %.3f max_ms %.3f" % (len(lat), q(0.5), q(0.99), lat[-1]), flush=True)
    print("light_gpu_ms_mean %.4f window %.3f %.3f" % (sum(gpu) / len(gpu), w0, w1), flush=True)
elif mode == "busy":
    secs = float(sys.argv[2])
    ready = sys.argv[3] if len(sys.argv) > 3 else ""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    if ready:
        open(ready, "w").close()
    at = float(os.environ.get("LOOP_AT", "0"))
    if at:
        if time.time() > at:
            print("late: warm-up ended %.1f s after LOOP_AT" % (time.time() - at), file=sys.stderr)
        time.sleep(max(0.0, at - time.time()))
    done, t0, w0 = 0, time.perf_counter(), time.time()
    while time.perf_counter() - t0 < secs and not stop:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        done += 10
    print("window %.3f %.3f" % (w0, time.time()))
    print("busy_per_s %.3f" % (done / (time.perf_counter() - t0)), flush=True)
elif mode in ("train", "kernels"):
    from transformers import GPT2Config, GPT2LMHeadModel
    ready = sys.argv[2] if len(sys.argv) > 2 and mode == "train" else ""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    tick = float(os.environ.get("TICK_S", "0.25"))
    bs, seq = int(os.environ.get("TRAIN_BATCH", "8")), int(os.environ.get("TRAIN_SEQ", "1024"))
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    vocab = int(os.environ.get("TRAIN_VOCAB", "50257"))
    model = GPT2LMHeadModel(GPT2Config(n_positions=max(1024, seq), vocab_size=vocab)).to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, model.config.vocab_size, (bs, seq), device=dev)

    def step():
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(int(os.environ.get("TRAIN_WARM", "5"))):
        loss = step()
    if dev == "cuda":
        torch.cuda.synchronize()
    print("warm loss %.3f" % loss.item(), flush=True)
    if mode == "kernels":
        kernel_report(step, int(os.environ.get("PROFILE_STEPS", "3")))
        sys.exit(0)
    if ready:
        open(ready, "w").close()
    n, last = 0, 0.0
    while not stop:
        step()
        n += 1
        # one step in flight at most: the step count is what the GPU did
        if dev == "cuda":
            torch.cuda.synchronize()
        t = time.time()
        if t - last >= tick:
            print("steps %.4f %d" % (t, n), flush=True)
            last = t
    print("steps %.4f %d" % (time.time(), n), flush=True)
else:
    sys.exit("modes: light busy train kernels")
