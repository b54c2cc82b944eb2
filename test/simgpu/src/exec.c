/* Streams, events, modules, kernel launch, host functions, stream capture and
 * graphs: everything that puts work on the device timeline.
 *
 * A launch computes its slot at once: it starts when its stream's previous
 * work is done (stream_ready) and the device is free (FIFO across all streams
 * and processes, in the shared state) and runs for the kernel's duration. The
 * call returns immediately; synchronize/query/events compare CLOCK_MONOTONIC
 * with those times. Legacy default stream semantics: it waits for all blocking
 * streams of its context and they wait for it. */
#define _GNU_SOURCE
#include "cuda_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void sim_fill(void *p, unsigned v, unsigned elem, size_t n);
static __thread int tls_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* ---- streams ---- */
CUresult resolve_stream(CUstream h, int ptsz, struct stream **out)
{
    struct ctx *c;
    CUresult r;
    if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        if ((r = cur_ctx_checked(&c))) return r;
        if (h == CU_STREAM_PER_THREAD || (h == NULL && ptsz)) {
            struct stream *s = tls_perthread(c, 1);
            if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
            *out = s;
        } else {
            *out = &c->legacy;
        }
        return CUDA_SUCCESS;
    }
    struct stream *s = (struct stream *)h;
    if (!reg_has(s, OT_STREAM) || s->destroyed) return CUDA_ERROR_INVALID_HANDLE;
    if ((r = ctx_usable(s->o.ctx))) return r;
    *out = s;
    return CUDA_SUCCESS;
}

uint64_t stream_ready(struct stream *s)
{
    struct ctx *c = s->o.ctx;
    uint64_t t = s->tail;
    if (s->kind == SK_LEGACY) {
        for (struct stream *b = c->streams; b; b = b->next)
            if (!(b->flags & CU_STREAM_NON_BLOCKING) && b->tail > t) t = b->tail;
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING) && c->legacy.tail > t) {
        t = c->legacy.tail;
    }
    uint64_t now = sim_now();
    return t > now ? t : now;
}

void stream_done_at(struct stream *s, uint64_t t)
{
    if (t > s->tail) s->tail = t;
}

static uint64_t stream_idle_time(struct stream *s)
{
    uint64_t t = s->tail;
    if (s->kind == SK_LEGACY)
        for (struct stream *b = s->o.ctx->streams; b; b = b->next)
            if (!(b->flags & CU_STREAM_NON_BLOCKING) && b->tail > t) t = b->tail;
    return t;
}

static int host_pending(struct stream *s)
{
    if (s->pending_host) return 1;
    if (s->kind == SK_LEGACY)
        for (struct stream *b = s->o.ctx->streams; b; b = b->next)
            if (!(b->flags & CU_STREAM_NON_BLOCKING) && b->pending_host) return 1;
    return 0;
}

CUresult stream_sync_wait(struct stream *s)
{
    uint64_t t = stream_idle_time(s);
    struct ctx *c = s->o.ctx;
    sim_leave();
    sim_sleep_until(t);
    sim_enter();
    if (s->kind != SK_LEGACY && !reg_has(s, OT_STREAM)) return CUDA_SUCCESS;
    while (c->alive && host_pending(s)) pthread_cond_wait(&g.cond, &g.mu);
    return CUDA_SUCCESS;
}

void ctx_sync_wait(struct ctx *c)
{
    uint64_t t = c->legacy.tail;
    for (struct stream *b = c->streams; b; b = b->next)
        if (b->tail > t) t = b->tail;
    sim_leave();
    sim_sleep_until(t);
    sim_enter();
    for (;;) {
        int p = c->legacy.pending_host;
        for (struct stream *b = c->streams; b && c->alive; b = b->next) p += b->pending_host;
        if (!p || !c->alive) break;
        pthread_cond_wait(&g.cond, &g.mu);
    }
}

