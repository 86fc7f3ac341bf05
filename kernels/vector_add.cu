// c[i] = a[i] + b[i] for i < n: reads 8n bytes, writes 4n bytes, n FP32 additions.
// One thread per element; the book's ch. 14 exercise 1 (bandwidth-bound once n is large).
extern "C" __global__ void vector_add(const float* __restrict__ a,
                                      const float* __restrict__ b,
                                      float* __restrict__ c,
                                      unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}
