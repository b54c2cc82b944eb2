# A tenant for test/gpu/borrow-shapes.sh, one mode a run:
#   fill WAIT_GIB MAX_GIB: PyTorch; wait (at most 30 s) until cuMemGetInfo's
#     free passes WAIT_GIB (vgpu node's first ceiling), take 1 GiB tensors
#     until out of memory or MAX_GIB (0: no maximum), print fill_gib=, hold
#   owner FW N CHUNK_GIB: FW torch, cupy (its default memory pool) or jax
#     (XLA's BFC allocator: XLA_PYTHON_CLIENT_PREALLOCATE=false and
#     XLA_PYTHON_CLIENT_MEM_FRACTION from the caller); take N tensors of
#     CHUNK_GIB, timing each, print owner_done_gib= and owner_worst_s=,
#     exit 0; on out-of-memory print owner_oom_at= and exit 1
import sys, time

G = 1 << 30
mode = sys.argv[1]
if mode == "fill":
    import torch

    wait, most = int(sys.argv[2]), int(sys.argv[3])
    torch.cuda.init()
    for _ in range(300):
        if torch.cuda.mem_get_info()[0] > wait * G:
            break
        time.sleep(0.1)
    held = []
    try:
        while most == 0 or len(held) < most:
            held.append(torch.empty(G, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError:
        pass
    print(f"fill_gib={len(held)} fill_free_mib={torch.cuda.mem_get_info()[0] >> 20}", flush=True)
    time.sleep(3600)

fw, n, chunk = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if fw == "torch":
    import torch

    torch.cuda.init()
    alloc = lambda: torch.empty(chunk * G, dtype=torch.uint8, device="cuda")
    oom = (torch.cuda.OutOfMemoryError,)
elif fw == "cupy":
    import cupy

    cupy.cuda.runtime.getDeviceCount()
    alloc = lambda: cupy.empty(chunk * G, dtype=cupy.uint8)
    oom = (cupy.cuda.memory.OutOfMemoryError,)
else:
    import jax, jax.numpy as jnp

    jax.devices()
    alloc = lambda: jnp.ones((chunk * G,), dtype=jnp.uint8).block_until_ready()
    oom = (Exception,)  # XlaRuntimeError: RESOURCE_EXHAUSTED
time.sleep(1)  # vgpu node's first round over this tenant (its deadline)
held, worst = [], 0.0
for i in range(n):
    t = time.monotonic()
    try:
        held.append(alloc())
    except oom as e:
        print(f"owner_oom_at={i} owner_oom_s={time.monotonic() - t:.3f} {str(e).splitlines()[0][:300]}", flush=True)
        sys.exit(1)
    d = time.monotonic() - t
    worst = max(worst, d)
    print(f"owner_gib={(i + 1) * chunk} owner_alloc_s={d:.3f}", flush=True)
print(f"owner_done_gib={len(held) * chunk} owner_worst_s={worst:.3f}", flush=True)
time.sleep(2)
