// flash_attn_bwd_1_smem: FlashAttention-2 style backward pass of O = softmax(scale Q K^T)
// V for BH = batch x heads heads: Q, K, V, dO, dK, dV row-major [BH, S, D] __half, L the
// natural logsumexp of each row of scale Q K^T ([BH, S] float, as 12-flash-attention/
// flash_attn_2_mma.cu stores it), Dl = rowsum(dO * O) and dQ a zeroed float accumulator
// (both from flash_attn_bwd_prep.cu). fp32 arithmetic throughout. A block owns BC keys
// (K and V tiles in shared memory, its dK and dV in registers) and walks the query
// tiles of BR rows: per tile it recomputes S = Q K^T and P = exp(scale S - L) (no S x S
// matrix is stored, and L makes P exact without a running maximum), dP = dO V^T and
// dS = P (dP - Dl), then adds dV += P^T dO and dK += scale dS^T Q in registers and
// dQ += scale dS K into global memory.
// dQ by atomicAdd in fp32: row i of dQ sums over every key tile, that is over blocks.
// Adding there keeps one pass that computes P and dS once; a separate dQ pass (one
// block per query tile over the key tiles) would compute S and dP again: 7 products of
// 2 BR BC D flops per tile pair instead of 5 (40% more work) to save the atomics. The
// price is a summation order that varies from run to run (fp32 rounding, ~1e-7
// relative; the emulator's order is fixed). flash_attn_bwd_dq_half rounds dQ to __half.
// causal != 0 masks key > query and starts at the first query tile holding a row >= the
// block's first key (rows above see none of its keys); rows and keys past S are masked
// (zero-filled tiles, P = 0), so any S >= 1 works.
// Plain CUDA C, one idea: shared-memory tiles read by every thread; no Tensor Cores.
// Shared tiles of halves have rows of D + 2 halves (an odd number of 4-byte words), so
// the threads of a warp reading one column of K or V (S and dP) hit 32 different banks.
// Limit: 5 products of 2 BR BC D flops per tile pair on CUDA cores (FMA from shared
// memory, two loads per FMA): at best a few percent of what Tensor Cores give; SDPA's
// backward runs on Tensor Cores. The next step (flash_attn_bwd_2_mma.cu) uses mma.sync.
// Compile with -DHEAD_DIM=64 or 128 (default 64); BR, BC (32) and THREADS (256) are the
// tile and block shape: BR x BC, BC x D and BR x D divisible by THREADS.
// Launch: block THREADS, grid (ceil(S / BC), BH); static shared memory
// 4 x BR x (D + 2) x 2 B + 2 x BR x BC x 4 B + 8 BR B: 25 KiB at D = 64, 41 KiB at 128.

#include <cuda_fp16.h>

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef BR  // query rows per tile
#define BR 32
#endif
#ifndef BC  // keys per block
#define BC 32
#endif
#ifndef THREADS
#define THREADS 256
#endif
#define D HEAD_DIM
#define DP (HEAD_DIM + 2)  // padded row of a shared tile (see the header)
#define KV_PER (BC * D / THREADS)  // dK and dV elements per thread
#define RC_PER (BR * BC / THREADS)  // elements of S, dP per thread
#define QD_PER (BR * D / THREADS)  // elements of a dQ tile per thread

static_assert((BR * BC) % THREADS == 0 && (BC * D) % THREADS == 0 &&
              (BR * D) % THREADS == 0, "tile shape");
static_assert(THREADS % BC == 0 && THREADS % D == 0, "thread layout");

