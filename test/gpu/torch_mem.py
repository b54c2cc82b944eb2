"""PyTorch under a memory limit: what it sees, where it stops, and that
freeing gives the memory back. Prints one JSON line (test/gpu/memory.sh)."""
import json, os, sys
import torch

MiB = 1 << 20
out = {"alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
free, total = torch.cuda.mem_get_info()
out["mem_get_info_total_mib"] = total / MiB
out["mem_get_info_free_mib"] = free / MiB

def fill():
    held, peak_reserved = [], 0
    try:
        while True:
            held.append(torch.empty(256 * MiB, dtype=torch.uint8, device="cuda"))
            peak_reserved = max(peak_reserved, torch.cuda.memory_reserved())
    except torch.OutOfMemoryError as e:
        err = type(e).__name__
    n = len(held)
    del held
    torch.cuda.empty_cache()
    return n, peak_reserved, err

n1, r1, e1 = fill()
out["first_fill_tensors_256mib"] = n1
out["first_fill_held_mib"] = n1 * 256
out["first_fill_peak_reserved_mib"] = r1 / MiB
out["first_fill_error"] = e1
free2, _ = torch.cuda.mem_get_info()
out["free_after_release_mib"] = free2 / MiB
n2, r2, e2 = fill()
out["second_fill_tensors_256mib"] = n2
out["second_fill_error"] = e2
print(json.dumps(out))
