// conv2d_5_depthwise: a depthwise 3 x 3 convolution (groups = C, as in MobileNet) in
// NCHW: output channel c reads only input channel c, with its own 3 x 3 filter (w is
// C x 1 x 3 x 3). There are only 9 FMAs per output, 2.25 FLOP per byte of minimum
// traffic: far left of the ridge point, so the kernel is a copy with a stencil in it.
// Each thread computes a ROWS x OUTS patch of outputs: it loads each input row the patch
// needs into registers once ((OUTS - 1) stride + 3 values) and adds it to every output
// row that uses it, so a value is loaded about (ROWS - 1) stride + 3 / ROWS times per
// thread instead of 9. ROWS = 1 is the plain version (each input row is loaded by the 3
// threads whose outputs need it).
// Limit: memory bandwidth: read x once and write y once; target >= 60% of the copy
// bandwidth.
// Launch: block (256), grid (ceil(N C ceil(P / ROWS) ceil(Q / OUTS) / 256)). Any pad;
// strides other than 1 and 2 take a slower generic path (9 loads per output).

#ifndef OUTS
// consecutive outputs of a row per thread: float4 stores when Q % 4 == 0
#define OUTS 4
#endif
#ifndef ROWS
#define ROWS 4  // output rows per thread
#endif

// The ROWS x OUTS outputs starting at (p0, q0); every index into v and out is a
// compile-time constant, so both arrays live in registers.
template <int STRIDE>
__device__ __forceinline__ void depthwise_patch(const float* __restrict__ xc,
                                                const float* wr, int H, int W, int p0,
                                                int q0, int pad,
                                                float (&out)[ROWS][OUTS]) {
    constexpr int SPAN = (OUTS - 1) * STRIDE + 3;    // input columns the patch touches
    constexpr int IN_ROWS = (ROWS - 1) * STRIDE + 3; // input rows the patch touches
    const int h0 = p0 * STRIDE - pad, w0 = q0 * STRIDE - pad;
#pragma unroll
    for (int j = 0; j < ROWS; ++j)
#pragma unroll
        for (int o = 0; o < OUTS; ++o) out[j][o] = 0.0f;
#pragma unroll
    for (int i = 0; i < IN_ROWS; ++i) {
        const int h = h0 + i;
        if (h < 0 || h >= H) continue;  // a padding row (or past the image) adds nothing
        float v[SPAN];
#pragma unroll
        for (int t = 0; t < SPAN; ++t) {
            const int ww = w0 + t;
            v[t] = (ww >= 0 && ww < W) ? __ldg(xc + h * W + ww) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < ROWS; ++j) {
            // which filter row input row i is for output row j
            const int r = i - j * STRIDE;
            if (r < 0 || r > 2) continue;  // resolved at compile time
#pragma unroll
            for (int o = 0; o < OUTS; ++o)
#pragma unroll
                for (int s = 0; s < 3; ++s)
                    out[j][o] += v[o * STRIDE + s] * wr[r * 3 + s];
        }
    }
}

extern "C" __global__ void conv2d_5_depthwise(int N, int C, int H, int W, int P, int Q,
                                              int stride, int pad,
                                              const float* __restrict__ x,
                                              const float* __restrict__ w,
                                              float* __restrict__ y) {
    const int groupsQ = (Q + OUTS - 1) / OUTS, groupsP = (P + ROWS - 1) / ROWS;
    // consecutive threads: along a row
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * C * groupsP * groupsQ) return;
    const int q0 = (i % groupsQ) * OUTS, p0 = ((i / groupsQ) % groupsP) * ROWS;
    const int nc = i / (groupsQ * groupsP), c = nc % C;
    const float* xc = x + (long long)nc * H * W;
    // the channel's filter; the threads of a warp mostly share it (broadcast loads)
    float wr[9];
#pragma unroll
    for (int t = 0; t < 9; ++t) wr[t] = __ldg(w + c * 9 + t);
    float out[ROWS][OUTS];
    if (stride == 1) {
        depthwise_patch<1>(xc, wr, H, W, p0, q0, pad, out);
    } else if (stride == 2) {
        depthwise_patch<2>(xc, wr, H, W, p0, q0, pad, out);
    } else {  // generic stride: 9 loads per output
#pragma unroll
        for (int j = 0; j < ROWS; ++j)
#pragma unroll
            for (int o = 0; o < OUTS; ++o) {
                float acc = 0.0f;
                for (int r = 0; r < 3; ++r)
                    for (int s = 0; s < 3; ++s) {
                        const int h = (p0 + j) * stride - pad + r;
                        const int ww = (q0 + o) * stride - pad + s;
                        if (h >= 0 && h < H && ww >= 0 && ww < W)
                            acc += xc[h * W + ww] * wr[r * 3 + s];
                    }
                out[j][o] = acc;
            }
    }
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        if (p0 + j >= P) break;
        float* yr = y + ((long long)nc * P + p0 + j) * Q;
        // float4 stores: q0 + o < Q implies q0 + o + 3 < Q; 16-byte aligned
        if (OUTS % 4 == 0 && (Q & 3) == 0) {
#pragma unroll
            for (int o = 0; o < OUTS; o += 4)
                if (q0 + o < Q)
                    *reinterpret_cast<float4*>(yr + q0 + o) = make_float4(
                        out[j][o], out[j][o + 1], out[j][o + 2], out[j][o + 3]);
        } else {
#pragma unroll
            for (int o = 0; o < OUTS; ++o)
                if (q0 + o < Q) yr[q0 + o] = out[j][o];
        }
    }
}
