"""PyTorch on several limited GPUs (test/gpu/multigpu.sh). Prints key=value
lines that the script checks.

  torch_multigpu.py info                 devices as PyTorch sees them
  torch_multigpu.py hold GIB RELEASE     GIB GiB on cuda:0, "held=1", wait for the file RELEASE
  torch_multigpu.py fill                 every device filled with 256 MiB tensors until OOM
  torch_multigpu.py allreduce            NCCL all-reduce, one process per device
"""
import os
import sys
import time

import torch

MiB = 1 << 20


def uuid_of(props):
    u = getattr(props, "uuid", None)
    if u is None:
        return "unknown"
    s = str(u).lower()
    return s if s.startswith("gpu-") else "gpu-" + s


def info():
    n = torch.cuda.device_count()
    print(f"count={n}")
    for i in range(n):
        p = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        print(f"name{i}={p.name}")
        print(f"uuid{i}={uuid_of(p)}")
        print(f"props_total_mib{i}={p.total_memory // MiB}")
        print(f"meminfo_total_mib{i}={total // MiB}")
        print(f"meminfo_free_mib{i}={free // MiB}")


def hold(gib, release):
    x = torch.empty(int(gib * 1024) * MiB, dtype=torch.uint8, device="cuda:0")
    x.fill_(1)
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info(0)
    print(f"held_mib={x.numel() // MiB}\nheld_total_mib={total // MiB}\nheld_free_mib={free // MiB}")
    print("held=1", flush=True)
    deadline = time.time() + 120
    while not os.path.exists(release) and time.time() < deadline:
        time.sleep(0.1)
    del x


def fill():
    for i in range(torch.cuda.device_count()):
        held = []
        err = "none"
        try:
            while True:
                held.append(torch.empty(256 * MiB, dtype=torch.uint8, device=f"cuda:{i}"))
        except torch.OutOfMemoryError as e:
            err = type(e).__name__
        print(f"fill_mib{i}={len(held) * 256}\nfill_error{i}={err}")
        del held
        torch.cuda.empty_cache()


def _allreduce_rank(rank, world, init):
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    n = 64 * MiB  # floats: 256 MiB
    x = torch.full((n,), float(rank + 1), device=f"cuda:{rank}")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    want = world * (world + 1) / 2
    ok = bool(torch.all(x == want).item())
    free, total = torch.cuda.mem_get_info(rank)
    print(f"allreduce_ok{rank}={int(ok)}\nallreduce_total_mib{rank}={total // MiB}\nallreduce_free_mib{rank}={free // MiB}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def allreduce():
    import tempfile

    import torch.multiprocessing as mp

    world = torch.cuda.device_count()
    print(f"allreduce_world={world}")
    for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        print(f"env_{k}={os.environ.get(k, '')}")
    fd, path = tempfile.mkstemp(prefix="nccl-init-")
    os.close(fd)
    os.unlink(path)
    mp.spawn(_allreduce_rank, args=(world, "file://" + path), nprocs=world, join=True)
    print("allreduce_done=1")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "info"
    if cmd == "info":
        info()
    elif cmd == "hold":
        hold(float(sys.argv[2]), sys.argv[3])
    elif cmd == "fill":
        fill()
    elif cmd == "allreduce":
        allreduce()
    else:
        sys.exit(f"unknown command {cmd}")
