// Mutant: forgets the block offset, so every block updates the first 256 elements and the rest stay.
extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
    int i = threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
