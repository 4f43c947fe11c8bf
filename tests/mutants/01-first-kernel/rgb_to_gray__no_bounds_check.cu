// Mutant: no bounds check at all; the blocks on the right and bottom edges write outside the image.
extern "C" __global__ void rgb_to_gray(const unsigned char* __restrict__ rgb, float* __restrict__ gray,
                                       int height, int width) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int p = row * width + col;
    gray[p] = 0.299f * rgb[3 * p] + 0.587f * rgb[3 * p + 1] + 0.114f * rgb[3 * p + 2];
}
