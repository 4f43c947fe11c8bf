// gpt_ops: the small kernels that glue a GPT training step together around the book's
// GEMMs (11), attention (12, 15), LayerNorm (07), GELU (03, 08), cross-entropy, bias
// gradients and AdamW (09). Activations between two GEMMs stay in fp32 (the GEMMs write
// fp32, and the row kernels of 07-09 run on fp32); every GEMM or attention operand is an
// fp16 copy made by cast_transpose, which also writes the transposed copy that a weight
// gradient dW = X^T dY needs, so that every product of the step is chapter 11's A B.
//   embedding_forward    x[r] = wte[token[r]] + wpe[r % seq]
//   embedding_backward   dwte[v] += sum of dx[r] over the rows r whose token is v: one
//                        block per vocabulary row walks its rows in a fixed order (the
//                        tokens sorted by id on the host), so the sum is deterministic
//                        (atomicAdd would add in a different order at every run)
//   position_backward    dwpe[s] = sum over the batch of dx[b seq + s]
//   cast_transpose       y = half(scale x) and yt = its transpose, through a 32 x 32
//                        tile of shared memory so that reads and writes both coalesce
//   residual_add         out = x + y (+ bias): the residual stream, a projection's bias
//   split_heads          [rows, parts C] fp32 (+ bias) -> `parts` fp16 [B H, seq, hd],
//                        the layout of the attention kernels; merge_heads is the inverse
//                        (fp16 heads -> fp32 rows)
//   block_sum            per-block sums (of squares) in a fixed order: a deterministic
//                        gradient norm in two launches
//   grad_unscale_clip    g *= min(1, max_norm / (||g|| + 1e-6)) / loss_scale, reading
//                        ||g||^2 from device memory (no host round trip: graphs hold it)
// Limit: all memory-bound (a few bytes per element): target the copy bandwidth. Together
// they move a few times the activations once per layer; the GEMMs dominate the step.
// Launch: grid-stride kernels take block (256) and any grid; cast_transpose block
// (32, 8), grid (ceil(cols / 32), ceil(rows / 32)); embedding_backward block (128), grid
// (vocab); block_sum block (256).

#include <cuda_fp16.h>

#define WARP 32
#define TILE 32  // cast_transpose: a 32 x 32 tile, 8 rows of threads stepping by 8

__device__ __forceinline__ long long first_index() {
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long grid_stride() {
    return (long long)gridDim.x * blockDim.x;
}

extern "C" __global__ void embedding_forward(const int* __restrict__ tokens,
                                             const float* __restrict__ wte,
                                             const float* __restrict__ wpe,
                                             float* __restrict__ x, int rows, int seq,
                                             int C) {
    const long long n = (long long)rows * C;
    for (long long i = first_index(); i < n; i += grid_stride()) {
        const long long r = i / C;
        const int c = (int)(i - r * C);
        x[i] = wte[(long long)tokens[r] * C + c] + wpe[(long long)(r % seq) * C + c];
    }
}

// order: the rows sorted by token (stable), starts[v] .. starts[v + 1] - 1 the positions
// in `order` of the rows of token v (a CSR of the batch, built on the host with it)
extern "C" __global__ void embedding_backward(const float* __restrict__ dx,
                                              const int* __restrict__ order,
                                              const int* __restrict__ starts,
                                              float* __restrict__ dwte, int C) {
    const int v = blockIdx.x, begin = starts[v], end = starts[v + 1];
    if (begin == end) return;  // a token absent from the batch: its row gets no gradient
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.f;
#pragma unroll 8  // the loads are independent: several in flight hide their latency
        for (int i = begin; i < end; i++) acc += dx[(long long)order[i] * C + c];
        dwte[(long long)v * C + c] += acc;  // after the tied head's dW, never racing it
    }
}

extern "C" __global__ void position_backward(const float* __restrict__ dx,
                                             float* __restrict__ dwpe, int batch, int seq,
                                             int C) {
    const long long n = (long long)seq * C;
    for (long long i = first_index(); i < n; i += grid_stride()) {
        float acc = 0.f;
        for (int b = 0; b < batch; b++) acc += dx[(long long)b * n + i];
        dwpe[i] = acc;
    }
}

