// conv2d_4_implicit_gemm: the GEMM of kernel 3 without its col matrix. Y' = W col with
// M = K, N_gemm = N P Q and K_gemm = C R S, computed by chapter 5's double-buffered
// warp-tile scheme; but each element of col is gathered from x (with the padding's zeros)
// at the moment the B tile is loaded into shared memory, and each output is stored
// straight to its place in y. col is never written, y needs no second pass.
// Layouts: NCHW by default (x N x C x H x W, w K x C x R x S, y N x K x P x Q, reduction
// order (c, r, s)); with -DNHWC=1, x is N x H x W x C, w is K x R x S x C and y is
// N x P x Q x K, reduction order (r, s, c), so consecutive elements of a B-tile row are
// consecutive channels: float4 loads when C % 4 == 0.
// Limit: the FP32 pipes, as matmul_8 (plus a little index arithmetic per tile load).
// Tile sizes: BM x BN outputs (channels x pixels) per block, set with -D options. The
// defaults suit the ResNet-50 layer 3 x 3, 256 -> 256, 14 x 14, batch 32 on an H100: its
// GEMM (256 x 6272 x 2304) is too small for chapter 5's 128 x 256 tiles (50 blocks for
// 132 SMs); 64 x 64 tiles give 392 blocks, several per SM. The best tile depends on the
// GPU and the layer: the chapter measures a few and picks one on the GPU it runs on.
// Launch: block (NUM_THREADS) = (128), grid (ceil(N P Q / BN), ceil(K / BM)).

#ifndef NHWC
#define NHWC 0
#endif
#ifndef BM
#define BM 64           // output channels per block
#endif
#ifndef BN
#define BN 64           // output pixels (n, p, q) per block
#endif
#ifndef BK
#define BK 16           // depth of the reduction staged in shared memory per step
#endif
#ifndef WM
#define WM 32           // channels per warp
#endif
#ifndef WN
#define WN 32           // pixels per warp
#endif
#ifndef WNITER
#define WNITER 2        // sub-tiles per warp along the pixels
#endif
#ifndef TM
#define TM 4            // channels per thread per sub-tile
#endif
#ifndef TN
#define TN 4            // pixels per thread per sub-tile
#endif
#ifndef NUM_THREADS
#define NUM_THREADS 128 // = 32 * (BM / WM) * (BN / WN): one warp per warp tile
#endif

constexpr int WARP_SIZE = 32;
constexpr int WMITER = (WM * WN) / (WARP_SIZE * TM * TN * WNITER);
constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;
constexpr int WARPS = NUM_THREADS / WARP_SIZE;
static_assert((BM / WM) * (BN / WN) * WARP_SIZE == NUM_THREADS, "one warp per warp tile");
static_assert(WMITER >= 1 && (WSUBM / TM) * (WSUBN / TN) == WARP_SIZE,
              "32 lanes cover a sub-tile");
static_assert(BK % 4 == 0 && TM % 4 == 0 && TN % 4 == 0, "float4 granularity");
static_assert(NUM_THREADS % (BK / 4) == 0 && BM % (NUM_THREADS / (BK / 4)) == 0,
              "W tile in whole passes");
#if NHWC
static_assert(BN % (NUM_THREADS / (BK / 4)) == 0,
              "x tile in whole passes (4 channels per load)");
// X_LOADS: pixels per thread
constexpr int X_STRIDE = NUM_THREADS / (BK / 4), X_LOADS = BN / X_STRIDE;
#else
static_assert(BN % WARP_SIZE == 0 && BK % WARPS == 0,
              "x tile: a warp loads 32 pixels of one row");
constexpr int X_LOADS = BN / WARP_SIZE;  // pixels per thread, each for BK / WARPS rows
#endif
constexpr int W_STRIDE = NUM_THREADS / (BK / 4), W_LOADS = BM / W_STRIDE;

// w[m][kk .. kk + 3] of the K x GK weight matrix, zero outside it; float4 when rows are
// 16-byte aligned.
__device__ __forceinline__ float4 weights4(const float* __restrict__ w, int m, int kk,
                                           int K, int GK) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (m >= K) return v;
    const float* row = w + (long long)m * GK;
    if ((GK & 3) == 0 && kk + 3 < GK) return *reinterpret_cast<const float4*>(row + kk);
    if (kk < GK) v.x = row[kk];
    if (kk + 1 < GK) v.y = row[kk + 1];
    if (kk + 2 < GK) v.z = row[kk + 2];
    if (kk + 3 < GK) v.w = row[kk + 3];
    return v;
}

