// conv2d_5_depthwise: a depthwise 3 x 3 convolution (groups = C, as in MobileNet) in NCHW: output channel
// c reads only input channel c, with its own 3 x 3 filter (w is C x 1 x 3 x 3). There are only 9 FMAs
// per output, 2.25 FLOP per byte of minimum traffic: far left of the ridge point, so the kernel is a
// copy with a stencil in it. Each thread computes OUTS = 4 consecutive outputs of one row; for stride 1
// and 2 it loads the 3 input rows it needs into registers once ((OUTS - 1) stride + 3 values each)
// instead of 9 loads per output, and the rows shared with the threads above and below come from L1.
// Limit: memory bandwidth: read x once and write y once; target >= 60% of the copy bandwidth.
// Launch: block (256), grid (ceil(N C P ceil(Q / OUTS) / 256)). Any pad; other strides take a slower
// generic path (9 loads per output).

#ifndef OUTS
#define OUTS 4  // consecutive outputs per thread: float4 stores when Q % 4 == 0
#endif

// The OUTS outputs of row p starting at q0, with the 3 input rows held in registers.
template <int STRIDE>
__device__ __forceinline__ void depthwise_row(const float* __restrict__ xc, const float* wr, int H,
                                              int W, int p, int q0, int pad, float* out) {
    constexpr int SPAN = (OUTS - 1) * STRIDE + 3;  // input columns the OUTS outputs touch
    const int h0 = p * STRIDE - pad, w0 = q0 * STRIDE - pad;
#pragma unroll
    for (int o = 0; o < OUTS; ++o) out[o] = 0.0f;
#pragma unroll
    for (int r = 0; r < 3; ++r) {
        const int h = h0 + r;
        if (h < 0 || h >= H) continue;  // a padding row adds nothing
        float v[SPAN];
#pragma unroll
        for (int i = 0; i < SPAN; ++i) {
            const int ww = w0 + i;
            v[i] = (ww >= 0 && ww < W) ? __ldg(xc + h * W + ww) : 0.0f;
        }
#pragma unroll
        for (int o = 0; o < OUTS; ++o)
#pragma unroll
            for (int s = 0; s < 3; ++s) out[o] += v[o * STRIDE + s] * wr[r * 3 + s];
    }
}

extern "C" __global__ void conv2d_5_depthwise(int N, int C, int H, int W, int P, int Q, int stride,
                                              int pad, const float* __restrict__ x,
                                              const float* __restrict__ w, float* __restrict__ y) {
    const int groups = (Q + OUTS - 1) / OUTS;  // groups of OUTS outputs per row
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * C * P * groups) return;
    const int q0 = (i % groups) * OUTS, p = (i / groups) % P, nc = i / (groups * P);
    const int c = nc % C;
    const float* xc = x + (long long)nc * H * W;
    float wr[9];  // the channel's filter; the threads of a warp mostly share it (broadcast loads)
#pragma unroll
    for (int t = 0; t < 9; ++t) wr[t] = __ldg(w + c * 9 + t);
    float out[OUTS];
    if (stride == 1) {
        depthwise_row<1>(xc, wr, H, W, p, q0, pad, out);
    } else if (stride == 2) {
        depthwise_row<2>(xc, wr, H, W, p, q0, pad, out);
    } else {  // generic stride: 9 loads per output
        for (int o = 0; o < OUTS; ++o) {
            float acc = 0.0f;
            for (int r = 0; r < 3; ++r)
                for (int s = 0; s < 3; ++s) {
                    const int h = p * stride - pad + r, ww = (q0 + o) * stride - pad + s;
                    if (h >= 0 && h < H && ww >= 0 && ww < W) acc += xc[h * W + ww] * wr[r * 3 + s];
                }
            out[o] = acc;
        }
    }
    float* yr = y + ((long long)nc * P + p) * Q;
    if (OUTS % 4 == 0 && (Q & 3) == 0) {  // q0 + o < Q implies q0 + o + 3 < Q; 16-byte aligned
#pragma unroll
        for (int o = 0; o < OUTS; o += 4)
            if (q0 + o < Q)
                *reinterpret_cast<float4*>(yr + q0 + o) = make_float4(out[o], out[o + 1], out[o + 2], out[o + 3]);
    } else {
#pragma unroll
        for (int o = 0; o < OUTS; ++o)
            if (q0 + o < Q) yr[q0 + o] = out[o];
    }
}
