/* emu_kernel.h - the CUDA environment for kernels the emulator compiles for the host.
 *
 * Force-included (-include) in front of the CUDA source NVRTC compiled, so the same text builds
 * as host C++.  Like NVRTC's environment it includes no standard header (nnc's kernels typedef
 * int64_t themselves) and declares the libm functions it needs itself.  Builtin variables,
 * barriers and shuffles go through nnc_emu_rt, which the emulated driver (cuda.c) fills in after
 * dlopen: `cur` points at the running fiber's variables, `barrier` and `shfl` switch back to the
 * scheduler until the block (or the warp) arrives.  Barriers are identified by source line.
 * __shared__ variables are static and live in section nnc_emu_shared, whose bounds
 * nnc_emu_shared_bounds() reports, so the driver can refill them with 0xFF at every block. */
#ifndef NNC_EMU_KERNEL_H
#define NNC_EMU_KERNEL_H

struct nnc_emu_dim3 {
    unsigned x, y, z;
};
typedef nnc_emu_dim3 dim3;
struct nnc_emu_vars {
    nnc_emu_dim3 tid, bid, bdim, gdim;
    unsigned lane;   /* linear thread index % 32 */
};
struct nnc_emu_rt_t {
    nnc_emu_vars *cur;
    void (*barrier)(int line, int warp_only, unsigned mask);
    unsigned long long (*shfl)(int line, unsigned mask, unsigned long long v, int src_lane);
    void (*misaligned)(const void *p, unsigned bytes, int write); /* fails the launch */
};
extern "C" {
nnc_emu_rt_t nnc_emu_rt;
extern char __start_nnc_emu_shared[] __attribute__((weak));
extern char __stop_nnc_emu_shared[] __attribute__((weak));
void nnc_emu_shared_bounds(char **b, char **e) {
    *b = __start_nnc_emu_shared;
    *e = __stop_nnc_emu_shared;
}
}

#define __global__
#define __device__ static
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static __attribute__((section("nnc_emu_shared")))
#define threadIdx (nnc_emu_rt.cur->tid)
#define blockIdx (nnc_emu_rt.cur->bid)
#define blockDim (nnc_emu_rt.cur->bdim)
#define gridDim (nnc_emu_rt.cur->gdim)
#define warpSize 32
#define __syncthreads() nnc_emu_rt.barrier(__LINE__, 0, 0xffffffffu)
#define __syncwarp(...) nnc_emu_rt.barrier(__LINE__, 1, nnc_emu_mask0(__VA_ARGS__))
static inline unsigned nnc_emu_mask0(unsigned m = 0xffffffffu) { return m; }

/* ---- shuffles: the source lane is computed here, the exchange in the driver ---- */
template <class T> static inline T nnc_emu_shfl(int line, unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
    unsigned long long bits = 0;
    __builtin_memcpy(&bits, &v, sizeof v);
    bits = nnc_emu_rt.shfl(line, mask, bits, src);
    T r;
    __builtin_memcpy(&r, &bits, sizeof r);
    return r;
}
template <class T> static inline T nnc_emu_shfl_idx(int line, unsigned mask, T v, int src, int w = 32) {
    int lane = (int)nnc_emu_rt.cur->lane;
    return nnc_emu_shfl(line, mask, v, lane / w * w + (src % w));
}
template <class T> static inline T nnc_emu_shfl_xor(int line, unsigned mask, T v, int o, int w = 32) {
    int lane = (int)nnc_emu_rt.cur->lane, s = lane ^ o;
    return nnc_emu_shfl(line, mask, v, s / w == lane / w ? s : lane);
}
template <class T> static inline T nnc_emu_shfl_down(int line, unsigned mask, T v, unsigned d, int w = 32) {
    int lane = (int)nnc_emu_rt.cur->lane;
    return nnc_emu_shfl(line, mask, v, lane % w + (int)d < w ? lane + (int)d : lane);
}
template <class T> static inline T nnc_emu_shfl_up(int line, unsigned mask, T v, unsigned d, int w = 32) {
    int lane = (int)nnc_emu_rt.cur->lane;
    return nnc_emu_shfl(line, mask, v, lane % w >= (int)d ? lane - (int)d : lane);
}
#define __shfl_sync(...) nnc_emu_shfl_idx(__LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) nnc_emu_shfl_xor(__LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) nnc_emu_shfl_down(__LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) nnc_emu_shfl_up(__LINE__, __VA_ARGS__)