// Where an output pixel's receptive field starts: the pixel's image offset in x and its
// top-left tap.
struct Pixel {
    int base, h0, w0;  // base < 0: the pixel is past the end (its column of col is zeros)
};

__device__ __forceinline__ Pixel pixel_of(int j, int NPQ, int PQ, int Q, int CHW,
                                          int stride, int pad) {
    if (j >= NPQ) return {-1, 0, 0};
    const int n = j / PQ, pq = j - n * PQ, p = pq / Q, q = pq - p * Q;
    return {n * CHW, p * stride - pad, q * stride - pad};
}

extern "C" __global__ void __launch_bounds__(NUM_THREADS)
conv2d_4_implicit_gemm(int N, int C, int H, int W, int K, int R, int S, int P, int Q,
                       int stride, int pad, int dil, const float* __restrict__ x,
                       const float* __restrict__ w, float* __restrict__ y) {
    __shared__ float4 Ws4[2][BK * BM / 4];  // transposed: Ws[kk * BM + m]
    __shared__ float4 Xs4[2][BK * BN / 4];  // Xs[kk * BN + j]
    const int GK = C * R * S, PQ = P * Q, NPQ = N * PQ, RS = R * S, CHW = C * H * W;
    const int tid = threadIdx.x;
    const int rowBlock = blockIdx.y * BM, colBlock = blockIdx.x * BN;
    const int warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    const int warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);
    const int laneRow = lane / (WSUBN / TN), laneCol = lane % (WSUBN / TN);
    const int mBase = warpRow * WM + laneRow * TM, nBase = warpCol * WN + laneCol * TN;
    const int wRow = tid / (BK / 4), wCol = (tid % (BK / 4)) * 4;

    // The pixels whose gathers this thread does are the same at every step: decode them
    // once.
    Pixel pix[X_LOADS];
#if NHWC
    // pixel in the tile, first channel
    const int xRow = tid / (BK / 4), xCol = (tid % (BK / 4)) * 4;
#pragma unroll
    for (int l = 0; l < X_LOADS; ++l)
        pix[l] = pixel_of(colBlock + xRow + l * X_STRIDE, NPQ, PQ, Q, CHW, stride, pad);
#else
    // a warp's lanes take 32 consecutive pixels: coalesced
#pragma unroll
    for (int l = 0; l < X_LOADS; ++l)
        pix[l] = pixel_of(colBlock + lane + l * WARP_SIZE, NPQ, PQ, Q, CHW, stride, pad);
#endif

    float4 wStage[W_LOADS];
#if NHWC
    float4 xStage[X_LOADS];  // 4 channels of one pixel each
    auto load_tiles = [&](int k0) {
#pragma unroll
        for (int l = 0; l < W_LOADS; ++l)
            wStage[l] = weights4(w, rowBlock + wRow + l * W_STRIDE, k0 + wCol, K, GK);
        const int kk = k0 + xCol;
#pragma unroll
        for (int l = 0; l < X_LOADS; ++l) {
            float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (pix[l].base >= 0) {
                // 4 channels of one tap: contiguous, 16-byte aligned
                if ((C & 3) == 0 && kk < GK) {
                    const int rs = kk / C, c = kk - rs * C, r = rs / S, s = rs - r * S;
                    const int h = pix[l].h0 + r * dil, ww = pix[l].w0 + s * dil;
                    if (h >= 0 && h < H && ww >= 0 && ww < W) {
                        const float* src = x + pix[l].base + (h * W + ww) * C + c;
                        const float4 t = *reinterpret_cast<const float4*>(src);
                        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
                    }
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        if (kk + e >= GK) break;
                        const int rs = (kk + e) / C, c = kk + e - rs * C;
                        const int r = rs / S, s = rs - r * S;
                        const int h = pix[l].h0 + r * dil, ww = pix[l].w0 + s * dil;
                        if (h >= 0 && h < H && ww >= 0 && ww < W)
                            v[e] = x[pix[l].base + (h * W + ww) * C + c];
                    }
                }
            }
            xStage[l] = make_float4(v[0], v[1], v[2], v[3]);
        }
    };
