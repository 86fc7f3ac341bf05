// GEMM: C (M x N) = A (M x K) * B (K x N), all row-major.
// Analytic work: 2*M*N*K FLOPs. Fewest bytes: A, B read once and C written once
// (4*(MK + KN + MN) for FP32; 2*(MK + KN) + 4*MN for the BF16 kernel, which writes FP32).
// Header-free: BF16 values travel as their 16-bit patterns (unsigned short) and the tensor-core
// kernel uses the PTX wmma instructions directly (NVRTC has no <mma.h> without an include path).
//
//   gemm_naive      block (16, 16), grid (ceil(N/16), ceil(M/16)): one thread per C element
//                   reading a row of A and a column of B from global memory
//   gemm_tiled      block (32, 8), grid (ceil(N/32), ceil(M/32)): 32x32 tiles of A and B staged
//                   in shared memory, each thread computes 4 elements of a 32x32 C tile;
//                   padded shape ceil to 32 in M, N and K
//   gemm_wmma_bf16  block 128 (4 warps, 2x2), grid (ceil(N/64), ceil(M/64)): a 64x64 C tile per
//                   block, 32x32 per warp as 2x2 wmma m16n16k16 BF16 fragments with FP32
//                   accumulators, K staged through shared memory 32 at a time; padded shape
//                   ceil to 64 in M and N, 32 in K

#define NAIVE_BLOCK 16
#define TT 32
#define TT_ROWS 8

extern "C" __global__ void gemm_naive(const float* __restrict__ A,
                                      const float* __restrict__ B,
                                      float* __restrict__ C,
                                      unsigned int M,
                                      unsigned int N,
                                      unsigned int K) {
    unsigned int col = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (unsigned int k = 0; k < K; ++k) {
            acc = fmaf(A[(unsigned long long)row * K + k], B[(unsigned long long)k * N + col], acc);
        }
        C[(unsigned long long)row * N + col] = acc;
    }
}

extern "C" __global__ void __launch_bounds__(TT * TT_ROWS)
gemm_tiled(const float* __restrict__ A,
           const float* __restrict__ B,
           float* __restrict__ C,
           unsigned int M,
           unsigned int N,
           unsigned int K) {
    __shared__ float As[TT][TT];
    __shared__ float Bs[TT][TT];
    const unsigned int tx = threadIdx.x;
    const unsigned int ty = threadIdx.y;
    const unsigned int row0 = blockIdx.y * TT;
    const unsigned int col = blockIdx.x * TT + tx;
    float acc[TT / TT_ROWS];
#pragma unroll
    for (int r = 0; r < TT / TT_ROWS; ++r) {
        acc[r] = 0.0f;
    }
    for (unsigned int k0 = 0; k0 < K; k0 += TT) {
#pragma unroll
        for (int r = 0; r < TT / TT_ROWS; ++r) {
            unsigned int ar = row0 + ty + r * TT_ROWS;
            unsigned int ak = k0 + tx;
            As[ty + r * TT_ROWS][tx] =
                (ar < M && ak < K) ? A[(unsigned long long)ar * K + ak] : 0.0f;
            unsigned int bk = k0 + ty + r * TT_ROWS;
            Bs[ty + r * TT_ROWS][tx] =
                (bk < K && col < N) ? B[(unsigned long long)bk * N + col] : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < TT; ++kk) {
            float b = Bs[kk][tx];
#pragma unroll
            for (int r = 0; r < TT / TT_ROWS; ++r) {
                acc[r] = fmaf(As[ty + r * TT_ROWS][kk], b, acc[r]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < TT / TT_ROWS; ++r) {
        unsigned int row = row0 + ty + r * TT_ROWS;
        if (row < M && col < N) {
            C[(unsigned long long)row * N + col] = acc[r];
        }
    }
}

// ---- tensor cores: wmma m16n16k16, BF16 inputs, FP32 accumulate ----

#define WM 64
#define WN 64
#define WK 32
#define A_LD (WK + 8)  // BF16 elements per shared row of the A tile (16-byte multiple, staggered)
#define B_LD (WN + 8)  // BF16 elements per shared row of the B tile

typedef unsigned short bf16_bits;

struct FragAB {
    unsigned int r[4];  // 8 BF16 values, two per 32-bit register
};

struct FragC {
    float x[8];
};

// The wmma PTX instructions read memory the compiler cannot see: volatile with a memory clobber
// keeps them after the barrier that publishes the tile.
__device__ __forceinline__ void wmma_load_a_row(FragAB& f, const bf16_bits* p, unsigned int ldm) {
    asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.bf16 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(f.r[0]), "=r"(f.r[1]), "=r"(f.r[2]), "=r"(f.r[3])
                 : "l"(p), "r"(ldm)
                 : "memory");
}

__device__ __forceinline__ void wmma_load_b_row(FragAB& f, const bf16_bits* p, unsigned int ldm) {
    asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.bf16 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(f.r[0]), "=r"(f.r[1]), "=r"(f.r[2]), "=r"(f.r[3])
                 : "l"(p), "r"(ldm)
                 : "memory");
}

__device__ __forceinline__ void wmma_mma_row_row(FragC& d, const FragAB& a, const FragAB& b) {
    asm volatile(
        "wmma.mma.sync.aligned.row.row.m16n16k16.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, {%12,%13,%14,%15}, "
        "{%0,%1,%2,%3,%4,%5,%6,%7};"
        : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3]), "+f"(d.x[4]), "+f"(d.x[5]),
          "+f"(d.x[6]), "+f"(d.x[7])
        : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]),
          "r"(b.r[2]), "r"(b.r[3]));
}

