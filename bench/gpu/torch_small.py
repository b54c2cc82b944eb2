"""PyTorch small-kernel loop: 1024-element in-place add, kernels per second."""
import sys, time, torch
x = torch.zeros(1024, device="cuda")
for _ in range(2000):
    x.add_(1)
torch.cuda.synchronize()
n = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
t0 = time.perf_counter()
for _ in range(n):
    x.add_(1)
torch.cuda.synchronize()
print("torch_small_per_s %.0f" % (n / (time.perf_counter() - t0)))
