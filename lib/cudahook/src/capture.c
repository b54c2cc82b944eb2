/* Captures: counted (pacer.h, vgpu_captures_*), so that launches and
 * stream-ordered allocations ask the driver whether their stream captures only
 * while one may: +1 for a begin that succeeded, -1 for an end after which the
 * stream, capturing before, no longer is. */
#include "capture.h"
#include "cuda_hooks.h"
#include "pacer.h"

typedef CUresult (*cuStreamIsCapturing_t)(CUstream, CUstreamCaptureStatus *);
typedef CUresult (*cuThreadExchangeStreamCaptureMode_t)(CUstreamCaptureMode *);

static int open_captures;

static CUresult capture_status(CUstream s, int ptsz, CUstreamCaptureStatus *st)
{
    *st = CU_STREAM_CAPTURE_STATUS_NONE;
    return ptsz ? REALT(cuStreamIsCapturing_t, cuStreamIsCapturing_ptsz)(s, st)
                : REALT(cuStreamIsCapturing_t, cuStreamIsCapturing)(s, st);
}

int vgpu_capturing(CUstream s, int ptsz)
{
    CUstreamCaptureStatus st;

    if (!vgpu_captures_open(&open_captures))
        return 0;
    return capture_status(s, ptsz, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Our event calls are made in RELAXED capture mode: while another thread
 * captures in GLOBAL mode, cuEventQuery & co. are "potentially unsafe" calls
 * that would fail and invalidate that capture. Our events are never recorded
 * in a capture, so they are safe to use; the caller's mode is restored before
 * its own launch. */
int vgpu_capture_relax(void)
{
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;

    if (REALT(cuThreadExchangeStreamCaptureMode_t, cuThreadExchangeStreamCaptureMode)(&m) != CUDA_SUCCESS)
        return -1;
    return (int)m;
}

void vgpu_capture_restore(int old)
{
    CUstreamCaptureMode m = (CUstreamCaptureMode)old;

    if (old >= 0)
        REALT(cuThreadExchangeStreamCaptureMode_t, cuThreadExchangeStreamCaptureMode)(&m);
}

static CUresult capture_begun(CUresult r)
{
    if (r == CUDA_SUCCESS)
        vgpu_captures_begun(&open_captures);
    return r;
}

static CUresult end_capture(CUstream s, CUgraph *g, int ptsz)
{
    CUstreamCaptureStatus st;
    int was;
    CUresult r;

    READY();
    was = capture_status(s, ptsz, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
    r = ptsz ? REAL(cuStreamEndCapture_ptsz)(s, g) : REAL(cuStreamEndCapture)(s, g);
    if (was && capture_status(s, ptsz, &st) == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_NONE)
        vgpu_captures_ended(&open_captures);
    return r;
}

#define BEGIN_CAPTURE(call)                                                                                            \
    do {                                                                                                               \
        READY();                                                                                                       \
        return capture_begun(call);                                                                                    \
    } while (0)

CUresult cuStreamBeginCapture(CUstream s) { BEGIN_CAPTURE(REAL(cuStreamBeginCapture)(s)); }
CUresult cuStreamBeginCapture_ptsz(CUstream s) { BEGIN_CAPTURE(REAL(cuStreamBeginCapture_ptsz)(s)); }
CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m)
{
    BEGIN_CAPTURE(REAL(cuStreamBeginCapture_v2)(s, m));
}
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m)
{
    BEGIN_CAPTURE(REAL(cuStreamBeginCapture_v2_ptsz)(s, m));
}
CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                                     size_t n, CUstreamCaptureMode m)
{
    BEGIN_CAPTURE(REAL(cuStreamBeginCaptureToGraph)(s, g, deps, edges, n, m));
}
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                                          size_t n, CUstreamCaptureMode m)
{
    BEGIN_CAPTURE(REAL(cuStreamBeginCaptureToGraph_ptsz)(s, g, deps, edges, n, m));
}
CUresult cuStreamEndCapture(CUstream s, CUgraph *g) { return end_capture(s, g, 0); }
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) { return end_capture(s, g, 1); }