#else
    // rows warp, warp + WARPS, ...; pixels lane, lane + 32, ...
    float xStage[BK / WARPS][X_LOADS];
    auto load_tiles = [&](int k0) {
#pragma unroll
        for (int l = 0; l < W_LOADS; ++l)
            wStage[l] = weights4(w, rowBlock + wRow + l * W_STRIDE, k0 + wCol, K, GK);
#pragma unroll
        for (int i = 0; i < BK / WARPS; ++i) {
            // one row (c, r, s) of col per warp: no divergence
            const int kk = k0 + warp + i * WARPS;
            const int c = kk / RS, rs = kk - c * RS, r = rs / S, s = rs - r * S;
            const int off = c * H * W, dr = r * dil, ds = s * dil;
#pragma unroll
            for (int l = 0; l < X_LOADS; ++l) {
                const int h = pix[l].h0 + dr, ww = pix[l].w0 + ds;
                const bool inside = h >= 0 && h < H && ww >= 0 && ww < W;
                xStage[i][l] = (kk < GK && pix[l].base >= 0 && inside)
                                   ? x[pix[l].base + off + h * W + ww] : 0.0f;
            }
        }
    };
#endif
    auto store_tiles = [&](int buf) {
        float* Ws = reinterpret_cast<float*>(Ws4[buf]);
        float* Xs = reinterpret_cast<float*>(Xs4[buf]);
#pragma unroll
        for (int l = 0; l < W_LOADS; ++l) {
            const int m = wRow + l * W_STRIDE;
            Ws[(wCol + 0) * BM + m] = wStage[l].x;
            Ws[(wCol + 1) * BM + m] = wStage[l].y;
            Ws[(wCol + 2) * BM + m] = wStage[l].z;
            Ws[(wCol + 3) * BM + m] = wStage[l].w;
        }
#if NHWC
#pragma unroll
        for (int l = 0; l < X_LOADS; ++l) {
            const int j = xRow + l * X_STRIDE;
            Xs[(xCol + 0) * BN + j] = xStage[l].x;
            Xs[(xCol + 1) * BN + j] = xStage[l].y;
            Xs[(xCol + 2) * BN + j] = xStage[l].z;
            Xs[(xCol + 3) * BN + j] = xStage[l].w;
        }
#else
#pragma unroll
        for (int i = 0; i < BK / WARPS; ++i)
#pragma unroll
            for (int l = 0; l < X_LOADS; ++l)
                Xs[(warp + i * WARPS) * BN + lane + l * WARP_SIZE] = xStage[i][l];
#endif
    };

    float acc[WMITER * TM][WNITER * TN];
#pragma unroll
    for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
        for (int j = 0; j < WNITER * TN; ++j) acc[i][j] = 0.0f;
    float regM[WMITER * TM], regN[WNITER * TN];

    load_tiles(0);
    store_tiles(0);
    __syncthreads();
    int buf = 0;
    for (int k0 = 0; k0 < GK; k0 += BK) {
        const bool has_next = k0 + BK < GK;
        if (has_next) load_tiles(k0 + BK);  // in flight while the FMAs below run
        const float* Ws = reinterpret_cast<const float*>(Ws4[buf]);
        const float* Xs = reinterpret_cast<const float*>(Xs4[buf]);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
                for (int i = 0; i < TM; i += 4) {
                    const float4 a = *reinterpret_cast<const float4*>(
                        &Ws[k * BM + mBase + wm * WSUBM + i]);
                    regM[wm * TM + i] = a.x; regM[wm * TM + i + 1] = a.y;
                    regM[wm * TM + i + 2] = a.z; regM[wm * TM + i + 3] = a.w;
                }
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float4 b = *reinterpret_cast<const float4*>(
                        &Xs[k * BN + nBase + wn * WSUBN + j]);
                    regN[wn * TN + j] = b.x; regN[wn * TN + j + 1] = b.y;
                    regN[wn * TN + j + 2] = b.z; regN[wn * TN + j + 3] = b.w;
                }
#pragma unroll
            for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
                for (int j = 0; j < WNITER * TN; ++j) acc[i][j] += regM[i] * regN[j];
        }
        // that buffer was last read before the previous barrier
        if (has_next) store_tiles(buf ^ 1);
        __syncthreads();
        buf ^= 1;
    }

    // Each accumulator acc[i][j] is output channel m of pixel jj; scatter it to its place
    // in y.
#pragma unroll
    for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int jj = colBlock + nBase + wn * WSUBN + j;
            if (jj >= NPQ) continue;
            const int n = jj / PQ, pq = jj - n * PQ;
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
                for (int i = 0; i < TM; ++i) {
                    const int m = rowBlock + mBase + wm * WSUBM + i;
                    if (m >= K) continue;
#if NHWC
                    // channels contiguous
                    y[(long long)jj * K + m] = acc[wm * TM + i][wn * TN + j];
#else
                    y[((long long)n * K + m) * PQ + pq] = acc[wm * TM + i][wn * TN + j];
#endif
                }
        }
}
