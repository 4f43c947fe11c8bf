// gpt_ops: the small kernels that glue a GPT training step together around the book's
// GEMMs (11), attention (12, 15), LayerNorm (07), GELU (03, 08), cross-entropy, bias
// gradients and AdamW (09). The GEMMs write fp32, the row math runs on fp32, and every
// GEMM or attention operand is fp16, written by the pass that computes it (a cast, the
// LayerNorm, the merge of the heads) together with the transposed copy that a weight
// gradient dW = X^T dY needs, so that every product of the step is chapter 11's A B and
// no fp32 activation is stored only to be cast.
//   embedding_forward    x[r] = wte[token[r]] + wpe[r % seq]
//   embedding_backward   dwte[v] += sum of dx[r] over the rows r whose token is v: one
//                        block per vocabulary row walks its rows in a fixed order (the
//                        tokens sorted by id on the host), so the sum is deterministic
//                        (atomicAdd would add in a different order at every run)
//   position_backward    dwpe[s] = sum over the batch of dx[b seq + s]
//   cast_transpose       y = half(scale x) and yt = its transpose, through a 32 x 64
//                        tile of shared memory so that reads and writes both coalesce;
//                        with colsum, also the tile's column sums: a bias gradient
//                        (db = sum of dY's rows) costs no pass of its own over dY. The
//                        MLP's bias + GELU (chapter 3's gelu_erf) and its backward
//                        (chapter 8's gelu_erf_grad) run as the cast's epilogue: the
//                        activation and its gradient are never stored in fp32
//   bias_grad_reduce     db[c] = sum of those per-tile sums, in a fixed order: no
//                        atomics, the same bits at every run
//   split_heads          [rows, parts C] fp32 (+ bias) -> `parts` fp16 [B H, seq, hd],
//                        the layout of the attention kernels; merge_heads is the inverse
//                        straight to fp16 rows (the next GEMM's operand), with the
//                        transposed copy and the column sums (the qkv bias gradient)
//                        on request, so no fp32 copy is written and read back
//   residual_layernorm   residual add + LayerNorm forward + fp16 cast (and its
//                        transpose) in one pass: the stream is read once per LayerNorm
//   layernorm_backward_add  chapter 7's LayerNorm backward with one float4 of a row per
//                        thread (fewer registers: more rows in flight) that adds the
//                        result to the residual stream's gradient in the same pass
//   block_sum            per-block sums (of squares) in a fixed order: a deterministic
//                        gradient norm in two launches
//   grad_unscale_clip    g *= min(1, max_norm / (||g|| + 1e-6)) / loss_scale, reading
//                        ||g||^2 from device memory (no host round trip: graphs hold it)
//   split_k_reduce       out = part[0] + part[1] + ... + part[s - 1], in that order: the
//                        weight gradients computed as s GEMMs over slices of K (more
//                        blocks than their few output tiles) summed without atomics, the
//                        same bits at every run; (s + 1) x 4 bytes per element
// Limit: all memory-bound (a few bytes per element): target the copy bandwidth. What
// keeps them there: 16 bytes per thread in flight (about 2048 threads x 16 B = 32 KB per
// SM covers ~4.8 TB/s x ~0.7 us of latency over 132 SMs), enough blocks to fill every SM,
// and no 64-bit division per element (a software routine of dozens of instructions: 4
// per element made the old split_heads compute-bound, at about a fifth of the bandwidth).
// Launch: grid-stride kernels take block (256) and any grid; cast_transpose block
// (32, 8), grid (ceil(cols / 64), ceil(rows / 32)); bias_grad_reduce block (32, 32),
// grid (ceil(cols / 32)); split_heads one block per row (grid rows, block: a multiple
// of 32 covering parts C / 8, up to 1024); merge_heads block (256), grid
// (ceil(seq / 32), batch heads, parts); residual_layernorm block (128), grid
// (ceil(rows / 16)), 16 (cols + 2) x 2 bytes of dynamic shared memory;
// layernorm_backward_add block: a multiple of 32 covering cols / 4, any grid (the
// number of dw, db partials); embedding_backward block (128), grid (vocab); block_sum
// block (256); split_k_reduce block (256), any grid, n a multiple of 4 and 16-byte
// aligned arrays.

#include <cuda_fp16.h>

