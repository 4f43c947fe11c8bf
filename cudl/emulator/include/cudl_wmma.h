// nvcuda::wmma for the cudl emulator. Simplest correct emulation: every lane of the warp holds the
// WHOLE tile (num_elements = rows * cols, stored row-major inside the fragment), so load, store, fill and
// mma need no exchange between lanes; each lane computes the full product. Element-wise loops over
// frag.x[0..num_elements) behave as on the GPU (the mapping of elements to lanes is unspecified there).
#pragma once
// Every lane loads and stores the whole tile, so the emulator's race check (a -fsanitize=thread build) must not
// see these accesses as 32 lanes writing one element: they are one warp-wide operation on a GPU.
#define CUDL_WARP_COLLECTIVE __attribute__((no_sanitize_thread, noinline))
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision { struct tf32 {}; }
namespace experimental { namespace precision { struct u4 {}; struct s4 {}; struct b1 {}; } }

template <class Use, int M, int N, int K> struct __shape;
template <int M, int N, int K> struct __shape<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct __shape<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct __shape<accumulator, M, N, K> { enum { rows = M, cols = N }; };
template <class T> struct __storage { typedef T type; };
template <> struct __storage<precision::tf32> { typedef float type; };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    enum { rows = __shape<Use, M, N, K>::rows, cols = __shape<Use, M, N, K>::cols };
    enum { num_elements = rows * cols };
    typedef typename __storage<T>::type element_type;
    element_type x[num_elements];
};

template <class Use, int M, int N, int K, class T, class L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const typename fragment<Use, M, N, K, T, L>::element_type& v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}
template <class Use, int M, int N, int K, class T, class L, class P>
CUDL_WARP_COLLECTIVE static void __load(fragment<Use, M, N, K, T, L>& f, const P* p, unsigned ldm, bool col) {
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++) f.x[r * f.cols + c] = p[col ? (size_t)c * ldm + r : (size_t)r * ldm + c];
}
template <class Use, int M, int N, int K, class T, class P>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, row_major>& f, const P* p, unsigned ldm) { __load(f, p, ldm, false); }
template <class Use, int M, int N, int K, class T, class P>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, col_major>& f, const P* p, unsigned ldm) { __load(f, p, ldm, true); }
template <int M, int N, int K, class T, class P>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, T, void>& f, const P* p, unsigned ldm, layout_t l) {
    __load(f, p, ldm, l == mem_col_major);
}
#if defined(__SANITIZE_THREAD__)
extern "C" void __cudl_ck_init(const volatile void* p, size_t n);  // runtime.cpp: for the initcheck
#endif
template <int M, int N, int K, class T, class P>
CUDL_WARP_COLLECTIVE static void store_matrix_sync(P* p, const fragment<accumulator, M, N, K, T, void>& f, unsigned ldm,
                                                  layout_t l) {
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            p[l == mem_col_major ? (size_t)c * ldm + r : (size_t)r * ldm + c] = f.x[r * N + c];
#if defined(__SANITIZE_THREAD__)
    for (int i = 0; i < (l == mem_col_major ? N : M); i++) __cudl_ck_init(p + (size_t)i * ldm, sizeof(P) * (l == mem_col_major ? M : N));
#endif
}
template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC, class TD>
static inline void mma_sync(fragment<accumulator, M, N, K, TD, void>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                            const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC, void>& c,
                            bool satf = false) {
    float out[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = (float)c.x[i * N + j];
            for (int k = 0; k < K; k++) acc += (float)a.x[i * K + k] * (float)b.x[k * N + j];
            out[i * N + j] = satf ? fminf(fmaxf(acc, 0.f), 1.f) : acc;
        }
    for (int i = 0; i < M * N; i++) d.x[i] = out[i];
}
static inline float __float_to_tf32(float f) { return f; }
}  // namespace wmma
}  // namespace nvcuda
