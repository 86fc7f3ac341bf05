// Matrix transpose: out (cols x rows) = in (rows x cols)^T, row-major FP32.
// Analytic work for every variant: 4*rows*cols bytes read, 4*rows*cols written, no FLOPs.
//
// All three have the same launch structure: grid (ceil(cols/32), ceil(rows/32)), block (32, 8);
// each block moves one 32x32 tile, each thread 4 elements. They differ only in how the tile
// reaches its destination:
//   transpose_direct   reads rows (coalesced), writes columns straight to global memory: each
//                      warp store touches 32 different rows (32 sectors for 128 useful bytes)
//   transpose_tiled    stages the tile in shared memory so that both global reads and writes
//                      are coalesced; the column read of tile[32][32] hits one bank 32 times
//   transpose_padded   the same with tile[32][33]: the padding column spreads a column over all
//                      32 banks (no conflicts)

#define TILE 32
#define BLOCK_ROWS 8

extern "C" __global__ void transpose_direct(const float* __restrict__ in,
                                            float* __restrict__ out,
                                            unsigned int rows,
                                            unsigned int cols) {
    unsigned int x = blockIdx.x * TILE + threadIdx.x;  // column in `in`
    unsigned int y = blockIdx.y * TILE + threadIdx.y;  // row in `in`
#pragma unroll
    for (unsigned int j = 0; j < TILE; j += BLOCK_ROWS) {
        if (x < cols && y + j < rows) {
            out[(unsigned long long)x * rows + (y + j)] = in[(unsigned long long)(y + j) * cols + x];
        }
    }
}

extern "C" __global__ void transpose_tiled(const float* __restrict__ in,
                                           float* __restrict__ out,
                                           unsigned int rows,
                                           unsigned int cols) {
    __shared__ float tile[TILE][TILE];
    unsigned int x = blockIdx.x * TILE + threadIdx.x;
    unsigned int y = blockIdx.y * TILE + threadIdx.y;
#pragma unroll
    for (unsigned int j = 0; j < TILE; j += BLOCK_ROWS) {
        if (x < cols && y + j < rows) {
            tile[threadIdx.y + j][threadIdx.x] = in[(unsigned long long)(y + j) * cols + x];
        }
    }
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;  // column in `out` (a row of `in`)
    y = blockIdx.x * TILE + threadIdx.y;  // row in `out` (a column of `in`)
#pragma unroll
    for (unsigned int j = 0; j < TILE; j += BLOCK_ROWS) {
        if (x < rows && y + j < cols) {
            out[(unsigned long long)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
        }
    }
}

extern "C" __global__ void transpose_padded(const float* __restrict__ in,
                                            float* __restrict__ out,
                                            unsigned int rows,
                                            unsigned int cols) {
    __shared__ float tile[TILE][TILE + 1];
    unsigned int x = blockIdx.x * TILE + threadIdx.x;
    unsigned int y = blockIdx.y * TILE + threadIdx.y;
#pragma unroll
    for (unsigned int j = 0; j < TILE; j += BLOCK_ROWS) {
        if (x < cols && y + j < rows) {
            tile[threadIdx.y + j][threadIdx.x] = in[(unsigned long long)(y + j) * cols + x];
        }
    }
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
#pragma unroll
    for (unsigned int j = 0; j < TILE; j += BLOCK_ROWS) {
        if (x < rows && y + j < cols) {
            out[(unsigned long long)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
        }
    }
}
