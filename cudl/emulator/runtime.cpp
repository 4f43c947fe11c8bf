// Runtime of the cudl CPU emulator: runs the blocks of a launch on a pool of worker threads, the threads
// of a block either in a plain loop (kernel .so's __cudl_block_N) or as fibers (__cudl_thread_N) when the
// kernel has barriers or warp primitives; turns faults (SIGSEGV/SIGBUS/SIGFPE) into a report.
// Compiled once by cudl/emulator/__init__.py (g++ -O2 -shared -fPIC -pthread) and loaded RTLD_GLOBAL, so
// the kernel libraries' __cudl_rt_* references resolve to it.
// Context switch: a few lines of assembly on x86-64 and aarch64 ELF (Linux); ucontext elsewhere (macOS,
// other architectures) or when built with -DCUDL_UCONTEXT (CUDL_EMULATOR_UCONTEXT=1), which is slower.
#if defined(__ELF__) && defined(__x86_64__) && !defined(CUDL_UCONTEXT)
#define CUDL_ASM_X86 1
#elif defined(__ELF__) && defined(__aarch64__) && !defined(CUDL_UCONTEXT)
#define CUDL_ASM_A64 1
#else
#define CUDL_UC 1
#ifdef __APPLE__
#define _XOPEN_SOURCE 700
#endif
#endif
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <tuple>
#include <unordered_map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <csetjmp>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sys/mman.h>
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>
#ifdef CUDL_UC
#include <ucontext.h>
#endif

#define EXPORT extern "C" __attribute__((visibility("default")))

typedef void (*entry_fn)(void** args, const unsigned* info);

struct cudl_launch {              // filled by Python (ctypes structure of the same layout)
    entry_fn block_fn;            // plain loop over the threads of one block
    entry_fn thread_fn;           // one thread (fiber mode)
    const void* (*tid_ptr)(void); // &threadIdx in the kernel library (for fault reports)
    void** args;
    unsigned grid[3], block[3];
    unsigned long long shared_mem;
    int fibers, workers;
    unsigned long long stack_size;
    int interruptible;            // called from Python's main thread: Ctrl-C (SIGINT) cancels the launch
    // result
    int status;                   // 0 ok, 1 memory fault at addr, 2 message about a thread, 3 stack overflow,
                                  // 4 message about a block (barrier / warp deadlock),
                                  // 5 dynamic shared memory overflow (addr = byte offset, signed),
                                  // 6 kernel needs fibers (relaunched by Python), 7 interrupted (SIGINT),
                                  // 8 data race (race check), 9 no progress (watchdog; message in msg),
                                  // 10 misaligned address (addr; msg: what \t file:line \t alignment),
                                  // 11 read of uninitialized shared memory (race check; cell as for 8),
                                  // 12 array index out of bounds (msg: array type \t index \t file:line:column)
    int is_write;                 // 1 write, 0 read, -1 unknown
    unsigned long long addr;
    unsigned tid[3], bid[3];
    char msg[1024];
    // more inputs
    int reverse;                  // CUDL_EMULATOR_SCHEDULE=reverse: blocks, and threads in a block, in reverse
    int nsmem;                    // static __shared__ variables, poisoned at every block start:
    const long long* smem;        // nsmem pairs (offset from &threadIdx, bytes)
    long long tls_off, ds_off;    // result: addr - &threadIdx, addr - dynamic shared memory (to name a variable)
};

// ------------------------------------------------------------------ context switch
#if defined(CUDL_ASM_X86)
// void cudl_switch(void** save_sp, void* new_sp): save callee-saved registers on this stack, switch.
asm(R"(
.text
.globl cudl_switch
.hidden cudl_switch
.type cudl_switch,@function
cudl_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size cudl_switch,.-cudl_switch
.globl cudl_fiber_start
.hidden cudl_fiber_start
.type cudl_fiber_start,@function
cudl_fiber_start:
    movq %r12, %rdi
    callq *%r13
    ud2
.size cudl_fiber_start,.-cudl_fiber_start
)");
#elif defined(CUDL_ASM_A64)
asm(R"(
.text
.globl cudl_switch
.hidden cudl_switch
.type cudl_switch,%function
cudl_switch:
    sub sp, sp, #176
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mov x9, sp
    str x9, [x0]
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #176
    ret
.size cudl_switch,.-cudl_switch
.globl cudl_fiber_start
.hidden cudl_fiber_start
.type cudl_fiber_start,%function
cudl_fiber_start:
    mov x0, x19
    blr x20
    brk #0
.size cudl_fiber_start,.-cudl_fiber_start
)");
#endif
#ifndef CUDL_UC
extern "C" void cudl_switch(void** save_sp, void* new_sp);
extern "C" void cudl_fiber_start(void);
#endif

// ------------------------------------------------------------------ per-worker state
enum { RUN, AT_BARRIER, AT_WARP, DONE };

struct Fiber {
    void* sp;
    char* stack_lo;  // lowest usable byte (the guard page lies just below)
    int state;
    unsigned lin;
    int line;
    const char* file;
    // warp operation
    int op, arg, width;
    unsigned mask;
    uint64_t val, result;
    const char* opname;
    unsigned wclk;  // warp-sync clock (race checks): raised past every lane's clock at each warp rendezvous
#ifdef CUDL_UC
    ucontext_t uc;
#endif
};

struct StackSet { char* base; size_t len, per; unsigned count; };
static std::mutex g_stack_mu;
static std::vector<StackSet> g_stacks;  // free stack sets, reused across launches
static size_t g_page;