void stream_free(struct stream *s)
{
    reg_del(s);
    s->destroyed = 1;
    struct ctx *c = s->o.ctx;
    for (struct stream **pp = &c->streams; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    if (!s->pending_host) free(s); /* else the worker frees it */
}

static CUresult stream_create(CUstream *ph, unsigned flags, int prio)
{
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    struct stream *s = calloc(1, sizeof *s);
    if (!s) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    s->o.type = OT_STREAM;
    s->o.ctx = c;
    s->flags = flags;
    s->prio = prio > 0 ? 0 : prio < -5 ? -5
                                       : prio; /* clamped to the range, like the driver */
    s->id = ++g.next_id;
    s->next = c->streams;
    c->streams = s;
    reg_add(s, OT_STREAM);
    *ph = (CUstream)s;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuStreamCreate(CUstream *ph, unsigned int flags) { return stream_create(ph, flags, 0); }
SIM_EXPORT CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority) { return stream_create(ph, flags, priority); }

static CUresult stream_destroy(CUstream h)
{
    ENTER();
    struct stream *s = (struct stream *)h;
    if (!h || !reg_has(s, OT_STREAM) || s->kind != SK_NORMAL) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    stream_free(s); /* queued work still completes on the device timeline */
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuStreamDestroy_v2(CUstream h) { return stream_destroy(h); }
SIM_EXPORT CUresult cuStreamDestroy(CUstream h) { return stream_destroy(h); }

void capture_invalidate(struct stream *s)
{
    if (s->cap) s->cap_status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
}

static CUresult stream_sync(CUstream h, int ptsz)
{
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(h, ptsz, &s);
    if (r) LEAVE(r);
    if (s->cap) {
        capture_invalidate(s);
        LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    int cfg = s->o.ctx->cfg;
    stream_sync_wait(s);
    pools_trim_sync(cfg);
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuStreamSynchronize(CUstream h) { return stream_sync(h, 0); }
SIM_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream h) { return stream_sync(h, 1); }

static CUresult stream_query(CUstream h, int ptsz)
{
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(h, ptsz, &s);
    if (r) LEAVE(r);
    if (s->cap) {
        capture_invalidate(s);
        LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    LEAVE(sim_now() >= stream_idle_time(s) && !host_pending(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}
SIM_EXPORT CUresult cuStreamQuery(CUstream h) { return stream_query(h, 0); }
SIM_EXPORT CUresult cuStreamQuery_ptsz(CUstream h) { return stream_query(h, 1); }

static CUresult stream_get_priority(CUstream h, int *p, int ptsz)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(h, ptsz, &s);
    if (!r) *p = s->prio;
    LEAVE(r);
}
SIM_EXPORT CUresult cuStreamGetPriority(CUstream h, int *p) { return stream_get_priority(h, p, 0); }
SIM_EXPORT CUresult cuStreamGetPriority_ptsz(CUstream h, int *p) { return stream_get_priority(h, p, 1); }

static CUresult stream_get_flags(CUstream h, unsigned *f, int ptsz)
{
    if (!f) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(h, ptsz, &s);
    if (!r) *f = s->flags;
    LEAVE(r);
}
SIM_EXPORT CUresult cuStreamGetFlags(CUstream h, unsigned int *f) { return stream_get_flags(h, f, 0); }
SIM_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream h, unsigned int *f) { return stream_get_flags(h, f, 1); }

static CUresult stream_get_ctx(CUstream h, CUcontext *pc, int ptsz)
{
    if (!pc) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(h, ptsz, &s);
    if (!r) *pc = (CUcontext)s->o.ctx;
    LEAVE(r);
}
SIM_EXPORT CUresult cuStreamGetCtx(CUstream h, CUcontext *pc) { return stream_get_ctx(h, pc, 0); }
SIM_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream h, CUcontext *pc) { return stream_get_ctx(h, pc, 1); }

static CUresult stream_get_id(CUstream h, unsigned long long *id, int ptsz)
{
    if (!id) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(h, ptsz, &s);
    if (!r) *id = s->kind == SK_LEGACY ? 1 : s->id;
    LEAVE(r);
}
SIM_EXPORT CUresult cuStreamGetId(CUstream h, unsigned long long *id) { return stream_get_id(h, id, 0); }
SIM_EXPORT CUresult cuStreamGetId_ptsz(CUstream h, unsigned long long *id) { return stream_get_id(h, id, 1); }

/* ---- events ---- */
SIM_EXPORT CUresult cuEventCreate(CUevent *ph, unsigned int flags)
{
    if (!ph || (flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    struct event *e = calloc(1, sizeof *e);
    if (!e) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    e->o.type = OT_EVENT;
    e->o.ctx = c;
    e->flags = flags;
    reg_add(e, OT_EVENT);
    *ph = (CUevent)e;
    LEAVE(CUDA_SUCCESS);
}

static CUresult event_destroy(CUevent h)
{
    ENTER();
    if (!reg_has(h, OT_EVENT)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    reg_del(h);
    free(h);
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuEventDestroy_v2(CUevent h) { return event_destroy(h); }
SIM_EXPORT CUresult cuEventDestroy(CUevent h) { return event_destroy(h); }

static CUresult event_record(CUevent h, CUstream hs, unsigned flags, int ptsz)
{
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct event *e = (struct event *)h;
    if (!reg_has(e, OT_EVENT)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    struct stream *s;
    CUresult r = resolve_stream(hs, ptsz, &s);
    if (r) LEAVE(r);
    if (s->o.ctx != e->o.ctx) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    if (s->cap) { /* a capture event: other streams waiting on it join the capture */
        e->cap = s->cap;
        LEAVE(CUDA_SUCCESS);
    }
    e->cap = NULL;
    /* a marker in the device FIFO: reached after its stream's earlier work and
     * after everything queued on the device before it (one engine, in order) */
    e->ts = sim_marker(&g.st, s->o.ctx->cfg, stream_ready(s));
    e->recorded = 1;
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuEventRecord(CUevent h, CUstream s) { return event_record(h, s, 0, 0); }
SIM_EXPORT CUresult cuEventRecord_ptsz(CUevent h, CUstream s) { return event_record(h, s, 0, 1); }
SIM_EXPORT CUresult cuEventRecordWithFlags(CUevent h, CUstream s, unsigned int f) { return event_record(h, s, f, 0); }
SIM_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent h, CUstream s, unsigned int f) { return event_record(h, s, f, 1); }

/* "Potentially unsafe" calls during stream capture (real rules): a thread whose
 * capture mode (cuThreadExchangeStreamCaptureMode) is not RELAXED may not query
 * or wait on an event while it has a capture of its own begun in another mode
 * than RELAXED, nor, in GLOBAL mode, while any other thread has a capture begun
 * in GLOBAL mode: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and those captures are
 * invalidated. Called with g.mu held. */
static int active_captures; /* begun and not yet ended, under g.mu */

static void forbid_one(void *obj, void *arg)
{
    struct stream *s = obj;
    if (((struct obj *)obj)->type != OT_STREAM || !s->cap || !s->cap_origin) /* ongoing, even invalidated */
        return;
    int own = pthread_equal(s->cap_thread, pthread_self());
    if ((own && s->cap_mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
        (!own && tls_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && s->cap_mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
        capture_invalidate(s);
        *(int *)arg = 1;
    }
}

static int capture_forbids(void)
{
    int bad = 0;
    if (tls_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED || active_captures <= 0) return 0;
    reg_foreach(forbid_one, &bad);
    return bad;
}

SIM_EXPORT CUresult cuEventQuery(CUevent h)
{
    ENTER();
    struct event *e = (struct event *)h;
    if (!reg_has(e, OT_EVENT)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    if (e->cap) LEAVE(CUDA_ERROR_CAPTURED_EVENT);
    if (capture_forbids()) LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    LEAVE(!e->recorded || sim_now() >= e->ts ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

SIM_EXPORT CUresult cuEventSynchronize(CUevent h)
{
    ENTER();
    struct event *e = (struct event *)h;
    if (!reg_has(e, OT_EVENT)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    if (e->cap) LEAVE(CUDA_ERROR_CAPTURED_EVENT);
    if (capture_forbids()) LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (!e->recorded) LEAVE(CUDA_SUCCESS);
    uint64_t t = e->ts;
    int cfg = e->o.ctx->cfg;
    sim_leave();
    sim_sleep_until(t);
    sim_enter();
    pools_trim_sync(cfg);
    LEAVE(CUDA_SUCCESS);
}

static CUresult elapsed(float *ms, CUevent hs, CUevent he)
{
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct event *a = (struct event *)hs, *b = (struct event *)he;
    if (!reg_has(a, OT_EVENT) || !reg_has(b, OT_EVENT)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    if (!a->recorded || !b->recorded) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    uint64_t now = sim_now();
    if (now < a->ts || now < b->ts) LEAVE(CUDA_ERROR_NOT_READY);
    *ms = (float)(((double)b->ts - (double)a->ts) / 1e6);
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent s, CUevent e) { return elapsed(ms, s, e); }
SIM_EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent s, CUevent e) { return elapsed(ms, s, e); }

static CUresult stream_wait_event(CUstream hs, CUevent he, unsigned flags, int ptsz)
{
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(hs, ptsz, &s);
    if (r) LEAVE(r);
    struct event *e = (struct event *)he;
    if (!reg_has(e, OT_EVENT)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    if (e->cap) {
        if (s->cap && s->cap != e->cap) LEAVE(CUDA_ERROR_STREAM_CAPTURE_MERGE);
        if (!s->cap) { /* fork into the capture */
            if (s->kind == SK_LEGACY) LEAVE(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
            s->cap = e->cap;
            s->cap_status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
            s->cap_origin = 0;
            s->cap_id = 0;
            for (struct stream *o = s->o.ctx->streams; o; o = o->next)
                if (o->cap == e->cap && o->cap_origin) s->cap_id = o->cap_id;
        }
        LEAVE(CUDA_SUCCESS);
    }
    if (s->cap) LEAVE(CUDA_SUCCESS); /* dependency on work outside the graph: already done when replayed */
    if (e->recorded) stream_done_at(s, e->ts);
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int f) { return stream_wait_event(s, e, f, 0); }
SIM_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int f) { return stream_wait_event(s, e, f, 1); }

/* ---- modules: a module image is text, kernel names separated by white space ---- */
static uint64_t kernel_duration(const char *name)
{
    size_t n = strlen(name);
    if (n < 3 || name[n - 1] != 's' || name[n - 2] != 'u' || !isdigit((unsigned char)name[n - 3])) return SIM_DEFAULT_KERNEL_NS;
    size_t i = n - 2;
    while (i > 0 && isdigit((unsigned char)name[i - 1])) i--;
    uint64_t us = 0;
    for (size_t k = i; k < n - 2; k++) {
        if (us > UINT64_MAX / 10000) return UINT64_MAX / 2;
        us = us * 10 + (uint64_t)(name[k] - '0');
    }
    return us * 1000;
}

static struct func *func_new(struct ctx *c, struct module *m, const char *name, size_t len, size_t local)
{
    struct func *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->name = strndup(name, len);
    if (!f->name) {
        free(f);
        return NULL;
    }
    f->o.type = OT_FUNC;
    f->o.ctx = c;
    f->mod = m;
    f->dur_ns = kernel_duration(f->name);
    f->max_dyn_shmem = 49152;
    f->local = local;
    return f;
}

/* SIZE: decimal bytes, or with a K/M/G suffix (binary); 0 on a bad number */
static int parse_size(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0, mul = 1;
    if (n && (s[n - 1] == 'K' || s[n - 1] == 'M' || s[n - 1] == 'G')) {
        mul = s[n - 1] == 'K' ? 1ULL << 10 : s[n - 1] == 'M' ? 1ULL << 20
                                                             : 1ULL << 30;
        n--;
    }
    if (n == 0 || n > 15) return -1;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v * mul;
    return 0;
}

static void module_release(struct module *m)
{
    for (int k = 0; k < m->nfunc; k++) {
        free(m->funcs[k]->name);
        free(m->funcs[k]);
    }
    for (int k = 0; k < m->ngvar; k++) free(m->gvars[k].name);
    free(m->funcs);
    free(m->gvars);
    free(m);
}

/* One token of an image: `name` (a kernel), `name:local=SIZE` (a kernel whose
 * frame needs SIZE bytes of local memory per thread), `name=SIZE` (a
 * __device__ variable of SIZE bytes). */
static CUresult add_token(struct ctx *c, struct module *m, const char *t, size_t n)
{
    const char *eq = memchr(t, '=', n);
    if (eq && eq - t >= 6 && memcmp(eq - 6, ":local", 6) == 0) {
        uint64_t local;
        if (eq - 6 == t || parse_size(eq + 1, n - (size_t)(eq + 1 - t), &local) < 0) return CUDA_ERROR_INVALID_IMAGE;
        struct func **nf = realloc(m->funcs, sizeof *nf * (size_t)(m->nfunc + 1));
        if (!nf) return CUDA_ERROR_OUT_OF_MEMORY;
        m->funcs = nf;
        if (!(m->funcs[m->nfunc] = func_new(c, m, t, (size_t)(eq - 6 - t), local))) return CUDA_ERROR_OUT_OF_MEMORY;
        m->nfunc++;
        return CUDA_SUCCESS;
    }
    if (eq) {
        uint64_t size;
        if (eq == t || parse_size(eq + 1, n - (size_t)(eq + 1 - t), &size) < 0 || size == 0) return CUDA_ERROR_INVALID_IMAGE;
        struct gvar *ng = realloc(m->gvars, sizeof *ng * (size_t)(m->ngvar + 1));
        if (!ng) return CUDA_ERROR_OUT_OF_MEMORY;
        m->gvars = ng;
        if (!(ng[m->ngvar].name = strndup(t, (size_t)(eq - t)))) return CUDA_ERROR_OUT_OF_MEMORY;
        ng[m->ngvar++].size = size;
        if (m->gbytes > (1ULL << 50)) return CUDA_ERROR_INVALID_IMAGE;
        m->gbytes += size;
        return CUDA_SUCCESS;
    }
    struct func **nf = realloc(m->funcs, sizeof *nf * (size_t)(m->nfunc + 1));
    if (!nf) return CUDA_ERROR_OUT_OF_MEMORY;
    m->funcs = nf;
    if (!(m->funcs[m->nfunc] = func_new(c, m, t, n, 0))) return CUDA_ERROR_OUT_OF_MEMORY;
    m->nfunc++;
    return CUDA_SUCCESS;
}

/* ---- a module's data in a context: its __device__ variables, one
 * allocation rounded up to 512 B (code is not counted) ---- */
static struct mload *load_of(struct module *m, struct ctx *c)
{
    for (int i = 0; i < m->nloads; i++)
        if (m->loads[i].c == c) return &m->loads[i];
    return NULL;
}

/* Loads m's data into c unless it is there; called with g.mu held. */
static CUresult module_load_into(struct module *m, struct ctx *c)
{
    if (load_of(m, c)) return CUDA_SUCCESS;
    if (m->nloads == SIM_MAX_LOADS) return CUDA_ERROR_OUT_OF_MEMORY;
    struct mload *l = &m->loads[m->nloads];
    memset(l, 0, sizeof *l);
    l->c = c;
    if (m->gbytes) {
        l->charge = (m->gbytes + 511) / 512 * 512;
        if (sim_charge(&g.st, c->cfg, sim_usable(devcfg(c->ord)), l->charge) < 0) return CUDA_ERROR_OUT_OF_MEMORY;
        if (!(l->base = sim_map(m->gbytes, &l->map_size))) {
            sim_uncharge(&g.st, c->cfg, l->charge);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    m->nloads++;
    return CUDA_SUCCESS;
}

static void module_unload_at(struct module *m, int i)
{
    struct mload *l = &m->loads[i];
    sim_uncharge(&g.st, l->c->cfg, l->charge);
    if (l->base) munmap(l->base, l->map_size);
    m->loads[i] = m->loads[--m->nloads];
}

static void unload_ctx_cb(void *obj, void *arg)
{
    struct obj *o = obj;
    if (o->type != OT_MODULE) return;
    struct module *m = (struct module *)o;
    for (int i = 0; i < m->nloads; i++)
        if (m->loads[i].c == arg) {
            module_unload_at(m, i);
            return;
        }
}

/* context teardown: every module's data in it goes */
void modules_ctx_gone(struct ctx *c) { reg_foreach(unload_ctx_cb, c); }

/* A library is loaded into a context at first use (lazy loading, the default
 * since CUDA 12.2), or at cuLibraryLoadData into the current context when
 * CUDA_MODULE_LOADING=EAGER. A module (cuModuleLoad*) gets its data at load:
 * the driver API never loads data lazily. */
static int eager_loading(void)
{
    const char *e = getenv("CUDA_MODULE_LOADING");
    return e && strcmp(e, "EAGER") == 0;
}

static CUresult module_from_text(struct ctx *c, const char *img, size_t len, int library, struct module **out)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)img[i];
        if (!(isprint(ch) || isspace(ch))) return CUDA_ERROR_INVALID_IMAGE; /* ELF cubin, fatbin, garbage */
    }
    struct module *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    m->o.type = OT_MODULE;
    m->o.ctx = c;
    m->library = library;
    size_t i = 0;
    CUresult r = CUDA_SUCCESS;
    while (i < len) {
        while (i < len && isspace((unsigned char)img[i])) i++;
        size_t st = i;
        while (i < len && !isspace((unsigned char)img[i])) i++;
        if (i == st) break;
        if ((r = add_token(c, m, img + st, i - st))) goto fail;
    }
    if (m->nfunc == 0 && m->ngvar == 0) {
        r = CUDA_ERROR_INVALID_IMAGE;
        goto fail;
    }
    struct ctx *into = library ? (eager_loading() ? cur_ctx() : NULL) : c;
    if (into && into->alive && (r = module_load_into(m, into))) goto fail;
    reg_add(m, OT_MODULE);
    for (int k = 0; k < m->nfunc; k++) reg_add(m->funcs[k], OT_FUNC);
    *out = m;
    return CUDA_SUCCESS;
fail:
    module_release(m);
    return r;
}

#define MAX_IMAGE (64u << 20)

static CUresult load_data(CUmodule *pm, const void *image, int library)
{
    if (!pm || !image) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c = NULL;
    CUresult r = CUDA_SUCCESS;
    if (!library && (r = cur_ctx_checked(&c))) LEAVE(r);
    size_t len = strnlen(image, MAX_IMAGE);
    struct module *m;
    r = module_from_text(c, image, len, library, &m);
    if (!r) *pm = (CUmodule)m;
    LEAVE(r);
}

SIM_EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image) { return load_data(m, image, 0); }
SIM_EXPORT CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *o, void **v)
{
    if (n && (!o || !v)) return CUDA_ERROR_INVALID_VALUE;
    return load_data(m, image, 0);
}
SIM_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *m, const void *fatCubin) { return load_data(m, fatCubin, 0); }

SIM_EXPORT CUresult cuModuleLoad(CUmodule *pm, const char *fname)
{
    if (!pm || !fname) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    int fd = open(fname, O_RDONLY | O_CLOEXEC);
    if (fd < 0) LEAVE(CUDA_ERROR_FILE_NOT_FOUND);
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_IMAGE) {
        close(fd);
        LEAVE(CUDA_ERROR_INVALID_IMAGE);
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    }
    ssize_t n = read(fd, buf, (size_t)st.st_size);
    close(fd);
    if (n < 0) {
        free(buf);
        LEAVE(CUDA_ERROR_FILE_NOT_FOUND);
    }
    struct module *m;
    r = module_from_text(c, buf, (size_t)n, 0, &m);
    free(buf);
    if (!r) *pm = (CUmodule)m;
    LEAVE(r);
}

static void module_free(struct module *m)
{
    while (m->nloads) module_unload_at(m, m->nloads - 1);
    for (int k = 0; k < m->nfunc; k++) reg_del(m->funcs[k]); /* names stay: graphs may still refer to them */
    reg_del(m);
}

SIM_EXPORT CUresult cuModuleUnload(CUmodule h)
{
    ENTER();
    struct module *m = (struct module *)h;
    if (!reg_has(m, OT_MODULE) || m->library) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    module_free(m);
    LEAVE(CUDA_SUCCESS);
}

static CUresult get_func(struct module *m, const char *name, struct func **out)
{
    for (int k = 0; k < m->nfunc; k++)
        if (strcmp(m->funcs[k]->name, name) == 0) {
            *out = m->funcs[k];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

SIM_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule h, const char *name)
{
    if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct module *m = (struct module *)h;
    if (!reg_has(m, OT_MODULE) || m->library) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    struct func *f;
    CUresult r = get_func(m, name, &f);
    if (!r) *hfunc = (CUfunction)f;
    LEAVE(r);
}

SIM_EXPORT CUresult cuModuleGetLoadingMode(int *mode)
{
    if (!mode) return CUDA_ERROR_INVALID_VALUE;
    *mode = eager_loading() ? 1 : 2; /* CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING (the default) */
    return CUDA_SUCCESS;
}

/* libraries: context independent modules (CUDA 12) */
SIM_EXPORT CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned int njo,
                                      CUlibraryOption *lo, void **lv, unsigned int nlo)
{
    if ((njo && (!jo || !jv)) || (nlo && (!lo || !lv))) return CUDA_ERROR_INVALID_VALUE;
    return load_data((CUmodule *)lib, code, 1);
}

SIM_EXPORT CUresult cuLibraryUnload(CUlibrary h)
{
    ENTER();
    struct module *m = (struct module *)h;
    if (!reg_has(m, OT_MODULE) || !m->library) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    module_free(m);
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary h, const char *name)
{
    if (!k || !name) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct module *m = (struct module *)h;
    if (!reg_has(m, OT_MODULE) || !m->library) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    struct func *f;
    CUresult r = get_func(m, name, &f);
    if (!r) *k = (CUkernel)f;
    LEAVE(r);
}

SIM_EXPORT CUresult cuKernelGetFunction(CUfunction *pf, CUkernel k)
{
    if (!pf) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    if (!reg_has(k, OT_FUNC)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    struct func *f = (struct func *)k;
    if (f->mod->library && (r = module_load_into(f->mod, c))) LEAVE(r);
    *pf = (CUfunction)k;
    LEAVE(CUDA_SUCCESS);
}

static CUresult get_global(struct module *m, struct ctx *c, const char *name, CUdeviceptr *dptr, size_t *bytes)
{
    uint64_t off = 0;
    for (int k = 0; k < m->ngvar; k++) {
        if (strcmp(m->gvars[k].name, name) == 0) {
            CUresult r = module_load_into(m, c);
            if (r) return r;
            if (dptr) *dptr = (CUdeviceptr)((uintptr_t)load_of(m, c)->base + off);
            if (bytes) *bytes = m->gvars[k].size;
            return CUDA_SUCCESS;
        }
        off += m->gvars[k].size;
    }
    return CUDA_ERROR_NOT_FOUND;
}

SIM_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule h, const char *name)
{
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct module *m = (struct module *)h;
    if (!reg_has(m, OT_MODULE) || m->library) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    LEAVE(get_global(m, m->o.ctx, name, dptr, bytes));
}

/* the library's module in the current context: loads it there. The handle is
 * the library's own (module calls on it are refused: INVALID_HANDLE). */
SIM_EXPORT CUresult cuLibraryGetModule(CUmodule *pm, CUlibrary h)
{
    if (!pm) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    struct module *m = (struct module *)h;
    if (!reg_has(m, OT_MODULE) || !m->library) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    if ((r = module_load_into(m, c))) LEAVE(r);
    *pm = (CUmodule)m;
    LEAVE(CUDA_SUCCESS);
}

/* the library's variable in the current context: loads the library there first */
SIM_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary h, const char *name)
{
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    struct module *m = (struct module *)h;
    if (!reg_has(m, OT_MODULE) || !m->library) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    LEAVE(get_global(m, c, name, dptr, bytes));
}

SIM_EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute a, CUfunction h)
{
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct func *f = (struct func *)h;
    if (!reg_has(f, OT_FUNC)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dyn_shmem; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = -1; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = f->local > INT_MAX ? INT_MAX : (int)f->local; break;
    default:
        if ((int)a < 0 || a >= CU_FUNC_ATTRIBUTE_MAX) LEAVE(CUDA_ERROR_INVALID_VALUE);
        *pi = 0;
    }
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuFuncSetAttribute(CUfunction h, CUfunction_attribute a, int v)
{
    ENTER();
    struct func *f = (struct func *)h;
    if (!reg_has(f, OT_FUNC)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
        if (v < 0 || v > 232448) LEAVE(CUDA_ERROR_INVALID_VALUE);
        f->max_dyn_shmem = v;
    } else if (a != CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT && (int)a < 10) {
        LEAVE(CUDA_ERROR_INVALID_VALUE); /* read-only attributes */
    }
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuFuncSetCacheConfig(CUfunction h, CUfunc_cache c)
{
    (void)c;
    ENTER();
    LEAVE(reg_has(h, OT_FUNC) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

SIM_EXPORT CUresult cuFuncGetName(const char **name, CUfunction h)
{
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!reg_has(h, OT_FUNC)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    *name = ((struct func *)h)->name;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction h, int bs, size_t shmem)
{
    if (!n || bs <= 0) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!reg_has(h, OT_FUNC)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    int b = 2048 / bs;
    if (shmem) {
        int bsh = (int)(233472 / shmem);
        if (bsh < b) b = bsh;
    }
    *n = b > 32 ? 32 : b;
    LEAVE(CUDA_SUCCESS);
}

/* ---- launch ---- */
static CUresult launch_check(struct func *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shmem, void **params, void **extra, int coop, int sms)
{
    if (!reg_has(f, OT_FUNC)) return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz) return CUDA_ERROR_INVALID_VALUE;
    if (gx > 2147483647u || gy > 65535 || gz > 65535) return CUDA_ERROR_INVALID_VALUE;
    if (bx > 1024 || by > 1024 || bz > 64 || (uint64_t)bx * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
    if (shmem > (unsigned)f->max_dyn_shmem) return CUDA_ERROR_INVALID_VALUE;
    if (params && extra) return CUDA_ERROR_INVALID_VALUE;
    if (coop) {
        uint64_t threads = (uint64_t)bx * by * bz, per_sm = 2048 / threads;
        if (per_sm > 32) per_sm = 32;
        if ((uint64_t)gx * gy * gz > per_sm * (uint64_t)sms) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    }
    return CUDA_SUCCESS;
}

struct gnode *capture_node(struct stream *s, int kind)
{
    struct graph *gr = s->cap;
    struct gnode *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->o.type = OT_GNODE;
    n->o.ctx = gr->o.ctx;
    n->g = gr;
    n->kind = kind;
    if (gr->tail) gr->tail->next = n;
    else gr->head = n;
    gr->tail = n;
    gr->n++;
    reg_add(n, OT_GNODE);
    return n;
}

static void run_kernel(struct stream *s, struct func *f)
{
    uint64_t end = sim_schedule(&g.st, s->o.ctx->cfg, stream_ready(s), f->dur_ns, NULL);
    stream_done_at(s, end);
}

static CUresult launch(CUfunction hf, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shmem, CUstream hs, void **params, void **extra, int coop, int ptsz)
{
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(hs, ptsz, &s);
    if (r) LEAVE(r);
    struct func *f = (struct func *)hf;
    if ((r = launch_check(f, gx, gy, gz, bx, by, bz, shmem, params, extra, coop, devcfg(s->o.ctx->ord)->sms))) LEAVE(r);
    if (f->o.ctx && f->o.ctx != s->o.ctx) LEAVE(CUDA_ERROR_INVALID_HANDLE); /* module of another context */
    /* a library kernel loads its library into the context at its first launch;
     * a frame larger than the stack limit grows the stack first */
    if (f->mod->library && (r = module_load_into(f->mod, s->o.ctx))) LEAVE(r);
    if ((r = ctx_grow_stack(s->o.ctx, f->local))) LEAVE(r);
    if (s->cap) {
        if (s->cap_status != CU_STREAM_CAPTURE_STATUS_ACTIVE) LEAVE(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        struct gnode *n = capture_node(s, GN_KERNEL);
        if (!n) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        n->f = f;
        LEAVE(CUDA_SUCCESS);
    }
    run_kernel(s, f);
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                   unsigned shmem, CUstream s, void **params, void **extra)
{
    return launch(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra, 0, 0);
}
SIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                        unsigned shmem, CUstream s, void **params, void **extra)
{
    return launch(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra, 0, 1);
}
SIM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                              unsigned bz, unsigned shmem, CUstream s, void **params)
{
    return launch(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL, 1, 0);
}
SIM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                                   unsigned bz, unsigned shmem, CUstream s, void **params)
{
    return launch(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL, 1, 1);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra, int ptsz)
{
    if (!c || (c->numAttrs && !c->attrs)) return CUDA_ERROR_INVALID_VALUE;
    int coop = 0;
    for (unsigned i = 0; i < c->numAttrs; i++)
        if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) coop = c->attrs[i].value.cooperative != 0;
    return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ, c->sharedMemBytes,
                  c->hStream, params, extra, coop, ptsz);
}
SIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **p, void **e) { return launch_ex(c, f, p, e, 0); }
SIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **p, void **e) { return launch_ex(c, f, p, e, 1); }

/* Deprecated (CUDA 11.3) but still exported by the driver. One kernel per device,
 * on explicitly created streams; the kernels run together: they start when every
 * device has reached them (after all streams' earlier work unless
 * NO_PRE_LAUNCH_SYNC), and later work on any of the streams waits for all of them
 * unless NO_POST_LAUNCH_SYNC. */
SIM_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n, unsigned int flags)
{
    if (!list || n == 0 || n > SIM_MAX_DEV) return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(unsigned)(CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC |
                            CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC))
        return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *ss[SIM_MAX_DEV];
    uint64_t ready = 0, start = 0, end = 0, ends[SIM_MAX_DEV];
    for (unsigned i = 0; i < n; i++) {
        const CUDA_LAUNCH_PARAMS *p = &list[i], *p0 = &list[0];
        CUstream h = p->hStream;
        struct stream *s;
        CUresult r;
        if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) LEAVE(CUDA_ERROR_INVALID_VALUE);
        if ((r = resolve_stream(h, 0, &s))) LEAVE(r);
        if (s->cap) LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        for (unsigned k = 0; k < i; k++)
            if (ss[k]->o.ctx->ord == s->o.ctx->ord) LEAVE(CUDA_ERROR_INVALID_VALUE); /* two on one device */
        struct func *f = (struct func *)p->function;
        if ((r = launch_check(f, p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ,
                              p->sharedMemBytes, p->kernelParams, NULL, 1, devcfg(s->o.ctx->ord)->sms)))
            LEAVE(r);
        if (f->o.ctx && f->o.ctx != s->o.ctx) LEAVE(CUDA_ERROR_INVALID_HANDLE);
        if (i > 0 && (strcmp(f->name, ((struct func *)p0->function)->name) != 0 || p->gridDimX != p0->gridDimX ||
                      p->gridDimY != p0->gridDimY || p->gridDimZ != p0->gridDimZ || p->blockDimX != p0->blockDimX ||
                      p->blockDimY != p0->blockDimY || p->blockDimZ != p0->blockDimZ ||
                      p->sharedMemBytes != p0->sharedMemBytes))
            LEAVE(CUDA_ERROR_INVALID_VALUE); /* the same kernel, the same shape everywhere */
        ss[i] = s;
        if (stream_ready(s) > ready) ready = stream_ready(s);
    }
    for (unsigned i = 0; i < n; i++) {
        uint64_t r = (flags & CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC) ? stream_ready(ss[i]) : ready;
        uint64_t t = sim_marker(&g.st, ss[i]->o.ctx->cfg, r);
        if (t > start) start = t;
    }
    for (unsigned i = 0; i < n; i++) {
        ends[i] = sim_schedule(&g.st, ss[i]->o.ctx->cfg, start, ((struct func *)list[i].function)->dur_ns, NULL);
        if (ends[i] > end) end = ends[i];
    }
    for (unsigned i = 0; i < n; i++)
        stream_done_at(ss[i], (flags & CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC) ? ends[i] : end);
    LEAVE(CUDA_SUCCESS);
}

/* ---- host functions: run on a worker thread when the stream reaches them.
 * Later work on the stream is scheduled as if the callback took no time, but
 * synchronizing the stream waits for the callback to return. ---- */
static void *worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g.mu);
    unsigned long long gen = g.gen;
    for (;;) {
        if (g.gen != gen) break;
        struct hostjob *j = g.jobs;
        if (!j) {
            pthread_cond_wait(&g.wcond, &g.mu);
            continue;
        }
        uint64_t now = sim_now();
        if (now < j->t) {
            struct timespec ts = {.tv_sec = (time_t)(j->t / 1000000000ULL), .tv_nsec = (long)(j->t % 1000000000ULL)};
            pthread_cond_timedwait(&g.wcond, &g.mu, &ts);
            continue;
        }
        g.jobs = j->next;
        pthread_mutex_unlock(&g.mu);
        if (j->fn) j->fn(j->data);
        else j->cb(j->h, CUDA_SUCCESS, j->data);
        pthread_mutex_lock(&g.mu);
        if (g.gen != gen) {
            free(j);
            break;
        }
        struct stream *s = j->s;
        if (--s->pending_host == 0 && s->destroyed && s->kind == SK_NORMAL) free(s);
        free(j);
        pthread_cond_broadcast(&g.cond);
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static CUresult enqueue_host(struct stream *s, CUhostFn fn, CUstreamCallback cb, CUstream h, void *data)
{
    if (!g.worker_started) {
        pthread_condattr_t a;
        pthread_condattr_init(&a);
        pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
        pthread_cond_init(&g.wcond, &a);
        pthread_condattr_destroy(&a);
        pthread_attr_t ta;
        pthread_attr_init(&ta);
        pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&g.worker, &ta, worker_main, NULL);
        pthread_attr_destroy(&ta);
        if (rc) return CUDA_ERROR_OUT_OF_MEMORY;
        g.worker_started = 1;
    }
    struct hostjob *j = calloc(1, sizeof *j);
    if (!j) return CUDA_ERROR_OUT_OF_MEMORY;
    j->t = stream_ready(s);
    j->fn = fn;
    j->cb = cb;
    j->h = h;
    j->data = data;
    j->s = s;
    stream_done_at(s, j->t);
    s->pending_host++;
    struct hostjob **pp = &g.jobs;
    while (*pp && (*pp)->t <= j->t) pp = &(*pp)->next;
    j->next = *pp;
    *pp = j;
    pthread_cond_signal(&g.wcond);
    return CUDA_SUCCESS;
}

static CUresult launch_host(CUstream hs, CUhostFn fn, void *data, int ptsz)
{
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(hs, ptsz, &s);
    if (r) LEAVE(r);
    if (s->cap) {
        struct gnode *n = capture_node(s, GN_HOST);
        if (!n) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        n->fn = fn;
        n->data = data;
        LEAVE(CUDA_SUCCESS);
    }
    LEAVE(enqueue_host(s, fn, NULL, NULL, data));
}
SIM_EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) { return launch_host(s, fn, data, 0); }
SIM_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data) { return launch_host(s, fn, data, 1); }

