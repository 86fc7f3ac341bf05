// Three kernels of distinct names that stand for a training step's phases in the examples and
// tests of attribution across threads: each thread runs `iters` dependent FMAs on one element,
// so a launch's length is set by `iters` and its work is known.
// Analytic work of each: 4n bytes read, 4n bytes written, 2n*iters FP32 operations.
// Header-free on purpose: NVRTC compiles it with no include path.

// One kernel per phase; the constants differ so that no two compile to the same code.
#define TRAIN_OP(NAME, MUL, ADD)                                                              \
    extern "C" __global__ void NAME(float* __restrict__ x, unsigned long long n,            \
                                    unsigned int iters) {                                    \
        unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;   \
        if (i < n) {                                                                         \
            float v = x[i];                                                                  \
            for (unsigned int k = 0; k < iters; ++k) v = fmaf(v, MUL, ADD);                  \
            x[i] = v;                                                                        \
        }                                                                                    \
    }

TRAIN_OP(forward_op, 0.999f, 0.001f)
TRAIN_OP(backward_op, 0.998f, 0.002f)
TRAIN_OP(optimizer_op, 0.997f, 0.003f)