#include "03-elementwise/bias_gelu.cu"           // gelu_erf, chapter 3's GELU
#include "08-profiling/bias_gelu_backward.cu"  // gelu_erf_grad, its derivative

#define WARP 32
// cast_transpose: a tile of 32 rows x 64 columns on (32, 8) threads, each thread two
// adjacent columns of 4 rows (8-byte loads, 4-byte stores, 4 loads in flight)
#define TILE_ROWS 32
#define TILE_COLS 64
#define ROW_STEP 8  // = blockDim.y
#define MAX_HD 128  // merge_heads: the attention kernels' largest head dimension
#define LN_ROWS 16  // residual_layernorm: rows per block (16 x 1024 fp16 fit 48 KB)
#define LN_VEC 8    // and float4 per lane: rows of up to 8 x 4 x 32 = 1024 columns

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

// The two columns c, c + 1 of row r of a [rows, cols] matrix (0 outside it); 8 bytes
// in one load when cols is even (then both are in or both out).
__device__ __forceinline__ float2 load_pair(const float* __restrict__ p, int r, int c,
                                            int rows, int cols) {
    const long long at = (long long)r * cols + c;
    float2 v = make_float2(0.f, 0.f);
    if (r < rows && cols % 2 == 0 && c < cols) {
        v = *reinterpret_cast<const float2*>(p + at);
    } else if (r < rows) {
        if (c < cols) v.x = p[at];
        if (c + 1 < cols) v.y = p[at + 1];
    }
    return v;
}

// The value the cast writes: scale x, or with bias (the MLP's), scale gelu(x + bias),
// or with pre (the activation's input) too, its gradient scale x gelu'(pre + bias).
__device__ __forceinline__ float epilogue(float x, float pre, float bias, int kind,
                                          float scale) {
    if (kind == 1) return scale * gelu_erf(x + bias);
    if (kind == 2) return scale * x * gelu_erf_grad(pre + bias);
    return scale * x;
}

// x [rows, cols] fp32 -> y = half(v) [rows, cols] and yt its transpose [cols, rows]
// (either may be null), v = epilogue(x): bias and pre may be null. colsum (if not null)
// [ceil(rows / 32), cols] gets the sum of v over each tile's 32 rows (bias_grad_reduce).
// 40 registers (ptxas, sm_90): 6 blocks per SM, 48 KB of x in flight per SM
extern "C" __global__ void
cast_transpose(const float* __restrict__ x, const float* __restrict__ pre,
               const float* __restrict__ bias, __half* __restrict__ y,
               __half* __restrict__ yt, float* __restrict__ colsum, int rows, int cols,
               float scale) {
    __shared__ float tile[TILE_ROWS][TILE_COLS + 1];  // + 1: column reads hit 32 banks
    const int c0 = blockIdx.x * TILE_COLS, r0 = blockIdx.y * TILE_ROWS;
    const int c = c0 + 2 * threadIdx.x;  // this thread's two adjacent columns
    const int kind = !bias ? 0 : !pre ? 1 : 2;  // uniform over the grid
    const float2 b = kind ? load_pair(bias, 0, c, 1, cols) : make_float2(0.f, 0.f);
    float2 v[TILE_ROWS / ROW_STEP], u[TILE_ROWS / ROW_STEP];
#pragma unroll  // every load issued before the first use: 4 (8) x 8 bytes in flight
    for (int k = 0; k < TILE_ROWS / ROW_STEP; k++) {
        const int r = r0 + threadIdx.y + k * ROW_STEP;
        v[k] = load_pair(x, r, c, rows, cols);
        u[k] = kind == 2 ? load_pair(pre, r, c, rows, cols) : make_float2(0.f, 0.f);
    }
#pragma unroll
    for (int k = 0; k < TILE_ROWS / ROW_STEP; k++) {
        const int i = threadIdx.y + k * ROW_STEP, r = r0 + i;
        const bool in0 = r < rows && c < cols, in1 = r < rows && c + 1 < cols;
        // outside the matrix: 0, which adds nothing to colsum (gelu(0 + bias) would)
        const float v0 = in0 ? epilogue(v[k].x, u[k].x, b.x, kind, scale) : 0.f;
        const float v1 = in1 ? epilogue(v[k].y, u[k].y, b.y, kind, scale) : 0.f;
        tile[i][2 * threadIdx.x] = v0;
        tile[i][2 * threadIdx.x + 1] = v1;
        if (!y) continue;
        const long long at = (long long)r * cols + c;
        if (cols % 2 == 0 && in0) {
            *reinterpret_cast<__half2*>(y + at) = __floats2half2_rn(v0, v1);
        } else {
            if (in0) y[at] = __float2half_rn(v0);
            if (in1) y[at + 1] = __float2half_rn(v1);
        }
    }
    if (!yt && !colsum) return;  // uniform: the barrier is met by all threads or none
    __syncthreads();
    if (yt) {
#pragma unroll
        for (int k = 0; k < TILE_COLS / ROW_STEP; k++) {
            const int j = threadIdx.y + k * ROW_STEP, r = r0 + threadIdx.x;
            const float t = tile[threadIdx.x][j];
            // a warp writes 32 consecutive halves (64 bytes) of yt's row c0 + j
            if (r < rows && c0 + j < cols)
                yt[(long long)(c0 + j) * rows + r] = __float2half_rn(t);
        }
    }
    const int j = threadIdx.y * WARP + threadIdx.x;  // one thread per tile column
    if (colsum && j < TILE_COLS && c0 + j < cols) {
        float acc = 0.f;
        for (int i = 0; i < TILE_ROWS; i++) acc += tile[i][j];  // in row order
        colsum[(long long)blockIdx.y * cols + c0 + j] = acc;
    }
}