static CUresult add_callback(CUstream hs, CUstreamCallback cb, void *data, unsigned flags, int ptsz)
{
    if (!cb || flags) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(hs, ptsz, &s);
    if (r) LEAVE(r);
    if (s->cap) LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    LEAVE(enqueue_host(s, NULL, cb, hs, data));
}
SIM_EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *d, unsigned int f) { return add_callback(s, cb, d, f, 0); }
SIM_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void *d, unsigned int f) { return add_callback(s, cb, d, f, 1); }

/* ---- graphs ---- */
static struct graph *graph_new(struct ctx *c)
{
    struct graph *gr = calloc(1, sizeof *gr);
    if (!gr) return NULL;
    gr->o.type = OT_GRAPH;
    gr->o.ctx = c;
    reg_add(gr, OT_GRAPH);
    return gr;
}

SIM_EXPORT CUresult cuGraphCreate(CUgraph *pg, unsigned int flags)
{
    if (!pg || flags) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    struct graph *gr = graph_new(c);
    if (!gr) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    *pg = (CUgraph)gr;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuGraphDestroy(CUgraph h)
{
    ENTER();
    struct graph *gr = (struct graph *)h;
    if (!reg_has(gr, OT_GRAPH)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    for (struct gnode *n = gr->head, *nx; n; n = nx) {
        nx = n->next;
        reg_del(n);
        if (n->gm) gmem_unref(n->gm);
        free(n);
    }
    reg_del(gr);
    free(gr);
    LEAVE(CUDA_SUCCESS);
}

static CUresult add_node(CUgraphNode *pn, CUgraph h, const CUgraphNode *deps, size_t ndeps, int kind, struct gnode **out)
{
    if (!pn || (ndeps && !deps)) return CUDA_ERROR_INVALID_VALUE;
    struct graph *gr = (struct graph *)h;
    if (!reg_has(gr, OT_GRAPH)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < ndeps; i++) {
        struct gnode *d = (struct gnode *)deps[i];
        if (!reg_has(d, OT_GNODE) || d->g != gr) return CUDA_ERROR_INVALID_VALUE;
        for (size_t k = 0; k < i; k++)
            if (deps[k] == deps[i]) return CUDA_ERROR_INVALID_VALUE;
    }
    struct gnode *n = calloc(1, sizeof *n);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    n->o.type = OT_GNODE;
    n->o.ctx = gr->o.ctx;
    n->g = gr;
    n->kind = kind;
    /* nodes run in insertion order: a topological order, since dependencies must exist first */
    if (gr->tail) gr->tail->next = n;
    else gr->head = n;
    gr->tail = n;
    gr->n++;
    reg_add(n, OT_GNODE);
    *pn = (CUgraphNode)n;
    *out = n;
    return CUDA_SUCCESS;
}

static CUresult add_kernel(CUgraphNode *pn, CUgraph h, const CUgraphNode *deps, size_t nd, CUfunction f, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    ENTER();
    CUresult r = launch_check((struct func *)f, p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ,
                              p->sharedMemBytes, p->kernelParams, p->extra, 0, 1 << 20);
    if (r) LEAVE(r == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : r);
    struct gnode *n;
    if ((r = add_node(pn, h, deps, nd, GN_KERNEL, &n))) LEAVE(r);
    n->f = (struct func *)f;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuGraphAddKernelNode(CUgraphNode *pn, CUgraph h, const CUgraphNode *deps, size_t nd, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    return add_kernel(pn, h, deps, nd, p->func, p);
}

SIM_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *pn, CUgraph h, const CUgraphNode *deps, size_t nd, const CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUDA_KERNEL_NODE_PARAMS_v1 v1;
    memcpy(&v1, p, sizeof v1); /* v2 extends v1 */
    return add_kernel(pn, h, deps, nd, p->func ? p->func : (CUfunction)p->kern, &v1);
}

SIM_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *pn, CUgraph h, const CUgraphNode *deps, size_t nd)
{
    ENTER();
    struct gnode *n;
    LEAVE(add_node(pn, h, deps, nd, GN_EMPTY, &n));
}

SIM_EXPORT CUresult cuGraphAddHostNode(CUgraphNode *pn, CUgraph h, const CUgraphNode *deps, size_t nd, const CUDA_HOST_NODE_PARAMS *p)
{
    if (!p || !p->fn) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct gnode *n;
    CUresult r = add_node(pn, h, deps, nd, GN_HOST, &n);
    if (!r) {
        n->fn = p->fn;
        n->data = p->userData;
    }
    LEAVE(r);
}

SIM_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *pn, CUgraph h, const CUgraphNode *deps, size_t nd, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    if (!p || p->bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED || p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        !dev_ok(p->poolProps.location.id))
        LEAVE(CUDA_ERROR_INVALID_VALUE);
    /* a virtual address now; physical memory when the graph is uploaded or launched */
    struct gmem *gm = gmem_new(p->poolProps.location.id, p->bytesize);
    if (!gm) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    struct gnode *n;
    CUresult r = add_node(pn, h, deps, nd, GN_MEMALLOC, &n);
    if (r) {
        gmem_unref(gm);
        LEAVE(r);
    }
    n->gm = gm;
    n->dptr = gm->base;
    n->size = gm->size;
    p->dptr = gm->base;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *pn, CUgraph h, const CUgraphNode *deps, size_t nd, CUdeviceptr dptr)
{
    ENTER();
    struct alloc *a = alloc_find((uintptr_t)dptr);
    if (!a || a->kind != A_GRAPH || a->base != (uintptr_t)dptr) LEAVE(CUDA_ERROR_INVALID_VALUE);
    struct gnode *n;
    CUresult r = add_node(pn, h, deps, nd, GN_MEMFREE, &n);
    if (!r) {
        n->gm = a->gm;
        a->gm->refs++;
        n->dptr = dptr;
    }
    LEAVE(r);
}

