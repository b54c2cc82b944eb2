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
INTERVAL_MS (default 20) is the light tenant's request interval."""
import os, signal, sys, time, torch

mode = sys.argv[1]
print("pid %d" % os.getpid(), flush=True)
if mode == "light":
    reqs = int(sys.argv[2])
    ready = sys.argv[3] if len(sys.argv) > 3 else ""
    every = float(os.environ.get("INTERVAL_MS", "20")) / 1000
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        (a @ b) @ b
    torch.cuda.synchronize()
    t_wait = time.time()
    while ready and not os.path.exists(ready):
        if time.time() - t_wait > 120:
            sys.exit("light: %s never appeared" % ready)
        time.sleep(0.05)
    for _ in range(50):  # settle beside the busy tenant; not counted
        (a @ b) @ b
        torch.cuda.synchronize()
        time.sleep(every)
    lat = []
    t0 = time.perf_counter()
    for k in range(reqs):
        at = t0 + k * every
        d = at - time.perf_counter()
        if d > 0:
            time.sleep(d)
        (a @ b) @ b
        torch.cuda.synchronize()
        lat.append((time.perf_counter() - at) * 1000)
    lat.sort()
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))]
    print("light n=%d p50_ms %.3f p99_ms %.3f max_ms %.3f" % (len(lat), q(0.5), q(0.99), lat[-1]), flush=True)
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
else:
    sys.exit("modes: light busy")