// out[c] = sum over p < parts of part[p, c] (overwritten), in an order fixed by the
// launch: lane y adds parts y, y + 32, ..., then lane 0 adds the 32 lanes in order
extern "C" __global__ void bias_grad_reduce(const float* __restrict__ part, int parts,
                                            int cols, float* __restrict__ out) {
    __shared__ float sums[WARP][WARP + 1];
    const int c = blockIdx.x * WARP + threadIdx.x;
    float acc = 0.f;
    if (c < cols)
        for (int p = threadIdx.y; p < parts; p += WARP)
            acc += part[(long long)p * cols + c];
    sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float s = 0.f;
        for (int k = 0; k < WARP; k++) s += sums[k][threadIdx.x];
        out[c] = s;
    }
}

struct alignas(16) Half8 {  // 8 halves: one 16-byte load or store
    __half2 h[4];
};

// src [batch seq, parts C] fp32 (+ bias [parts C]), C = heads hd: column p C + h hd + d
// of row b seq + s goes to dst_p[((b heads + h) seq + s) hd + d] (dst_1, dst_2 unused
// when parts = 1). One row per block, 8 columns per thread (two float4 in, 16 bytes out);
// C, hd multiples of 8.
extern "C" __global__ void split_heads(const float* __restrict__ src,
                                       const float* __restrict__ bias,
                                       __half* __restrict__ dst0,
                                       __half* __restrict__ dst1,
                                       __half* __restrict__ dst2, int batch, int seq,
                                       int heads, int hd, int parts) {
    const int C = heads * hd, width = parts * C;
    const int r = blockIdx.x, b = r / seq, s = r - b * seq;  // 32-bit, once per row
    const float* row = src + (long long)r * width;
    for (int col = 8 * threadIdx.x; col < width; col += 8 * blockDim.x) {
        const int p = col / C, h = (col - p * C) / hd, d = col - p * C - h * hd;
        float4 lo = *reinterpret_cast<const float4*>(row + col);
        float4 hi = *reinterpret_cast<const float4*>(row + col + 4);
        if (bias) {
            const float4 bl = *reinterpret_cast<const float4*>(bias + col);
            const float4 bh = *reinterpret_cast<const float4*>(bias + col + 4);
            lo = make_float4(lo.x + bl.x, lo.y + bl.y, lo.z + bl.z, lo.w + bl.w);
            hi = make_float4(hi.x + bh.x, hi.y + bh.y, hi.z + bh.z, hi.w + bh.w);
        }
        Half8 o;
        o.h[0] = __floats2half2_rn(lo.x, lo.y);
        o.h[1] = __floats2half2_rn(lo.z, lo.w);
        o.h[2] = __floats2half2_rn(hi.x, hi.y);
        o.h[3] = __floats2half2_rn(hi.z, hi.w);
        __half* dst = p == 0 ? dst0 : p == 1 ? dst1 : dst2;
        const long long at = ((long long)(b * heads + h) * seq + s) * hd + d;
        *reinterpret_cast<Half8*>(dst + at) = o;
    }
}

