# What the real NVML, opened by path as a tenant skipping the stand-in would,
# lists: its process list, process utilization and memory info on GPU 0.
#   python3 test/gpu/realnvml.py TAG     (TAG own: allocate 512 MiB first, with PyTorch)
# docs/security.md says what it means for a tenant; docs/results.md the figures.
import ctypes, os, sys
nv = ctypes.CDLL(os.environ.get("NVML_LIB", "/usr/local/nvidia/lib64/libnvidia-ml.so.1"))
assert nv.nvmlInit_v2() == 0
dev = ctypes.c_void_p()
assert nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
class P(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]
class M(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
class S(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint), ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]
def show(tag):
    n = ctypes.c_uint(64); arr = (P * 64)()
    r = nv.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(n), arr)
    m = M(); nv.nvmlDeviceGetMemoryInfo(dev, ctypes.byref(m))
    k = ctypes.c_uint(64); sa = (S * 64)()
    ru = nv.nvmlDeviceGetProcessUtilization(dev, sa, ctypes.byref(k), ctypes.c_ulonglong(0))
    print(tag, "my pid", os.getpid(), "procs rc", r, [(arr[i].pid, arr[i].usedGpuMemory >> 20) for i in range(n.value)],
          "| util rc", ru, sorted({sa[i].pid for i in range(k.value)}) if ru == 0 else "", "| device used MiB", m.used >> 20, flush=True)
if len(sys.argv) > 1 and sys.argv[1] == "own":
    import torch
    x = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
show(sys.argv[1] if len(sys.argv) > 1 else "list")
