# A tenant for test/gpu/borrow.sh, in PyTorch (cudaMalloc through the
# caching allocator), one mode a run:
#   outside KEEP_GIB: outside vgpu, hold all of the GPU but KEEP_GIB
#   fill WAIT_GIB: wait until cuMemGetInfo's free passes WAIT_GIB (vgpu
#     node's first ceiling), take 1 GiB tensors until out of memory, hold
#   owner N: take N tensors of 1 GiB, timing each, hold 5 s, exit 0
import sys, time, torch

G = 1 << 30
mode, arg = sys.argv[1], int(sys.argv[2])
torch.cuda.init()
free, total = torch.cuda.mem_get_info()
print(f"{mode}_start_free_mib={free >> 20} {mode}_total_mib={total >> 20}", flush=True)
held = []
if mode == "outside":
    held.append(torch.empty(free - arg * G, dtype=torch.uint8, device="cuda"))
    print(f"outside_free_mib={torch.cuda.mem_get_info()[0] >> 20}", flush=True)
    time.sleep(3600)
elif mode == "fill":
    for _ in range(600):
        if torch.cuda.mem_get_info()[0] > arg * G:
            break
        time.sleep(0.1)
    try:
        while True:
            held.append(torch.empty(G, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError:
        pass
    print(f"fill_gib={len(held)} fill_free_mib={torch.cuda.mem_get_info()[0] >> 20}", flush=True)
    time.sleep(3600)
else:
    time.sleep(1)  # vgpu node's first round over this container
    worst = 0.0
    for i in range(arg):
        t = time.monotonic()
        try:
            held.append(torch.empty(G, dtype=torch.uint8, device="cuda"))
        except torch.cuda.OutOfMemoryError as e:
            print(f"owner_oom_at={i} owner_oom_s={time.monotonic() - t:.3f} {str(e).splitlines()[0]}", flush=True)
            sys.exit(1)
        d = time.monotonic() - t
        worst = max(worst, d)
        print(f"owner_gib={i + 1} owner_alloc_s={d:.3f}", flush=True)
    print(f"owner_done_gib={len(held)} owner_worst_s={worst:.3f}", flush=True)
    time.sleep(5)
