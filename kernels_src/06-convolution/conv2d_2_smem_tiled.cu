// conv2d_2_smem_tiled: a block computes a TILE x TILE patch of outputs for KB output
// channels of one image. For each input channel it stages the input patch the outputs
// need, the tile plus its halo ((TILE - 1) stride + (R - 1) dil + 1 on a side, zeros
// where it overlaps the padding), and the KB x R x S weights in shared memory; then each
// thread reads its R x S taps from there and updates KB sums.
// Each input value is loaded from global memory about once per (KB channels x halo
// overhead) instead of once per tap and output channel, and each shared-memory read of x
// feeds KB FMAs.
// Limit: shared-memory loads (one for x plus KB broadcasts of w per KB FMAs) and two
// barriers per input channel: better than kernel 1, far from the FP32 peak.
// Launch: block (TILE, TILE) = (16, 16), grid (ceil(Q / 16) * ceil(P / 16),
// ceil(K / KB), N), dynamic shared memory 4 * (IH * IW + KB * R * S) bytes with
// IH = 15 stride + (R - 1) dil + 1 (IW with S).

// outputs per block along p and along q: 256 threads, one output pixel each
#define TILE 16
#ifndef KB
// output channels per block: each thread keeps KB accumulators in registers
#define KB 8
#endif

extern "C" __global__ void conv2d_2_smem_tiled(int N, int C, int H, int W, int K, int R,
                                               int S, int P, int Q, int stride, int pad,
                                               int dil, const float* __restrict__ x,
                                               const float* __restrict__ w,
                                               float* __restrict__ y) {
    extern __shared__ float smem[];
    // input rows the tile needs (with halo)
    const int IH = (TILE - 1) * stride + (R - 1) * dil + 1;
    const int IW = (TILE - 1) * stride + (S - 1) * dil + 1;
    float* xs = smem;               // IH x IW input patch of one channel
    float* ws = smem + IH * IW;     // KB x R x S weights of that channel
    const int tilesQ = (Q + TILE - 1) / TILE;
    const int p0 = (blockIdx.x / tilesQ) * TILE, q0 = (blockIdx.x % tilesQ) * TILE;
    const int k0 = blockIdx.y * KB, n = blockIdx.z;
    const int tid = threadIdx.y * TILE + threadIdx.x;
    const int p = p0 + threadIdx.y, q = q0 + threadIdx.x;
    // input position of xs[0][0]
    const int h0 = p0 * stride - pad, w0 = q0 * stride - pad;

    float acc[KB];
#pragma unroll
    for (int kk = 0; kk < KB; ++kk) acc[kk] = 0.0f;

    for (int c = 0; c < C; ++c) {
        const float* xc = x + (n * C + c) * H * W;
        // coalesced along the patch rows
        for (int j = tid; j < IH * IW; j += TILE * TILE) {
            const int h = h0 + j / IW, ww = w0 + j % IW;
            xs[j] = (h >= 0 && h < H && ww >= 0 && ww < W) ? xc[h * W + ww] : 0.0f;
        }
        for (int j = tid; j < KB * R * S; j += TILE * TILE) {
            const int kk = j / (R * S);
            ws[j] = (k0 + kk < K) ? w[((k0 + kk) * C + c) * R * S + j % (R * S)] : 0.0f;
        }
        __syncthreads();  // the patch and the weights are complete
        for (int r = 0; r < R; ++r)
            for (int s = 0; s < S; ++s) {
                const float xv = xs[(threadIdx.y * stride + r * dil) * IW +
                                    threadIdx.x * stride + s * dil];
#pragma unroll
                for (int kk = 0; kk < KB; ++kk) acc[kk] += xv * ws[(kk * R + r) * S + s];
            }
        __syncthreads();  // everyone is done before the next channel overwrites them
    }
    if (p < P && q < Q) {
#pragma unroll
        for (int kk = 0; kk < KB; ++kk)
            if (k0 + kk < K) y[((n * K + k0 + kk) * P + p) * Q + q] = acc[kk];
    }
}
