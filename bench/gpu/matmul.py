"""bf16 8192x8192 matmul loop for SECONDS (default 10): prints matmuls per second."""
import sys, time, torch
secs = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    a @ b
torch.cuda.synchronize()
done, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < secs:
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    done += 10
el = time.perf_counter() - t0
print("matmul_per_s %.2f  (%d in %.2f s, %.0f TFLOP/s)" % (done / el, done, el, done * 2 * n**3 / el / 1e12))
