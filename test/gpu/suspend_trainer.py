"""The borrower of test/gpu/suspend.sh: a deterministic PyTorch training loop
(fixed seeds, torch.use_deterministic_algorithms) holding about GIB of device
memory, whose loss sequence is the same on every undisturbed run, so that a
suspension that changes anything shows as a differing step.

  suspend_trainer.py STEPS GIB [STOP]
Waits (up to WAIT_S, 120) until the driver reports GIB free (vgpu node's
first ceiling under memory_borrow = "free"), takes GIB - 1 of 1 GiB ballast
tensors (the model, its optimiser, the activations and the context make up
the rest), prints 'ready pid=P ballast_gib=B', then 'step I T LOSS' per step
(T: Unix time after the step; LOSS: the float's exact hex) and STEP_SLEEP
(0.02 s) between steps, until STEPS or STOP exists; then 'done steps=N
ballast_intact=BOOL'."""
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402

steps, gib = int(sys.argv[1]), float(sys.argv[2])
stop = sys.argv[3] if len(sys.argv) > 3 else ""
pause = float(os.environ.get("STEP_SLEEP", "0.02"))
G = 1 << 30
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
dev = "cuda"
t = time.time()
while torch.cuda.mem_get_info()[0] < gib * G and time.time() - t < float(os.environ.get("WAIT_S", "120")):
    time.sleep(0.1)
model = torch.nn.Sequential(
    torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048), torch.nn.ReLU(),
    torch.nn.Linear(2048, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
g = torch.Generator(device=dev)
g.manual_seed(1)
ballast = []
try:
    for _ in range(max(0, int(gib) - 1)):
        ballast.append(torch.full((G // 4,), 1.5, device=dev))
except torch.cuda.OutOfMemoryError as e:
    print(f"ballast_oom at={len(ballast)} {str(e).splitlines()[0]}", flush=True)
    sys.exit(1)
torch.cuda.synchronize()
print(f"ready pid={os.getpid()} ballast_gib={len(ballast)} free_mib={torch.cuda.mem_get_info()[0] >> 20}", flush=True)
n = 0
for i in range(steps):
    if stop and os.path.exists(stop):
        break
    x = torch.randn(512, 2048, device=dev, generator=g)
    y = torch.randint(0, 10, (512,), device=dev, generator=g)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {i} {time.time():.4f} {loss.item().hex()}", flush=True)
    n += 1
    if pause > 0:
        time.sleep(pause)
ok = all(bool((b == 1.5).all().item()) for b in ballast)
print(f"done steps={n} ballast_intact={ok}", flush=True)
sys.exit(0 if ok else 3)