// The inverse of split_heads, straight to fp16 rows: src_p [batch heads, seq, hd] ->
// y [batch seq, parts C] (column p C + h hd + d) and, if not null, yt = y^T [parts C,
// batch seq]; colsum (if not null) [batch ceil(seq / 32), parts C] gets the column sums
// of each 32 positions. A block moves 32 positions of one head of one part (a 32 x hd
// tile, hd <= MAX_HD): rows of src and y are read and written 16 bytes per thread, yt
// through the tile in shared memory, a warp writing 32 positions (64 bytes) of a row.
extern "C" __global__ void merge_heads(const __half* __restrict__ src0,
                                       const __half* __restrict__ src1,
                                       const __half* __restrict__ src2,
                                       __half* __restrict__ y, __half* __restrict__ yt,
                                       float* __restrict__ colsum, int batch, int seq,
                                       int heads, int hd, int parts) {
    __shared__ __half tile[WARP][MAX_HD + 2];  // + 2 halves: column reads hit 32 banks
    const int bh = blockIdx.y, b = bh / heads, h = bh - b * heads, p = blockIdx.z;
    const int s0 = blockIdx.x * WARP, col0 = (p * heads + h) * hd;
    const int width = parts * heads * hd;
    const int n = min(WARP, seq - s0) * hd;  // halves of this tile, contiguous in src
    const __half* src = (p == 0 ? src0 : p == 1 ? src1 : src2);
    src += ((long long)bh * seq + s0) * hd;
    for (int i = 8 * threadIdx.x; i < WARP * hd; i += 8 * blockDim.x) {
        const int s = i / hd, d = i - s * hd;
        Half8 v;
        if (i < n) {
            v = *reinterpret_cast<const Half8*>(src + i);
            const long long at = (long long)(b * seq + s0 + s) * width + col0 + d;
            if (y) *reinterpret_cast<Half8*>(y + at) = v;
        } else {
            for (int k = 0; k < 4; k++) v.h[k] = __floats2half2_rn(0.f, 0.f);  // sums 0
        }
        for (int k = 0; k < 4; k++)
            *reinterpret_cast<__half2*>(&tile[s][d + 2 * k]) = v.h[k];
    }
    if (!yt && !colsum) return;  // uniform: the barrier is met by all threads or none
    __syncthreads();
    if (yt) {
        const long long rows = (long long)batch * seq;
        for (int i = threadIdx.x; i < WARP * hd; i += blockDim.x) {
            const int d = i / WARP, s = i % WARP;  // lane s: 32 positions of yt's row
            if (s0 + s < seq) yt[(col0 + d) * rows + b * seq + s0 + s] = tile[s][d];
        }
    }
    if (colsum) {
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            float acc = 0.f;
            for (int s = 0; s < WARP; s++) acc += __half2float(tile[s][d]);  // in order
            const long long part = (long long)b * gridDim.x + blockIdx.x;
            colsum[part * width + col0 + d] = acc;
        }
    }
}