extern "C" __global__ void cast_transpose(const float* __restrict__ x,
                                          __half* __restrict__ y, __half* __restrict__ yt,
                                          int rows, int cols, float scale) {
    __shared__ float tile[TILE][TILE + 1];  // + 1: the column reads hit 32 banks
    const int c0 = blockIdx.x * TILE, r0 = blockIdx.y * TILE;
    for (int i = threadIdx.y; i < TILE; i += blockDim.y) {
        const int r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols) {
            const float v = scale * x[(long long)r * cols + c];
            tile[i][threadIdx.x] = v;
            if (y) y[(long long)r * cols + c] = __float2half_rn(v);
        }
    }
    if (!yt) return;  // uniform over the block: the barrier below is met by all or none
    __syncthreads();
    for (int i = threadIdx.y; i < TILE; i += blockDim.y) {
        const int c = c0 + i, r = r0 + threadIdx.x;  // yt's row c: down a tile column
        if (r < rows && c < cols)
            yt[(long long)c * rows + r] = __float2half_rn(tile[threadIdx.x][i]);
    }
}

// out may be x (in place); bias may be null
extern "C" __global__ void residual_add(float* out, const float* x,
                                        const float* __restrict__ y,
                                        const float* __restrict__ bias, int rows,
                                        int cols) {
    const long long n = (long long)rows * cols;
    for (long long i = first_index(); i < n; i += grid_stride())
        out[i] = x[i] + y[i] + (bias ? bias[i % cols] : 0.f);
}

// src [batch seq, parts C] with C = heads hd; column p C + h hd + d of row b seq + s goes
// to dst_p[((b heads + h) seq + s) hd + d] (dst_1, dst_2 unused when parts = 1)
extern "C" __global__ void split_heads(const float* __restrict__ src,
                                       const float* __restrict__ bias,
                                       __half* __restrict__ dst0,
                                       __half* __restrict__ dst1,
                                       __half* __restrict__ dst2, int batch, int seq,
                                       int heads, int hd, int parts) {
    const int C = heads * hd, width = parts * C;
    const long long n = (long long)batch * seq * width;
    for (long long i = first_index(); i < n; i += grid_stride()) {
        const long long r = i / width;
        const int col = (int)(i - r * width), p = col / C, h = col % C / hd, d = col % hd;
        const long long b = r / seq, s = r % seq;
        __half* dst = p == 0 ? dst0 : p == 1 ? dst1 : dst2;
        const float v = src[i] + (bias ? bias[col] : 0.f);
        dst[((b * heads + h) * seq + s) * hd + d] = __float2half_rn(v);
    }
}

extern "C" __global__ void merge_heads(const __half* __restrict__ src0,
                                       const __half* __restrict__ src1,
                                       const __half* __restrict__ src2,
                                       float* __restrict__ dst, int batch, int seq,
                                       int heads, int hd, int parts) {
    const int C = heads * hd, width = parts * C;
    const long long n = (long long)batch * seq * width;
    for (long long i = first_index(); i < n; i += grid_stride()) {
        const long long r = i / width;
        const int col = (int)(i - r * width), p = col / C, h = col % C / hd, d = col % hd;
        const long long b = r / seq, s = r % seq;
        const __half* src = p == 0 ? src0 : p == 1 ? src1 : src2;
        dst[i] = __half2float(src[((b * heads + h) * seq + s) * hd + d]);
    }
}

// out[blockIdx.x] = sum (of squares, if square) of this block's grid-stride share of x.
// The order of the additions depends only on the grid: run twice, same bits.
extern "C" __global__ void block_sum(const float* __restrict__ x, long long n, int square,
                                     float* __restrict__ out) {
    __shared__ float warp_sums[WARP];
    float acc = 0.f;
    for (long long i = first_index(); i < n; i += grid_stride())
        acc += square ? x[i] * x[i] : x[i];
    for (int w = WARP / 2; w > 0; w /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, w);
    if (threadIdx.x % WARP == 0) warp_sums[threadIdx.x / WARP] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.f;
        for (int w = 0; w < blockDim.x / WARP; w++) s += warp_sums[w];
        out[blockIdx.x] = s;
    }
}

// g holds the loss-scaled gradients; norm_sq their squared norm (scaled too). The norm
// that clipping compares with max_norm is the unscaled one, as torch's clip_grad_norm_.
extern "C" __global__ void grad_unscale_clip(float* __restrict__ g, long long n,
                                             const float* __restrict__ norm_sq,
                                             float inv_scale, float max_norm) {
    const float norm = sqrtf(*norm_sq) * inv_scale;
    const float factor = inv_scale * fminf(1.f, max_norm / (norm + 1e-6f));
    for (long long i = first_index(); i < n; i += grid_stride()) g[i] *= factor;
}
