/* cuda_profile.c - the CUDA target's side of --profile: every launch of a call between two
 * events, and the device's ceilings.
 *
 * A timed call (cuda_run_timed) goes through the runtime as any call does, but the device's run
 * launches it directly rather than as a CUDA graph (backend_cuda.c: launch_entry), recording an
 * event on the launch's stream before and after each launch (cuda_issue.c); once the call's
 * streams are synchronized, each pair's elapsed time is that launch's.  Where the GPU runs ahead
 * of nothing (a launch shorter than the host's few microseconds to issue the next), the time
 * between the events includes that wait, so tiny launches read as the issue time, as in any
 * event-based timer; a graph hides that cost, which is why the report's step line is the
 * unprofiled step's.
 *
 * Ceilings: the memory's bandwidth measured by a device-to-device copy (bytes read + written per
 * second, the best of four after a warm-up), which is what the percentages use, and the nominal
 * one from the memory clock and bus width; arithmetic is nominal only: SMs x clock x the dense
 * FLOPs per SM and clock of the architecture's data-center part (cuBLAS's products can come
 * close; sustained clocks under load are lower than the attribute's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_model.h"

bool cuda_profile_mark(CudaModel *m, const Entry *e, int k, bool end) {
    CUevent *ev = m->timing_ev[e->kind];
    if (!ev) ev = m->timing_ev[e->kind] = xcalloc(2 * (size_t)e->nlaunch + 1, sizeof *ev);
    CUevent *at = &ev[2 * k + end];
    if (!*at) CU(cu.EventCreate(at, CU_EVENT_DEFAULT));
    CU(cu.EventRecord(*at, m->cur->st));
    return true;
}

bool cuda_profile_read(CudaModel *m, const Entry *e) {
    CUevent *ev = m->timing_ev[e->kind];
    for (int k = 0; k < e->nlaunch; k++) {
        float ms = 0;
        if (!ev[2 * k]) { /* a later launch of a run: its time is in its first launch's */
            m->timing[k] = 0;
            continue;
        }
        CU(cu.EventElapsedTime(&ms, ev[2 * k], ev[2 * k + 1]));
        m->timing[k] = 1e-3 * (double)ms;
    }
    return true;
}

void cuda_profile_free(CudaModel *m) {
    for (int k = 0; k < ENTRY_COUNT; k++) {
        for (int i = 0; m->timing_ev[k] && i < 2 * m->p->entry[k].nlaunch; i++)
            if (m->timing_ev[k][i]) cu.EventDestroy(m->timing_ev[k][i]);
        free(m->timing_ev[k]);
        m->timing_ev[k] = NULL;
    }
}

int cuda_run_timed(LoadedModel *lm, const Program *p, int entry, const void *const *in, int64_t batch, double *t) {
    CudaModel *m = lm->handle;
    (void)p;
    m->timing = t;
    int rc = lm->abi->run(lm->m, entry, in, batch);
    m->timing = NULL;
    return rc;
}

/* ---- ceilings ---------------------------------------------------------------------------------- */

/* Dense FLOPs per SM and clock of each architecture's data-center part: f32 on the CUDA cores,
 * f64 as cuBLAS's DGEMM gets it (tensor cores from sm_80 on), tf32 and half on tensor cores
 * (0: none; cuBLAS then computes TF32 requests in f32). */
static const struct {
    int cc;
    double f32, f64, tf32, half;
    const char *part;
} sm_rates[] = {
    {70, 128, 64, 0, 1024, "V100"},      {75, 128, 4, 0, 1024, "T4"},        {80, 128, 128, 1024, 2048, "A100"},
    {86, 256, 4, 512, 1024, "A10/A40"},  {89, 256, 4, 512, 1024, "L4/L40S"}, {90, 256, 256, 2048, 4096, "H100/H200"},
    {100, 256, 128, 4096, 8192, "B200"},
};

static int attr(CUdevice d, CUdevice_attribute a) {
    int v = 0;
    return cu.DeviceGetAttribute(&v, a, d) == CUDA_SUCCESS ? v : 0;
}

/* GB/s of a device-to-device copy of `bytes` on GPU g, the best of four after one to warm up;
 * 0 when the memory or the events cannot be had (the model may fill the device). */
