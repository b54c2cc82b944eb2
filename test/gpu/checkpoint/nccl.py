"""An NCCL process on one GPU for the checkpoint probe: a world of one rank
doing all_reduce on a GIB tensor in a loop; prints the running sum each
second, so that a suspension shows as a gap and a bad restore as a wrong
sum. Usage: nccl.py GIB SECS STORE_FILE."""
import os
import sys
import time

import torch
import torch.distributed as dist

gib, secs, store = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
dist.init_process_group("nccl", init_method="file://" + store, rank=0, world_size=1)
x = torch.ones(int(gib * (1 << 30)) // 4, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
print(f"ready pid={os.getpid()}", flush=True)
t0 = last = time.time()
n = bad = 0
gap = 0.0
while time.time() - t0 < secs:
    dist.all_reduce(x)  # one rank: the sum is x itself
    torch.cuda.synchronize()
    n += 1
    t = time.time()
    gap = max(gap, t - last)
    last = t
    if n % 20 == 0:
        ok = x[0].item() == 1.0 and x[-1].item() == 1.0
        bad += not ok
        print(f"t={t - t0:.1f} iters={n} bad={bad} gap_max_ms={gap * 1e3:.0f}", flush=True)
print(f"done iters={n} bad={bad} gap_max_ms={gap * 1e3:.0f}", flush=True)
dist.destroy_process_group()
sys.exit(0 if bad == 0 else 1)