// LayerNorm forward fused with the residual add before it and the fp16 cast after it:
// v = x + y + bias (y, bias may be null: v = x), written to res when y is given; then
// h = half(LN(v) w + b) and, if not null, ht = h^T [cols, rows]; mean, rstd per row as
// fused_rows' layernorm_forward. Residual + LayerNorm + cast were 3 passes over the
// stream (151 + 100 + 100 MB at T = 16384, C = 768); here 200 MB in one. A warp owns a
// row (32 lanes x LN_VEC float4: cols a multiple of 128, up to 1024), so its statistics
// need no block barrier; a block of 4 warps does 16 rows and transposes them through
// shared memory (dynamic: 16 (cols + 2) halves), a warp writing 2 rows of ht, 32 bytes
// each. Launch: block (128), grid (ceil(rows / 16)).
extern "C" __global__ void residual_layernorm(
    const float* __restrict__ x, const float* __restrict__ y,
    const float* __restrict__ bias, float* __restrict__ res, const float* __restrict__ w,
    const float* __restrict__ b, __half* __restrict__ h, __half* __restrict__ ht,
    float* __restrict__ mean, float* __restrict__ rstd, int rows, int cols, float eps) {
    extern __shared__ __half rows16[];  // [LN_ROWS][cols + 2] (+ 2: no bank conflicts)
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, n = cols / (4 * WARP);
    const int stride = cols + 2, r0 = blockIdx.x * LN_ROWS;
    for (int i = warp; i < LN_ROWS; i += blockDim.x / WARP) {
        const int r = r0 + i;
        if (r >= rows) break;  // warp-uniform; the barrier below is outside this loop
        const long long at = (long long)r * cols;
        float4 v[LN_VEC];
        float sum = 0.f;
#pragma unroll
        for (int k = 0; k < LN_VEC; k++) {
            if (k >= n) break;
            const int q = k * WARP + lane;  // float4 q of the row: a warp reads 512 bytes
            v[k] = reinterpret_cast<const float4*>(x + at)[q];
            if (y) {
                const float4 a = reinterpret_cast<const float4*>(y + at)[q];
                v[k] = make_float4(v[k].x + a.x, v[k].y + a.y, v[k].z + a.z,
                                   v[k].w + a.w);
                if (bias) {
                    const float4 e = reinterpret_cast<const float4*>(bias)[q];
                    v[k] = make_float4(v[k].x + e.x, v[k].y + e.y, v[k].z + e.z,
                                       v[k].w + e.w);
                }
                reinterpret_cast<float4*>(res + at)[q] = v[k];
            }
            sum += v[k].x + v[k].y + v[k].z + v[k].w;
        }
        for (int o = WARP / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const float mu = sum / cols;
        float sq = 0.f;  // two passes over registers, as fused_rows
#pragma unroll
        for (int k = 0; k < LN_VEC; k++) {
            if (k >= n) break;
            const float4 d =
                make_float4(v[k].x - mu, v[k].y - mu, v[k].z - mu, v[k].w - mu);
            sq += d.x * d.x + d.y * d.y + d.z * d.z + d.w * d.w;
        }
        for (int o = WARP / 2; o > 0; o /= 2) sq += __shfl_xor_sync(0xffffffffu, sq, o);
        const float rs = rsqrtf(sq / cols + eps);
        if (lane == 0) {
            mean[r] = mu;
            rstd[r] = rs;
        }
#pragma unroll
        for (int k = 0; k < LN_VEC; k++) {
            if (k >= n) break;
            const int q = k * WARP + lane;
            const float4 wq = reinterpret_cast<const float4*>(w)[q];
            const float4 bq = reinterpret_cast<const float4*>(b)[q];
            const __half2 lo = __floats2half2_rn((v[k].x - mu) * rs * wq.x + bq.x,
                                                 (v[k].y - mu) * rs * wq.y + bq.y);
            const __half2 hi = __floats2half2_rn((v[k].z - mu) * rs * wq.z + bq.z,
                                                 (v[k].w - mu) * rs * wq.w + bq.w);
            *reinterpret_cast<__half2*>(h + at + 4 * q) = lo;
            *reinterpret_cast<__half2*>(h + at + 4 * q + 2) = hi;
            *reinterpret_cast<__half2*>(rows16 + i * stride + 4 * q) = lo;
            *reinterpret_cast<__half2*>(rows16 + i * stride + 4 * q + 2) = hi;
        }
    }
    if (!ht) return;  // uniform: the barrier is met by all threads or none
    __syncthreads();
    // thread t: row t % 16 of the tile, columns t / 16, t / 16 + 8, ...
    const int i = threadIdx.x % LN_ROWS, r = r0 + i;
    for (int c = threadIdx.x / LN_ROWS; c < cols; c += blockDim.x / LN_ROWS)
        if (r < rows) ht[(long long)c * rows + r] = rows16[i * stride + c];
}

// LayerNorm backward, fused_rows.cu's layernorm_backward (chapter 7) narrowed and fused
// for the residual stream: dx = acc + LN'(dy), where acc (may be dx itself, or null) is
// the gradient that the residual connection carries past the LayerNorm, so no separate
// add pass writes and rereads the LayerNorm's output. With xhat = (x - mean)
// rstd and g = w dy: LN'(dy) = rstd (g - mean(g) - xhat mean(g xhat)); dw_part, db_part
// [gridDim.x, cols] get this block's sums of dy xhat and dy (fused_rows'
// layernorm_backward_reduce adds them in a fixed order). Why a variant: chapter 7's
// kernel keeps 16 values per thread of 5 rows (125 registers, 4 blocks of 128 threads
// per SM); here a thread owns one float4 of columns (cols <= 4 blockDim.x), 20 values.
extern "C" __global__ void layernorm_backward_add(
    const float* __restrict__ dy, const float* __restrict__ x,
    const float* __restrict__ w, const float* __restrict__ mean,
    const float* __restrict__ rstd, const float* acc, float* dx,
    float* __restrict__ dw_part, float* __restrict__ db_part, int rows, int cols) {
    __shared__ float scratch[2][WARP];  // two sums per row share each pair of barriers
    const int c = 4 * threadIdx.x, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const bool on = c < cols;  // cols a multiple of 4: a thread's 4 columns all in or out
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 wv = on ? *reinterpret_cast<const float4*>(w + c) : zero;
    float4 dw = zero, db = zero;
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const long long at = (long long)row * cols + c;
        const float4 xv = on ? *reinterpret_cast<const float4*>(x + at) : zero;
        const float4 d = on ? *reinterpret_cast<const float4*>(dy + at) : zero;
        const float mu = mean[row], r = rstd[row];
        const float4 xh = make_float4((xv.x - mu) * r, (xv.y - mu) * r, (xv.z - mu) * r,
                                      (xv.w - mu) * r);
        db = make_float4(db.x + d.x, db.y + d.y, db.z + d.z, db.w + d.w);
        dw = make_float4(dw.x + d.x * xh.x, dw.y + d.y * xh.y, dw.z + d.z * xh.z,
                         dw.w + d.w * xh.w);
        const float4 g = make_float4(wv.x * d.x, wv.y * d.y, wv.z * d.z, wv.w * d.w);
        float sg = g.x + g.y + g.z + g.w;  // padding threads add 0 (g = 0)
        float sgx = g.x * xh.x + g.y * xh.y + g.z * xh.z + g.w * xh.w;
        for (int o = WARP / 2; o > 0; o /= 2) {
            sg += __shfl_xor_sync(0xffffffffu, sg, o);
            sgx += __shfl_xor_sync(0xffffffffu, sgx, o);
        }
        __syncthreads();  // the previous row's reads of scratch are done
        if (lane == 0) {
            scratch[0][warp] = sg;
            scratch[1][warp] = sgx;
        }
        __syncthreads();
        const bool has = lane < (blockDim.x + WARP - 1) / WARP;
        float mg = has ? scratch[0][lane] : 0.f, mgx = has ? scratch[1][lane] : 0.f;
        for (int o = WARP / 2; o > 0; o /= 2) {
            mg += __shfl_xor_sync(0xffffffffu, mg, o);
            mgx += __shfl_xor_sync(0xffffffffu, mgx, o);
        }
        mg /= cols;
        mgx /= cols;
        if (!on) continue;
        float4 o = make_float4(r * (g.x - mg - xh.x * mgx), r * (g.y - mg - xh.y * mgx),
                               r * (g.z - mg - xh.z * mgx), r * (g.w - mg - xh.w * mgx));
        if (acc) {
            const float4 a = *reinterpret_cast<const float4*>(acc + at);
            o = make_float4(o.x + a.x, o.y + a.y, o.z + a.z, o.w + a.w);
        }
        *reinterpret_cast<float4*>(dx + at) = o;
    }
    if (on) {
        *reinterpret_cast<float4*>(dw_part + (long long)blockIdx.x * cols + c) = dw;
        *reinterpret_cast<float4*>(db_part + (long long)blockIdx.x * cols + c) = db;
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

// part: `slices` fp32 arrays of n elements one after another; out[i] = their sum at i,
// added in slice order. A float4 per thread and iteration: the slices' loads are
// independent, so several are in flight.
extern "C" __global__ void split_k_reduce(const float* __restrict__ part, int slices,
                                          long long n, float* __restrict__ out) {
    const float4* p = reinterpret_cast<const float4*>(part);
    const long long n4 = n / 4;
    for (long long i = first_index(); i < n4; i += grid_stride()) {
        float4 acc = p[i];
#pragma unroll 4
        for (int j = 1; j < slices; j++) {
            const float4 v = p[j * n4 + i];
            acc = make_float4(acc.x + v.x, acc.y + v.y, acc.z + v.z, acc.w + v.w);
        }
        reinterpret_cast<float4*>(out)[i] = acc;
    }
}
