/* backend_cuda.c - the CUDA backend: load a model onto its GPUs, and the device operations.
 *
 * The model's host side (nnc_model_abi: tensor tables, initialisation, checks, outputs, the
 * step) is the shared runtime, include/nnc_runtime.h, over the description model_desc.c builds;
 * this file is the CUDA device under it (nnc_device_ops): pinned host memory, copies between the
 * host mirrors and device blocks, and running an entry.  cuda_model.h says how the backend's
 * files divide the rest (the libraries: cuda_api.c; issuing launches: cuda_issue.c).
 *
 * load() opens the driver (cuda_api.c), compiles the rendered source for the device's sm_XY
 * with NVRTC (cached on disk by a hash of the source, the architecture, the NVRTC version and
 * the flags), and allocates:
 *   - device memory: parameters, optimizer state, one activation block (the description's
 *     block sizes), the step counter and the error flag, and cuDNN's workspace where the
 *     convolutions run on it (cuda_dnn.c chooses their algorithms here, once);
 *   - pinned host memory: the runtime's host blocks (parameter and state mirrors, host
 *     activations such as the loss copied back) and output copies, through host_alloc, and
 *     this file's staging for the batch inputs, so that every copy is asynchronous on the
 *     compute stream and capturable.
 * run() issues an entry's launches (cuda_issue.c).  The first run of an entry at a batch size
 * goes direct; the next one captures the sequence as a CUDA graph (keyed by the batch size,
 * which the cuBLAS calls bake in, and the call slot) and later runs replay it.  If capture fails the entry stays
 * on direct launches.  submit() and finish() are the pipelined calls: a call queued on a slot
 * of the runtime's input ring, its inputs going up on a copy stream while the call before it
 * runs (below).  Every CUDA and cuBLAS call is checked by a macro that reports the call and its
 * site (llm.c's cudaCheck) into the instance's message. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../include/nnc_rng.h"
#include "../../io/cache.h"
#include "cuda_model.h"
#include "../kernel.h"
#define NNC_RUNTIME_IMPLEMENTATION   /* the runtime's functions, static in this file */
#include "../../include/nnc_runtime.h"

void cu_fail(CudaModel *m, CUresult r, const char *call, const char *file, int line) {
    const char *name = "?", *desc = "?";
    if (cu.GetErrorName) cu.GetErrorName(r, &name);
    if (cu.GetErrorString) cu.GetErrorString(r, &desc);
    nnc_rt_fail(m->rt, NNC_STATUS_ARG, "CUDA error %d (%s: %s) at %s:%d: %s", (int)r, name, desc, file, line, call);
}

/* ---- running an entry: directly, or as a CUDA graph --------------------------------------------- */