/* ---- atomics: fibers of a launch run on one host thread, one at a time ---- */
template <class T> static inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <class T> static inline T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }
template <class T> static inline T atomicMax(T *p, T v) { T o = *p; *p = o > v ? o : v; return o; }
template <class T> static inline T atomicMin(T *p, T v) { T o = *p; *p = o < v ? o : v; return o; }
template <class T> static inline T atomicCAS(T *p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }

/* A global memory fence orders one thread's writes for the others; blocks run one after
 * another here, so it only has to stop the compiler moving accesses across it. */
#define __threadfence() __atomic_thread_fence(__ATOMIC_SEQ_CST)

/* Loads that bypass L1 (ld.global.cg): memory is one here. */
template <class T> static inline T __ldcg(const T *p) { return *p; }

/* ---- vector types: CUDA's sizes and alignments.  A GPU faults on a vector access through a
 * pointer not aligned to its size (CUDA_ERROR_MISALIGNED_ADDRESS); here the copy that loads one
 * from memory, or the assignment that stores one, checks the address and fails the launch. ---- */
static inline void nnc_emu_aligned(const void *p, unsigned bytes, int write) {
    if ((unsigned long)p % bytes) nnc_emu_rt.misaligned(p, bytes, write);
}
#define NNC_EMU_VEC2(V, T) \
    struct alignas(2 * sizeof(T)) V { \
        T x, y; \
        V() = default; \
        V(T a, T b) : x(a), y(b) {} \
        V(const V &o) { \
            nnc_emu_aligned(&o, sizeof(V), 0); \
            x = o.x; \
            y = o.y; \
        } \
        V &operator=(const V &o) { \
            nnc_emu_aligned(this, sizeof(V), 1); \
            x = o.x; \
            y = o.y; \
            return *this; \
        } \
    }; \
    static inline V make_##V(T a, T b) { return V(a, b); }
#define NNC_EMU_VEC4(V, T) \
    struct alignas(4 * sizeof(T)) V { \
        T x, y, z, w; \
        V() = default; \
        V(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {} \
        V(const V &o) { \
            nnc_emu_aligned(&o, sizeof(V), 0); \
            x = o.x; \
            y = o.y; \
            z = o.z; \
            w = o.w; \
        } \
        V &operator=(const V &o) { \
            nnc_emu_aligned(this, sizeof(V), 1); \
            x = o.x; \
            y = o.y; \
            z = o.z; \
            w = o.w; \
            return *this; \
        } \
    }; \
    static inline V make_##V(T a, T b, T c, T d) { return V(a, b, c, d); }
NNC_EMU_VEC2(float2, float)
NNC_EMU_VEC4(float4, float)
NNC_EMU_VEC2(double2, double)
NNC_EMU_VEC2(int2, int)
NNC_EMU_VEC4(int4, int)
NNC_EMU_VEC2(ushort2, unsigned short)
NNC_EMU_VEC4(ushort4, unsigned short)
NNC_EMU_VEC2(uint2, unsigned int)
NNC_EMU_VEC4(uint4, unsigned int)

/* ---- bit casts ---- */
template <class D, class S> static inline D nnc_emu_bits(S s) {
    static_assert(sizeof(D) == sizeof(S), "bit cast between sizes");
    D d;
    __builtin_memcpy(&d, &s, sizeof d);
    return d;
}
static inline double __longlong_as_double(long long x) { return nnc_emu_bits<double>(x); }
static inline long long __double_as_longlong(double x) { return nnc_emu_bits<long long>(x); }
static inline float __int_as_float(int x) { return nnc_emu_bits<float>(x); }
static inline int __float_as_int(float x) { return nnc_emu_bits<int>(x); }

/* the running thread's linear index in its block */
static inline unsigned nnc_emu_tid(void) {
    const nnc_emu_vars *v = nnc_emu_rt.cur;
    return v->tid.x + v->bdim.x * (v->tid.y + v->bdim.y * v->tid.z);
}

/* ---- tensor cores: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 ----
 * A warp's D = A B + C for A 16x16 (row), B 16x8 (col), bf16, C and D f32, each lane holding
 * the fragments PTX's ISA gives it (g = lane / 4, t = lane % 4; a register's low half is the
 * lower index): a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9],
 * a3 = A[g+8][2t+8, 2t+9]; b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]; c0, c1 = C[g][2t, 2t+1],
 * c2, c3 = C[g+8][2t, 2t+1].  The lanes leave their fragments in the warp's slot and wait for
 * each other (a warp barrier, so a divergent call fails the launch); each then sums its four
 * elements' 16 terms in k order in f32 (bf16 products are exact in f32), and the warp waits
 * again before the slot is reused.  A GPU's tensor cores add the terms in an order of their own:
 * the emulator checks where each element goes, not the last bit. */
static unsigned nnc_emu_mma_slot[32][32][6]; /* [warp of the block][lane][a0..a3, b0, b1] */
static inline float nnc_emu_bf16_half(unsigned r, int hi) {
    return nnc_emu_bits<float>((hi ? r >> 16 : r & 0xffffu) << 16);
}
static inline void nnc_emu_mma_bf16(float *c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
    const unsigned tid = nnc_emu_tid(), w = tid / 32, lane = tid % 32;
    unsigned *mine = nnc_emu_mma_slot[w][lane];
    mine[0] = a0, mine[1] = a1, mine[2] = a2, mine[3] = a3, mine[4] = b0, mine[5] = b1;
    nnc_emu_rt.barrier(__LINE__, 1, 0xffffffffu);
    const unsigned g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++) {
        const unsigned row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
        float acc = c[i];
        for (unsigned k = 0; k < 16; k++) {
            const unsigned *ra = nnc_emu_mma_slot[w][row % 8 * 4 + k % 8 / 2];
            const unsigned *rb = nnc_emu_mma_slot[w][col * 4 + k % 8 / 2];
            const float x = nnc_emu_bf16_half(ra[(row >= 8) + 2 * (k >= 8)], k & 1);
            const float y = nnc_emu_bf16_half(rb[4 + (k >= 8)], k & 1);
            acc = __builtin_fmaf(x, y, acc);
        }
        c[i] = acc;
    }
    nnc_emu_rt.barrier(__LINE__, 1, 0xffffffffu);
}

