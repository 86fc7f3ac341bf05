// Kernels whose warp stall character is known, for checking PC sampling.
//
// pointer_chase: every load's address is the previous load's value, over a random cycle larger
// than L2, so each warp waits on DRAM for every step: long-scoreboard stalls dominate, at the
// line of the dependent load.
//
// fma_chain: one dependent chain of fused multiply-adds per thread, no memory traffic in the
// loop. With one warp per scheduler, each FMA waits for the previous one's fixed latency: `wait`
// stalls dominate, and memory stalls are absent.

extern "C" __global__ void pointer_chase(const unsigned int* __restrict__ next,
                                         unsigned int* __restrict__ out,
                                         unsigned int steps) {
    unsigned int p = blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned int i = 0; i < steps; ++i) {
        p = next[p];  // the dependent load
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = p;
}

extern "C" __global__ void fma_chain(float* __restrict__ out, unsigned int iters) {
    float x = 1.0f + threadIdx.x * 1e-6f;
    const float a = 0.999999f, b = 1e-7f;
    for (unsigned int i = 0; i < iters; ++i) {
        x = fmaf(x, a, b);  // the dependent FMA
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}