struct Worker {
    cudl_launch* L;
    std::vector<Fiber> fibers;
    StackSet stacks{};
    void* sched_sp = nullptr;
#ifdef CUDL_UC
    ucontext_t sched_uc;
#endif
    Fiber* cur = nullptr;
    unsigned bid[3];
    unsigned info[13];  // blockIdx, blockDim, gridDim, threadIdx (fibers), reverse order (plain loop)
    char* dsmem = nullptr;
    unsigned long long stack_lo = 0;  // lowest byte of the worker thread's stack (plain mode runs threads on it)
    char* ds_base = nullptr;  // mapping of dynamic shared memory, guard pages included
    size_t ds_len = 0;
    const unsigned* tid_plain = nullptr;  // &threadIdx of the kernel library (plain mode)
    sigjmp_buf jmp;
    bool in_kernel = false;
    std::string error;  // barrier / warp errors found by the scheduler
    // Watchdog (read by the monitor thread without locks: a changing value means progress).
    std::atomic<unsigned long long> progress{0};
    std::atomic<unsigned long long> blin{0};  // linear index of the block being run
    unsigned epoch = 0;                       // barriers completed by this block (race checks)
    struct CheckState* ck = nullptr;          // race checks / counters (check mode only)
    // A misaligned address seen by a UBSan check that may not be an access (a reference bound, a member
    // named): reported only if a load or store, or an aligned SSE instruction's fault, follows.
    const void* ub_ptr = nullptr;
    char ub_what[200];
};
static inline void bump(std::atomic<unsigned long long>& c) {  // single writer: a plain increment
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
static thread_local Worker* t_w = nullptr;
EXPORT void* cudl_guarded_alloc(size_t nbytes, void** map_base, size_t* map_len);
EXPORT void __cudl_rt_trap(const char* what, const char* file, int line) __attribute__((noreturn));

static std::atomic<unsigned long long> g_next_block;
static std::atomic<int> g_abort;
static std::atomic<int> g_cancel;  // set by cudl_cancel()
static std::atomic<int> g_wd_fired;  // the watchdog stopped the launch (its report is in L)
static std::mutex g_warn_mu;
static std::string g_warning;  // one warning of the launch (barriers met at different lines), for Python
static std::mutex g_result_mu;
static std::mutex g_printf_mu;
static std::string g_printf;
static const size_t PRINTF_LIMIT = 1 << 20;

static void tid_of(Worker* w, unsigned out[3]) {
    if (w->cur) {
        unsigned bx = w->L->block[0], by = w->L->block[1], l = w->cur->lin;
        out[0] = l % bx; out[1] = (l / bx) % by; out[2] = l / (bx * by);
    } else if (w->tid_plain) {
        memcpy(out, w->tid_plain, 12);
    } else {
        out[0] = out[1] = out[2] = 0;
    }
}

// First error of the launch wins.
static void report(Worker* w, int status, const char* msg, unsigned long long addr, int is_write) {
    std::lock_guard<std::mutex> g(g_result_mu);
    if (w->L->status) return;
    w->L->status = status;
    w->L->addr = addr;
    w->L->is_write = is_write;
    w->L->tls_off = (long long)(addr - (unsigned long long)w->tid_plain);
    w->L->ds_off = (long long)(addr - (unsigned long long)w->dsmem);
    tid_of(w, w->L->tid);
    memcpy(w->L->bid, w->bid, sizeof w->bid);
    snprintf(w->L->msg, sizeof w->L->msg, "%s", msg ? msg : "");
    g_abort.store(1);
}

// Report and leave the kernel (from kernel code: the worker's sigsetjmp takes over).
[[noreturn]] static void stop_kernel(Worker* w, int status, const char* msg, const void* addr, int is_write) {
    report(w, status, msg, (unsigned long long)addr, is_write);
    w->in_kernel = false;
    siglongjmp(w->jmp, 1);
}

// ------------------------------------------------------------------ signals
static struct sigaction g_old[4];
static const int g_sigs[4] = {SIGSEGV, SIGBUS, SIGFPE, SIGUSR2};  // SIGUSR2: cudl_cancel()
static std::mutex g_sig_mu;
static int g_sig_users = 0;

static void on_signal(int sig, siginfo_t* si, void* ucv) {
    Worker* w = t_w;
    if (!w || !w->in_kernel) {  // not a kernel thread: let the previous handler see it
        for (int i = 0; i < 4; i++)
            if (g_sigs[i] == sig && sig != SIGUSR2) sigaction(sig, &g_old[i], nullptr);
        return;
    }
    if (sig == SIGUSR2) {  // cancelled (Ctrl-C in Python): leave the kernel, report nothing
        w->in_kernel = false;
        siglongjmp(w->jmp, 1);
    }
    unsigned long long addr = (unsigned long long)si->si_addr;
    int is_write = -1;
#if defined(__linux__) && defined(__x86_64__)
    if (sig == SIGSEGV) is_write = (((ucontext_t*)ucv)->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#else
    (void)ucv;
#endif
    int status = 1;
    const char* msg = "";
    // Stack overflow only where a stack ends: a fiber's guard page (big frames probe every page, see
    // -fstack-clash-protection, so they fault there too), or just below the worker thread's own stack.
    // A wild write elsewhere is an out-of-bounds access, named after the nearest argument by Python.
    const unsigned long long below = 64 * 1024;
#ifdef SI_KERNEL
    const bool gp = sig == SIGSEGV && si->si_code == SI_KERNEL;  // general protection, e.g. an unaligned movaps
#else
    const bool gp = false;
#endif
    if (sig == SIGFPE) {
        status = 2;
        msg = "arithmetic exception (integer division by zero?)";
    } else if (gp && w->ub_ptr) {
        status = 10;  // an aligned SSE load/store at the misaligned address a UBSan check saw first
        msg = w->ub_what;
        addr = (unsigned long long)w->ub_ptr;
    } else if (w->cur && w->stacks.base && addr + below >= (unsigned long long)w->stacks.base &&
               addr < (unsigned long long)(w->stacks.base + w->stacks.len)) {
        status = 3;  // a fiber ran into the guard page below its stack
    } else if (!w->cur && w->stack_lo && addr + below >= w->stack_lo && addr < w->stack_lo + g_page) {
        status = 3;  // plain mode: the worker thread's own stack (8 MiB by default) overflowed
    } else if (w->ds_base && addr >= (unsigned long long)w->ds_base &&
               addr < (unsigned long long)(w->ds_base + w->ds_len)) {
        status = 5;  // dynamic shared memory overflow: addr becomes the byte offset
        addr = addr - (unsigned long long)w->dsmem;
    }
    report(w, status, msg, addr, is_write);
    w->in_kernel = false;
    siglongjmp(w->jmp, 1);
}

static void install_signals() {
    std::lock_guard<std::mutex> g(g_sig_mu);
    if (g_sig_users++) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 4; i++) sigaction(g_sigs[i], &sa, &g_old[i]);
}
static void restore_signals() {
    std::lock_guard<std::mutex> g(g_sig_mu);
    if (--g_sig_users) return;
    for (int i = 0; i < 4; i++) sigaction(g_sigs[i], &g_old[i], nullptr);
}

// ------------------------------------------------------------------ fibers
static void take_stacks(Worker* w, unsigned n, size_t per) {
    {
        std::lock_guard<std::mutex> g(g_stack_mu);
        for (size_t i = 0; i < g_stacks.size(); i++)
            if (g_stacks[i].per == per && g_stacks[i].count >= n) {
                w->stacks = g_stacks[i];
                g_stacks.erase(g_stacks.begin() + i);
                return;
            }
    }
    size_t slot = per + g_page, len = slot * n;
    char* base = (char*)mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) { w->stacks = StackSet{}; return; }
    for (unsigned i = 0; i < n; i++) mprotect(base + i * slot, g_page, PROT_NONE);
    w->stacks = StackSet{base, len, per, n};
}
static void give_stacks(Worker* w) {
    if (!w->stacks.base) return;
    std::lock_guard<std::mutex> g(g_stack_mu);
    g_stacks.push_back(w->stacks);
    if (g_stacks.size() > 8) {  // keep a few
        munmap(g_stacks[0].base, g_stacks[0].len);
        g_stacks.erase(g_stacks.begin());
    }
    w->stacks = StackSet{};
}

// A fiber that blocks (barrier, warp operation, exit) passes control straight to the next runnable fiber
// of the round; the last one of the round returns to the scheduler. One switch per block instead of two.
// A round runs the threads in order of their linear index, or in reverse (CUDL_EMULATOR_SCHEDULE=reverse).
static Fiber* next_runnable(Worker* w, long from) {
    const long n = (long)w->fibers.size();
    if (!w->L->reverse) {
        for (long i = from; i < n; i++)
            if (w->fibers[i].state == RUN) return &w->fibers[i];
    } else {
        for (long i = from < n ? from : n - 1; i >= 0; i--)
            if (w->fibers[i].state == RUN) return &w->fibers[i];
    }
    return nullptr;
}
static Fiber* first_runnable(Worker* w) { return next_runnable(w, w->L->reverse ? (long)w->fibers.size() - 1 : 0); }
static void to_scheduler(Worker* w, Fiber* f) {
    bump(w->progress);
    Fiber* nx = g_abort.load(std::memory_order_relaxed) ? nullptr
              : next_runnable(w, w->L->reverse ? (long)f->lin - 1 : (long)f->lin + 1);
    w->cur = nx;
#ifndef CUDL_UC
    cudl_switch(&f->sp, nx ? nx->sp : w->sched_sp);
#else
    swapcontext(&f->uc, nx ? &nx->uc : &w->sched_uc);
#endif
}

static void fiber_main(Fiber* f) {
    Worker* w = t_w;
    unsigned* info = w->info;
    unsigned bx = w->L->block[0], by = w->L->block[1];
    info[9] = f->lin % bx; info[10] = (f->lin / bx) % by; info[11] = f->lin / (bx * by);
    w->L->thread_fn(w->L->args, info);
    f->state = DONE;
    to_scheduler(w, f);
    abort();  // never resumed
}
#ifdef CUDL_UC
static void fiber_tramp(unsigned hi, unsigned lo) {
    fiber_main((Fiber*)(((uintptr_t)hi << 32) | lo));
}
#endif

static void start_fiber(Worker* w, Fiber* f) {
    size_t slot = w->stacks.per + g_page;
    f->stack_lo = w->stacks.base + f->lin * slot + g_page;
    // Stagger the stack tops by cache lines: at equal offsets modulo 4 KiB every fiber's hot frames would
    // fall into the same L1 set and evict each other on every switch.
    char* top = f->stack_lo + w->stacks.per - (f->lin % 61) * 64;  // 16-byte aligned
#if defined(CUDL_ASM_X86)
    void** sp = (void**)top;
    // After cudl_switch's ret, rsp == top (16-byte aligned), so the call in cudl_fiber_start enters
    // fiber_main with rsp % 16 == 8, as the ABI requires.
    *--sp = (void*)cudl_fiber_start;       // return address of cudl_switch
    *--sp = nullptr;                       // rbp
    *--sp = nullptr;                       // rbx
    *--sp = (void*)f;                      // r12 -> rdi
    *--sp = (void*)fiber_main;             // r13 -> called
    *--sp = nullptr;                       // r14
    *--sp = nullptr;                       // r15
    f->sp = sp;
#elif defined(CUDL_ASM_A64)
    void** sp = (void**)(top - 176);
    memset(sp, 0, 176);
    sp[0] = (void*)f;                      // x19 -> x0
    sp[1] = (void*)fiber_main;             // x20 -> called
    sp[11] = (void*)cudl_fiber_start;      // x30 (lr)
    f->sp = sp;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack_lo;
    f->uc.uc_stack.ss_size = (size_t)(top - f->stack_lo);
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, (void (*)())fiber_tramp, 2, (unsigned)((uintptr_t)f >> 32), (unsigned)(uintptr_t)f);
#endif
}

static void run_fiber(Worker* w, Fiber* f) {
    w->cur = f;
#ifndef CUDL_UC
    cudl_switch(&w->sched_sp, f->sp);
#else
    swapcontext(&w->sched_uc, &f->uc);
#endif
    w->cur = nullptr;
}

// ------------------------------------------------------------------ warp rendezvous
static const char* g_opnames[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                  "__ballot_sync", "__any_sync", "__all_sync", "__syncwarp",
                                  "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
                                  "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
                                  "__match_any_sync", "__match_all_sync", "__activemask"};
static const int OP_ACTIVEMASK = 16;

