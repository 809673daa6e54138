/* half.h - bfloat16 and IEEE float16 to and from float on the host, rounding to nearest even
 * (NaN stays NaN, overflow goes to infinity): the same rules as the generated kernels'
 * conversions (codegen/kernel.c), so an exported half checkpoint holds what a half tensor in a
 * step would. */
#ifndef NNC_HALF_H
#define NNC_HALF_H
#include <stdint.h>
#include <string.h>

static inline float nnc_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t nnc_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float nnc_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    float f;
    if (e == 0) {
        f = (float)m * 5.9604644775390625e-8f;
        return s ? -f : f;
    }
    u = s | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13));
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t nnc_f32_to_f16(float f) {
    uint32_t u, a, s;
    memcpy(&u, &f, 4);
    s = (u >> 16) & 0x8000u;
    a = u & 0x7fffffffu;
    if (a >= 0x47800000u) return (uint16_t)(s | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (a < 0x38800000u) { /* a subnormal half: the float adder rounds at 2^-24 */
        float w;
        memcpy(&w, &a, 4);
        w += 0.5f;
        memcpy(&a, &w, 4);
        return (uint16_t)(s | (a - 0x3f000000u));
    }
    return (uint16_t)(s | ((a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13));
}
#endif
