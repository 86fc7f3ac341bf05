// Vector addition, c[i] = a[i] + b[i] over n floats, in the four variants the suite compares.
// Analytic work for every variant: 8n bytes read, 4n bytes written, n FP32 additions.
// Header-free on purpose: NVRTC compiles it with no include path.
//
//   vector_add              one thread per element, 4-byte loads and stores (also the kernel of
//                           kernels::VectorAdd; its name is the one ledgers and tests know)
//   vadd_vec4               one thread per 4 elements, 16-byte (float4) loads and stores;
//                           the n % 4 tail elements are done by the first threads
//   vadd_scalar_grid_stride a fixed grid that strides over the array (4-byte accesses)
//   vadd_vec4_grid_stride   the same with float4 accesses
//
// The float4 variants need a, b and c 16-byte aligned (every cudarc allocation is).

extern "C" __global__ void vector_add(const float* __restrict__ a,
                                      const float* __restrict__ b,
                                      float* __restrict__ c,
                                      unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}

extern "C" __global__ void vadd_vec4(const float* __restrict__ a,
                                     const float* __restrict__ b,
                                     float* __restrict__ c,
                                     unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long n4 = n / 4;
    if (i < n4) {
        float4 x = reinterpret_cast<const float4*>(a)[i];
        float4 y = reinterpret_cast<const float4*>(b)[i];
        reinterpret_cast<float4*>(c)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    if (i < (n & 3ull)) {
        unsigned long long t = n4 * 4 + i;
        c[t] = a[t] + b[t];
    }
}

extern "C" __global__ void vadd_scalar_grid_stride(const float* __restrict__ a,
                                                   const float* __restrict__ b,
                                                   float* __restrict__ c,
                                                   unsigned long long n) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        c[i] = a[i] + b[i];
    }
}

extern "C" __global__ void vadd_vec4_grid_stride(const float* __restrict__ a,
                                                 const float* __restrict__ b,
                                                 float* __restrict__ c,
                                                 unsigned long long n) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long n4 = n / 4;
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* c4 = reinterpret_cast<float4*>(c);
    for (unsigned long long i = first; i < n4; i += stride) {
        float4 x = a4[i];
        float4 y = b4[i];
        c4[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    if (first < (n & 3ull)) {
        unsigned long long t = n4 * 4 + first;
        c[t] = a[t] + b[t];
    }
}
