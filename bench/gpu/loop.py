"""One GPU work loop for SECS seconds; prints '<kind>_per_s <rate>'.
kinds: matmul (bf16 8192x8192), small (1024-element in-place add),
graph (a torch.cuda.CUDAGraph of 8 bf16 4096x4096 matmuls, replayed).
LOOP_AT (Unix time, s): after the warm-up, wait until then to start timing, so
that processes started together time the same window."""
import os, sys, time, torch
kind, secs = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
if kind == "matmul":
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    step, per = (lambda: a @ b), 10
elif kind == "small":
    x = torch.zeros(1024, device="cuda")
    step, per = (lambda: x.add_(1)), 1000
elif kind == "graph":
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = a @ a
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = a
        for _ in range(8):
            y = y @ a
    step, per = g.replay, 10
else:
    sys.exit("kinds: matmul small graph")
for _ in range(per):
    step()
torch.cuda.synchronize()
at = float(os.environ.get("LOOP_AT", "0"))
if at:
    if time.time() > at:
        print("late: warm-up ended %.1f s after LOOP_AT" % (time.time() - at), file=sys.stderr)
    time.sleep(max(0.0, at - time.time()))
done, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < secs:
    for _ in range(per):
        step()
    torch.cuda.synchronize()
    done += per
print("%s_per_s %.3f" % (kind, done / (time.perf_counter() - t0)))