SIM_EXPORT CUresult cuGraphNodeGetType(CUgraphNode h, CUgraphNodeType *type)
{
    if (!type) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct gnode *n = (struct gnode *)h;
    if (!reg_has(n, OT_GNODE)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    switch (n->kind) {
    case GN_KERNEL: *type = CU_GRAPH_NODE_TYPE_KERNEL; break;
    case GN_MEMALLOC: *type = CU_GRAPH_NODE_TYPE_MEM_ALLOC; break;
    case GN_MEMFREE: *type = CU_GRAPH_NODE_TYPE_MEM_FREE; break;
    case GN_HOST: *type = CU_GRAPH_NODE_TYPE_HOST; break;
    case GN_MEMCPY: *type = CU_GRAPH_NODE_TYPE_MEMCPY; break;
    case GN_MEMSET: *type = CU_GRAPH_NODE_TYPE_MEMSET; break;
    default: *type = CU_GRAPH_NODE_TYPE_EMPTY; break;
    }
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode h, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct gnode *n = (struct gnode *)h;
    if (!reg_has(n, OT_GNODE) || n->kind != GN_MEMALLOC) LEAVE(CUDA_ERROR_INVALID_VALUE);
    memset(p, 0, sizeof *p);
    p->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->poolProps.location.id = n->gm->ord;
    p->bytesize = n->gm->size;
    p->dptr = n->gm->base;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuGraphMemFreeNodeGetParams(CUgraphNode h, CUdeviceptr *dptr)
{
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct gnode *n = (struct gnode *)h;
    if (!reg_has(n, OT_GNODE) || n->kind != GN_MEMFREE) LEAVE(CUDA_ERROR_INVALID_VALUE);
    *dptr = n->dptr;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuGraphGetNodes(CUgraph h, CUgraphNode *nodes, size_t *num)
{
    if (!num) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct graph *gr = (struct graph *)h;
    if (!reg_has(gr, OT_GRAPH)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (nodes) {
        size_t i = 0;
        for (struct gnode *n = gr->head; n && i < *num; n = n->next) nodes[i++] = (CUgraphNode)n;
        for (; i < *num; i++) nodes[i] = NULL;
    }
    *num = (size_t)gr->n;
    LEAVE(CUDA_SUCCESS);
}

static CUresult instantiate(CUgraphExec *pe, CUgraph h, unsigned long long flags)
{
    if (!pe) return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~0xfULL) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct graph *gr = (struct graph *)h;
    if (!reg_has(gr, OT_GRAPH)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    struct gexec *e = calloc(1, sizeof *e);
    if (!e) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    e->nodes = calloc((size_t)gr->n + 1, sizeof *e->nodes);
    if (!e->nodes) {
        free(e);
        LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    }
    int i = 0;
    for (struct gnode *n = gr->head; n; n = n->next, i++) {
        e->nodes[i] = *n;
        e->nodes[i].next = NULL;
        if (n->gm) n->gm->refs++;
    }
    e->n = i;
    e->o.type = OT_GEXEC;
    e->o.ctx = gr->o.ctx;
    e->flags = flags;
    reg_add(e, OT_GEXEC);
    *pe = (CUgraphExec)e;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *pe, CUgraph h, unsigned long long flags) { return instantiate(pe, h, flags); }
SIM_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *pe, CUgraph h, CUgraphNode *errNode, char *log, size_t logSize)
{
    if (errNode) *errNode = NULL;
    if (log && logSize) log[0] = 0;
    return instantiate(pe, h, 0);
}
SIM_EXPORT CUresult cuGraphInstantiate(CUgraphExec *pe, CUgraph h, CUgraphNode *errNode, char *log, size_t logSize)
{
    return cuGraphInstantiate_v2(pe, h, errNode, log, logSize);
}

static CUresult graph_upload(CUgraphExec h, CUstream hs, int ptsz);
SIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec h);

static CUresult instantiate_params(CUgraphExec *pe, CUgraph h, CUDA_GRAPH_INSTANTIATE_PARAMS *p, int ptsz)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = instantiate(pe, h, p->flags);
    if (r == CUDA_SUCCESS && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)) {
        r = graph_upload(*pe, p->hUploadStream, ptsz);
        if (r != CUDA_SUCCESS) {
            cuGraphExecDestroy(*pe);
            *pe = NULL;
        }
    }
    p->hErrNode_out = NULL;
    p->result_out = r ? CUDA_GRAPH_INSTANTIATE_ERROR : CUDA_GRAPH_INSTANTIATE_SUCCESS;
    return r;
}
SIM_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *pe, CUgraph h, CUDA_GRAPH_INSTANTIATE_PARAMS *p) { return instantiate_params(pe, h, p, 0); }
SIM_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *pe, CUgraph h, CUDA_GRAPH_INSTANTIATE_PARAMS *p) { return instantiate_params(pe, h, p, 1); }

SIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec h)
{
    ENTER();
    struct gexec *e = (struct gexec *)h;
    if (!reg_has(e, OT_GEXEC)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    uint64_t now = sim_now();
    for (int i = 0; i < e->n; i++) {
        struct gnode *n = &e->nodes[i];
        /* its memory goes back to the pool (not to the device) once the graph is done with it */
        if (n->kind == GN_MEMALLOC && !n->gm->live && n->gm->busy_until <= now) gmem_unbind(n->gm);
        if (n->gm) gmem_unref(n->gm);
    }
    reg_del(e);
    free(e->nodes);
    free(e);
    LEAVE(CUDA_SUCCESS);
}

static CUresult graph_launch(CUgraphExec h, CUstream hs, int ptsz)
{
    ENTER();
    struct gexec *e = (struct gexec *)h;
    if (!reg_has(e, OT_GEXEC)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    struct stream *s;
    CUresult r = resolve_stream(hs, ptsz, &s);
    if (r) LEAVE(r);
    if (s->cap) LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); /* child-graph capture is not simulated */
    /* refused before anything runs */
    for (int i = 0; i < e->n; i++) {
        struct gnode *n = &e->nodes[i];
        if (n->kind == GN_KERNEL && !reg_has(n->f, OT_FUNC)) LEAVE(CUDA_ERROR_INVALID_HANDLE); /* its module was unloaded */
        /* an allocation of the last launch not freed yet */
        if (n->kind == GN_MEMALLOC && n->gm->live && !(e->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))
            LEAVE(CUDA_ERROR_INVALID_VALUE);
    }
    if ((r = gmem_bind_exec(e))) LEAVE(r); /* first launch (or the first since a trim): physical memory */
    for (int i = 0; i < e->n; i++) {
        struct gnode *n = &e->nodes[i];
        switch (n->kind) {
        case GN_KERNEL: run_kernel(s, n->f); break;
        case GN_MEMALLOC: n->gm->live = 1; break;
        case GN_MEMFREE: n->gm->live = 0; break;
        case GN_HOST:
            if ((r = enqueue_host(s, n->fn, NULL, NULL, n->data))) LEAVE(r);
            break;
        case GN_MEMCPY: memmove(n->dst, n->src, n->size); break;
        case GN_MEMSET: sim_fill(n->dst, n->memset_val, n->memset_elem, n->size); break;
        default: break;
        }
    }
    uint64_t done = stream_ready(s);
    stream_done_at(s, done);
    for (int i = 0; i < e->n; i++) /* a trim leaves their memory alone until this launch is done */
        if (e->nodes[i].gm && e->nodes[i].gm->busy_until < done) e->nodes[i].gm->busy_until = done;
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuGraphLaunch(CUgraphExec e, CUstream s) { return graph_launch(e, s, 0); }
SIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) { return graph_launch(e, s, 1); }

static CUresult graph_upload(CUgraphExec h, CUstream hs, int ptsz)
{
    ENTER();
    if (!reg_has(h, OT_GEXEC)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    struct stream *s;
    CUresult r = resolve_stream(hs, ptsz, &s);
    if (r) LEAVE(r);
    LEAVE(gmem_bind_exec((struct gexec *)h)); /* physical memory for its allocations, as at a first launch */
}
SIM_EXPORT CUresult cuGraphUpload(CUgraphExec e, CUstream s) { return graph_upload(e, s, 0); }
SIM_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream s) { return graph_upload(e, s, 1); }

/* ---- stream capture ---- */
static CUresult begin_capture(CUstream hs, int mode, int ptsz)
{
    if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(hs, ptsz, &s);
    if (r) LEAVE(r);
    if (s->kind == SK_LEGACY) LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (s->cap) LEAVE(CUDA_ERROR_ILLEGAL_STATE);
    struct graph *gr = graph_new(s->o.ctx);
    if (!gr) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    s->cap = gr;
    s->cap_status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    s->cap_mode = mode;
    s->cap_origin = 1;
    s->cap_id = ++g.next_id;
    s->cap_thread = pthread_self();
    active_captures++;
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m) { return begin_capture(s, (int)m, 0); }
SIM_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m) { return begin_capture(s, (int)m, 1); }
SIM_EXPORT CUresult cuStreamBeginCapture(CUstream s) { return begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, 0); }
SIM_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream s) { return begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, 1); }