// Result of lane `lane` of group `g` (bit set of waiting lanes), PTX semantics for shuffles.
static uint64_t warp_result(Fiber* base, unsigned nl, unsigned g, unsigned lane) {
    Fiber& f = base[lane];
    int op = f.op;
    if (op <= 3) {
        unsigned w = (unsigned)f.width, b = (unsigned)f.arg, seg = lane & ~(w - 1), maxl = seg | (w - 1);
        long j;
        bool ok;
        switch (op) {
            case 0: j = seg | (b & (w - 1)); ok = true; break;
            case 1: j = (long)lane - (long)b; ok = j >= (long)seg; break;
            case 2: j = (long)lane + (long)b; ok = j <= (long)maxl; break;
            default: j = lane ^ (b & 31); ok = j <= (long)maxl; break;
        }
        if (!ok || j < 0 || j >= (long)nl || !((g >> j) & 1)) return f.val;  // inactive source: own value
        return base[j].val;
    }
    uint64_t r = 0;
    switch (op) {
        case 4: for (unsigned l = 0; l < nl; l++) if (((g >> l) & 1) && base[l].val) r |= 1ull << l; return r;
        case 5: for (unsigned l = 0; l < nl; l++) if (((g >> l) & 1) && base[l].val) return 1; return 0;
        case 6: for (unsigned l = 0; l < nl; l++) if (((g >> l) & 1) && !base[l].val) return 0; return 1;
        case 7: return 0;
        case 14: for (unsigned l = 0; l < nl; l++) if (((g >> l) & 1) && base[l].val == f.val) r |= 1ull << l; return r;
        default: break;
    }
    bool first = true, sgn = f.arg != 0;
    for (unsigned l = 0; l < nl; l++) {
        if (!((g >> l) & 1)) continue;
        uint32_t v = (uint32_t)base[l].val;
        if (first) { r = v; first = false; continue; }
        uint32_t a = (uint32_t)r;
        switch (op) {
            case 8: a += v; break;
            case 9: a = sgn ? (uint32_t)((int32_t)v < (int32_t)a ? v : a) : (v < a ? v : a); break;
            case 10: a = sgn ? (uint32_t)((int32_t)v > (int32_t)a ? v : a) : (v > a ? v : a); break;
            case 11: a &= v; break;
            case 12: a |= v; break;
            case 13: a ^= v; break;
        }
        r = a;
    }
    return r;
}

// Complete every warp operation whose participants have all arrived; false when none could.
static bool resolve_warps(Worker* w, unsigned n) {
    bool progress = false;
    for (unsigned w0 = 0; w0 < n; w0 += 32) {
        Fiber* base = &w->fibers[w0];
        unsigned nl = n - w0 < 32 ? n - w0 : 32;
        unsigned handled = 0;
        for (unsigned l = 0; l < nl; l++) {
            if (base[l].state != AT_WARP || base[l].op == OP_ACTIVEMASK || ((handled >> l) & 1)) continue;
            unsigned m = base[l].mask | (1u << l), g = 0;
            bool ok = true;
            for (unsigned k = 0; k < nl && ok; k++) {
                if (!((m >> k) & 1) || base[k].state == DONE) continue;
                if (base[k].state != AT_WARP || base[k].op == OP_ACTIVEMASK || base[k].mask != base[l].mask) ok = false;
                else g |= 1u << k;
            }
            if (!ok) continue;
            uint64_t res[32];
            unsigned clk = 0;
            for (unsigned k = 0; k < nl; k++)
                if ((g >> k) & 1) { res[k] = warp_result(base, nl, g, k); clk = base[k].wclk > clk ? base[k].wclk : clk; }
            for (unsigned k = 0; k < nl; k++)
                if ((g >> k) & 1) { base[k].result = res[k]; base[k].state = RUN; base[k].wclk = clk + 1; }
            handled |= g;
            progress = true;
        }
    }
    return progress;
}

// __activemask(): once nothing else can move, the lanes of a warp waiting at the same __activemask() call
// are the lanes that run together there (the emulator's stand-in for the GPU's convergence).
static bool resolve_activemask(Worker* w, unsigned n) {
    bool progress = false;
    for (unsigned w0 = 0; w0 < n; w0 += 32) {
        Fiber* base = &w->fibers[w0];
        unsigned nl = n - w0 < 32 ? n - w0 : 32, handled = 0;
        for (unsigned l = 0; l < nl; l++) {
            if (base[l].state != AT_WARP || base[l].op != OP_ACTIVEMASK || ((handled >> l) & 1)) continue;
            unsigned g = 0;
            for (unsigned k = l; k < nl; k++)
                if (base[k].state == AT_WARP && base[k].op == OP_ACTIVEMASK && base[k].line == base[l].line &&
                    (base[k].file == base[l].file || !strcmp(base[k].file, base[l].file)))
                    g |= 1u << k;
            for (unsigned k = l; k < nl; k++)
                if ((g >> k) & 1) { base[k].result = g; base[k].state = RUN; }
            handled |= g;
            progress = true;
        }
    }
    return progress;
}

// "0-15, 17, 20-31"
static void lane_list(unsigned bits, char* out, size_t cap) {
    out[0] = 0;
    for (unsigned k = 0; k < 32;) {
        if (!((bits >> k) & 1)) { k++; continue; }
        unsigned e = k;
        while (e + 1 < 32 && ((bits >> (e + 1)) & 1)) e++;
        char one[16];
        if (e == k) snprintf(one, sizeof one, "%s%u", out[0] ? ", " : "", k);
        else snprintf(one, sizeof one, "%s%u-%u", out[0] ? ", " : "", k, e);
        if (strlen(out) + strlen(one) < cap) strcat(out, one);
        k = e + 1;
    }
}

// Why a block cannot go on: a message naming the barrier or warp operation.
static std::string stuck_message(Worker* w, unsigned n) {
    char buf[900];
    unsigned at_bar = 0, done = 0;
    Fiber *bar = nullptr, *other_bar = nullptr, *warp = nullptr;
    for (unsigned i = 0; i < n; i++) {
        Fiber& f = w->fibers[i];
        if (f.state == DONE) done++;
        if (f.state == AT_BARRIER) {
            at_bar++;
            if (!bar) bar = &f;
            else if (!other_bar && (f.line != bar->line || strcmp(f.file, bar->file))) other_bar = &f;
        }
        if (f.state == AT_WARP && !warp) warp = &f;
    }
    if (other_bar) {
        snprintf(buf, sizeof buf, "threads of block (%u,%u,%u) wait at different barriers: __syncthreads() at %s:%d "
                 "and at %s:%d (a barrier inside divergent code?)", w->bid[0], w->bid[1], w->bid[2],
                 bar->file, bar->line, other_bar->file, other_bar->line);
    } else if (warp) {
        // The lanes its mask names that wait elsewhere, grouped by where they wait.
        const unsigned w0 = warp->lin / 32 * 32, nl = n - w0 < 32 ? n - w0 : 32;
        const Fiber* base = &w->fibers[w0];
        unsigned missing = 0;
        for (unsigned k = 0; k < nl; k++)
            if (((warp->mask >> k) & 1) && base[k].state != DONE &&
                !(base[k].state == AT_WARP && base[k].op != OP_ACTIVEMASK && base[k].mask == warp->mask))
                missing |= 1u << k;
        char lanes[120], where[400] = "";
        lane_list(missing, lanes, sizeof lanes);
        for (unsigned todo = missing; todo;) {
            const Fiber& o = base[__builtin_ctz(todo)];
            unsigned same = 0;
            for (unsigned k = 0; k < nl; k++)
                if (((todo >> k) & 1) && base[k].state == o.state && base[k].line == o.line &&
                    !strcmp(base[k].file, o.file) && (o.state != AT_WARP || (base[k].op == o.op && base[k].mask == o.mask)))
                    same |= 1u << k;
            todo &= ~same;
            char group[120], one[260];
            lane_list(same, group, sizeof group);
            if (o.state == AT_WARP && o.op == OP_ACTIVEMASK)
                snprintf(one, sizeof one, "; lanes %s wait at __activemask() at %s:%d", group, o.file, o.line);
            else if (o.state == AT_WARP)
                snprintf(one, sizeof one, "; lanes %s wait at %s at %s:%d (mask 0x%08x)", group, g_opnames[o.op], o.file,
                         o.line, o.mask);
            else
                snprintf(one, sizeof one, "; lanes %s wait at __syncthreads() at %s:%d", group, o.file, o.line);
            if (strlen(where) + strlen(one) < sizeof where) strcat(where, one);
        }
        snprintf(buf, sizeof buf, "%s at %s:%d in warp %u of block (%u,%u,%u): mask 0x%08x names lanes %s, which did "
                 "not reach it (every lane the mask names must call the same primitive, unless it has exited)%s",
                 g_opnames[warp->op], warp->file, warp->line, warp->lin / 32, w->bid[0], w->bid[1], w->bid[2],
                 warp->mask, lanes, where);
    } else {
        snprintf(buf, sizeof buf, "__syncthreads() at %s:%d reached by only %u of %u threads of block (%u,%u,%u)%s",
                 bar->file, bar->line, at_bar, n, w->bid[0], w->bid[1], w->bid[2],
                 done ? " (the others returned before it: a barrier after an early return?)" : "");
    }
    return buf;
}

