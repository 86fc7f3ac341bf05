// Reduction: the sum of n floats, then a consumer that uses it
// (y[i] = x[i] / sum, a normalisation).
//
// First pass (one launch, `gridDim.x` = P blocks of RED_BLOCK threads, grid-stride over x): each
// block writes one partial sum. Reads 4n bytes, writes 4P bytes, n additions.
//   reduce_tree_partials     shared-memory tree: log2(RED_BLOCK) levels, a barrier after each
//   reduce_shuffle_partials  warp shuffles (__shfl_down_sync), one shared stage of 8 values,
//                            two barriers in all
// Second pass, its own launch: reduce_second_pass sums the P partials in one block into total[0].
// Reads 4P bytes, writes 4.
// Consumer:
//   scale_by_total     y = x / total[0] after the second pass. Reads 4n + 4, writes 4n.
//   scale_by_partials  the second pass fused into the consumer: every block sums the P partials
//                      itself (from L2) and then scales, so no second-pass launch is needed.
//                      Reads 4n bytes from DRAM (+ 4P per block, L2-resident), writes 4n.
// The second pass and the fused consumer sum the partials with the same code in the same order,
// so both give bit-identical totals.

#define RED_BLOCK 256
#define RED_WARPS (RED_BLOCK / 32)

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;
}

// Block-wide sum with shuffles; the result is valid in thread 0. Needs RED_BLOCK threads.
__device__ __forceinline__ float block_sum_shuffle(float v, float* warp_sums) {
    unsigned int lane = threadIdx.x & 31;
    unsigned int warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) {
        warp_sums[warp] = v;
    }
    __syncthreads();
    v = 0.0f;
    if (warp == 0) {
        v = lane < RED_WARPS ? warp_sums[lane] : 0.0f;
        v = warp_sum(v);
    }
    return v;
}

__device__ __forceinline__ float thread_grid_stride_sum(const float* __restrict__ x,
                                                        unsigned long long n) {
    float acc = 0.0f;
    unsigned long long stride = (unsigned long long)gridDim.x * RED_BLOCK;
    for (unsigned long long i = (unsigned long long)blockIdx.x * RED_BLOCK + threadIdx.x; i < n;
         i += stride) {
        acc += x[i];
    }
    return acc;
}

// The sum of `count` partials, computed identically by every caller; valid in thread 0.
__device__ __forceinline__ float sum_partials(const float* __restrict__ partials,
                                              unsigned int count,
                                              float* warp_sums) {
    float acc = 0.0f;
    for (unsigned int i = threadIdx.x; i < count; i += RED_BLOCK) {
        acc += partials[i];
    }
    return block_sum_shuffle(acc, warp_sums);
}

extern "C" __global__ void __launch_bounds__(RED_BLOCK)
reduce_tree_partials(const float* __restrict__ x, unsigned long long n, float* __restrict__ partials) {
    __shared__ float s[RED_BLOCK];
    s[threadIdx.x] = thread_grid_stride_sum(x, n);
    __syncthreads();
#pragma unroll
    for (unsigned int stride = RED_BLOCK / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            s[threadIdx.x] += s[threadIdx.x + stride];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = s[0];
    }
}

extern "C" __global__ void __launch_bounds__(RED_BLOCK)
reduce_shuffle_partials(const float* __restrict__ x, unsigned long long n, float* __restrict__ partials) {
    __shared__ float warp_sums[RED_WARPS];
    float v = block_sum_shuffle(thread_grid_stride_sum(x, n), warp_sums);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = v;
    }
}

extern "C" __global__ void __launch_bounds__(RED_BLOCK)
reduce_second_pass(const float* __restrict__ partials, unsigned int count, float* __restrict__ total) {
    __shared__ float warp_sums[RED_WARPS];
    float v = sum_partials(partials, count, warp_sums);
    if (threadIdx.x == 0) {
        total[0] = v;
    }
}

extern "C" __global__ void __launch_bounds__(RED_BLOCK)
scale_by_total(const float* __restrict__ x, const float* __restrict__ total, float* __restrict__ y,
               unsigned long long n) {
    float inv = 1.0f / total[0];
    unsigned long long stride = (unsigned long long)gridDim.x * RED_BLOCK;
    for (unsigned long long i = (unsigned long long)blockIdx.x * RED_BLOCK + threadIdx.x; i < n;
         i += stride) {
        y[i] = x[i] * inv;
    }
}

extern "C" __global__ void __launch_bounds__(RED_BLOCK)
scale_by_partials(const float* __restrict__ x, const float* __restrict__ partials, unsigned int count,
                  float* __restrict__ y, unsigned long long n) {
    __shared__ float warp_sums[RED_WARPS];
    __shared__ float total;
    float v = sum_partials(partials, count, warp_sums);
    if (threadIdx.x == 0) {
        total = v;
    }
    __syncthreads();
    float inv = 1.0f / total;
    unsigned long long stride = (unsigned long long)gridDim.x * RED_BLOCK;
    for (unsigned long long i = (unsigned long long)blockIdx.x * RED_BLOCK + threadIdx.x; i < n;
         i += stride) {
        y[i] = x[i] * inv;
    }
}
