// GELU (tanh approximation) forward, llm.c style with a floatX typedef and a scaling-factor macro.
#define GELU_SCALING_FACTOR sqrtf(2.0f / 3.14159265358979f)
typedef float floatX;

__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float xi = inp[i];
        float cube = 0.044715f * xi * xi * xi;
        out[i] = 0.5f * xi * (1.0f + tanhf(GELU_SCALING_FACTOR * (xi + cube)));
    }
}