// Threads of a block met at __syncthreads() calls on different lines. GPUs since Volta count arrivals at
// barrier 0 whatever the call site, so the block goes on; the programming guide still calls a barrier in
// divergent code undefined, so Python shows this once per launch as a warning.
static void note_split_barrier(Worker* w, unsigned n) {
    Fiber& f0 = w->fibers[0];
    const Fiber* other = nullptr;
    for (unsigned i = 1; i < n && !other; i++)
        if (w->fibers[i].line != f0.line || strcmp(w->fibers[i].file, f0.file)) other = &w->fibers[i];
    if (!other) return;
    std::lock_guard<std::mutex> g(g_warn_mu);
    if (!g_warning.empty()) return;
    char buf[600];
    snprintf(buf, sizeof buf, "threads of block (%u,%u,%u) met at different __syncthreads() calls (%s:%d and "
             "%s:%d); the emulator lets them pass, as GPUs since Volta do, but CUDA calls a barrier in "
             "divergent code undefined: give both halves one shared __syncthreads()", w->bid[0], w->bid[1],
             w->bid[2], f0.file, f0.line, other->file, other->line);
    g_warning = buf;
}
EXPORT size_t cudl_take_warning(char* out, size_t cap) {
    std::lock_guard<std::mutex> g(g_warn_mu);
    size_t n = g_warning.size() < cap ? g_warning.size() : cap;
    memcpy(out, g_warning.data(), n);
    g_warning.clear();
    return n;
}

// Run one block with every thread as a fiber; false on a barrier/warp error (message in w->error).
static bool run_block_fibers(Worker* w, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        Fiber& f = w->fibers[i];
        f.state = RUN;
        f.lin = i;
        f.wclk = 0;
        start_fiber(w, &f);
    }
    for (;;) {
        unsigned live = 0, at_bar = 0;
        if (Fiber* first = first_runnable(w)) run_fiber(w, first);  // runs the whole round
        if (g_abort.load(std::memory_order_relaxed)) return true;
        for (unsigned i = 0; i < n; i++) {
            int s = w->fibers[i].state;
            live += s != DONE;
            at_bar += s == AT_BARRIER;
        }
        if (!live) return true;
        if (at_bar != n && (resolve_warps(w, n) || resolve_activemask(w, n))) continue;
        if (at_bar == n) {
            Fiber& f0 = w->fibers[0];
            bool same = true;
            for (unsigned i = 1; i < n && same; i++)
                same = w->fibers[i].line == f0.line &&
                       (w->fibers[i].file == f0.file || !strcmp(w->fibers[i].file, f0.file));
            if (!same) note_split_barrier(w, n);  // allowed, as on Volta and newer GPUs; Python warns once
            {
                w->epoch++;
                unsigned count = 0;
                for (unsigned i = 0; i < n; i++) count += (unsigned)w->fibers[i].val;
                for (unsigned i = 0; i < n; i++) {
                    Fiber& f = w->fibers[i];
                    f.result = f.op == 1 ? count : f.op == 2 ? count == n : f.op == 3 ? count > 0 : 0;
                    f.state = RUN;
                }
                continue;
            }
        }
        w->error = stuck_message(w, n);
        return false;
    }
}

// A barrier or warp primitive in a kernel launched without fibers (the source scan missed it): status 6 makes
// Python run the launch again, from fresh copies of the arguments, with fibers.
static void needs_fibers(Worker* w) __attribute__((noreturn));
static void needs_fibers(Worker* w) {
    if (!w || !w->in_kernel) abort();
    report(w, 6, "", 0, -1);
    w->in_kernel = false;
    siglongjmp(w->jmp, 1);
}

// __syncthreads() (op 0) and __syncthreads_count/_and/_or (op 1/2/3 with predicate pred).
EXPORT int __cudl_rt_barrier_op(int op, int pred, int line, const char* file) {
    Worker* w = t_w;
    Fiber* f = w ? w->cur : nullptr;
    if (!f) {
        if (w && w->L->block[0] * w->L->block[1] * w->L->block[2] == 1) return op == 1 ? pred != 0 : pred != 0;
        needs_fibers(w);
    }
    f->state = AT_BARRIER;
    f->op = op;
    f->val = pred != 0;
    f->line = line;
    f->file = file;
    to_scheduler(w, f);
    return (int)f->result;
}
EXPORT void __cudl_rt_barrier(int line, const char* file) { __cudl_rt_barrier_op(0, 0, line, file); }

EXPORT uint64_t __cudl_rt_warp(int op, unsigned mask, uint64_t val, int arg, int width, int line, const char* file) {
    Worker* w = t_w;
    Fiber* f = w ? w->cur : nullptr;
    if (!f) needs_fibers(w);
    if (op <= 3 && (width < 1 || width > 32 || (width & (width - 1))))
        __cudl_rt_trap("shuffle width must be a power of 2 from 1 to 32", file, line);
    const unsigned lane = f->lin & 31;
    if (op != OP_ACTIVEMASK && !((mask >> lane) & 1)) {  // CUDA: every calling thread must have its bit set
        char buf[400];
        snprintf(buf, sizeof buf, "%s at %s:%d: mask 0x%08x does not name lane %u of warp %u, which calls it (every "
                 "lane that calls a warp primitive must be in its mask)", g_opnames[op], file, line, mask, lane,
                 f->lin / 32);
        stop_kernel(w, 2, buf, nullptr, -1);
    }
    f->state = AT_WARP;
    f->op = op; f->mask = mask; f->val = val; f->arg = arg; f->width = width; f->line = line; f->file = file;
    to_scheduler(w, f);
    return f->result;
}

EXPORT void* __cudl_dynamic_smem(void) { return t_w ? t_w->dsmem : nullptr; }

EXPORT long long __cudl_rt_clock(void) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

EXPORT void __cudl_rt_trap(const char* what, const char* file, int line) {
    Worker* w = t_w;
    char buf[600];
    snprintf(buf, sizeof buf, "%s at %s:%d", what, file, line);
    if (!w || !w->in_kernel) { fprintf(stderr, "%s\n", buf); abort(); }
    report(w, 2, buf, 0, -1);
    w->in_kernel = false;
    siglongjmp(w->jmp, 1);
}

// ------------------------------------------------------------------ misaligned addresses, array bounds
// A GPU faults ("misaligned address") on an access that is not aligned to its size: a float4 load at a
// float's address, a half2 at an odd __half. Kernel libraries are compiled with -fsanitize=alignment (the
// race-check build with -fsanitize=bounds too) and linked without UBSan's runtime: g++ checks the alignment
// of every access through a pointer and calls the handlers below, which stop the launch with a report, as
// compute-sanitizer's memcheck does. The prelude calls __cudl_rt_misaligned itself for __ldg and friends,
// cp.async and ldmatrix.
EXPORT void __cudl_rt_misaligned(const void* p, const char* what, unsigned align, int is_write, const char* file,
                                 int line) {
    Worker* w = t_w;
    char buf[600];
    if (line > 0) snprintf(buf, sizeof buf, "%s\t%s:%d\t%u", what, file, line, align);
    else snprintf(buf, sizeof buf, "%s\t%s\t%u", what, file, align);  // "its launch": an argument
    if (!w || !w->in_kernel) { fprintf(stderr, "misaligned address: %s\n", buf); abort(); }
    stop_kernel(w, 10, buf, p, is_write);
}
struct UbLoc { const char* file; unsigned line, col; };
struct UbType { unsigned short kind, info; char name[1]; };  // name: "'const struct float4'"
struct UbMismatch { UbLoc loc; const UbType* type; unsigned char log_align, check; };
struct UbBounds { UbLoc loc; const UbType* array; const UbType* index; };
static void ub_type_name(const UbType* t, char* out, size_t cap) {  // 'const struct float4' -> float4
    const char* s = t->name;
    if (*s == '\'') s++;
    for (bool again = true; again;) {
        again = false;
        for (const char* q : {"const ", "volatile ", "struct ", "union ", "class "})
            if (!strncmp(s, q, strlen(q))) { s += strlen(q); again = true; }
    }
    snprintf(out, cap, "%s", s);
    size_t n = strlen(out);
    if (n && out[n - 1] == '\'') out[n - 1] = 0;
}
static void ub_mismatch(UbMismatch* d, uintptr_t p) {
    Worker* w = t_w;
    if (!w || !w->in_kernel || !p) return;  // null: the fault handler reports it when it is accessed
    char type[160], what[200];
    ub_type_name(d->type, type, sizeof type);
    const unsigned align = 1u << d->log_align;
    // check kinds (UBSan's TypeCheckKind): 0 load, 1 store, 2 reference binding, 3 member access, 4 member call.
    // A member named through a misaligned float4* is reported (nvcc merges p->x ... p->w into one 16-byte
    // access, which faults); a reference bound to it is not yet an access: the load or store that follows is.
    snprintf(what, sizeof what, "%s %s", d->check == 0 ? "read of" : d->check == 1 ? "write of" :
             d->check == 2 ? "reference to" : "access to a member of", type);
    if (d->check == 2 || d->check > 4) {
        w->ub_ptr = (const void*)p;
        snprintf(w->ub_what, sizeof w->ub_what, "%s\t%s:%u\t%u", what, d->loc.file, d->loc.line, align);
        return;
    }
    char buf[600];
    snprintf(buf, sizeof buf, "%s\t%s:%u\t%u", what, d->loc.file, d->loc.line, align);
    stop_kernel(w, 10, buf, (const void*)p, d->check == 1);
}
EXPORT void __ubsan_handle_type_mismatch_v1(UbMismatch* d, uintptr_t p) { ub_mismatch(d, p); }
EXPORT void __ubsan_handle_type_mismatch_v1_abort(UbMismatch* d, uintptr_t p) { ub_mismatch(d, p); }
static void ub_bounds(UbBounds* d, uintptr_t raw) {
    Worker* w = t_w;
    if (!w || !w->in_kernel) return;
    char type[160], buf[600];
    ub_type_name(d->array, type, sizeof type);
    long long index = (long long)raw;
    const unsigned bits = 1u << (d->index->info >> 1);  // integer type descriptor: log2 of the width, signed
    if (d->index->kind == 0 && bits < 64) {
        unsigned long long v = raw & ((1ull << bits) - 1);
        index = (d->index->info & 1) && (v >> (bits - 1)) ? (long long)(v | ~((1ull << bits) - 1)) : (long long)v;
    }
    snprintf(buf, sizeof buf, "%s\t%lld\t%s:%u:%u", type, index, d->loc.file, d->loc.line, d->loc.col);
    stop_kernel(w, 12, buf, nullptr, -1);
}
EXPORT void __ubsan_handle_out_of_bounds(UbBounds* d, uintptr_t index) { ub_bounds(d, index); }
EXPORT void __ubsan_handle_out_of_bounds_abort(UbBounds* d, uintptr_t index) { ub_bounds(d, index); }

