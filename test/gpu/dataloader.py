"""Two processes of one vGPU (run both under one `vgpu exec`): this one
trains from a DataLoader with 4 worker processes (forked after CUDA is
initialised in the parent), both fill the GPU with 256 MiB blocks until OOM,
wait for each other, report what they hold and the free memory they see.
usage: dataloader.py NAME BARRIER_DIR"""
import json, os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

name, bar = sys.argv[1], sys.argv[2]
MiB = 1 << 20
torch.zeros(1, device="cuda")  # CUDA up before the workers fork

class Data(Dataset):
    def __len__(self): return 4096
    def __getitem__(self, i): return torch.full((1024,), float(i))

def wait_for(tag, n=2, timeout=60):
    open(os.path.join(bar, f"{tag}.{name}"), "w").close()
    t0 = time.time()
    while len([f for f in os.listdir(bar) if f.startswith(tag + ".")]) < n and time.time() - t0 < timeout:
        time.sleep(0.05)

held, seen = [], 0
if name == "loader":
    for batch in DataLoader(Data(), batch_size=256, num_workers=4):
        held.append(batch.to("cuda"))
        seen += len(batch)
wait_for("start")
blocks = []
try:
    while True:
        blocks.append(torch.empty(256 * MiB, dtype=torch.uint8, device="cuda"))
        time.sleep(0.01)  # interleave with the other process
except torch.OutOfMemoryError:
    pass
wait_for("full")
free, total = torch.cuda.mem_get_info()
print(json.dumps({"name": name, "samples_from_workers": seen, "blocks_256mib": len(blocks),
                  "free_mib": free / MiB, "total_mib": total / MiB}), flush=True)
wait_for("reported")
time.sleep(2)  # the host samples nvidia-smi meanwhile
