// flash_attn_3_32rows: flash_attn_2_mma (FlashAttention-2 forward on mma.sync, online
// softmax with lazy rescaling, causal tile skipping, any S; Q, K, V, O [BH, S, D] __half,
// L [BH, S] float logsumexp; fa_common.cuh's copies, fragment offsets and ex2) with each
// warp owning 32 query rows, two 16-row mma tiles, as FlashAttention-2 does: every K and
// V fragment that ldmatrix brings from shared memory then feeds two mma.sync instead of
// one, halving the shared-memory reads per multiply, which kernel 2 spends as many cycles
// on as on the multiplies. The doubled accumulators (2 x 16 x D of O, 2 x 16 x BC of S)
// leave no registers for Q, so Q stays in shared memory and is re-read by ldmatrix at
// each key tile. Blocks are taken from the last query block down, so with causal masking
// the longest rows start first and the short ones fill the end of the wave.
// sm_75 (T4): two m16n8k8 per k16 step and plain 16-byte copies (define FLASH_SM75).
// Limit: still one kind of warp doing loads, softmax and mma in turn, and mma.sync rather
// than Hopper's wgmma: the chapter's target for its best kernel is 80% of PyTorch's SDPA
// on the H100 at d = 128.
// Compile with -DHEAD_DIM=64 or 128 (default 128), -DWARPS (4), -DBC (64),
// -DSTAGES (2 or 3 K/V tiles in shared memory, as in kernel 2), -DMIN_BLOCKS (1),
// -DSLACK (8).
// Launch: block 32 * WARPS, grid (ceil(S / (32 WARPS)), BH), dynamic shared memory
// (32 WARPS + 2 STAGES BC) * HEAD_DIM * 2 bytes (96 KiB at d = 128, WARPS 4, BC 64,
// STAGES 2).
// Q, K, V 16-byte aligned.