EXPORT int __cudl_printf(const char* fmt, ...) {
    Worker* w = t_w;
    bool was = w && w->in_kernel;
    if (w) w->in_kernel = false;  // no cancel while holding locks (ours, malloc's)
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    {
        std::lock_guard<std::mutex> g(g_printf_mu);
        if (g_printf.size() < PRINTF_LIMIT) {
            g_printf.append(buf, n < (int)sizeof buf ? (size_t)(n < 0 ? 0 : n) : sizeof buf - 1);
            if (g_printf.size() >= PRINTF_LIMIT) g_printf += "\n[cudl emulator: printf output of this launch cut at 1 MiB]\n";
        }
    }
    if (w) w->in_kernel = was;
    if (was && (g_cancel.load(std::memory_order_relaxed) || g_wd_fired.load(std::memory_order_relaxed))) {  // cancelled while formatting: leave now
        w->in_kernel = false;
        siglongjmp(w->jmp, 1);
    }
    return n;
}

// Python takes the captured printf output after each launch.
EXPORT size_t cudl_take_printf(char* out, size_t cap) {
    std::lock_guard<std::mutex> g(g_printf_mu);
    size_t n = g_printf.size() < cap ? g_printf.size() : cap;
    memcpy(out, g_printf.data(), n);
    g_printf.erase(0, n);
    return n;
}
EXPORT size_t cudl_printf_pending(void) {
    std::lock_guard<std::mutex> g(g_printf_mu);
    return g_printf.size();
}

// ------------------------------------------------------------------ checks: races and counters
// Only kernel libraries built for check mode (-fsanitize=thread, see _checked_library in __init__.py) call
// the __tsan_* hooks below: g++ puts a call before every load and store (address, size) and turns every
// atomic into a call. Nothing here runs for the normal, uninstrumented libraries. Check mode runs one
// worker thread, so the shadow state needs no locks.
struct cudl_checks {                    // filled by Python (ctypes structure of the same layout)
    int mode;                           // bit 0: races, bit 1: counters
    int nregions;
    const long long* regions;           // 5 values per region: start, end, granule, id, base (0: absolute
                                        // addresses, 1: offsets from &threadIdx, 2: from dynamic shared memory,
                                        // 3: from the kernel library's load address: __device__ variables)
    // the race found (race = 1): the earlier access [0] and the later one [1]
    int race, region;
    unsigned long long offset;          // byte offset of the shadow cell in the region
    unsigned long long blk[2];
    unsigned tid[2], pc[2], write[2], atomic[2];
};

struct Acc { uint32_t blk, epoch, wclk, t, pc; uint16_t tid, flags; };  // flags: 1 valid, 2 atomic, 4 write
struct Cell { Acc w, r1, r2; uint32_t init; };  // last write, two reads since it; init: 1 + block of the last write
struct Region { uintptr_t lo, hi; uint32_t gran; int id; bool shared; Cell* shadow; size_t ncells, maplen; };
struct ReqKey {
    uint32_t warp, pc, k;
    bool operator==(const ReqKey& o) const { return warp == o.warp && pc == o.pc && k == o.k; }
};
struct ReqHash {
    size_t operator()(const ReqKey& k) const { return ((size_t)k.pc * 0x9E3779B97F4A7C15ull) ^ ((size_t)k.k << 20) ^ k.warp; }
};
struct Req { uint8_t kind, write, n; uintptr_t addr[32]; uint16_t size[32]; uint8_t lane[32]; };
struct Agg { unsigned long long pc, kind, write, requests, units, ideal, lanes; };  // units: sectors / wavefronts
struct CheckState {
    std::vector<Region> regs;
    uintptr_t mod_base = 0;
    unsigned nthreads = 0;
    std::vector<std::unordered_map<uint32_t, uint32_t>> kcount;  // per thread: pc -> dynamic count
    std::unordered_map<ReqKey, Req, ReqHash> reqs;
    uint32_t last_warp = ~0u;
};
static cudl_checks* g_ck = nullptr;
static uint32_t g_T = 1;                                  // logical time, advanced at releases and acquires
static std::vector<uint32_t> g_rel, g_acq;                // per block: time of its last release / acquire
static std::vector<uint8_t> g_pend_rel, g_pend_acq;       // a fence waiting for an atomic, and the reverse
static std::map<std::tuple<uint32_t, int, int>, Agg> g_aggs;  // counters per (pc, kind, write)
static std::vector<uint32_t> g_thread_acc;                // counters: accesses per thread of the grid
static const size_t THREAD_COUNT_LIMIT = 1u << 24;

static void ck_leave_if_stopped(Worker* w) {
    w->in_kernel = true;
    if (g_cancel.load(std::memory_order_relaxed) || g_wd_fired.load(std::memory_order_relaxed)) {
        w->in_kernel = false;
        siglongjmp(w->jmp, 1);
    }
}

// Accesses by different blocks are never ordered, except through a release (a __threadfence() and then an
// atomic, by the earlier block) and an acquire (an atomic and then a __threadfence(), by the later one).
static inline bool ck_concurrent(const Acc& a, const Acc& me, bool shared) {
    if (!(a.flags & 1)) return false;
    if (a.blk != me.blk) {
        if (shared) return false;  // another block's shared memory: gone
        uint32_t rel = g_rel[a.blk];
        return !(rel > a.t && g_acq[me.blk] >= rel);
    }
    if (a.tid == me.tid || a.epoch != me.epoch) return false;  // same thread, or a barrier between them
    if ((a.tid >> 5) == (me.tid >> 5) && a.wclk < me.wclk) return false;  // a warp rendezvous between them
    return true;
}
// Not a conflict: two atomics, or an atomic and a plain read (the compare-and-swap idiom reads *p plainly,
// then retries if an atomic changed it; the CUDA guide's own atomicAdd for double does this).
static inline bool ck_conflict(const Acc& a, const Acc& me, bool shared) {
    const bool a_at = a.flags & 2, me_at = me.flags & 2, a_rd = !(a.flags & 4), me_rd = !(me.flags & 4);
    if ((a_at && me_at) || (a_at && me_rd) || (me_at && a_rd)) return false;
    return ck_concurrent(a, me, shared);
}

static void ck_race(Worker* w, Region* r, size_t cell, const Acc& old, const Acc& me, uintptr_t addr) {
    cudl_checks* C = g_ck;
    C->race = 1;
    C->region = r->id;
    C->offset = (unsigned long long)cell * r->gran;
    const Acc* a[2] = {&old, &me};
    for (int i = 0; i < 2; i++) {
        C->blk[i] = a[i]->blk;
        C->tid[i] = a[i]->tid;
        C->pc[i] = a[i]->pc;
        C->write[i] = (a[i]->flags & 4) != 0;
        C->atomic[i] = (a[i]->flags & 2) != 0;
    }
    report(w, 8, "", addr, me.flags & 4 ? 1 : 0);
    w->in_kernel = false;
    siglongjmp(w->jmp, 1);
}

static void ck_check_race(Worker* w, Region* r, uintptr_t a, size_t size, const Acc& me) {
    size_t first = (a - r->lo) / r->gran, last = (a + size - 1 - r->lo) / r->gran;
    if (last >= r->ncells) last = r->ncells - 1;
    const bool write = me.flags & 4, sh = r->shared;
    for (size_t i = first; i <= last; i++) {
        Cell& c = r->shadow[i];
        if (ck_conflict(c.w, me, sh)) ck_race(w, r, i, c.w, me, a);
        if (write) {
            if (ck_conflict(c.r1, me, sh)) ck_race(w, r, i, c.r1, me, a);
            if (ck_conflict(c.r2, me, sh)) ck_race(w, r, i, c.r2, me, a);
            // An atomic after this thread's own plain write in the same epoch keeps the plain write on record:
            // other threads' atomics that follow race with it (`*total = 0` then atomicAdd by everyone).
            const bool keep = (me.flags & 2) && (c.w.flags & 1) && !(c.w.flags & 2) && c.w.blk == me.blk &&
                              c.w.epoch == me.epoch;
            if (!keep) c.w = me;
            c.r1.flags = c.r2.flags = 0;
            c.init = me.blk + 1;
        } else {
            auto free_slot = [&](const Acc& x) {
                return !(x.flags & 1) || (x.blk == me.blk && (x.tid == me.tid || x.epoch < me.epoch)) ||
                       (sh && x.blk != me.blk);
            };
            if (free_slot(c.r1)) c.r1 = me;
            else if (free_slot(c.r2)) c.r2 = me;  // else two other threads' reads stay on record
        }
    }
}

