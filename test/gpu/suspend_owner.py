"""An owner of test/gpu/suspend.sh: grows to its memory request in 1 GiB
allocations through one framework's own allocator, timing each, then holds
what it took.

  suspend_owner.py torch|cupy|jax N HOLD_S
torch: the caching allocator; cupy: its default memory pool; jax: XLA's
allocator with XLA_PYTHON_CLIENT_PREALLOCATE=false and
XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 (set here before jax is imported, as a
user sets them), each array made by a function compiled before the timing. Prints 'owner_alloc fw=F gib=I s=S t=T' per allocation (S: the
call and its synchronisation), 'owner_done fw=F gib=N worst_s=W', holds
HOLD_S seconds, 'owner_exit fw=F t=T'. An allocation that fails prints
'owner_oom fw=F at=I s=S ...' and exits 1."""
import os
import sys
import time

fw, n, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
G = 1 << 30
if fw == "torch":
    import torch
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()

    def alloc():
        x = torch.empty(G, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        return x
elif fw == "cupy":
    import cupy
    cupy.zeros(1)
    cupy.cuda.Device().synchronize()

    def alloc():
        x = cupy.empty(G, dtype=cupy.uint8)
        cupy.cuda.Device().synchronize()
        return x
elif fw == "jax":
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    # XLA caps its allocator at this fraction of the total the driver (here
    # the library: the limit) reports, 0.75 by default: 14 GiB of 16 needs more
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
    import jax
    import jax.numpy as jnp
    jnp.zeros(1).block_until_ready()
    make = jax.jit(lambda: jnp.zeros((G,), dtype=jnp.uint8)).lower().compile()

    def alloc():
        return make().block_until_ready()
else:
    sys.exit("frameworks: torch cupy jax")
time.sleep(1)  # vgpu node's first round over this tenant
print(f"owner_start fw={fw} t={time.time():.3f}", flush=True)
held, worst = [], 0.0
for i in range(n):
    t = time.monotonic()
    try:
        held.append(alloc())
    except Exception as e:  # each framework has its own out-of-memory error
        print(f"owner_oom fw={fw} at={i} s={time.monotonic() - t:.3f} {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
        sys.exit(1)
    d = time.monotonic() - t
    worst = max(worst, d)
    print(f"owner_alloc fw={fw} gib={i + 1} s={d:.3f} t={time.time():.3f}", flush=True)
print(f"owner_done fw={fw} gib={n} worst_s={worst:.3f} t={time.time():.3f}", flush=True)
time.sleep(hold)
print(f"owner_exit fw={fw} t={time.time():.3f}", flush=True)
