/* emu.h - what the emulated cuBLAS (cublas.c) uses from the emulated driver (cuda.c). */
#ifndef NNC_EMU_H
#define NNC_EMU_H

#include <stddef.h>

#include <cuda.h>

/* The marker nvrtc.c appends to a cubin, followed by a little-endian uint64 length and the
 * CUDA source. */
#define NNC_EMU_MARKER "NNCEMU01"

/* Runs fn(ctx) when the stream reaches it (ctx is copied, ctx_bytes of it); under capture the
 * call is recorded into the graph instead.  CUDA_SUCCESS or the sticky/capture error. */
CUresult nnc_emu_enqueue_host(CUstream s, void (*fn)(void *ctx), const void *ctx, size_t ctx_bytes);
/* 0 if [p, p + bytes) lies in one device allocation; else prints "what" and the offence. */
int nnc_emu_check_range(const void *p, size_t bytes, const char *what);
/* Whether the stream is being captured (a graph is recording its work). */
int nnc_emu_capturing(CUstream s);
/* A line of NNC_EMU_TRACE (when set): the event, then the stream's. */
void nnc_emu_trace(CUstream s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