// Initcheck (with the race check): a read of shared memory that no thread of the block wrote since the block
// started (shared memory is undefined at a block's start; the runtime fills it with 0xff bytes). An access is
// uninitialized when none of its bytes was written: a struct copy reads padding bytes that nobody writes, so a
// float4 of which some floats were set passes too.
static void ck_uninit(Worker* w, Region* r, size_t cell, const Acc& me, uintptr_t addr) {
    cudl_checks* C = g_ck;
    C->race = 2;
    C->region = r->id;
    C->offset = (unsigned long long)cell * r->gran;
    C->blk[1] = me.blk;
    C->tid[1] = me.tid;
    C->pc[1] = me.pc;
    C->write[1] = (me.flags & 4) != 0;
    C->atomic[1] = (me.flags & 2) != 0;
    report(w, 11, "", addr, 0);
    w->in_kernel = false;
    siglongjmp(w->jmp, 1);
}
static void ck_check_init(Worker* w, Region* r, uintptr_t a, size_t size, const Acc& me) {
    const uint32_t mark = me.blk + 1;
    const uintptr_t end = a + size < r->hi ? a + size : r->hi;
    for (uintptr_t b = a; b < end; b++)
        if (r->shadow[(b - r->lo) / r->gran].init == mark) return;
    ck_uninit(w, r, (a - r->lo) / r->gran, me, a);
}
// Memory written by a warp-wide operation the race check does not follow (wmma::store_matrix_sync): initialized.
EXPORT void __cudl_ck_init(const volatile void* p, size_t n) {
    Worker* w = t_w;
    if (!w || !w->ck || !(g_ck->mode & 1) || !n) return;
    const uintptr_t a = (uintptr_t)p;
    for (auto& r : w->ck->regs)
        if (r.shadow && a < r.hi && a + n > r.lo) {
            const uintptr_t lo = a > r.lo ? a : r.lo, hi = a + n < r.hi ? a + n : r.hi;
            const uint32_t mark = (uint32_t)w->blin.load(std::memory_order_relaxed) + 1;
            for (size_t i = (lo - r.lo) / r.gran; i <= (hi - 1 - r.lo) / r.gran; i++) r.shadow[i].init = mark;
        }
}

// Group the accesses of a warp into requests: the k-th access at one call site by each lane.
static void ck_flush(CheckState* c) {
    for (auto& kv : c->reqs) {
        const Req& q = kv.second;
        if (!q.n) continue;
        unsigned long long units = 0, ideal = 0;
        uintptr_t v[32 * 5];
        unsigned m = 0;
        if (q.kind == 0) {  // global: distinct 32-byte sectors; ideal = sectors of the distinct bytes
            std::pair<uintptr_t, uintptr_t> iv[32];
            for (unsigned l = 0; l < q.n; l++) {
                iv[l] = {q.addr[l], q.addr[l] + q.size[l]};
                for (uintptr_t s = q.addr[l] >> 5; s <= (q.addr[l] + q.size[l] - 1) >> 5 && m < 32 * 5; s++) v[m++] = s;
            }
            std::sort(v, v + m);
            units = std::unique(v, v + m) - v;
            std::sort(iv, iv + q.n);
            uintptr_t bytes = 0, end = 0;
            for (unsigned l = 0; l < q.n; l++) {
                uintptr_t lo = iv[l].first > end ? iv[l].first : end;
                if (iv[l].second > lo) bytes += iv[l].second - lo;
                if (iv[l].second > end) end = iv[l].second;
            }
            ideal = (bytes + 31) / 32;
        } else {  // shared: 32 banks of 4-byte words; wavefronts = most distinct words in one bank
            // 16-byte accesses (uint4, ldmatrix rows) are served a quarter-warp (8 lanes) per phase, and a
            // bank conflict exists only inside a phase; smaller accesses, the whole warp at once.
            bool quarters = true;
            for (unsigned l = 0; l < q.n; l++) quarters = quarters && q.size[l] == 16;
            for (unsigned phase = 0; phase < (quarters ? 4u : 1u); phase++) {
                m = 0;
                for (unsigned l = 0; l < q.n; l++) {
                    if (quarters && q.lane[l] / 8 != phase) continue;
                    for (uintptr_t s = q.addr[l] >> 2; s <= (q.addr[l] + q.size[l] - 1) >> 2 && m < 32 * 5; s++)
                        v[m++] = s;
                }
                if (!m) continue;
                std::sort(v, v + m);
                unsigned nw = (unsigned)(std::unique(v, v + m) - v), per_bank[32] = {0}, most = 0;
                for (unsigned i = 0; i < nw; i++) {
                    unsigned b = (unsigned)(v[i] & 31);
                    if (++per_bank[b] > most) most = per_bank[b];
                }
                units += most;
                ideal += (nw + 31) / 32;
            }
        }
        Agg& g = g_aggs[std::make_tuple(kv.first.pc, (int)q.kind, (int)q.write)];
        g.pc = kv.first.pc; g.kind = q.kind; g.write = q.write;
        g.requests++; g.units += units; g.ideal += ideal; g.lanes += q.n;
    }
    c->reqs.clear();
}

static void ck_count(Worker* w, CheckState* c, Region* r, uintptr_t a, size_t size, int write, int atomic,
                     uint32_t tid, uint32_t pc) {
    unsigned long long gt = w->blin.load(std::memory_order_relaxed) * c->nthreads + tid;
    if (gt < g_thread_acc.size()) g_thread_acc[gt]++;
    if (atomic) return;  // atomics are counted per thread, not as requests
    uint32_t warp = tid >> 5;
    w->in_kernel = false;  // the maps allocate: no cancelling inside malloc
    if (!w->cur && warp != c->last_warp) {  // plain loop: the previous warp is complete
        ck_flush(c);
        c->last_warp = warp;
    }
    uint32_t k = c->kcount[tid][pc]++;
    Req& q = c->reqs[ReqKey{warp, pc, k}];
    if (q.n == 0) { q.kind = r->shared; q.write = (uint8_t)write; }
    if (q.n < 32) {
        q.addr[q.n] = a; q.size[q.n] = (uint16_t)(size > 65535 ? 65535 : size); q.lane[q.n] = tid & 31; q.n++;
    }
    ck_leave_if_stopped(w);
}

static inline void ck_access(const volatile void* p, size_t size, int write, int atomic, void* ret, int reads) {
    Worker* w = t_w;
    if (!w || !w->ck || !w->in_kernel || !size) return;
    CheckState* c = w->ck;
    uintptr_t a = (uintptr_t)p;
    Region* r = nullptr;
    for (auto& x : c->regs)
        if (a >= x.lo && a < x.hi) { r = &x; break; }
    if (!r) return;  // locals, and memory the checks do not track
    uint32_t tid, wclk = 0;
    if (w->cur) {
        tid = w->cur->lin;
        wclk = w->cur->wclk;
    } else {
        const unsigned* t = w->tid_plain;
        tid = t[0] + w->L->block[0] * (t[1] + w->L->block[1] * t[2]);
    }
    uint32_t pc = (uint32_t)((uintptr_t)ret - 1 - c->mod_base);
    if (g_ck->mode & 2) ck_count(w, c, r, a, size, write, atomic, tid, pc);
    if (g_ck->mode & 1) {
        Acc me{(uint32_t)w->blin.load(std::memory_order_relaxed), w->epoch, wclk, g_T, pc, (uint16_t)tid,
               (uint16_t)(1 | (atomic ? 2 : 0) | (write ? 4 : 0))};
        if (reads && r->shared) ck_check_init(w, r, a, size, me);
        ck_check_race(w, r, a, size, me);
    }
}

// Release (fence, then atomic) and acquire (atomic, then fence), per block.
static inline void ck_atomic(const volatile void* p, size_t size, int write, int reads, void* ret) {
    ck_access(p, size, write, 1, ret, reads);
    Worker* w = t_w;
    if (!w || !w->ck || !g_rel.size()) return;
    size_t b = w->blin.load(std::memory_order_relaxed);
    if (g_pend_rel[b]) { g_rel[b] = ++g_T; g_pend_rel[b] = 0; }
    g_pend_acq[b] = 1;
}
static inline void ck_fence() {
    Worker* w = t_w;
    if (!w || !w->ck || !g_rel.size()) return;
    size_t b = w->blin.load(std::memory_order_relaxed);
    g_pend_rel[b] = 1;
    if (g_pend_acq[b]) { g_acq[b] = ++g_T; g_pend_acq[b] = 0; }
}

#define RA __builtin_return_address(0)
#define CK_RW(N) \
    EXPORT void __tsan_read##N(void* p) { ck_access(p, N, 0, 0, RA, 1); } \
    EXPORT void __tsan_write##N(void* p) { ck_access(p, N, 1, 0, RA, 0); } \
    EXPORT void __tsan_unaligned_read##N(void* p) { ck_access(p, N, 0, 0, RA, 1); } \
    EXPORT void __tsan_unaligned_write##N(void* p) { ck_access(p, N, 1, 0, RA, 0); } \
    EXPORT void __tsan_volatile_read##N(void* p) { ck_access(p, N, 0, 0, RA, 1); } \
    EXPORT void __tsan_volatile_write##N(void* p) { ck_access(p, N, 1, 0, RA, 0); }