static CUresult end_capture(CUstream hs, CUgraph *pg, int ptsz)
{
    if (!pg) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(hs, ptsz, &s);
    if (r) LEAVE(r);
    if (!s->cap) LEAVE(CUDA_ERROR_ILLEGAL_STATE);
    if (!s->cap_origin) LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    struct graph *gr = s->cap;
    int invalid = s->cap_status == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    for (struct stream *o = s->o.ctx->streams; o; o = o->next) /* joined streams end with it */
        if (o->cap == gr) {
            if (o->cap_status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) invalid = 1;
            o->cap = NULL;
            o->cap_status = CU_STREAM_CAPTURE_STATUS_NONE;
        }
    s->cap = NULL;
    s->cap_status = CU_STREAM_CAPTURE_STATUS_NONE;
    active_captures--;
    if (invalid) {
        *pg = NULL;
        sim_leave();
        cuGraphDestroy((CUgraph)gr);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *pg = (CUgraph)gr;
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g_) { return end_capture(s, g_, 0); }
SIM_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g_) { return end_capture(s, g_, 1); }

static CUresult is_capturing(CUstream hs, CUstreamCaptureStatus *st, int ptsz)
{
    if (!st) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(hs, ptsz, &s);
    if (r) LEAVE(r);
    *st = s->cap ? (CUstreamCaptureStatus)s->cap_status : CU_STREAM_CAPTURE_STATUS_NONE;
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) { return is_capturing(s, st, 0); }
SIM_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st) { return is_capturing(s, st, 1); }

