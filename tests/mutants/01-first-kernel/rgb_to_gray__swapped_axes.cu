// Mutant: takes the row from the x axis and the column from the y axis, but the grid is laid out as
// (columns, rows): part of the image is never written.
extern "C" __global__ void rgb_to_gray(const unsigned char* __restrict__ rgb, float* __restrict__ gray,
                                       int height, int width) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < height && col < width) {
        int p = row * width + col;
        gray[p] = 0.299f * rgb[3 * p] + 0.587f * rgb[3 * p + 1] + 0.114f * rgb[3 * p + 2];
    }
}