/* ---- ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 ----
 * Four 8x8 matrices of 16-bit elements: lane 8i + j gives the address of matrix i's row j (16
 * bytes, 16-byte aligned), and lane l receives in register i matrix i's row l / 4, columns
 * 2 (l % 4) and 2 (l % 4) + 1 (a word as it lies in memory), or with .trans its column l / 4,
 * rows 2 (l % 4) and 2 (l % 4) + 1 (the lower row in the low half).  Lanes leave their
 * addresses in the warp's slot and meet at a warp barrier, as for mma.sync. */
static const unsigned short *nnc_emu_ldsm_slot[32][32];
static inline void nnc_emu_ldsm4(unsigned *r, const unsigned *row, int trans) {
    const unsigned tid = nnc_emu_tid(), w = tid / 32, lane = tid % 32;
    nnc_emu_aligned(row, 16, 0);
    nnc_emu_ldsm_slot[w][lane] = (const unsigned short *)row;
    nnc_emu_rt.barrier(__LINE__, 1, 0xffffffffu);
    const unsigned g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++) {
        const unsigned short *const *m = nnc_emu_ldsm_slot[w] + 8 * i;
        r[i] = trans ? m[2 * t][g] | (unsigned)m[2 * t + 1][g] << 16 : m[g][2 * t] | (unsigned)m[g][2 * t + 1] << 16;
    }
    nnc_emu_rt.barrier(__LINE__, 1, 0xffffffffu);
}

/* ---- cp.async (sm_80): copies to shared memory that land only at cp.async.wait_group ----
 * A thread's copies join its open group; commit_group closes it; wait_group n writes every copy
 * of the groups but the n most recent committed ones.  The bytes are read when the copy is
 * issued and written when waited for, so a kernel that reads its shared tile before waiting for
 * it reads what was there before (the driver fills shared memory with 0xFF at every block). */
