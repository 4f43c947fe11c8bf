// Mutant: alpha = exp(m) / exp(m'), equal to exp(m - m') in exact arithmetic, but exp of a running
// maximum above 88.7 is infinity in fp32 (inf / inf is NaN)
extern "C" __global__ void online_softmax_tile(const float* __restrict__ s, const float* __restrict__ v,
                                               float* m, float* l, float* o, int rows, int bc, int d) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) {
        return;
    }
    const float* sr = s + (long long)row * bc;
    float m_new = m[row];
    for (int j = 0; j < bc; ++j) {
        m_new = fmaxf(m_new, sr[j]);
    }
    if (m_new == -__int_as_float(0x7f800000)) {
        return;  // no key seen yet: exp(-inf - (-inf)) would be NaN, and there is nothing to add
    }
    const float alpha = expf(m[row]) / expf(m_new);  // 0 when the row was empty
    float* orow = o + (long long)row * d;
    for (int k = 0; k < d; ++k) {
        orow[k] *= alpha;
    }
    float sum = l[row] * alpha;
    for (int j = 0; j < bc; ++j) {
        const float p = expf(sr[j] - m_new);  // 0 for a masked key
        sum += p;
        for (int k = 0; k < d; ++k) {
            orow[k] += p * v[(long long)j * d + k];
        }
    }
    m[row] = m_new;
    l[row] = sum;
}
