/* Routes by which the driver takes device memory beside allocation calls
 * (docs/memory-routes.md): context limits (limits.c), module and library data
 * (modules.c), and the v1 and green context exports (context.c). The
 * measurement they share is probe.h. */
#ifndef VGPU_ROUTES_H
#define VGPU_ROUTES_H
#include <stdint.h>
#include "cuda_abi.h"
#include "vgpu.h"

/* limits.c: a function about to run in the current context needs `local`
 * bytes of stack per thread; raise the stack limit through the counted path
 * first. CUDA_SUCCESS or OUT_OF_MEMORY. */
CUresult vgpu_stack_fit(size_t local);
/* limits.c / modules.c: forget what each counted for ctx, a context that
 * went (context.c calls both: the one way between these files) */
void vgpu_limits_ctx_gone(CUcontext ctx);
void vgpu_modules_ctx_gone(CUcontext ctx);

/* modules.c: library kernels launched as they are (a CUkernel cast to
 * CUfunction, as cudart 12+ does). The driver loads the kernel's library into
 * the launch's context at that launch, where nothing can refuse it any more:
 * the launch path (launch.c) asks first, only for handles this map may hold
 * (a byte per hash of the handle, set when cuLibraryGetKernel hands one out,
 * never cleared: a false hit costs one lookup). vgpu_kernel_none stays 1
 * until the first is handed out. */
#define VGPU_KERNEL_MAP 4096 /* a power of two; launch.c's assembly hashes with it */
extern unsigned char vgpu_kernel_map[VGPU_KERNEL_MAP];
extern int vgpu_kernel_none;
static inline int vgpu_kernel_maybe(const void *f)
{
    return vgpu_kernel_map[((uintptr_t)f >> 4) & (VGPU_KERNEL_MAP - 1)] != 0;
}
/* Before a launch of f in the current context: when f is a library kernel,
 * its library is loaded (and counted) there and room made for its frame, or
 * OUT_OF_MEMORY. CUDA_SUCCESS for any other handle. */
CUresult vgpu_kernel_launch_fit(CUfunction f);

#define E VGPU_EXPORT
E CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);
E CUresult cuCtxDestroy(CUcontext ctx);
E CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
E CUresult cuDevicePrimaryCtxReset(CUdevice dev);
E CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags);
E CUresult cuGreenCtxDestroy(CUgreenCtx g);
E CUresult cuCtxSetLimit(CUlimit limit, size_t value);
E CUresult cuModuleLoad(CUmodule *m, const char *fname);
E CUresult cuModuleLoadData(CUmodule *m, const void *image);
E CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *o, void **v);
E CUresult cuModuleLoadFatBinary(CUmodule *m, const void *fatCubin);
E CUresult cuModuleUnload(CUmodule m);
E CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
E CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned int njo,
                             CUlibraryOption *lo, void **lv, unsigned int nlo);
E CUresult cuLibraryLoadFromFile(CUlibrary *lib, const char *fname, CUjit_option *jo, void **jv, unsigned int njo,
                                 CUlibraryOption *lo, void **lv, unsigned int nlo);
E CUresult cuLibraryUnload(CUlibrary lib);
E CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name);
E CUresult cuLibraryGetModule(CUmodule *m, CUlibrary lib);
E CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib, const char *name);
E CUresult cuKernelGetFunction(CUfunction *f, CUkernel k);
#undef E

/* used, not wrapped */
typedef CUresult (*vgpu_ctx_get_current_t)(CUcontext *);
typedef CUresult (*cuCtxFromGreenCtx_t)(CUcontext *, CUgreenCtx);
typedef CUresult (*cuModuleGetLoadingMode_t)(int *);
typedef CUresult (*cuCtxGetLimit_t)(size_t *, CUlimit);
typedef CUresult (*cuDeviceGetAttribute_t)(int *, CUdevice_attribute, CUdevice);
typedef CUresult (*cuFuncGetAttribute_t)(int *, CUfunction_attribute, CUfunction);
#endif