CK_RW(1) CK_RW(2) CK_RW(4) CK_RW(8) CK_RW(16)
#undef CK_RW
EXPORT void __tsan_read_range(void* p, size_t n) { ck_access(p, n, 0, 0, RA, 1); }
EXPORT void __tsan_write_range(void* p, size_t n) { ck_access(p, n, 1, 0, RA, 0); }
EXPORT void __tsan_init(void) {}
EXPORT void __tsan_func_entry(void*) {}
EXPORT void __tsan_func_exit(void) {}
EXPORT void __tsan_vptr_update(void**, void*) {}
EXPORT void __tsan_vptr_read(void**) {}
EXPORT void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); ck_fence(); }
EXPORT void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
#define CK_ATOMIC(N, T) \
    EXPORT T __tsan_atomic##N##_load(const volatile T* a, int) { \
        ck_atomic(a, sizeof(T), 0, 1, RA); return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
    EXPORT void __tsan_atomic##N##_store(volatile T* a, T v, int) { \
        ck_atomic(a, sizeof(T), 1, 0, RA); __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
    EXPORT T __tsan_atomic##N##_exchange(volatile T* a, T v, int) { \
        ck_atomic(a, sizeof(T), 1, 0, RA); return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
    EXPORT T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) { \
        ck_atomic(a, sizeof(T), 1, 1, RA); return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
    EXPORT T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) { \
        ck_atomic(a, sizeof(T), 1, 1, RA); return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
    EXPORT T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) { \
        ck_atomic(a, sizeof(T), 1, 1, RA); return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
    EXPORT T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) { \
        ck_atomic(a, sizeof(T), 1, 1, RA); return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); } \
    EXPORT T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) { \
        ck_atomic(a, sizeof(T), 1, 1, RA); return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
    EXPORT T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) { \
        ck_atomic(a, sizeof(T), 1, 1, RA); return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST); } \
    EXPORT int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) { \
        ck_atomic(a, sizeof(T), 1, 1, RA); \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); } \
    EXPORT int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) { \
        ck_atomic(a, sizeof(T), 1, 1, RA); \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); } \
    EXPORT T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) { \
        ck_atomic(a, sizeof(T), 1, 1, RA); \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
CK_ATOMIC(8, uint8_t) CK_ATOMIC(16, uint16_t) CK_ATOMIC(32, uint32_t) CK_ATOMIC(64, uint64_t)
#undef CK_ATOMIC
#undef RA

static void ck_worker_begin(Worker* w) {
    cudl_checks* C = g_ck;
    if (!C || !C->mode) return;
    CheckState* c = new CheckState;
    Dl_info info;
    if (dladdr((void*)w->L->block_fn, &info)) c->mod_base = (uintptr_t)info.dli_fbase;
    c->nthreads = w->L->block[0] * w->L->block[1] * w->L->block[2];
    c->kcount.resize(C->mode & 2 ? c->nthreads : 0);
    for (int i = 0; i < C->nregions; i++) {
        const long long* v = C->regions + 5 * i;
        uintptr_t base = v[4] == 1 ? (uintptr_t)w->tid_plain : v[4] == 2 ? (uintptr_t)w->dsmem
                       : v[4] == 3 ? c->mod_base : 0;
        Region r{};
        r.lo = base + v[0];
        r.hi = base + v[1];
        r.gran = v[2] > 0 ? (uint32_t)v[2] : 1;
        r.id = (int)v[3];
        r.shared = v[4] == 1 || v[4] == 2;  // __device__ variables (3) live as long as global memory
        if (r.hi <= r.lo) continue;
        r.ncells = (r.hi - r.lo + r.gran - 1) / r.gran;
        if (C->mode & 1) {
            r.maplen = (r.ncells * sizeof(Cell) + g_page - 1) / g_page * g_page;
            void* m = mmap(nullptr, r.maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (m == MAP_FAILED) continue;
            r.shadow = (Cell*)m;
        }
        c->regs.push_back(r);
    }
    w->ck = c;
}
static void ck_block_begin(Worker* w) {
    CheckState* c = w->ck;
    if (!c) return;
    for (auto& m : c->kcount) m.clear();
    c->last_warp = ~0u;
}
static void ck_block_end(Worker* w) {
    if (w->ck) ck_flush(w->ck);
}
static void ck_worker_end(Worker* w) {
    CheckState* c = w->ck;
    if (!c) return;
    for (auto& r : c->regs)
        if (r.shadow) munmap(r.shadow, r.maplen);
    delete c;
    w->ck = nullptr;
}
static void ck_launch_begin(cudl_launch* L) {
    g_aggs.clear();
    g_thread_acc.clear();
    g_rel.clear(); g_acq.clear(); g_pend_rel.clear(); g_pend_acq.clear();
    g_T = 1;
    if (!g_ck || !g_ck->mode) return;
    g_ck->race = 0;
    unsigned long long nb = (unsigned long long)L->grid[0] * L->grid[1] * L->grid[2];
    unsigned long long nt = nb * L->block[0] * L->block[1] * L->block[2];
    g_rel.assign(nb, 0); g_acq.assign(nb, 0); g_pend_rel.assign(nb, 0); g_pend_acq.assign(nb, 0);
    if ((g_ck->mode & 2) && nt <= THREAD_COUNT_LIMIT) g_thread_acc.assign(nt, 0);
}

// Python: set (or clear, with NULL) the checks of the next launches; read the counters of the last one.
EXPORT void cudl_checks_set(cudl_checks* C) { g_ck = C; }
EXPORT size_t cudl_counters_rows(Agg* out, size_t cap) {
    size_t n = 0;
    for (auto& kv : g_aggs) {
        if (n < cap) out[n] = kv.second;
        n++;
    }
    return n;
}
EXPORT size_t cudl_counters_threads(uint32_t* out, size_t cap) {
    size_t n = g_thread_acc.size() < cap ? g_thread_acc.size() : cap;
    if (out) memcpy(out, g_thread_acc.data(), n * sizeof(uint32_t));
    return g_thread_acc.size();
}

// ------------------------------------------------------------------ the launch
static const int MAX_WORKERS = 512;
static std::mutex g_wk_mu;
static Worker* g_wk[MAX_WORKERS];  // the running launch's workers, for the watchdog
static std::atomic<int> g_live;
static std::mutex g_live_mu;
static std::condition_variable g_live_cv;  // the last worker to leave wakes the watchdog

// Shared memory is undefined when a block starts (on a GPU it holds what an earlier block left): fill every
// static __shared__ variable and the dynamic shared memory with 0xff bytes (NaN as float, -1 as int), so that
// a kernel that reads it before writing it gets NaN, not the previous block's values or zeros.
static const int SHARED_POISON = 0xff;
static void poison_shared(Worker* w) {
    const cudl_launch* L = w->L;
    if (w->tid_plain)
        for (int i = 0; i < L->nsmem; i++) memset((char*)w->tid_plain + L->smem[2 * i], SHARED_POISON, (size_t)L->smem[2 * i + 1]);
    if (w->dsmem && L->shared_mem) memset(w->dsmem, SHARED_POISON, L->shared_mem);
}

static void worker_main(cudl_launch* L, int index) {
    Worker w;
    w.L = L;
    {
#if defined(__APPLE__)
        w.stack_lo = (unsigned long long)pthread_get_stackaddr_np(pthread_self()) - pthread_get_stacksize_np(pthread_self());
#else
        pthread_attr_t attr;
        void* lo = nullptr;
        size_t len = 0;
        if (!pthread_getattr_np(pthread_self(), &attr)) {
            if (!pthread_attr_getstack(&attr, &lo, &len)) w.stack_lo = (unsigned long long)lo;
            pthread_attr_destroy(&attr);
        }
#endif
    }
    t_w = &w;
    // Signals are handled on an alternate stack (a fault may come from a fiber at the end of its stack).
    size_t alt_size = 64 * 1024;
    void* alt = malloc(alt_size);
    stack_t ss{}, old_ss{};
    ss.ss_sp = alt;
    ss.ss_size = alt_size;
    sigaltstack(&ss, &old_ss);
    const unsigned nthreads = L->block[0] * L->block[1] * L->block[2];
    const unsigned long long nblocks = (unsigned long long)L->grid[0] * L->grid[1] * L->grid[2];
    // Dynamic shared memory ends at a PROT_NONE page, so overflowing it faults (status 5).
    void* ds_base = nullptr;
    size_t ds_len = 0;
    w.dsmem = (char*)cudl_guarded_alloc(L->shared_mem, &ds_base, &ds_len);
    w.ds_base = (char*)ds_base;
    w.ds_len = ds_len;
    if (L->fibers) {
        w.fibers.resize(nthreads);
        take_stacks(&w, nthreads, L->stack_size);
        if (!w.stacks.base) report(&w, 2, "cannot allocate fiber stacks (out of memory)", 0, -1);
    }
    w.tid_plain = L->tid_ptr ? (const unsigned*)L->tid_ptr() : nullptr;
    ck_worker_begin(&w);
    {
        std::lock_guard<std::mutex> g(g_wk_mu);
        g_wk[index] = &w;
    }
    for (;;) {
        if (g_abort.load(std::memory_order_relaxed)) break;
        unsigned long long b = g_next_block.fetch_add(1);
        if (b >= nblocks) break;
        if (L->reverse) b = nblocks - 1 - b;
        w.bid[0] = (unsigned)(b % L->grid[0]);
        w.bid[1] = (unsigned)((b / L->grid[0]) % L->grid[1]);
        w.bid[2] = (unsigned)(b / ((unsigned long long)L->grid[0] * L->grid[1]));
        unsigned* info = w.info;
        memcpy(info, w.bid, 12);
        memcpy(info + 3, L->block, 12);
        memcpy(info + 6, L->grid, 12);
        info[9] = info[10] = info[11] = 0;
        info[12] = (unsigned)L->reverse;
        poison_shared(&w);
        w.ub_ptr = nullptr;
        w.blin.store(b, std::memory_order_relaxed);
        w.epoch = 0;
        ck_block_begin(&w);
        if (sigsetjmp(w.jmp, 1)) { w.cur = nullptr; break; }  // a fault: report() has the details
        w.in_kernel = true;
        if (!L->fibers) {
            L->block_fn(L->args, info);
        } else if (!run_block_fibers(&w, nthreads)) {
            w.in_kernel = false;
            report(&w, 4, w.error.c_str(), 0, -1);
            break;
        }
        w.in_kernel = false;
        ck_block_end(&w);
        bump(w.progress);
    }
    w.in_kernel = false;
    {
        std::lock_guard<std::mutex> g(g_wk_mu);
        g_wk[index] = nullptr;
    }
    if (g_live.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> g(g_live_mu);
        g_live_cv.notify_all();
    }
    ck_worker_end(&w);
    give_stacks(&w);
    if (ds_base) munmap(ds_base, ds_len);
    stack_t dis{};
    dis.ss_flags = SS_DISABLE;
    sigaltstack(&dis, nullptr);
    free(alt);
    t_w = nullptr;
}

// Worker threads of the running launch, for cancelling (read by a signal handler: a fixed array).
EXPORT void cudl_cancel(void);
static pthread_t g_pool[MAX_WORKERS];
static std::atomic<int> g_pool_n;
static std::mutex g_launch_mu;
static void on_sigint(int) { cudl_cancel(); }  // Ctrl-C during a launch from Python's main thread  // one launch at a time per process (block counter and abort flag are global)

// Watchdog: wait for the workers; when none of them moves on (no fiber switch, no finished block, no new
// thread in the plain loop) for CUDL_EMULATOR_WATCHDOG seconds (default 10, 0: never), stop the launch with
// a report. A spin-wait on a flag that another thread of the block must set never ends here, because the
// threads of a block run one at a time between barriers and warp operations.
static double watchdog_seconds() {
    const char* e = getenv("CUDL_EMULATOR_WATCHDOG");
    if (!e || !*e) return 10.0;
    double v = atof(e);
    return v > 0 ? v : 0.0;
}
EXPORT double cudl_watchdog_seconds(void) { return watchdog_seconds(); }
static unsigned long long signature(Worker* w) {
    unsigned long long h = w->progress.load(std::memory_order_relaxed) * 0x9E3779B97F4A7C15ull;
    h ^= w->blin.load(std::memory_order_relaxed) * 0xC2B2AE3D27D4EB4Full;
    if (!w->cur && w->tid_plain) {
        const volatile unsigned* t = w->tid_plain;
        h ^= ((unsigned long long)t[0] << 1) ^ ((unsigned long long)t[1] << 21) ^ ((unsigned long long)t[2] << 41);
    }
    return h;
}
static void watch(cudl_launch* L) {
    const double limit = watchdog_seconds();
    unsigned long long last = 0;
    double since_fire = -1;
    const double tick = 0.05;
    // Measured on the clock, not counted in ticks: on a loaded machine a tick of the wait below lasts longer.
    auto moved = std::chrono::steady_clock::now();
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(g_live_mu);
            if (g_live_cv.wait_for(lk, std::chrono::milliseconds(50), [] { return g_live.load() == 0; })) return;
        }
        if (limit <= 0) continue;
        std::lock_guard<std::mutex> g(g_wk_mu);
        if (since_fire >= 0) {  // fired: nudge workers that have not left yet (e.g. were in printf)
            since_fire += tick;
            if (since_fire > 1.0) {
                for (int i = 0, n = g_pool_n.load(); i < n; i++) if (g_wk[i]) pthread_kill(g_pool[i], SIGUSR2);
                since_fire = 0;
            }
            continue;
        }
        unsigned long long sig = 0;
        for (int i = 0, n = g_pool_n.load(); i < n; i++)
            if (g_wk[i]) sig = sig * 31 + signature(g_wk[i]);
        const auto now = std::chrono::steady_clock::now();
        if (sig != last) { last = sig; moved = now; continue; }
        if (std::chrono::duration<double>(now - moved).count() < limit) continue;
        Worker* w = nullptr;
        for (int i = 0, n = g_pool_n.load(); i < n && !w; i++) w = g_wk[i];
        if (!w) continue;
        {
            std::lock_guard<std::mutex> r(g_result_mu);
            if (!L->status) {
                unsigned t[3];
                tid_of(w, t);
                unsigned long long b = w->blin.load(std::memory_order_relaxed);
                unsigned bx = (unsigned)(b % L->grid[0]), by = (unsigned)((b / L->grid[0]) % L->grid[1]);
                unsigned bz = (unsigned)(b / ((unsigned long long)L->grid[0] * L->grid[1]));
                L->status = 9;
                snprintf(L->msg, sizeof L->msg, "no progress for %g s (thread (%u,%u,%u) of block (%u,%u,%u) "
                         "neither finished nor reached a barrier): a spin-wait for a value that another thread "
                         "must write, or an endless loop? The emulator runs the threads of a block one at a time "
                         "between barriers and warp operations, so such a wait never ends here (on a GPU it may "
                         "hang too). Stopped by the emulator's watchdog (CUDL_EMULATOR_WATCHDOG=seconds, 0: off)",
                         limit, t[0], t[1], t[2], bx, by, bz);
            }
        }
        g_wd_fired.store(1);
        g_abort.store(1);
        for (int i = 0, n = g_pool_n.load(); i < n; i++) if (g_wk[i]) pthread_kill(g_pool[i], SIGUSR2);
        since_fire = 0;
    }
}