__device__ __forceinline__ void wmma_store_row(float* p, const FragC& d, unsigned int ldm) {
    asm volatile(
        "wmma.store.d.sync.aligned.row.m16n16k16.f32 [%0], {%1,%2,%3,%4,%5,%6,%7,%8}, %9;"
        :
        : "l"(p), "f"(d.x[0]), "f"(d.x[1]), "f"(d.x[2]), "f"(d.x[3]), "f"(d.x[4]), "f"(d.x[5]),
          "f"(d.x[6]), "f"(d.x[7]), "r"(ldm)
        : "memory");
}

extern "C" __global__ void __launch_bounds__(128)
gemm_wmma_bf16(const bf16_bits* __restrict__ A,
               const bf16_bits* __restrict__ B,
               float* __restrict__ C,
               unsigned int M,
               unsigned int N,
               unsigned int K) {
    // wmma pointers must be 32-byte aligned: every fragment offset below is a multiple of 32 B.
    __shared__ __align__(128) bf16_bits As[WM * A_LD];
    __shared__ __align__(128) bf16_bits Bs[WK * B_LD];
    __shared__ __align__(128) float Cs[4][16 * 16];
    const unsigned int tid = threadIdx.x;
    const unsigned int lane = tid & 31;
    const unsigned int warp = tid >> 5;
    const unsigned int wr = warp >> 1;  // warp row in the 2x2 warp grid
    const unsigned int wc = warp & 1;
    const unsigned int row0 = blockIdx.y * WM;
    const unsigned int col0 = blockIdx.x * WN;
    const bool vec_ok = ((K & 7u) == 0) && ((N & 7u) == 0);

    FragC acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                acc[i][j].x[e] = 0.0f;
            }
        }
    }

    for (unsigned int k0 = 0; k0 < K; k0 += WK) {
        // A tile: 64 rows x 32 k, as 256 chunks of 8 BF16 (16 bytes), two per thread.
#pragma unroll
        for (unsigned int c = tid; c < (WM * WK) / 8; c += 128) {
            unsigned int r = c / (WK / 8);
            unsigned int kc = (c % (WK / 8)) * 8;
            unsigned int gr = row0 + r;
            unsigned int gk = k0 + kc;
            bf16_bits* dst = &As[r * A_LD + kc];
            if (vec_ok && gr < M && gk + 8 <= K) {
                *reinterpret_cast<uint4*>(dst) =
                    *reinterpret_cast<const uint4*>(&A[(unsigned long long)gr * K + gk]);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    dst[e] = (gr < M && gk + e < K) ? A[(unsigned long long)gr * K + gk + e]
                                                    : (bf16_bits)0;
                }
            }
        }
        // B tile: 32 k x 64 columns, 256 chunks of 8.
#pragma unroll
        for (unsigned int c = tid; c < (WK * WN) / 8; c += 128) {
            unsigned int r = c / (WN / 8);
            unsigned int nc = (c % (WN / 8)) * 8;
            unsigned int gk = k0 + r;
            unsigned int gn = col0 + nc;
            bf16_bits* dst = &Bs[r * B_LD + nc];
            if (vec_ok && gk < K && gn + 8 <= N) {
                *reinterpret_cast<uint4*>(dst) =
                    *reinterpret_cast<const uint4*>(&B[(unsigned long long)gk * N + gn]);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    dst[e] = (gk < K && gn + e < N) ? B[(unsigned long long)gk * N + gn + e]
                                                    : (bf16_bits)0;
                }
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < WK; kk += 16) {
            FragAB a[2];
            FragAB b[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                wmma_load_a_row(a[i], &As[(wr * 32 + i * 16) * A_LD + kk], A_LD);
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                wmma_load_b_row(b[j], &Bs[kk * B_LD + wc * 32 + j * 16], B_LD);
            }
#pragma unroll
            for (int i = 0; i < 2; ++i) {
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    wmma_mma_row_row(acc[i][j], a[i], b[j]);
                }
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            unsigned int r = row0 + wr * 32 + i * 16;
            unsigned int c = col0 + wc * 32 + j * 16;
            if (r + 16 <= M && c + 16 <= N && (N & 3u) == 0) {
                wmma_store_row(&C[(unsigned long long)r * N + c], acc[i][j], N);
            } else {
                // Edge fragment: through the warp's staging tile, element by element.
                wmma_store_row(&Cs[warp][0], acc[i][j], 16);
                __syncwarp();
                for (unsigned int e = lane; e < 256; e += 32) {
                    unsigned int rr = r + e / 16;
                    unsigned int cc = c + e % 16;
                    if (rr < M && cc < N) {
                        C[(unsigned long long)rr * N + cc] = Cs[warp][e];
                    }
                }
                __syncwarp();
            }
        }
    }
}
