// Choosing the next token from the logits, one block per sequence, no host round trip:
// sample_top_k: keeps the k largest logits (ties: the smaller token id first) and draws
//   token j with probability exp(z_j / temperature) / sum over the k of
//   exp(z / temperature),
//   by inverse transform: the first j whose running sum exceeds u[b] x total, for a
//   uniform number u[b] in [0, 1) passed in, so the same u gives the same token.
//   temperature <= 0 or k == 1 is argmax (greedy decoding). k <= MAX_K.
//   The top k are found in k rounds of a block argmax, each round over the logits that
//   rank below the previous winner: k x vocab / blockDim loads per thread, fine for the
//   k <= 64 of text generation (a large k would sort instead).
// advance: the bookkeeping at the end of a decode step, so that a whole step (and a CUDA
//   graph of it) needs no host: records the tokens in history[step] (history and u_all
//   have `steps` and steps + 1 rows; a step past them records nothing and reuses u_all
//   cyclically, so a benchmark may run any number of steps), moves each sequence's
//   position on by one and loads the next step's uniform numbers.
// Limit: latency; vocab x 4 bytes per round, a few microseconds at small vocabularies.
// Launch: sample_top_k: grid (batch), block (256); advance: grid (1), block (>= batch).
#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu
#define MAX_K 64
#define UNROLL 8  // logits per thread in flight
#define NEG_INF (-__int_as_float(0x7f800000))

struct Candidate {
    float v;
    int i;
};

// a ranks before b: larger logit, or the same logit and a smaller id. NaN never ranks.
__device__ __forceinline__ bool before(Candidate a, Candidate b) {
    return a.v > b.v || (a.v == b.v && a.i < b.i);
}

__device__ __forceinline__ Candidate warp_best(Candidate c) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        Candidate o{__shfl_xor_sync(FULL_MASK, c.v, offset),
                    __shfl_xor_sync(FULL_MASK, c.i, offset)};
        if (before(o, c)) c = o;
    }
    return c;
}

extern "C" __global__ void sample_top_k(const float* __restrict__ logits,
                                        const float* __restrict__ u,
                                        int* __restrict__ token, int vocab, int k,
                                        float temperature) {
    __shared__ Candidate warp_win[32], top[MAX_K];
    const float* z = logits + static_cast<long long>(blockIdx.x) * vocab;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int warps = blockDim.x / WARP_SIZE;
    if (temperature <= 0.0f) k = 1;
    k = max(1, min(k, min(vocab, MAX_K)));
    Candidate prev{__int_as_float(0x7f800000), -1};  // +inf ranks before every logit
    for (int r = 0; r < k; ++r) {
        Candidate best{NEG_INF, 0x7fffffff};
        // UNROLL loads per thread issued before any is compared (a load under the loop's
        // bound check would wait for the one before); an index past vocab re-reads the
        // last logit and is never a candidate
        const int stride = blockDim.x;
        for (int i0 = threadIdx.x; i0 < vocab; i0 += UNROLL * stride) {
            float v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) v[u] = z[min(i0 + u * stride, vocab - 1)];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const Candidate c{v[u], i0 + u * stride};
                if (c.i < vocab && before(prev, c) && before(c, best)) best = c;
            }
        }
        best = warp_best(best);
        if (lane == 0) warp_win[warp] = best;
        __syncthreads();
        best = lane < warps ? warp_win[lane] : Candidate{NEG_INF, 0x7fffffff};
        best = warp_best(best);  // every warp reduces the warp winners itself
        if (threadIdx.x == 0) top[r] = best;
        prev = best;
        __syncthreads();  // warp_win is read before the next round writes it
    }
    if (threadIdx.x == 0) {
        int pick = top[0].i;
        if (k > 1) {
            float total = 0.0f;
            for (int r = 0; r < k; ++r)
                total += expf((top[r].v - top[0].v) / temperature);
            const float target = u[blockIdx.x] * total;
            float run = 0.0f;
            pick = top[k - 1].i;  // u x total rounds to total or above: the last one
            for (int r = 0; r < k; ++r) {
                run += expf((top[r].v - top[0].v) / temperature);
                if (run > target) {
                    pick = top[r].i;
                    break;
                }
            }
        }
        token[blockIdx.x] = pick;
    }
}

extern "C" __global__ void advance(const int* __restrict__ token,
                                   int* __restrict__ history,
                                   const float* __restrict__ u_all,
                                   float* __restrict__ u_now, int* __restrict__ pos,
                                   int* __restrict__ step, int batch, int steps) {
    const int b = threadIdx.x;
    const int s = step[0];
    if (b < batch) {
        if (s < steps) history[static_cast<long long>(s) * batch + b] = token[b];
        u_now[b] = u_all[static_cast<long long>((s + 1) % (steps + 1)) * batch + b];
        pos[b] += 1;
    }
    __syncthreads();  // every thread has read step[0]
    if (b == 0) step[0] = s + 1;
}