// Copy rows [row0, row0 + ROWS) of an [S, D] matrix into a padded shared tile
template <int ROWS>
__device__ __forceinline__ void load_rows(__half (*tile)[DP], const __half* src,
                                          int row0, int S) {
    for (int i = threadIdx.x; i < ROWS * D; i += THREADS) {
        const int r = i / D, c = i % D;
        const bool in = row0 + r < S;  // rows past S: zeros
        tile[r][c] = in ? src[(size_t)(row0 + r) * D + c] : __float2half(0.f);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
flash_attn_bwd_1_smem(int S, float scale, int causal, const __half* __restrict__ Q,
                      const __half* __restrict__ K, const __half* __restrict__ V,
                      const __half* __restrict__ dO, const float* __restrict__ L,
                      const float* __restrict__ Dl, float* __restrict__ dQ,
                      __half* __restrict__ dK, __half* __restrict__ dV) {
    __shared__ __half Ks[BC][DP], Vs[BC][DP], Qs[BR][DP], dOs[BR][DP];
    __shared__ float Ps[BR][BC], dSs[BR][BC];  // P and scale dS of the tile pair
    __shared__ float Ls[BR], Dls[BR];
    const int k0 = blockIdx.x * BC;
    const size_t head = (size_t)blockIdx.y * S;  // first row of the head
    const int tid = threadIdx.x;
    load_rows<BC>(Ks, K + head * D, k0, S);
    load_rows<BC>(Vs, V + head * D, k0, S);
    // thread tid owns column tid % D of rows tid / D + j THREADS / D of dK and dV (and
    // of each dQ tile), and column tid % BC of rows tid / BC + j THREADS / BC of S and
    // dP: a warp shares one row, so P and dS are broadcast, Q, dO, K read along a row
    const int cd = tid % D, rd = tid / D, cs = tid % BC, rs = tid / BC;
    constexpr int RD_STEP = THREADS / D, RS_STEP = THREADS / BC;
    float dk[KV_PER] = {}, dv[KV_PER] = {};

    // (causal) query rows below k0 see no key of this block: start at k0's tile
    const int first = causal ? k0 / BR : 0;
    for (int q0 = first * BR; q0 < S; q0 += BR) {
        __syncthreads();  // the previous tile's Qs, dOs, Ps and dSs are no longer read
        load_rows<BR>(Qs, Q + head * D, q0, S);
        load_rows<BR>(dOs, dO + head * D, q0, S);
        for (int r = tid; r < BR; r += THREADS) {
            Ls[r] = q0 + r < S ? L[head + q0 + r] : 0.f;
            Dls[r] = q0 + r < S ? Dl[head + q0 + r] : 0.f;
        }
        __syncthreads();
        // S = Q K^T and dP = dO V^T, then P and dS, for this thread's elements
        for (int j = 0; j < RC_PER; j++) {
            const int r = rs + j * RS_STEP, row = q0 + r, key = k0 + cs;
            float s = 0.f, dp = 0.f;
            for (int d = 0; d < D; d++) {
                s += __half2float(Qs[r][d]) * __half2float(Ks[cs][d]);
                dp += __half2float(dOs[r][d]) * __half2float(Vs[cs][d]);
            }
            const bool masked = row >= S || key >= S || (causal && key > row);
            const float p = masked ? 0.f : expf(s * scale - Ls[r]);
            Ps[r][cs] = p;
            dSs[r][cs] = p * (dp - Dls[r]) * scale;  // scale: S was scaled in the forward
        }
        __syncthreads();
        // dV += P^T dO, dK += dS^T Q over the tile's rows
        for (int j = 0; j < KV_PER; j++) {
            const int c = rd + j * RD_STEP;
            float av = 0.f, ak = 0.f;
            for (int r = 0; r < BR; r++) {
                av += Ps[r][c] * __half2float(dOs[r][cd]);
                ak += dSs[r][c] * __half2float(Qs[r][cd]);
            }
            dv[j] += av;
            dk[j] += ak;
        }
        // dQ += dS K: this block's share of the sum over all key tiles
        for (int j = 0; j < QD_PER; j++) {
            const int r = rd + j * RD_STEP;
            if (q0 + r >= S) break;  // rows grow with j
            float a = 0.f;
            for (int c = 0; c < BC; c++) a += dSs[r][c] * __half2float(Ks[c][cd]);
            atomicAdd(&dQ[(head + q0 + r) * D + cd], a);
        }
    }
    for (int j = 0; j < KV_PER; j++) {
        const int key = k0 + rd + j * RD_STEP;
        if (key >= S) break;
        dK[(head + key) * D + cd] = __float2half_rn(dk[j]);
        dV[(head + key) * D + cd] = __float2half_rn(dv[j]);
    }
}
