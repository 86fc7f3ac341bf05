// Row softmax of a rows x cols FP32 matrix: y = exp(x - max) / sum.
//
// As a framework composes it: five kernels, each reading and writing device memory
// (n = rows * cols; bytes per kernel, FLOPs counting exp as one):
//   softmax_row_max   grid rows, block 256: reads 4n, writes 4*rows            n ops
//   softmax_subtract  grid ceil(n/256):     reads 4n + 4*rows, writes 4n       n
//   softmax_exp       grid ceil(n/256):     reads 4n, writes 4n                n
//   softmax_row_sum   grid rows, block 256: reads 4n, writes 4*rows            n
//   softmax_divide    grid ceil(n/256):     reads 4n + 4*rows, writes 4n       n
// in all 8 passes over the matrix. Fused, one kernel:
//   softmax_fused     grid rows, block 256, dynamic shared memory 4*cols (the row stays on
//                     chip): reads 4n, writes 4n, 2 passes                     5n
// The row reductions of both use the same thread-to-element mapping and the same block
// reduction, so the fused output is bit-identical to the composition's.

#define SM_BLOCK 256
#define SM_WARPS (SM_BLOCK / 32)

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float block_max_all(float v, float* scratch) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    }
    if ((threadIdx.x & 31) == 0) {
        scratch[threadIdx.x >> 5] = v;
    }
    __syncthreads();
    float r = scratch[0];
#pragma unroll
    for (int w = 1; w < SM_WARPS; ++w) {
        r = fmaxf(r, scratch[w]);
    }
    __syncthreads();  // scratch may be reused
    return r;
}

__device__ __forceinline__ float block_sum_all(float v, float* scratch) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    if ((threadIdx.x & 31) == 0) {
        scratch[threadIdx.x >> 5] = v;
    }
    __syncthreads();
    float r = scratch[0];
#pragma unroll
    for (int w = 1; w < SM_WARPS; ++w) {
        r += scratch[w];
    }
    __syncthreads();
    return r;
}

extern "C" __global__ void __launch_bounds__(SM_BLOCK)
softmax_row_max(const float* __restrict__ x, float* __restrict__ rowmax, unsigned int cols) {
    __shared__ float scratch[SM_WARPS];
    const float* xr = x + (unsigned long long)blockIdx.x * cols;
    float m = neg_inf();
    for (unsigned int c = threadIdx.x; c < cols; c += SM_BLOCK) {
        m = fmaxf(m, xr[c]);
    }
    m = block_max_all(m, scratch);
    if (threadIdx.x == 0) {
        rowmax[blockIdx.x] = m;
    }
}

extern "C" __global__ void softmax_subtract(const float* __restrict__ x,
                                            const float* __restrict__ rowmax,
                                            float* __restrict__ y,
                                            unsigned long long n,
                                            unsigned int cols) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] - rowmax[i / cols];
    }
}

extern "C" __global__ void softmax_exp(const float* __restrict__ x,
                                       float* __restrict__ y,
                                       unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = expf(x[i]);
    }
}

extern "C" __global__ void __launch_bounds__(SM_BLOCK)
softmax_row_sum(const float* __restrict__ x, float* __restrict__ rowsum, unsigned int cols) {
    __shared__ float scratch[SM_WARPS];
    const float* xr = x + (unsigned long long)blockIdx.x * cols;
    float s = 0.0f;
    for (unsigned int c = threadIdx.x; c < cols; c += SM_BLOCK) {
        s += xr[c];
    }
    s = block_sum_all(s, scratch);
    if (threadIdx.x == 0) {
        rowsum[blockIdx.x] = s;
    }
}

extern "C" __global__ void softmax_divide(const float* __restrict__ x,
                                          const float* __restrict__ rowsum,
                                          float* __restrict__ y,
                                          unsigned long long n,
                                          unsigned int cols) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] / rowsum[i / cols];
    }
}

extern "C" __global__ void __launch_bounds__(SM_BLOCK)
softmax_fused(const float* __restrict__ x, float* __restrict__ y, unsigned int cols) {
    extern __shared__ float row[];  // cols floats: the row read once from DRAM
    __shared__ float scratch[SM_WARPS];
    const float* xr = x + (unsigned long long)blockIdx.x * cols;
    float* yr = y + (unsigned long long)blockIdx.x * cols;
    float m = neg_inf();
    for (unsigned int c = threadIdx.x; c < cols; c += SM_BLOCK) {
        float v = xr[c];
        row[c] = v;
        m = fmaxf(m, v);
    }
    m = block_max_all(m, scratch);
    float s = 0.0f;
    for (unsigned int c = threadIdx.x; c < cols; c += SM_BLOCK) {
        float t = row[c] - m;
        float e = expf(t);
        row[c] = e;
        s += e;
    }
    s = block_sum_all(s, scratch);
    for (unsigned int c = threadIdx.x; c < cols; c += SM_BLOCK) {
        yr[c] = row[c] / s;
    }
}
