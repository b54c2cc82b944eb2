"""A deterministic PyTorch training loop for the checkpoint probe: the same
loss sequence on every undisturbed run, so a suspension mid-step that changes
anything shows as a differing line. Usage: trainer.py STEPS BALLAST_GIB."""
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402

steps = int(sys.argv[1])
ballast_gib = float(sys.argv[2])
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
dev = "cuda"
# A ballast the size of a model's weights, so that a checkpoint moves GiBs.
ballast = torch.full((int(ballast_gib * (1 << 30)) // 4,), 1.5, device=dev)
model = torch.nn.Sequential(
    torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048), torch.nn.ReLU(),
    torch.nn.Linear(2048, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
g = torch.Generator(device=dev)
g.manual_seed(1)
print(f"ready pid={os.getpid()}", flush=True)
t0 = time.monotonic()
for i in range(steps):
    x = torch.randn(512, 2048, device=dev, generator=g)
    y = torch.randint(0, 10, (512,), device=dev, generator=g)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {i} loss {loss.item():.10f}", flush=True)
    time.sleep(0.01)
ok = bool((ballast == 1.5).all().item())
print(f"done secs={time.monotonic() - t0:.2f} ballast_intact={ok}", flush=True)
