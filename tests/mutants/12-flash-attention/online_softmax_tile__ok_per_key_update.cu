// Correct, another style: the online update key by key inside the tile (rescale l and o whenever a
// key raises the maximum), instead of the tile's maximum first; more roundings, the same result
extern "C" __global__ void online_softmax_tile(const float* __restrict__ s, const float* __restrict__ v,
                                               float* m, float* l, float* o, int rows, int bc, int d) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float mr = m[row], lr = l[row];
    float* orow = o + (long long)row * d;
    for (int j = 0; j < bc; ++j) {
        const float sj = s[(long long)row * bc + j];
        const float m_new = fmaxf(mr, sj);
        if (m_new == -__int_as_float(0x7f800000)) continue;  // nothing seen yet
        const float c = expf(mr - m_new), p = expf(sj - m_new);
        lr = lr * c + p;
        for (int k = 0; k < d; ++k) orow[k] = orow[k] * c + p * v[(long long)j * d + k];
        mr = m_new;
    }
    m[row] = mr;
    l[row] = lr;
}
