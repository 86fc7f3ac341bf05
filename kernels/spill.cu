// A per-thread array indexed with a data-dependent index lives in local memory (thread-private,
// physically device memory behind L1/L2); the same computation written with compile-time indices
// stays in registers.
//
// Each of `threads` threads reads `iters` values x[i * threads + t] (coalesced), adds each to one
// of SLOTS accumulators chosen by the value's low mantissa bits, and writes
// out[t] = sum_s acc[s] * (s + 1).
// Analytic work for both: 4 * threads * iters bytes read, 4 * threads written,
// threads * (iters + 2 * SLOTS) FLOPs. Both give bit-identical results.
//   spill_dynamic_index  acc[idx] += v: acc (SLOTS floats = 128 bytes) goes to local memory
//   spill_free           for every s: acc[s] += (idx == s) ? v : 0: registers only, SLOTS times
//                        the compare/select work, no local memory

#define SLOTS 32

extern "C" __global__ void spill_dynamic_index(const float* __restrict__ x,
                                               float* __restrict__ out,
                                               unsigned int threads,
                                               unsigned int iters) {
    unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= threads) {
        return;
    }
    float acc[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        acc[s] = 0.0f;
    }
    for (unsigned int i = 0; i < iters; ++i) {
        float v = x[(unsigned long long)i * threads + t];
        unsigned int idx = __float_as_uint(v) & (SLOTS - 1);
        acc[idx] += v;
    }
    float r = 0.0f;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        r = fmaf(acc[s], (float)(s + 1), r);
    }
    out[t] = r;
}

extern "C" __global__ void spill_free(const float* __restrict__ x,
                                      float* __restrict__ out,
                                      unsigned int threads,
                                      unsigned int iters) {
    unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= threads) {
        return;
    }
    float acc[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        acc[s] = 0.0f;
    }
    for (unsigned int i = 0; i < iters; ++i) {
        float v = x[(unsigned long long)i * threads + t];
        unsigned int idx = __float_as_uint(v) & (SLOTS - 1);
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            acc[s] += (idx == (unsigned int)s) ? v : 0.0f;
        }
    }
    float r = 0.0f;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        r = fmaf(acc[s], (float)(s + 1), r);
    }
    out[t] = r;
}