EXPORT void cudl_launch_kernel(cudl_launch* L) {
    std::lock_guard<std::mutex> g(g_launch_mu);
    if (!g_page) g_page = (size_t)sysconf(_SC_PAGESIZE);
    L->status = 0;
    L->msg[0] = 0;
    g_next_block.store(0);
    g_abort.store(0);
    g_cancel.store(0);
    g_wd_fired.store(0);
    ck_launch_begin(L);
    if (g_ck && g_ck->mode) L->workers = 1;  // the shadow state of the checks has no locks
    unsigned long long nblocks = (unsigned long long)L->grid[0] * L->grid[1] * L->grid[2];
    int nw = L->workers < 1 ? 1 : L->workers;
    if ((unsigned long long)nw > nblocks) nw = (int)nblocks;
    install_signals();
    if (nw > MAX_WORKERS) nw = MAX_WORKERS;
    struct sigaction old_int;
    if (L->interruptible) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &old_int);
    }
    if (g_ck && g_ck->mode) nw = 1;
    std::vector<std::thread> pool;
    g_pool_n.store(0);
    g_live.store(nw);
    for (int i = 0; i < nw; i++) {
        pool.emplace_back(worker_main, L, i);
        g_pool[i] = pool.back().native_handle();
        g_pool_n.store(i + 1);
    }
    watch(L);
    for (auto& t : pool) t.join();
    g_pool_n.store(0);
    restore_signals();
    if (L->interruptible) {
        sigaction(SIGINT, &old_int, nullptr);
        if (g_cancel.load()) {
            L->status = 7;
            raise(SIGINT);  // Python's own handler: KeyboardInterrupt once the call returns
        }
    }
}

// Stop the running launch: every worker leaves the kernel it runs (SIGUSR2) and takes no more blocks.
EXPORT void cudl_cancel(void) {
    g_cancel.store(1);
    g_abort.store(1);
    for (int i = 0, n = g_pool_n.load(); i < n; i++) pthread_kill(g_pool[i], SIGUSR2);
}

// ------------------------------------------------------------------ guarded buffers
// A buffer of `nbytes` whose end (rounded up to 16 bytes) touches a PROT_NONE page, with a guard page
// before it as well. Returns the data pointer; *map_base/*map_len describe the whole mapping.
EXPORT void* cudl_guarded_alloc(size_t nbytes, void** map_base, size_t* map_len) {
    if (!g_page) g_page = (size_t)sysconf(_SC_PAGESIZE);
    size_t padded = (nbytes + 15) & ~(size_t)15;
    size_t body = (padded + g_page - 1) / g_page * g_page;
    if (body == 0) body = g_page;
    size_t len = body + 2 * g_page;
    char* base = (char*)mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return nullptr;
    mprotect(base, g_page, PROT_NONE);
    mprotect(base + g_page + body, g_page, PROT_NONE);
    *map_base = base;
    *map_len = len;
    return base + g_page + body - padded;
}
EXPORT void cudl_guarded_free(void* map_base, size_t map_len) { munmap(map_base, map_len); }
EXPORT size_t cudl_page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }
