// Mutant: reads the channels as three planes (R plane, G plane, B plane) instead of interleaved RGB.
extern "C" __global__ void rgb_to_gray(const unsigned char* __restrict__ rgb, float* __restrict__ gray,
                                       int height, int width) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < height && col < width) {
        int p = row * width + col;
        int plane = height * width;
        gray[p] = 0.299f * rgb[p] + 0.587f * rgb[plane + p] + 0.114f * rgb[2 * plane + p];
    }
}
