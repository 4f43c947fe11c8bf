// vector_add as a standalone CUDA C++ program: what cudl.load and CuPy arrays do for you,
// written out. Allocate device memory, copy the inputs in, launch, copy the result back,
// check it, free everything, and check every CUDA call for errors.
// Build and run:  nvcc -O3 -arch=native -o vector_add vector_add_main.cu && ./vector_add
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

// Every runtime call returns a cudaError_t; stop at the first that is not cudaSuccess.
#define CUDA_CHECK(call)                                                        \
    do {                                                                        \
        cudaError_t err_ = (call);                                              \
        if (err_ != cudaSuccess) {                                              \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,  \
                         cudaGetErrorString(err_));                             \
            std::exit(EXIT_FAILURE);                                            \
        }                                                                       \
    } while (0)

// The kernel of chapter 1, unchanged: one thread per element, with a bounds check.
__global__ void vector_add(const float* __restrict__ x, const float* __restrict__ y,
                           float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}

int main() {
    const int n = 1 << 24;
    const size_t bytes = n * sizeof(float);
    std::vector<float> x(n), y(n), out(n, NAN);  // host memory; out poisoned with NaN
    for (int i = 0; i < n; ++i) {
        x[i] = std::sin(0.001f * i);
        y[i] = std::cos(0.002f * i);
    }

    float *d_x, *d_y, *d_out;  // device memory
    CUDA_CHECK(cudaMalloc(&d_x, bytes));
    CUDA_CHECK(cudaMalloc(&d_y, bytes));
    CUDA_CHECK(cudaMalloc(&d_out, bytes));
    CUDA_CHECK(cudaMemcpy(d_x, x.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_y, y.data(), bytes, cudaMemcpyHostToDevice));

    const int threads = 256;
    const int blocks = (n + threads - 1) / threads;
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start));
    vector_add<<<blocks, threads>>>(d_x, d_y, d_out, n);
    CUDA_CHECK(cudaGetLastError());       // a launch the GPU refused (bad configuration)
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));  // errors during the kernel show up here
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));

    CUDA_CHECK(cudaMemcpy(out.data(), d_out, bytes, cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < n; ++i) {
        // one float rounding per element: exact comparison with the same float sum
        if (!(out[i] == x[i] + y[i])) ++wrong;
    }
    std::printf("n = %d: %d wrong elements; one launch (cold) took %.3f ms, %.0f GB/s\n",
                n, wrong, ms, 3.0 * bytes / (ms * 1e6));

    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_y));
    CUDA_CHECK(cudaFree(d_out));
    return wrong == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
