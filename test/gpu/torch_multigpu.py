"""PyTorch on several limited GPUs (test/gpu/multigpu.sh). Prints key=value
lines that the script checks.

  torch_multigpu.py info                 devices as PyTorch sees them
  torch_multigpu.py hold GIB RELEASE     GIB GiB on cuda:0, "held=1", wait for the file RELEASE
  torch_multigpu.py fill                 every device filled with 256 MiB tensors until OOM
  torch_multigpu.py allreduce            NCCL all-reduce, one process per device
  torch_multigpu.py dist                 one process per device: NCCL all-reduce bus
                                         bandwidth at 256 MiB, the memory NCCL takes,
                                         then DDP training steps a second
  torch_multigpu.py peer                 peer access and copies between devices 0 and 1
Several commands may follow one another (info fill).
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


def _used_mib(i):
    free, total = torch.cuda.mem_get_info(i)
    return (total - free) / MiB


def _dist_rank(rank, world, init, steps):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.cuda.set_device(rank)
    dev = torch.device(f"cuda:{rank}")
    n = 64 * MiB  # floats: 256 MiB
    x = torch.ones(n, device=dev)
    torch.cuda.synchronize()
    before, res0 = _used_mib(rank), torch.cuda.memory_reserved(rank) / MiB
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world, device_id=dev)
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    # what the device lost beyond PyTorch's own pool: NCCL's buffers (and
    # its kernels), taken through cuMem* (the virtual memory API)
    nccl = _used_mib(rank) - before - (torch.cuda.memory_reserved(rank) / MiB - res0)
    reps, times = 20, []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        a.record()
        for _ in range(reps):
            dist.all_reduce(x)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / reps)
    times.sort()
    t = times[len(times) // 2]
    busbw = n * 4 * 2 * (world - 1) / world / t / 1e9
    ok = bool(torch.isfinite(x).all().item())
    print(f"nccl_mib{rank}={nccl:.0f}\nbusbw_gbs{rank}={busbw:.1f}\nallreduce_ok{rank}={int(ok)}", flush=True)
    del x
    # DDP: an MLP of four 4096x4096 layers, 256 samples a rank a step
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(4096, 4096), torch.nn.ReLU()]
    model = DDP(torch.nn.Sequential(*layers).to(dev), device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    data = torch.randn(256, 4096, device=dev)
    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(data).square().mean()
        loss.backward()
        opt.step()
        return loss
    for _ in range(30):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    used = _used_mib(rank)
    free, total = torch.cuda.mem_get_info(rank)
    print(f"ddp_steps_per_s{rank}={steps / dt:.2f}\nddp_loss{rank}={loss.item():.4g}\nddp_used_mib{rank}={used:.0f}\nddp_total_mib{rank}={total // MiB}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def dist_bench():
    import tempfile

    import torch.multiprocessing as mp

    world = torch.cuda.device_count()
    steps = int(os.environ.get("DDP_STEPS", "300"))
    print(f"dist_world={world}")
    for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        print(f"env_{k}={os.environ.get(k, '')}")
    fd, path = tempfile.mkstemp(prefix="nccl-init-")
    os.close(fd)
    os.unlink(path)
    mp.spawn(_dist_rank, args=(world, "file://" + path, steps), nprocs=world, join=True)
    print("dist_done=1")


def peer():
    """cudaDeviceEnablePeerAccess and cudaMemcpyPeer (through the CUDA runtime
    that PyTorch loaded), then PyTorch's own cross-device copies: the bytes
    arrive, each device's used memory moves only by what was allocated."""
    import ctypes

    rt = None
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            rt = ctypes.CDLL(name)
            break
        except OSError:
            pass
    print(f"peer_can01={int(torch.cuda.can_device_access_peer(0, 1))}\npeer_can10={int(torch.cuda.can_device_access_peer(1, 0))}")
    n = 1 << 30
    a = torch.full((n,), 7, dtype=torch.uint8, device="cuda:0")
    b = torch.zeros(n, dtype=torch.uint8, device="cuda:1")
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    u0, u1 = _used_mib(0), _used_mib(1)
    if rt is not None:
        rcs = []
        for d, p in ((0, 1), (1, 0)):
            rt.cudaSetDevice(d)
            rcs.append(rt.cudaDeviceEnablePeerAccess(p, 0))  # 704: already enabled
        print(f"peer_enable_rc={','.join(map(str, rcs))}")
        rt.cudaSetDevice(0)
        rc = rt.cudaMemcpyPeer(ctypes.c_void_p(b.data_ptr()), 1, ctypes.c_void_p(a.data_ptr()), 0, ctypes.c_size_t(n))
        rt.cudaDeviceSynchronize()
        print(f"peer_memcpy_rc={rc}\npeer_memcpy_ok={int(bool((b == 7).all().item()))}")
    else:
        print("peer_memcpy_rc=no-cudart")
    for src, dst, name in ((a, b, "01"), (b, a, "10")):
        dst.copy_(src)
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(5):
                dst.copy_(src)
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            times.append((time.perf_counter() - t0) / 5)
        times.sort()
        print(f"peer_gbs{name}={n / times[2] / 1e9:.1f}")
    b.fill_(3)
    a.copy_(b)
    ok = bool((a == 3).all().item())
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    print(f"peer_copy_ok={int(ok)}\npeer_used_delta_mib0={_used_mib(0) - u0:.0f}\npeer_used_delta_mib1={_used_mib(1) - u1:.0f}")


if __name__ == "__main__":
    args = sys.argv[1:] or ["info"]
    while args:
        cmd = args.pop(0)
        if cmd == "info":
            info()
        elif cmd == "hold":
            hold(float(args.pop(0)), args.pop(0))
        elif cmd == "fill":
            fill()
        elif cmd == "allreduce":
            allreduce()
        elif cmd == "dist":
            dist_bench()
        elif cmd == "peer":
            peer()
        else:
            sys.exit(f"unknown command {cmd}")