enum { NNC_EMU_CP_MAX = 64 };
static struct nnc_emu_cp {
    void *dst;
    unsigned char b[16];
    unsigned n, group;
} nnc_emu_cpq[1024][NNC_EMU_CP_MAX];
static unsigned nnc_emu_cpn[1024], nnc_emu_cpg[1024];
/* copies n bytes (4 or 16) from src to dst, or zeros where !ok (src is not read) */
static inline void nnc_emu_cp_async(void *dst, const void *src, unsigned n, bool ok) {
    const unsigned t = nnc_emu_tid();
    nnc_emu_aligned(dst, n, 1);
    if (ok) nnc_emu_aligned(src, n, 0);
    if (nnc_emu_cpn[t] == NNC_EMU_CP_MAX) __builtin_trap(); /* more copies in flight than a kernel should have */
    nnc_emu_cp *c = &nnc_emu_cpq[t][nnc_emu_cpn[t]++];
    c->dst = dst, c->n = n, c->group = nnc_emu_cpg[t];
    for (unsigned i = 0; i < n; i++) c->b[i] = ok ? ((const unsigned char *)src)[i] : 0;
}
static inline void nnc_emu_cp_commit(void) { nnc_emu_cpg[nnc_emu_tid()]++; }
static inline void nnc_emu_cp_wait(unsigned pending) {
    const unsigned t = nnc_emu_tid(), done = nnc_emu_cpg[t] - pending; /* groups below this one land */
    unsigned k = 0;
    for (unsigned i = 0; i < nnc_emu_cpn[t]; i++) {
        nnc_emu_cp *c = &nnc_emu_cpq[t][i];
        if ((int)(c->group - done) < 0)
            for (unsigned j = 0; j < c->n; j++) ((unsigned char *)c->dst)[j] = c->b[j];
        else nnc_emu_cpq[t][k++] = *c;
    }
    nnc_emu_cpn[t] = k;
}

/* ---- math (CUDA has the float overloads of the double names too) ---- */
extern "C" {
double exp(double); double log(double); double sqrt(double); double tanh(double); double pow(double, double);
double fabs(double); double fmax(double, double); double fmin(double, double); double erf(double);
double log1p(double);
double expm1(double);
double sin(double);
double cos(double);
double floor(double);
double ceil(double);
double rint(double);
double trunc(double);
double fmod(double, double);
double tan(double);
double asin(double);
double acos(double);
double atan(double);
double sinh(double);
double cosh(double);
double asinh(double);
double acosh(double);
double atanh(double);
float expf(float); float logf(float); float sqrtf(float); float tanhf(float); float powf(float, float);
float fabsf(float); float fmaxf(float, float); float fminf(float, float); float erff(float);
float log1pf(float);
float expm1f(float);
float sinf(float);
float cosf(float);
float floorf(float);
float ceilf(float);
float rintf(float);
float truncf(float);
float fmodf(float, float);
float tanf(float);
float asinf(float);
float acosf(float);
float atanf(float);
float sinhf(float);
float coshf(float);
float asinhf(float);
float acoshf(float);
float atanhf(float);
}
static inline float exp(float x) { return expf(x); }
static inline float log(float x) { return logf(x); }
static inline float sqrt(float x) { return sqrtf(x); }
static inline float tanh(float x) { return tanhf(x); }
static inline float pow(float x, float y) { return powf(x, y); }
static inline float fabs(float x) { return fabsf(x); }
static inline float fmax(float x, float y) { return fmaxf(x, y); }
static inline float fmin(float x, float y) { return fminf(x, y); }
static inline float erf(float x) { return erff(x); }
static inline float log1p(float x) { return log1pf(x); }
static inline float expm1(float x) { return expm1f(x); }
static inline float sin(float x) { return sinf(x); }
static inline float cos(float x) { return cosf(x); }
static inline float floor(float x) { return floorf(x); }
static inline float ceil(float x) { return ceilf(x); }
static inline float rint(float x) { return rintf(x); }
static inline float trunc(float x) { return truncf(x); }
static inline float fmod(float x, float y) { return fmodf(x, y); }
static inline float tan(float x) { return tanf(x); }
static inline float asin(float x) { return asinf(x); }
static inline float acos(float x) { return acosf(x); }
static inline float atan(float x) { return atanf(x); }
static inline float sinh(float x) { return sinhf(x); }
static inline float cosh(float x) { return coshf(x); }
static inline float asinh(float x) { return asinhf(x); }
static inline float acosh(float x) { return acoshf(x); }
static inline float atanh(float x) { return atanhf(x); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __expf(float x) { return expf(x); }
static inline float __logf(float x) { return logf(x); }

#endif