static double copy_gbs(Gpu *g, size_t bytes) {
    CUdeviceptr a = 0, b = 0;
    CUevent e0 = NULL, e1 = NULL;
    double best = 0;
    bool ok = cu.CtxSetCurrent(g->ctx) == CUDA_SUCCESS && cu.MemAlloc(&a, bytes) == CUDA_SUCCESS &&
        cu.MemAlloc(&b, bytes) == CUDA_SUCCESS && cu.EventCreate(&e0, CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
        cu.EventCreate(&e1, CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
        cu.MemsetD32Async(a, 0, bytes / 4, g->st) == CUDA_SUCCESS;
    for (int r = 0; ok && r < 5; r++) {
        float ms = 0;
        ok = cu.EventRecord(e0, g->st) == CUDA_SUCCESS && cu.MemcpyDtoDAsync(b, a, bytes, g->st) == CUDA_SUCCESS &&
            cu.EventRecord(e1, g->st) == CUDA_SUCCESS && cu.StreamSynchronize(g->st) == CUDA_SUCCESS &&
            cu.EventElapsedTime(&ms, e0, e1) == CUDA_SUCCESS;
        double gbs = ms > 0 ? 2.0 * (double)bytes / (1e-3 * (double)ms) / 1e9 : 0;
        if (ok && r > 0 && gbs > best) best = gbs;
    }
    cu.StreamSynchronize(g->st);
    if (e0) cu.EventDestroy(e0);
    if (e1) cu.EventDestroy(e1);
    if (a) cu.MemFree(a);
    if (b) cu.MemFree(b);
    return best;
}

/* The nominal FLOP rates of device d (GFLOP/s) into out->gflops; its description into `how`. */
static void flop_ceilings(CUdevice d, int cc, DeviceCeilings *out, char *how, size_t n) {
    int sms = attr(d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), khz = attr(d, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    double per = (double)sms * (double)khz * 1e3 / 1e9; /* SM-clocks per ns: GFLOP/s per FLOP/clock/SM */
    for (size_t i = 0; i < NNC_COUNTOF(sm_rates); i++) {
        if (sm_rates[i].cc != cc || !per) continue;
        out->gflops[FLOP_F32] = per * sm_rates[i].f32;
        out->gflops[FLOP_F64] = per * sm_rates[i].f64;
        out->gflops[FLOP_TF32] = per * (sm_rates[i].tf32 ? sm_rates[i].tf32 : sm_rates[i].f32);
        out->gflops[FLOP_HALF] = per * sm_rates[i].half;
        snprintf(how, n,
                 "f32 %.0f, tf32 %.0f, bf16/f16 %.0f, f64 %.0f GFLOP/s nominal (%d SMs at %d MHz times the dense "
                 "FLOPs per SM and clock of sm_%d's data-center part, %s; clocks under load are lower)",
                 out->gflops[FLOP_F32], out->gflops[FLOP_TF32], out->gflops[FLOP_HALF], out->gflops[FLOP_F64], sms,
                 khz / 1000, cc, sm_rates[i].part);
        return;
    }
    snprintf(how, n, "no FLOP ceilings (%s)",
             per ? "an architecture nnc has no rates for" : "the device gives no clock");
}

void cuda_ceilings(LoadedModel *lm, const BuildOpts *o, DeviceCeilings *out) {
    CudaModel *m = lm->handle;
    Gpu *g = m->cur;
    (void)o;
    *out = (DeviceCeilings){0};
    char name[96] = "?", flops[320];
    cu.DeviceGetName(name, (int)sizeof name, g->dev);
    int cc = 10 * attr(g->dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) +
        attr(g->dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    int sms = attr(g->dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    snprintf(out->device, sizeof out->device, "%s (sm_%d, %d SM%s)", name, cc, sms, sms == 1 ? "" : "s");
    int mem_khz = attr(g->dev, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    int bus = attr(g->dev, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    double nominal = 2.0 * (double)mem_khz * 1e3 * (double)bus / 8 / 1e9; /* double data rate */
    double measured = copy_gbs(g, (size_t)128 << 20);
    cu.CtxSetCurrent(m->cur->ctx);
    out->gbs = measured ? measured : nominal;
    flop_ceilings(g->dev, cc, out, flops, sizeof flops);
    char nom[160] = "no nominal one (the device gives no memory clock)";
    if (nominal) snprintf(nom, sizeof nom, "nominal %.0f GB/s (%d MHz, %d-bit bus)", nominal, mem_khz / 1000, bus);
    if (measured)
        snprintf(out->how, sizeof out->how, "memory %.0f GB/s measured (a 128 MiB device-to-device copy), %s; %s",
                 measured, nom, flops);
    else snprintf(out->how, sizeof out->how, "memory: no copy could be measured, %s; %s", nom, flops);
}
