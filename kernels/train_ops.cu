// Three kernels of distinct names that stand for a training step's phases in the examples and
// tests of attribution across threads: each thread runs `iters` dependent FMAs on one element,
// so a launch's length is set by `iters` and its work is known.
// Analytic work of each: 4n bytes read, 4n bytes written, 2n*iters FP32 operations.
// Header-free on purpose: NVRTC compiles it with no include path.

extern "C" __global__ void forward_op(float* __restrict__ x, unsigned long long n, unsigned int iters) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        for (unsigned int k = 0; k < iters; ++k) v = fmaf(v, 0.999f, 0.001f);
        x[i] = v;
    }
}

extern "C" __global__ void backward_op(float* __restrict__ x, unsigned long long n, unsigned int iters) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        for (unsigned int k = 0; k < iters; ++k) v = fmaf(v, 0.998f, 0.002f);
        x[i] = v;
    }
}

extern "C" __global__ void optimizer_op(float* __restrict__ x, unsigned long long n, unsigned int iters) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        for (unsigned int k = 0; k < iters; ++k) v = fmaf(v, 0.997f, 0.003f);
        x[i] = v;
    }
}