#define BR (32 * WARPS)  // query rows per block: 32 per warp
#include "12-flash-attention/fa_common.cuh"  // options, copies, ldmatrix offsets, ex2

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
flash_attn_3_32rows(int S, float scale, int causal, const __half* __restrict__ Q,
                    const __half* __restrict__ K, const __half* __restrict__ V,
                    __half* __restrict__ O, float* __restrict__ L) {
    extern __shared__ __align__(128) unsigned char smem[];
    __half* Qs = reinterpret_cast<__half*>(smem);  // BR x D, then [slot][K, V][BC x D]
    __half* tiles = Qs + BR * D;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;  // accumulator rows g, g + 8; cols 2t, 2t + 1
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;  // the longest causal rows first
    const int wq = q0 + 32 * warp;  // the warp's first row
    const size_t head = (size_t)blockIdx.y * S * D;
    const __half* Kh = K + head;
    const __half* Vh = V + head;
    const int last = causal ? min(q0 + BR, S) - 1 : S - 1;
    const int tiles_n = last / BC + 1;
    // the lane's ldmatrix offsets: ao for A fragments (Q) and V (.trans), ko for K
    int ao[4], ko[4];
    frag_offsets(ao, lane % 16, lane / 16);
    frag_offsets(ko, (lane / 16) * 8 + lane % 8, (lane / 8) % 2);
    const __half* Qw = Qs + 32 * warp * D;  // the warp's rows of Q

    load_tile<BR>(Qs, Q + head, q0, S);
    load_first_kv(tiles, Kh, Vh, tiles_n, S);

    const float scale2 = scale * LOG2E;  // exp(scale s) = exp2(scale2 s)
    float o[2][D / 8][4] = {};
    float m[2][2], l[2][2];  // [m tile][rows g, g + 8], log2 units
    for (int i = 0; i < 2; i++)
        for (int h = 0; h < 2; h++) m[i][h] = NEG_INF, l[i][h] = 0.f;
    for (int j = 0; j < tiles_n; j++) {
#if STAGES == 2
        if (j + 1 < tiles_n) {
            __half* next = tiles + ((j + 1) % 2) * 2 * BC * D;
            load_tile<BC>(next, Kh, (j + 1) * BC, S);
            load_tile<BC>(next + BC * D, Vh, (j + 1) * BC, S);
        }
        cp_async_commit();  // possibly empty: one group per tile keeps wait_group 1 right
        cp_async_wait<1>();  // tile j has landed (only tile j + 1 may be in flight)
        __syncthreads();
#else  // as in kernel 2: wait for tile j, then refill the slot of tile j - 1
        cp_async_wait<1>();
        __syncthreads();
        if (j + 2 < tiles_n) {
            __half* next = tiles + ((j + 2) % 3) * 2 * BC * D;
            load_tile<BC>(next, Kh, (j + 2) * BC, S);
            load_tile<BC>(next + BC * D, Vh, (j + 2) * BC, S);
        }
        cp_async_commit();
#endif
        const __half* Ks = tiles + (j % STAGES) * 2 * BC * D;
        const __half* Vs = Ks + BC * D;
        const int n0 = j * BC;
        if (!causal || n0 <= wq + 31) {  // else every key is above this warp's rows
            float s[2][BC / 8][4] = {};  // S = Q K^T for 2 x 16 rows x BC keys
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                unsigned a[2][4];
#pragma unroll
                for (int i = 0; i < 2; i++)
                    ldmatrix_x4(a[i], Qw + 16 * i * D + ao[kk % 4] + (kk / 4) * 64);
#pragma unroll
                for (int nt = 0; nt < BC / 8; nt += 2) {  // b of key tiles nt and nt + 1
                    unsigned b[4];
                    ldmatrix_x4(b, Ks + 8 * nt * D + ko[kk % 4] + (kk / 4) * 64);
#pragma unroll
                    for (int i = 0; i < 2; i++) {
                        mma_16x8x16(s[i][nt], a[i], b);
                        mma_16x8x16(s[i][nt + 1], a[i], b + 2);
                    }
                }
            }
            if (n0 + BC > S || (causal && n0 + BC - 1 > wq)) {  // mask: edge tiles only
#pragma unroll
                for (int i = 0; i < 2; i++)
#pragma unroll
                    for (int nt = 0; nt < BC / 8; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int key = n0 + 8 * nt + 2 * t + (e & 1);
                            const int row = wq + 16 * i + g + 8 * (e / 2);
                            if (key >= S || (causal && key > row)) s[i][nt][e] = NEG_INF;
                        }
            }
            float mx[2][2];  // [m tile][rows g, g + 8]: the tile's row maxima, log2 units
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    mx[i][h] = NEG_INF;
#pragma unroll
                    for (int nt = 0; nt < BC / 8; nt++)
                        mx[i][h] = fmaxf(mx[i][h],
                                         fmaxf(s[i][nt][2 * h], s[i][nt][2 * h + 1]));
                    mx[i][h] = fmaxf(mx[i][h], __shfl_xor_sync(0xffffffffu, mx[i][h], 1));
                    mx[i][h] = fmaxf(mx[i][h], __shfl_xor_sync(0xffffffffu, mx[i][h], 2));
                    mx[i][h] *= scale2;
                }
            // as in kernel 2: rescale only when a score passes its row's m by over SLACK
            bool raise = false;
#pragma unroll
            for (int r = 0; r < 4; r++)
                raise |= mx[r / 2][r % 2] > m[r / 2][r % 2] + SLACK;
            if (__any_sync(0xffffffffu, raise)) {
#pragma unroll
                for (int i = 0; i < 2; i++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const float m_new = fmaxf(m[i][h], mx[i][h]);
                        const float base = m_new == NEG_INF ? 0.f : m_new;
                        const float alpha = exp2_ftz(m[i][h] - base);
                        m[i][h] = m_new;
                        l[i][h] *= alpha;
#pragma unroll
                        for (int dt = 0; dt < D / 8; dt++) {
                            o[i][dt][2 * h] *= alpha;
                            o[i][dt][2 * h + 1] *= alpha;
                        }
                    }
            }
            // P = 2^(s scale2 - m), packed at once into the A fragments of P V: key
            // tiles 2kk, 2kk + 1 of rows g (h = 0), g + 8 (h = 1) are registers 0-3 of
            // step kk
            unsigned pa[2][BC / 16][4];
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float base = m[i][h] == NEG_INF ? 0.f : m[i][h];
#pragma unroll
                    for (int nt = 0; nt < BC / 8; nt++) {
                        const float* x = &s[i][nt][2 * h];  // the row's 2 scores in nt
                        const float p0 = exp2_ftz(fmaf(x[0], scale2, -base));
                        const float p1 = exp2_ftz(fmaf(x[1], scale2, -base));
                        l[i][h] += p0 + p1;
                        pa[i][nt / 2][2 * (nt % 2) + h] = pack_half2(p0, p1);
                    }
                }
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++) {  // O += P V
#pragma unroll
                for (int dt = 0; dt < D / 8; dt += 2) {  // b of column tiles dt, dt + 1
                    unsigned b[4];
                    ldmatrix_x4_trans(b, Vs + 16 * kk * D + ao[dt / 2 % 4] + dt / 8 * 64);
#pragma unroll
                    for (int i = 0; i < 2; i++) {
                        mma_16x8x16(o[i][dt], pa[i][kk], b);
                        mma_16x8x16(o[i][dt + 1], pa[i][kk], b + 2);
                    }
                }
            }
        }
#if STAGES == 2
        __syncthreads();  // the slot is refilled at the next step
#endif
    }
#ifdef FLASH_SM80
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // only empty groups are left
#endif
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float sum = l[i][h];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const int row = wq + 16 * i + g + 8 * h;
            if (row >= S) continue;
            const float inv = 1.f / sum;
            __half* out = O + head + (size_t)row * D;
#pragma unroll
            for (int dt = 0; dt < D / 8; dt++)
                *reinterpret_cast<__half2*>(&out[8 * dt + 2 * t]) =
                    __floats2half2_rn(o[i][dt][2 * h] * inv, o[i][dt][2 * h + 1] * inv);
            if (t == 0) L[(size_t)blockIdx.y * S + row] = (m[i][h] + log2f(sum)) * LN2;
        }
}
