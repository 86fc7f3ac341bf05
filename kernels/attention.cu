// Fused attention (forward, not causal), FP32:
//   O = softmax(Q K^T * scale) V   per (batch * head), Q, K, V, O of shape [bh][seq][D].
// One block of 4 warps computes BQ query rows against all keys, streaming K and V through shared
// memory BKV keys at a time with an online softmax (running max and sum per row), so the
// seq x seq score matrix never reaches device memory.
// Analytic work: 4 * bh * seq^2 * D FLOPs (QK^T and PV); fewest bytes 16 * bh * seq * D (Q, K, V
// read once, O written once); K and V are in fact re-read once per query tile (ceil(seq/BQ)).
//
// Parameterised at compile time by head dimension D and tile (BQ query rows, BKV keys), one
// extern "C" entry point per instantiation: attention_d<D>_q<BQ>_k<BKV>. Launch: grid
// (ceil(seq/BQ), bh), block 128, dynamic shared memory 4 * (BQ*D + BKV*(D+1) + BKV*D) bytes
// (above 48 KiB the host opts in with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
// Inside a warp, lane j scores key j of a 32-key chunk (K rows padded to D+1 floats so that the
// 32 lanes hit 32 banks), then each lane accumulates D/32 output columns.

#define ATT_WARPS 4
#define ATT_THREADS (ATT_WARPS * 32)

__device__ __forceinline__ float att_neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float att_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    }
    return v;
}

__device__ __forceinline__ float att_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

template <int D, int BQ, int BKV>
__device__ __forceinline__ void attention_impl(const float* __restrict__ q,
                                               const float* __restrict__ k,
                                               const float* __restrict__ v,
                                               float* __restrict__ o,
                                               unsigned int seq,
                                               float scale) {
    static_assert(D % 32 == 0, "head dimension must be a multiple of 32");
    static_assert(BQ % ATT_WARPS == 0, "query tile must split over the warps");
    static_assert(BKV % 32 == 0, "key tile must be whole 32-key chunks");
    constexpr int ROWS = BQ / ATT_WARPS;  // query rows per warp
    constexpr int E = D / 32;             // output columns per lane
    constexpr int KLD = D + 1;            // padded K row

    extern __shared__ float smem[];
    float* qs = smem;              // BQ x D
    float* ks = qs + BQ * D;       // BKV x (D + 1)
    float* vs = ks + BKV * KLD;    // BKV x D

    const unsigned int tid = threadIdx.x;
    const unsigned int lane = tid & 31;
    const unsigned int warp = tid >> 5;
    const unsigned long long base = (unsigned long long)blockIdx.y * seq * D;
    const unsigned int q0 = blockIdx.x * BQ;

    for (unsigned int i = tid; i < BQ * D; i += ATT_THREADS) {
        unsigned int r = i / D;
        unsigned int d = i % D;
        qs[i] = (q0 + r < seq) ? q[base + (unsigned long long)(q0 + r) * D + d] : 0.0f;
    }

    float m[ROWS];
    float l[ROWS];
    float acc[ROWS][E];
#pragma unroll
    for (int rr = 0; rr < ROWS; ++rr) {
        m[rr] = att_neg_inf();
        l[rr] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) {
            acc[rr][e] = 0.0f;
        }
    }

    for (unsigned int kv0 = 0; kv0 < seq; kv0 += BKV) {
        __syncthreads();  // the previous tile is consumed (and the Q tile is visible)
        for (unsigned int i = tid; i < BKV * D; i += ATT_THREADS) {
            unsigned int r = i / D;
            unsigned int d = i % D;
            bool ok = kv0 + r < seq;
            unsigned long long g = base + (unsigned long long)(kv0 + r) * D + d;
            ks[r * KLD + d] = ok ? k[g] : 0.0f;
            vs[r * D + d] = ok ? v[g] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int rr = 0; rr < ROWS; ++rr) {
            const float* qrow = qs + (warp * ROWS + rr) * D;
#pragma unroll 1
            for (int c = 0; c < BKV; c += 32) {
                if (kv0 + c >= seq) {
                    break;  // the same for the whole warp
                }
                const float* krow = ks + (c + lane) * KLD;
                float s = 0.0f;
#pragma unroll 16
                for (int d = 0; d < D; ++d) {
                    s = fmaf(qrow[d], krow[d], s);
                }
                s = (kv0 + c + lane < seq) ? s * scale : att_neg_inf();
                float m_new = fmaxf(m[rr], att_warp_max(s));
                float p = expf(s - m_new);
                float alpha = expf(m[rr] - m_new);
                l[rr] = l[rr] * alpha + att_warp_sum(p);
                m[rr] = m_new;
#pragma unroll
                for (int e = 0; e < E; ++e) {
                    acc[rr][e] *= alpha;
                }
#pragma unroll 8
                for (int j = 0; j < 32; ++j) {
                    float pj = __shfl_sync(0xffffffffu, p, j);
                    const float* vrow = vs + (c + j) * D;
#pragma unroll
                    for (int e = 0; e < E; ++e) {
                        acc[rr][e] = fmaf(pj, vrow[lane + 32 * e], acc[rr][e]);
                    }
                }
            }
        }
    }

#pragma unroll
    for (int rr = 0; rr < ROWS; ++rr) {
        unsigned int row = q0 + warp * ROWS + rr;
        if (row < seq) {
            float inv = 1.0f / l[rr];
#pragma unroll
            for (int e = 0; e < E; ++e) {
                o[base + (unsigned long long)row * D + lane + 32 * e] = acc[rr][e] * inv;
            }
        }
    }
}

#define ATTENTION_VARIANT(D, BQ, BKV)                                                         \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS)                                 \
        attention_d##D##_q##BQ##_k##BKV(const float* __restrict__ q,                          \
                                        const float* __restrict__ k,                          \
                                        const float* __restrict__ v,                          \
                                        float* __restrict__ o,                                \
                                        unsigned int seq,                                     \
                                        float scale) {                                        \
        attention_impl<D, BQ, BKV>(q, k, v, o, seq, scale);                                   \
    }

ATTENTION_VARIANT(64, 32, 32)
ATTENTION_VARIANT(64, 64, 32)
ATTENTION_VARIANT(64, 64, 64)
ATTENTION_VARIANT(128, 32, 32)
ATTENTION_VARIANT(128, 64, 32)
ATTENTION_VARIANT(128, 64, 64)