static __thread CUgraphNode tls_dep;

static CUresult capture_info(CUstream hs, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *gr, const CUgraphNode **deps,
                             const CUgraphEdgeData **edges, size_t *ndeps, int ptsz)
{
    if (!st) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *s;
    CUresult r = resolve_stream(hs, ptsz, &s);
    if (r) LEAVE(r);
    *st = s->cap ? (CUstreamCaptureStatus)s->cap_status : CU_STREAM_CAPTURE_STATUS_NONE;
    if (s->cap) {
        if (id) *id = s->cap_id;
        if (gr) *gr = (CUgraph)s->cap;
        tls_dep = (CUgraphNode)s->cap->tail;
        if (deps) *deps = s->cap->tail ? &tls_dep : NULL;
        if (edges) *edges = NULL;
        if (ndeps) *ndeps = s->cap->tail ? 1 : 0;
    }
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    return capture_info(s, st, id, NULL, NULL, NULL, NULL, 0);
}
SIM_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    return capture_info(s, st, id, NULL, NULL, NULL, NULL, 1);
}
SIM_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *gr, const CUgraphNode **d, size_t *n)
{
    return capture_info(s, st, id, gr, d, NULL, n, 0);
}
SIM_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *gr, const CUgraphNode **d, size_t *n)
{
    return capture_info(s, st, id, gr, d, NULL, n, 1);
}
SIM_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *gr, const CUgraphNode **d,
                                              const CUgraphEdgeData **e, size_t *n)
{
    return capture_info(s, st, id, gr, d, e, n, 0);
}
SIM_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *gr, const CUgraphNode **d,
                                                   const CUgraphEdgeData **e, size_t *n)
{
    return capture_info(s, st, id, gr, d, e, n, 1);
}

SIM_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || *mode < CU_STREAM_CAPTURE_MODE_GLOBAL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
    int old = tls_capture_mode;
    tls_capture_mode = (int)*mode;
    *mode = (CUstreamCaptureMode)old;
    return CUDA_SUCCESS;
}