/* Captures the entry's launches as a graph for batch B; false (stream usable) on failure. */
static bool capture(CudaModel *m, const Entry *e, int64_t B, CUgraphExec *exec) {
    CUgraph graph = NULL;
    if (cu.StreamBeginCapture(m->cur->st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) return false;
    bool ok = cuda_issue_entry(m, e, B);
    CUresult rc = cu.StreamEndCapture(m->cur->st, &graph);
    ok = ok && rc == CUDA_SUCCESS && graph && cu.GraphInstantiate(exec, graph, 0) == CUDA_SUCCESS;
    if (graph) cu.GraphDestroy(graph);
    if (!ok) {
        m->rt->status = 0;
        m->rt->msg[0] = 0;
    }
    return ok;
}

static bool launch_entry(CudaModel *m, const Entry *e, int64_t B) {
    int k = e->kind;
    if (m->timing) return cuda_issue_entry(m, e, B); /* --profile: events around each launch, no graph */
    for (int s = 0; s < GRAPH_SLOTS; s++)
        if (m->graph[k][s].exec && m->graph[k][s].B == B && m->graph[k][s].slot == m->slot) {
            CU(cu.GraphLaunch(m->graph[k][s].exec, m->cur->st));
            return true;
        }
    if (!m->ran[k] || m->no_graph[k] || m->check_numerics || getenv("NNC_CUDA_NO_GRAPHS")) {
        m->ran[k] = true;
        return cuda_issue_entry(m, e, B);
    }
    CUgraphExec exec = NULL;
    if (!capture(m, e, B, &exec)) {
        m->no_graph[k] = true;
        fprintf(stderr, "nnc: note: CUDA graph capture failed for %s; launching directly\n", e->name);
        return cuda_issue_entry(m, e, B);
    }
    GraphSlot *slot = &m->graph[k][m->next_slot[k]];
    m->next_slot[k] = (m->next_slot[k] + 1) % GRAPH_SLOTS;
    if (slot->exec) cu.GraphExecDestroy(slot->exec);
    *slot = (GraphSlot){B, m->slot, exec};
    CU(cu.GraphLaunch(exec, m->cur->st));
    return true;
}

/* ---- the device operations (nnc_device_ops) -------------------------------------------------- */

/* Every host<->device copy goes on the compute stream, from pinned memory, then the host waits
 * for it (but a small upload: upload_small).  A synchronous cuMemcpyHtoD would run on the legacy
 * stream, which a CU_STREAM_NON_BLOCKING stream does not wait for: the first kernel could read
 * parameters (or Adam's step) before they landed.  Ordering on one stream makes "copied, then
 * used" hold by construction. */
static bool upload_small(CudaModel *m, CUdeviceptr d, const void *host, size_t bytes);

static bool copy_block(CudaModel *m, int block, int64_t offset, void *host, size_t bytes, int direction) {
    if (direction == NNC_SYNC_TO_DEVICE && bytes <= UPLOAD_CELL_BYTES && m->ngpus == 1) {
        Gpu *g = m->cur;
        return upload_small(m, g->dBlock[block] + (CUdeviceptr)(offset - g->lo[block]), host, bytes);
    }
    for (int i = 0; i < NNC_MAX_GPUS; i++) {   /* each GPU's part of [offset, offset + bytes) */
        Gpu *g = &m->gpu[i];
        int64_t lo = offset > g->lo[block] ? offset : g->lo[block];
        int64_t hi = (int64_t)(offset + (int64_t)bytes), ghi = g->lo[block] + (int64_t)g->bytes[block];
        if (hi > ghi) hi = ghi;
        if (!g->used || hi <= lo) continue;
        CU(cu.CtxSetCurrent(g->ctx));
        CUdeviceptr d = g->dBlock[block] + (CUdeviceptr)(lo - g->lo[block]);
        char *h = (char *)host + (lo - offset);
        if (direction == NNC_SYNC_TO_HOST) CU(cu.MemcpyDtoHAsync(h, d, (size_t)(hi - lo), g->st));
        else CU(cu.MemcpyHtoDAsync(d, h, (size_t)(hi - lo), g->st));
        CU(cu.StreamSynchronize(g->st));
    }
    CU(cu.CtxSetCurrent(m->cur->ctx));
    return true;
}

/* A small upload (the rate a schedule sets before each step, NNC_SYNC_TO_DEVICE of a few bytes)
 * without waiting for the calls in flight: its bytes go into a pinned cell, copied on the
 * compute stream, so every call queued after it reads them.  A cell is written again once the
 * call issued after its copy has finished (then the copy has run); otherwise the host waits
 * for the copy's event, which with UPLOAD_CELLS cells and two calls in flight does not happen
 * in a training loop. */
static bool upload_small(CudaModel *m, CUdeviceptr d, const void *host, size_t bytes) {
    int c = m->next_cell;
    m->next_cell = (c + 1) % UPLOAD_CELLS;
    if (!m->hCell) {
        CU(cu.MemAllocHost((void **)&m->hCell, UPLOAD_CELLS * UPLOAD_CELL_BYTES));
        for (int i = 0; i < UPLOAD_CELLS; i++) CU(cu.EventCreate(&m->cell_ev[i], CU_EVENT_DISABLE_TIMING));
    }
    if (m->cell_call[c] && m->cell_call[c] > m->finished) CU(cu.EventSynchronize(m->cell_ev[c]));
    char *cell = m->hCell + c * UPLOAD_CELL_BYTES;
    memcpy(cell, host, bytes);
    CU(cu.MemcpyHtoDAsync(d, cell, bytes, m->cur->st));
    CU(cu.EventRecord(m->cell_ev[c], m->cur->st));
    m->cell_call[c] = m->issued + 1;
    return true;
}

static int cuda_copy(nnc_rt *rt, int block, int64_t offset, void *host, size_t bytes, int direction) {
    return copy_block(rt->dev, block, offset, host, bytes, direction) ? 0 : rt->status;
}

/* The step lives in device memory too, so a captured graph replays with the current step. */
static bool upload_step(CudaModel *m) {
    for (int i = 0; i < NNC_MAX_GPUS; i++) {   /* every GPU keeps its own copy */
        Gpu *g = &m->gpu[i];
        if (!g->used) continue;
        CU(cu.CtxSetCurrent(g->ctx));
        g->hStep[0] = m->rt->step;
        g->hStep[1] = (long long)m->rt->seed;   /* dropout masks read it next to the step */
        g->hStep[2] = m->rt->micro;
        CU(cu.MemcpyHtoDAsync(g->dStep, g->hStep, 3 * sizeof *g->hStep, g->st));
        CU(cu.StreamSynchronize(g->st));
    }
    CU(cu.CtxSetCurrent(m->cur->ctx));
    return true;
}

static int cuda_set_step(nnc_rt *rt) { return upload_step(rt->dev) ? 0 : rt->status; }

static size_t nonzero(size_t b) { return b ? b : 64; }

/* Pinned: copies from and to it are asynchronous on the stream, and a graph can capture them. */
static void *cuda_host_alloc(nnc_rt *rt, size_t bytes) {
    CudaModel *m = rt->dev;
    void *p = NULL;
    if (!m->cur || cu.CtxSetCurrent(m->cur->ctx) != CUDA_SUCCESS || cu.MemAllocHost(&p, nonzero(bytes)) != CUDA_SUCCESS)
        return NULL;
    memset(p, 0, nonzero(bytes));
    return p;
}

/* Only once every GPU's stream is idle: no copy may still read or write the memory. */
static void cuda_host_free(nnc_rt *rt, void *p) {
    CudaModel *m = rt->dev;
    for (int i = 0; i < NNC_MAX_GPUS; i++)
        if (m->gpu[i].ctx && m->gpu[i].st && cu.CtxSetCurrent(m->gpu[i].ctx) == CUDA_SUCCESS)
            cu.StreamSynchronize(m->gpu[i].st);
    if (m->cur) cu.CtxSetCurrent(m->cur->ctx);
    if (m->cpy) cu.StreamSynchronize(m->cpy);
    cu.MemFreeHost(p);
}

/* The batch into the pinned staging the (captured) input copies read. */
static void stage_inputs(CudaModel *m, int entry, const void *const *in, int64_t B) {
    const nnc_model_desc *d = m->desc;
    for (int i = 0; i < d->abi.ninputs; i++)
        if (d->entry[entry].reads[i]) memcpy(m->hIn[i], in[i], nnc_rt_bytes(d, &d->abi.inputs[i], B));
}

/* Waits for every GPU's stream: the work issued so far has run.  `ok` false: a failure is
 * already reported, and stays the one reported. */
static bool wait_all(CudaModel *m, bool ok) {
    for (int i = 0; i < NNC_MAX_GPUS; i++) {
        Gpu *g = &m->gpu[i];
        if (!g->used) continue;
        CUresult rc = cu.CtxSetCurrent(g->ctx);
        if (rc == CUDA_SUCCESS) rc = cu.StreamSynchronize(g->st);
        if (ok && rc != CUDA_SUCCESS) {
            cu_fail(m, rc, "cuStreamSynchronize(stream) after the step", __FILE__, __LINE__);
            ok = false;
        }
    }
    cu.CtxSetCurrent(m->cur->ctx);
    return ok;
}

/* The kernels' label and index checks of the call in slot `slot` (-1: run's), read back. */
static int check_flags(CudaModel *m, int entry, int slot) {
    for (int i = 0; m->has_ce[entry] && i < NNC_MAX_GPUS; i++) {
        const int *err = m->gpu[i].hErr[slot + 1]; /* 1: a cross_entropy label, 2: an embedding index */
        if (m->gpu[i].used && err[0])
            return nnc_rt_fail(m->rt, NNC_STATUS_CHECK, err[0] == 2 ? NNC_RT_INDEX_FMT : NNC_RT_LABEL_FMT, err[2],
                               (long long)err[1], (long long)err[3]);
    }
    return 0;
}

/* The runtime has checked the batch and the inputs and advanced the step. */
static int cuda_run(nnc_rt *rt, int entry, const void *const *in, int64_t B) {
    CudaModel *m = rt->dev;
    if (cu.CtxSetCurrent(m->cur->ctx) != CUDA_SUCCESS)
        return nnc_rt_fail(rt, NNC_STATUS_ARG, "cannot make the CUDA context current");
    stage_inputs(m, entry, in, B);
    m->issued++;
    bool ok = wait_all(m, launch_entry(m, &m->p->entry[entry], B));
    ok = ok && (!m->timing || cuda_profile_read(m, &m->p->entry[entry]));
    if (!ok) return rt->status ? rt->status : NNC_STATUS_ARG;
    m->finished = m->issued;
    return check_flags(m, entry, -1);
}

/* ---- pipelined calls (nnc_rt_submit) ------------------------------------------------------------
 * A call is queued on its ring slot's memory and the host goes on: the inputs go up on the copy
 * stream into the slot's device buffer while the calls before it run, the compute stream waits
 * for them by an event (never the host), then the entry's graph for that slot runs, which copies
 * the inputs from there into the activations, and the host block, the error flags and the
 * device outputs into the slot's pinned copies; an event marks its end, which finish waits for.
 * A graph is captured per slot because a graph's addresses are fixed: the two slots' graphs
 * differ only in the addresses of these copies. */

/* Slot s's memory, at its first call (never during a capture: nothing is allocated then), and
 * its copies of an entry's outputs at the entry's first call there: only as much as the entry
 * writes, so that eval's large outputs (logits) cost no pinned memory to a pipelined train step. */
static bool call_slot_alloc(CudaModel *m, int s, int entry) {
    CallSlot *c = &m->call[s];
    if (!c->ready) {
        m->up = m->ngpus == 1; /* a model over several GPUs copies its inputs in its step, as a run does */
        if (m->up && !m->cpy) CU(cu.StreamCreate(&m->cpy, CU_STREAM_NON_BLOCKING));
        if (m->up) CU(cu.MemAlloc(&c->dIn, nonzero(m->in_bytes)));
        CU(cu.EventCreate(&c->copied, CU_EVENT_DISABLE_TIMING));
        CU(cu.EventCreate(&c->done, CU_EVENT_DISABLE_TIMING));
        c->ready = true;
    }
    if (!c->hHost[entry])
        CU(cu.MemAllocHost((void **)&c->hHost[entry], nonzero(cuda_host_extent(m, &m->p->entry[entry]))));
    if (!c->hOut[entry])
        CU(cu.MemAllocHost((void **)&c->hOut[entry], nonzero(m->rt->stage_hi[entry] - m->rt->stage_lo[entry])));
    return true;
}

/* The call's inputs onto the device on the copy stream, and the compute stream's wait for them.
 * The slot's device buffer was last read by the call NNC_PIPELINE_DEPTH submits ago, which the
 * runtime has finished. */
static bool inputs_up(CudaModel *m, int entry, const void *const *in, int64_t B) {
    const nnc_model_desc *d = m->desc;
    CallSlot *c = &m->call[m->slot];
    if (!m->up) return true;
    for (int i = 0; i < d->abi.ninputs; i++)
        if (d->entry[entry].reads[i])
            CU(cu.MemcpyHtoDAsync(c->dIn + (CUdeviceptr)m->in_at[i], in[i], nnc_rt_bytes(d, &d->abi.inputs[i], B),
                                  m->cpy));
    CU(cu.EventRecord(c->copied, m->cpy));
    CU(cu.StreamWaitEvent(m->cur->st, c->copied, 0));
    return true;
}

/* The call's end on the compute stream (a model over several GPUs has run its call already). */
static bool mark_done(CudaModel *m, CallSlot *c) {
    if (m->ngpus == 1) CU(cu.EventRecord(c->done, m->cur->st));
    return true;
}

static bool rows_up(CudaModel *m, int entry, const int64_t *const *starts, int64_t B);

/* A call queued in `slot`: its inputs put on the device (inputs_up or rows_up), then the entry. */
static int queue_call(CudaModel *m, int entry, const void *const *in, const int64_t *const *starts, int64_t B,
                      int slot) {
    nnc_rt *rt = m->rt;
    CallSlot *c = &m->call[slot];
    if (cu.CtxSetCurrent(m->cur->ctx) != CUDA_SUCCESS)
        return nnc_rt_fail(rt, NNC_STATUS_ARG, "cannot make the CUDA context current");
    if (!call_slot_alloc(m, slot, entry)) return rt->status;
    m->slot = slot;
    m->in = in;
    c->seq = ++m->issued;
    bool ok = (starts ? rows_up(m, entry, starts, B) : inputs_up(m, entry, in, B)) &&
        launch_entry(m, &m->p->entry[entry], B) && mark_done(m, c);
    m->slot = -1;
    m->in = NULL;
    return ok ? 0 : rt->status ? rt->status : NNC_STATUS_ARG;
}

static int cuda_submit(nnc_rt *rt, int entry, const void *const *in, int64_t B, int slot) {
    return queue_call(rt->dev, entry, in, NULL, B, slot);
}

/* ---- kept inputs (nnc_rt_keep, nnc_rt_submit_rows) ---------------------------------------------
 * A data set that fits is copied to the device once (through pinned memory, in parts); a call
 * then sends only its rows' starts (8 bytes a row and input) on the copy stream, where one
 * nnc_rows launch an input gathers the batch into the slot's input buffer, the place its inputs'
 * copies would have written: everything after (the compute stream's wait, the entry's graph) is
 * the same as for submit. */

#define KEEP_PART ((size_t)32 << 20) /* bytes of pinned memory a source goes up through at a time */

static size_t kept_bytes(int type, int64_t elems) { return (size_t)elems * (type == NNC_TYPE_U8 ? 1 : 4); }

/* Input i's copy let go (freed when no other input shares it). */
static void keep_release(CudaModel *m, int i) {
    KeptSource *k = &m->kept[i];
    if (!k->p) return;
    int heir = -1; /* another input on the same copy takes it over */
    for (int j = 0; j < m->desc->abi.ninputs; j++)
        if (j != i && m->kept[j].p == k->p) heir = j;
    if (k->owner && heir >= 0) m->kept[heir].owner = true;
    else if (k->owner) {
        if (m->cpy) cu.StreamSynchronize(m->cpy); /* no gather still reads it */
        cu.StreamSynchronize(m->cur->st);
        cu.MemFree(k->p);
    }
    *k = (KeptSource){0};
}

/* `bytes` of host memory up to device address `d`, through a pinned buffer. */
static bool upload_big(CudaModel *m, CUdeviceptr d, const void *host, size_t bytes) {
    size_t part = bytes < KEEP_PART ? bytes : KEEP_PART;
    char *pin = NULL;
    CU(cu.MemAllocHost((void **)&pin, nonzero(part)));
    bool ok = true;
    for (size_t at = 0; ok && at < bytes; at += part) {
        size_t n = bytes - at < part ? bytes - at : part;
        memcpy(pin, (const char *)host + at, n);
        CUresult r = cu.MemcpyHtoDAsync(d + (CUdeviceptr)at, pin, n, m->cpy);
        if (r == CUDA_SUCCESS) r = cu.StreamSynchronize(m->cpy);
        if (r != CUDA_SUCCESS) {
            cu_fail(m, r, "cuMemcpyHtoDAsync(a kept input's part)", __FILE__, __LINE__);
            ok = false;
        }
    }
    cu.MemFreeHost(pin);
    return ok;
}

static int cuda_keep(nnc_rt *rt, int i, const void *data, int64_t elems, int type, float scale, int if_room) {
    CudaModel *m = rt->dev;
    const nnc_model_desc *d = m->desc;
    if (cu.CtxSetCurrent(m->cur->ctx) != CUDA_SUCCESS)
        return nnc_rt_fail(rt, NNC_STATUS_ARG, "cannot make the CUDA context current");
    if (!data) {
        keep_release(m, i);
        return 0;
    }
    if (m->ngpus > 1)
        return nnc_rt_fail(rt, NNC_STATUS_ENTRY, "%s_keep: the model spans %d GPUs: its inputs are copied in its step",
                           d->abi.name, m->ngpus);
    for (int j = 0; j < d->abi.ninputs; j++) { /* input i itself is copied again: its values may have changed */
        const KeptSource *o = &m->kept[j];
        if (j != i && o->p && o->host == data && o->elems == elems && o->type == type && o->scale == scale) {
            keep_release(m, i);
            m->kept[i] = (KeptSource){o->p, data, elems, type, scale, false};
            return 0;
        }
    }
    const size_t bytes = kept_bytes(type, elems);
    size_t free_b = 0, total = 0;
    if (if_room && (cu.MemGetInfo(&free_b, &total) != CUDA_SUCCESS || bytes > free_b / 4))
        return nnc_rt_fail(rt, NNC_STATUS_ROOM,
                           "%s_keep: input '%s' takes %.1f MB, more than a quarter of the %.1f MB "
                           "the GPU has free",
                           d->abi.name, d->abi.inputs[i].name, (double)bytes / 1e6, (double)free_b / 1e6);
    if (!m->cpy && cu.StreamCreate(&m->cpy, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
        return nnc_rt_fail(rt, NNC_STATUS_ARG, "cannot create the copy stream");
    CUdeviceptr p = 0;
    CUresult r = cu.MemAlloc(&p, nonzero(bytes));
    if (r != CUDA_SUCCESS) {
        cu_fail(m, r, "cuMemAlloc(a kept input)", __FILE__, __LINE__);
        return rt->status;
    }
    if (!upload_big(m, p, data, bytes)) {
        cu.MemFree(p);
        return rt->status;
    }
    keep_release(m, i); /* its earlier copy, which a refusal above leaves kept */
    m->kept[i] = (KeptSource){p, data, elems, type, scale, true};
    return 0;
}

/* The call's rows' starts up on the copy stream, and each input gathered there from its kept
 * source into the slot's input buffer; then the compute stream's wait, as inputs_up's. */
static bool rows_up(CudaModel *m, int entry, const int64_t *const *starts, int64_t B) {
    const nnc_model_desc *d = m->desc;
    CallSlot *c = &m->call[m->slot];
    const int64_t bmax = d->abi.batch_max;
    if (!c->hStarts) {
        CU(cu.MemAllocHost((void **)&c->hStarts, (size_t)(d->abi.ninputs * bmax) * sizeof(int64_t)));
        CU(cu.MemAlloc(&c->dStarts, (size_t)(d->abi.ninputs * bmax) * sizeof(int64_t)));
    }
    for (int i = 0; i < d->abi.ninputs; i++) {
        if (!d->entry[entry].reads[i]) continue;
        memcpy(c->hStarts + i * bmax, starts[i], (size_t)B * sizeof(int64_t));
        CU(cu.MemcpyHtoDAsync(c->dStarts + (CUdeviceptr)(i * bmax) * sizeof(int64_t), c->hStarts + i * bmax,
                              (size_t)B * sizeof(int64_t), m->cpy));
    }
    for (int i = 0; i < d->abi.ninputs; i++) {
        if (!d->entry[entry].reads[i]) continue;
        const KeptSource *k = &m->kept[i];
        CUdeviceptr dst = c->dIn + (CUdeviceptr)m->in_at[i],
                    st = c->dStarts + (CUdeviceptr)(i * bmax) * sizeof(int64_t);
        int64_t rows = B, n = nnc_rt_numel(&d->abi.inputs[i], 1);
        int t = (k->type == NNC_TYPE_U8) + (d->abi.inputs[i].dtype != NNC_TYPE_I32 && m->f64 ? 2 : 0);
        float scale = k->scale;
        const int64_t per = (n + 3) / 4; /* a thread's values: 4 where the row allows */
        unsigned gx = (unsigned)((per + 255) / 256 < 64 ? (per + 255) / 256 : 64);
        unsigned gy = (unsigned)(B < 65535 ? B : 65535);
        void *args[] = {&dst, (void *)&k->p, &st, &rows, &n, &t, &scale};
        CU(cu.LaunchKernel(m->cur->rows_fn, gx, gy, 1, 256, 1, 1, 0, m->cpy, args, NULL));
    }
    CU(cu.EventRecord(c->copied, m->cpy));
    CU(cu.StreamWaitEvent(m->cur->st, c->copied, 0));
    return true;
}

static int cuda_submit_rows(nnc_rt *rt, int entry, const int64_t *const *starts, int64_t B, int slot) {
    CudaModel *m = rt->dev;
    if (m->ngpus > 1)
        return nnc_rt_fail(rt, NNC_STATUS_ENTRY, "%s_submit_rows: the model spans %d GPUs", m->desc->abi.name,
                           m->ngpus);
    return queue_call(m, entry, NULL, starts, B, slot);
}

/* Waits for the call in `slot` (a model over several GPUs: for every stream), then its checks
 * and outputs, as a run leaves them. */
static int cuda_finish(nnc_rt *rt, int slot, int entry, int64_t B) {
    CudaModel *m = rt->dev;
    CallSlot *c = &m->call[slot];
    if (cu.CtxSetCurrent(m->cur->ctx) != CUDA_SUCCESS)
        return nnc_rt_fail(rt, NNC_STATUS_ARG, "cannot make the CUDA context current");
    if (m->ngpus > 1 && !wait_all(m, true)) return rt->status;
    CUresult r = m->ngpus > 1 ? CUDA_SUCCESS : cu.EventSynchronize(c->done);
    if (r != CUDA_SUCCESS) {
        cu_fail(m, r, "cuEventSynchronize(the call's end)", __FILE__, __LINE__);
        return rt->status;
    }
    if (c->seq > m->finished) m->finished = c->seq;
    if (check_flags(m, entry, slot)) return rt->status;
    nnc_rt_outputs_take(rt, entry, B, c->hHost[entry], c->hOut[entry]);
    return 0;
}

/* Everything the device allocated, then the description (in the arena) with it. */
static void cuda_close(nnc_rt *rt) {
    CudaModel *m = rt->dev;
    if (!m) return;
    for (int i = 0; i < NNC_MAX_GPUS; i++)   /* no work may still use what is freed below */
        if (m->gpu[i].ctx && m->gpu[i].st && cu.CtxSetCurrent(m->gpu[i].ctx) == CUDA_SUCCESS)
            cu.StreamSynchronize(m->gpu[i].st);
    if (m->cur && m->cur->ctx) cu.CtxSetCurrent(m->cur->ctx);
    cuda_profile_free(m);
    for (int k = 0; k < ENTRY_COUNT; k++)
        for (int s = 0; s < GRAPH_SLOTS; s++)
            if (m->graph[k][s].exec) cu.GraphExecDestroy(m->graph[k][s].exec);
    for (int i = 0; m->hIn && i < m->desc->abi.ninputs; i++)
        if (m->hIn[i]) cu.MemFreeHost(m->hIn[i]);
    if (m->hColl) cu.MemFreeHost(m->hColl);
    if (m->cst) cu.StreamSynchronize(m->cst);
    if (m->cpy) cu.StreamSynchronize(m->cpy);
    for (int s = 0; s < NNC_PIPELINE_DEPTH; s++) {
        CallSlot *c = &m->call[s];
        if (c->dIn) cu.MemFree(c->dIn);
        if (c->dStarts) cu.MemFree(c->dStarts);
        if (c->hStarts) cu.MemFreeHost(c->hStarts);
        for (int k = 0; k < ENTRY_COUNT; k++) {
            if (c->hHost[k]) cu.MemFreeHost(c->hHost[k]);
            if (c->hOut[k]) cu.MemFreeHost(c->hOut[k]);
        }
        if (c->copied) cu.EventDestroy(c->copied);
        if (c->done) cu.EventDestroy(c->done);
    }
    if (m->hCell) cu.MemFreeHost(m->hCell);
    for (int i = 0; m->kept && i < m->desc->abi.ninputs; i++)
        if (m->kept[i].p && m->kept[i].owner) cu.MemFree(m->kept[i].p);
    for (int i = 0; i < UPLOAD_CELLS; i++)
        if (m->cell_ev[i]) cu.EventDestroy(m->cell_ev[i]);
    if (m->cpy) cu.StreamDestroy(m->cpy);
    nccl_free(m->nccl);
    for (int i = 0; m->ready && i < m->p->g->n; i++) {
        if (m->ready[i]) cu.EventDestroy(m->ready[i]);
        if (m->done[i]) cu.EventDestroy(m->done[i]);
    }
    if (m->cst) cu.StreamDestroy(m->cst);
    cuda_dnn_close(m);
    for (int k = 0; k < ENTRY_COUNT; k++)
        for (int j = 0; m->lt[k] && j < m->p->entry[k].nlaunch; j++) cuda_lt_plan_free(&m->lt[k][j]);
    for (int i = 0; i < NNC_MAX_GPUS; i++) {
        Gpu *g = &m->gpu[i];
        if (!g->ctx) continue;
        cu.CtxSetCurrent(g->ctx);
        if (g->blas) cu.BlasDestroy(g->blas);
        if (g->lt) cu.LtDestroy(g->lt);
        CUdeviceptr dev[] = {g->dBlock[0], g->dBlock[1], g->dBlock[2], g->dBlock[3], g->dStep,
                             g->dErr,      g->dWork,     g->dFirst,    g->dDnnWork,  g->dRed};
        for (size_t j = 0; j < NNC_COUNTOF(dev); j++)
            if (dev[j]) cu.MemFree(dev[j]);
        void *pinned[] = {g->hStep, g->hFirst};
        for (size_t j = 0; j < NNC_COUNTOF(pinned); j++)
            if (pinned[j]) cu.MemFreeHost(pinned[j]);
        for (int s = 0; s <= NNC_PIPELINE_DEPTH; s++)
            if (g->hErr[s]) cu.MemFreeHost(g->hErr[s]);
        if (g->mod) cu.ModuleUnload(g->mod);
        if (g->st) cu.StreamDestroy(g->st);
        cu.PrimaryCtxRelease(g->dev);
    }
    arena_free(&m->arena);
    free(m);
    rt->dev = NULL;
}

/* Parameters, state and activations are device memory; the host block and the mirrors are the
 * runtime's, in pinned memory. */
static const nnc_device_ops cuda_device = {
    .name = "cuda",
    .device_blocks = 1u << NNC_BLOCK_PARAMS | 1u << NNC_BLOCK_STATE | 1u << NNC_BLOCK_ACT,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .copy = cuda_copy,
    .set_step = cuda_set_step,
    .run = cuda_run,
    .close = cuda_close,
    .submit = cuda_submit,
    .finish = cuda_finish,
    .keep = cuda_keep,
    .submit_rows = cuda_submit_rows,
};

/* nnc_model_abi.create: a CUDA model is created by the backend's load(), with its device. */
static void *cuda_create(void *mem) {
    (void)mem;
    return NULL;
}

/* ---- load ----------------------------------------------------------------------------------- */

/* Every kernel, GEMM and assignment must read and write device memory: a value the user kept
 * on the host with to(x, cpu) would need host code, which this backend does not generate. */
static bool check_placement(const Program *p, char *err, size_t n) {
    for (int k = 0; k < ENTRY_COUNT; k++) {
        const Entry *e = &p->entry[k];
        for (int i = 0; i < e->nlaunch; i++) {
            const Launch *L = &e->launches[i];
            if (L->kind == L_COPY) continue;
            int root = L->kind == L_GEMM ? launch_gemm_c(L) : L->root;
            bool ok = cuda_on_device(e, root) || L->kind == L_ASSIGN;
            /* a GEMM reads its operands a and b; its ins[] may name a transpose folded into the
             * product (BUF_NONE), which has no memory of its own */
            if (L->kind == L_GEMM)
                ok &= cuda_on_device(e, L->a) && cuda_on_device(e, L->b) && (L->bias < 0 || cuda_on_device(e, L->bias));
            else
                for (int j = 0; j < L->nins; j++) ok &= cuda_on_device(e, L->ins[j]);
            for (int j = 0; j < L->nouts; j++) ok &= cuda_on_device(e, L->outs[j]);
            if (!ok) {
                const SrcLoc *loc = &p->g->nodes[L->root].loc;
                snprintf(n ? err : NULL, n, "%s:%d: the CUDA target runs every computation on the device, but this %s "
                         "(in %s) reads or writes a value placed on the host; remove its to(..., cpu)",
                         p->diag && p->diag->file ? p->diag->file : "model", loc->line,
                         op_info[p->g->nodes[L->root].op].name, e->name);
                return false;
            }
        }
    }
    return true;
}

/* The cubin for this source and device: a verified cache entry (codegen/cache.c checks the
 * directory, the entry's owner and its checksum before cuModuleLoadData sees it), or
 * compiled and published into the cache. */
static char *get_cubin(const Program *p, const BuildOpts *o, const char *src, const char *arch, LoadedModel *lm,
                       char *err, size_t n) {
    static const char flags[] = "--std=c++17 -default-device cubin v2";
    int ver = cuda_nvrtc_version();
    uint64_t h = hash_fnv1a(src, strlen(src), HASH_FNV_INIT);
    h = hash_fnv1a(arch, strlen(arch), h);
    h = hash_fnv1a(&ver, sizeof ver, h);
    h = hash_fnv1a(flags, sizeof flags, h);
    const char *mn = model_c_name(p);
    Cache cache = {.dirfd = -1};
    Str name = {0}, cu = {0};
    str_printf(&name, "%016llx-%.64s.cubin", (unsigned long long)h, mn);   /* the hash first */
    str_printf(&cu, "%s.cu", name.buf);
    char *bin = NULL;
    size_t len = 0;
    if (o->cache_dir && cache_open(&cache, o->cache_dir, err, n) && !cache.temporary &&
        cache_get(&cache, name.buf, (void **)&bin, &len) && len > 0)
        lm->cache_hit = true;
    else {
        free(bin);
        char label[300];
        snprintf(label, sizeof label, "%s.cu", mn);
        bin = cuda_nvrtc_compile(src, label, arch, o->f64, &len, err, n);
        if (bin && cache.dirfd >= 0 && !cache.temporary) {
            cache_put(&cache, cu.buf, src, strlen(src), 0600);   /* for reading; the cache works without it */
            if (!cache_put(&cache, name.buf, bin, len, 0600))
                fprintf(stderr, "nnc: warning: %s: cannot write to the cache (%s); continuing without it\n", cache.dir,
                        strerror(errno));
        }
    }
    if (bin && cache.dirfd >= 0 && !cache.temporary) {
        char *path = cache_path(&cache, name.buf);
        if (strlen(path) < sizeof lm->so_path) snprintf(lm->so_path, sizeof lm->so_path, "%s", path);
        free(path);
    }
    cache_close(&cache);
    str_free(&name);
    str_free(&cu);
    return bin;
}

static bool load_module(CudaModel *m, const char *cubin) {
    CU(cu.ModuleLoadData(&m->cur->mod, cubin));
    CU(cu.ModuleGetFunction(&m->cur->step_inc, m->cur->mod, "nnc_step_inc"));
    CU(cu.ModuleGetFunction(&m->cur->micro_next, m->cur->mod, "nnc_micro_next"));
    CU(cu.ModuleGetFunction(&m->cur->rows_fn, m->cur->mod, "nnc_rows"));
    if (cuda_has_epilogue(m->p)) CU(cu.ModuleGetFunction(&m->cur->bias_fn, m->cur->mod, "nnc_bias_rows"));
    if (m->check_numerics) CU(cu.ModuleGetFunction(&m->cur->check_fn, m->cur->mod, "nnc_check_finite"));
    if (program_has_helpers(m->p))
        for (int h = 0; h < HP_COUNT; h++)
            CU(cu.ModuleGetFunction(&m->cur->helper[h], m->cur->mod, helper_info[h].name));
    for (int k = 0; k < ENTRY_COUNT; k++) {
        const Entry *e = &m->p->entry[k];
        m->cur->fn[k] = arena_alloc(&m->arena, (size_t)(e->nlaunch + 1) * sizeof(CUfunction));
        for (int i = 0; i < e->nlaunch; i++) {
            const Launch *L = &e->launches[i];
            /* cross_entropy's labels and embedding's indices are checked on the device */
            m->has_ce[k] |= op_has(m->p->g->nodes[L->root].op, OPF_MAY_FAIL);
            m->no_graph[k] |= L->kind == L_COLLECTIVE;   /* the host takes part: no CUDA graph */
            if (!cuda_launch_is_kernel(L) || m->kt.l[k][i].ngroups) continue; /* a run's: its groups' */
            char name[256];
            const CudaLaunchKernel *lk = &m->kt.l[k][i];
            cuda_kernel_name(name, sizeof name, m->p, &m->p->entry[lk->entry], lk->launch);
            CU(cu.ModuleGetFunction(&m->cur->fn[k][i], m->cur->mod, name));
        }
    }
    m->cur->gfn = arena_alloc(&m->arena, (size_t)(m->kt.ngroups + 1) * sizeof(CUfunction));
    for (int j = 0; j < m->kt.ngroups; j++) {
        char name[256];
        const CudaGroup *gr = &m->kt.groups[j];
        cuda_group_name(name, sizeof name, m->p, &m->p->entry[gr->entry], gr);
        CU(cu.ModuleGetFunction(&m->cur->gfn[j], m->cur->mod, name));
    }
    return true;
}

/* GPU k's device memory: its ranges of the parameter and state blocks and its activation block
 * (plan.c), the step, the error flag, cuBLAS's workspace and the reductions'. */
static bool alloc_gpu(CudaModel *m, int k) {
    const Program *p = m->p;
    Gpu *g = &m->gpu[k];
    Device d = DEV_GPU(k);
    int64_t lo[3] = {p->param_lo[d], p->state_lo[d], program_act_base(p, d)};
    int64_t hi[3] = {p->param_hi[d], p->state_hi[d], lo[2] + program_act_peak(p, d)};
    for (int b = 0; b < 3; b++) {
        g->lo[b] = lo[b] * (int64_t)m->rb;
        g->bytes[b] = (size_t)(hi[b] - lo[b]) * m->rb;
        CU(cu.MemAlloc(&g->dBlock[b], nonzero(g->bytes[b])));
    }
    CU(cu.MemAlloc(&g->dStep, 64));
    CU(cu.MemAlloc(&g->dErr, 64));
    CU(cu.MemAlloc(&g->dWork, BLAS_WORKSPACE));
    CU(cu.MemAlloc(&g->dFirst, 64));
    CU(cu.MemAlloc(&g->dRed, CUDA_WORKSPACE_BYTES));
    CU(cu.MemsetD32Async(g->dRed, 0, CUDA_TICKETS, g->st)); /* the tickets start at 0 */
    CU(cu.MemAllocHost((void **)&g->hFirst, 64));
    /* a fixed workspace: cuBLAS then allocates nothing while a graph is being captured */
    BLAS(cu.BlasSetWorkspace(g->blas, (void *)g->dWork, BLAS_WORKSPACE));
    CU(cu.MemAllocHost((void **)&g->hStep, 3 * sizeof *g->hStep));
    for (int s = 0; s <= NNC_PIPELINE_DEPTH; s++) {
        CU(cu.MemAllocHost((void **)&g->hErr[s], 64));
        memset(g->hErr[s], 0, 64);
    }
    return true;
}

/* Pinned staging for the inputs and (data parallel) the gradients (the host blocks come from
 * the runtime, nnc_rt_alloc). */
static bool alloc_staging(CudaModel *m) {
    const nnc_model_desc *d = m->desc;
    size_t coll = 0;   /* every allreduce start's gradient, side by side */
    m->coll_at = arena_alloc(&m->arena, (size_t)m->p->g->n * sizeof(size_t));
    for (int i = 0; i < m->p->g->n; i++)
        if (m->p->g->nodes[i].op == OP_ALLREDUCE_START) {
            m->coll_at[i] = coll;
            coll += (size_t)shape_numel(m->p->g->nodes[i].shape, m->p->g->batch_max) * m->rb;
        }
    if (coll) CU(cu.MemAllocHost((void **)&m->hColl, coll));
    m->hIn = arena_alloc(&m->arena, (size_t)(d->abi.ninputs + 1) * sizeof(void *));
    m->in_at = arena_alloc(&m->arena, (size_t)(d->abi.ninputs + 1) * sizeof(size_t));
    m->kept = arena_alloc(&m->arena, (size_t)(d->abi.ninputs + 1) * sizeof(KeptSource));
    for (int i = 0; i < d->abi.ninputs; i++) {
        size_t bytes = nnc_rt_bytes(d, &d->abi.inputs[i], d->abi.batch_max);
        CU(cu.MemAllocHost(&m->hIn[i], nonzero(bytes)));
        m->in_at[i] = m->in_bytes; /* a pipelined call's inputs on the device, each on 256 bytes */
        m->in_bytes += (bytes + 255) / 256 * 256;
    }
    return true;
}

/* Copies between the GPUs a model uses go directly where the hardware allows (peer access);
 * elsewhere cuMemcpyPeerAsync goes through the host. */
static bool enable_peers(CudaModel *m) {
    for (int i = 0; i < NNC_MAX_GPUS; i++)
        for (int j = 0; j < NNC_MAX_GPUS; j++) {
            Gpu *a = &m->gpu[i], *b = &m->gpu[j];
            int can = 0;
            if (i == j || !a->used || !b->used || a->dev == b->dev) continue;
            CU(cu.DeviceCanAccessPeer(&can, a->dev, b->dev));
            if (!can) continue;
            CU(cu.CtxSetCurrent(a->ctx));
            CUresult r = cu.CtxEnablePeerAccess(b->ctx, 0);
            if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) CU(r);
        }
    return true;
}

/* m->cur: physical GPU `ordinal` (modulo the GPUs there are), its context, stream and cuBLAS. */
static bool open_device(CudaModel *m, int ordinal, char *arch, size_t archlen) {
    int major = 0, minor = 0, count = 0;
    CU(cu.DeviceGetCount(&count));
    CU(cu.DeviceGet(&m->cur->dev, count > 0 ? ordinal % count : 0));
    CU(cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, m->cur->dev));
    CU(cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, m->cur->dev));
    snprintf(arch, archlen, "sm_%d%d", major, minor);
    CU(cu.PrimaryCtxRetain(&m->cur->ctx, m->cur->dev));
    CU(cu.CtxSetCurrent(m->cur->ctx));
    CU(cu.StreamCreate(&m->cur->st, CU_STREAM_NON_BLOCKING));
    BLAS(cu.BlasCreate(&m->cur->blas));
    BLAS(cu.BlasSetStream(m->cur->blas, (cudaStream_t)m->cur->st));
    BLAS(cu.BlasSetMathMode(m->cur->blas, m->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    /* cuBLASLt for the products with an epilogue; NNC_NO_CUBLASLT=1 runs their fallback instead */
    const char *no_lt = getenv("NNC_NO_CUBLASLT");
    if (cu.lt_ok && cuda_has_epilogue(m->p) && !(no_lt && !strcmp(no_lt, "1"))) BLAS(cu.LtCreate(&m->cur->lt));
    return true;
}

/* The instance, before any device work: its description, and the runtime's instance that every
 * later failure reports into. */
static CudaModel *cuda_model_new(const Program *p, const BuildOpts *o) {
    CudaModel *m = xcalloc(1, sizeof *m);
    m->p = p;
    m->f64 = o->f64;
    m->tf32 = o->tf32;
    m->check_numerics = o->check_numerics;
    m->verbose = o->verbose;
    m->rb = o->f64 ? 8 : 4;
    m->slot = -1;
    const nnc_model_abi fns = {NNC_RT_ABI_FUNCTIONS(cuda_create), NNC_RT_ABI_PIPELINE};
    m->desc = model_desc_build(p, o->f64, &fns, &m->arena);
    if (!(m->rt = nnc_rt_new(m->desc, &cuda_device, m))) {
        arena_free(&m->arena);
        free(m);
        return NULL;
    }
    return m;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* The device, the module (compiled or from the cache), device memory, then the runtime's host
 * memory.  A compile failure's log is in err already; anything else is the instance's message. */
static bool cuda_setup(CudaModel *m, const BuildOpts *o, LoadedModel *lm, char *err, size_t n) {
    char arch[32] = "", first_arch[32] = "";
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < m->p->g->n; i++)   /* the GPUs the model uses: cuda:k is GPU base + k */
        if (DEV_IS_GPU(m->p->g->nodes[i].dev)) m->gpu[DEV_GPU_INDEX(m->p->g->nodes[i].dev)].used = true;
    int any = 0;
    for (int k = 0; k < NNC_MAX_GPUS; k++) any |= m->gpu[k].used;
    if (!any) m->gpu[0].used = true;
    bool ok = true;
    for (int k = 0; k < NNC_MAX_GPUS && ok; k++) {
        if (!m->gpu[k].used) continue;
        m->cur = &m->gpu[k];
        m->ngpus++;
        ok = open_device(m, o->device + k, arch, sizeof arch);
        if (ok && first_arch[0] && strcmp(arch, first_arch)) {
            nnc_rt_fail(m->rt, NNC_STATUS_ARG, "the model's GPUs differ in architecture (%s and %s); nnc compiles one "
                        "set of kernels for all of them", first_arch, arch);
            ok = false;
        }
        snprintf(first_arch, sizeof first_arch, "%s", arch);
    }
    ok = ok && enable_peers(m);
    char *cubin = NULL;
    if (ok) {
        Str src = {0};
        cuda_render_kernels(m->p, o, &src, &m->arena, &m->kt);
        cubin = get_cubin(m->p, o, src.buf, arch, lm, err, n);
        str_free(&src);
        if (!cubin) return false;
    }
    lm->compile_seconds = seconds_since(&t0);
    for (int k = NNC_MAX_GPUS - 1; k >= 0 && ok; k--) {   /* ends with the first: m->cur */
        if (!m->gpu[k].used) continue;
        m->cur = &m->gpu[k];
        ok = cu.CtxSetCurrent(m->cur->ctx) == CUDA_SUCCESS && load_module(m, cubin) && alloc_gpu(m, k);
    }
    if (m->ngpus > 1)   /* the GPUs take turns, synchronized by the host: no CUDA graphs */
        for (int k = 0; k < ENTRY_COUNT; k++) m->no_graph[k] = true;
    char why[1700];
    if (ok && !cuda_dnn_setup(m, o, why, sizeof why)) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "%s", why);
        ok = false;
    }
    for (int k = 0; ok && k < ENTRY_COUNT && cuda_has_epilogue(m->p); k++) /* cuBLASLt's setups, made at first use */
        m->lt[k] = arena_alloc(&m->arena, (size_t)(m->p->entry[k].nlaunch + 1) * sizeof *m->lt[k]),
        memset(m->lt[k], 0, (size_t)(m->p->entry[k].nlaunch + 1) * sizeof *m->lt[k]);
    ok = ok && alloc_staging(m) && nnc_rt_alloc(m->rt, NULL) == 0;
    free(cubin);
    if (!ok) snprintf(err, n, "%s", m->rt->msg);
    return ok;
}

static LoadedModel *cuda_load(const Program *p, const BuildOpts *o, char *err, size_t n) {
    if (!cuda_open()) {
        snprintf(err, n, "%s", cu.why);
        return NULL;
    }
    if (!cuda_nvrtc_available(err, n) || !check_placement(p, err, n)) return NULL;
    CudaModel *m = cuda_model_new(p, o);
    if (!m) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    LoadedModel *lm = xcalloc(1, sizeof *lm);
    if (!cuda_setup(m, o, lm, err, n)) {
        nnc_rt_destroy(m->rt);
        free(lm);
        return NULL;
    }
    lm->abi = &m->desc->abi;
    lm->m = m->rt;
    lm->handle = m;
    return lm;
}

static void cuda_unload(LoadedModel *lm) {
    if (!lm) return;
    nnc_rt_destroy(lm->m);
    free(lm);
}

/* --emit ptx: NVRTC's PTX for the device's architecture (compute_XY), or for compute_90 when
 * there is no device to ask, which the first line says. */
static bool cuda_emit_ptx(const Program *p, const BuildOpts *o, Str *out, char *err, size_t n) {
    char arch[32] = "compute_90";
    const char *why = "no CUDA device found to choose it";
    CUdevice dev;
    int major = 0, minor = 0;
    if (cuda_open() && cu.DeviceGet(&dev, 0) == CUDA_SUCCESS &&
        cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) == CUDA_SUCCESS &&
        cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) == CUDA_SUCCESS) {
        snprintf(arch, sizeof arch, "compute_%d%d", major, minor);
        why = "the architecture of device 0";
    }
    Str src = {0};
    cuda_render(p, o, &src);
    size_t len = 0;
    char *ptx = cuda_nvrtc_compile(src.buf, "model.cu", arch, o->f64, &len, err, n);
    str_free(&src);
    if (!ptx) return false;
    str_printf(out, "// nnc: PTX for %s (%s), compiled by NVRTC from the source --emit cuda prints\n", arch, why);
    str_puts(out, ptx);
    free(ptx);
    return true;
}

/* Reductions and row sums accumulate in double (kernel.c), split over lanes, blocks and trees
 * (dialect_cuda.c): the bound of a sum of n terms holds in any order.  cuBLAS's FP32 products
 * (and the convolutions' im2col GEMMs, and cuDNN's with FMA math) use FMA chains; half inputs or
 * TF32 (--tf32; cuDNN on a convolution of half values widened, cuda_dnn.c) run on tensor cores,
 * whose FP32 accumulation may truncate rather than round (Fasi et al., "Numerical behavior of
 * NVIDIA tensor cores", 2021): twice the unit roundoff, and TF32 inputs keep 10 bits. */
static void cuda_numerics(const Program *p, const Launch *L, const BuildOpts *o, LaunchNumerics *out) {
    const Graph *g = p->g;
    const Node *r = &g->nodes[L->root];
    double u = o->f64 ? 0x1p-53 : 0x1p-24;
    bool conv = L->kind == L_HELPER && op_has(r->op, OPF_CONV), product = L->kind == L_GEMM || conv;
    bool half = L->kind == L_GEMM ? DTYPE_IS_HALF(g->nodes[L->a].dtype) || DTYPE_IS_HALF(g->nodes[L->b].dtype)
                                  : conv && cuda_half_widened(g, r->in[0]) && cuda_half_widened(g, r->in[1]);
    bool tensor = product && !o->f64 && (half || o->tf32);
    out->sum_unit = L->kind == L_REDUCE ? 0x1p-53 : tensor ? 2 * u : u;
    out->input_unit = product && o->tf32 && !o->f64 && !half ? 0x1p-10 : 0;
}

const Backend backend_cuda = {
    .name = "cuda",
    .render = cuda_render,
    .load = cuda_load,
    .unload = cuda_unload,
    .emit_asm = cuda_emit_ptx,
    .numerics = cuda_numerics,
    .run_timed = cuda_run_timed,
    .timed_how = "CUDA events before and after each launch on its stream, launched directly (no CUDA graph: "
                 "a launch shorter than the host's time to issue it reads as that time)",
    .ceilings = cuda_ceilings,
};
