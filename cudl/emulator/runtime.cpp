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
#include <atomic>
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
                                  // 6 kernel needs fibers (relaunched by Python), 7 interrupted (SIGINT)
    int is_write;                 // 1 write, 0 read, -1 unknown
    unsigned long long addr;
    unsigned tid[3], bid[3];
    char msg[1024];
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
    unsigned info[12];
    char* dsmem = nullptr;
    unsigned long long stack_top = 0;  // of the worker thread (plain mode runs threads on it)
    char* ds_base = nullptr;  // mapping of dynamic shared memory, guard pages included
    size_t ds_len = 0;
    const unsigned* tid_plain = nullptr;  // &threadIdx of the kernel library (plain mode)
    sigjmp_buf jmp;
    bool in_kernel = false;
    std::string error;  // barrier / warp errors found by the scheduler
};
static thread_local Worker* t_w = nullptr;
EXPORT void* cudl_guarded_alloc(size_t nbytes, void** map_base, size_t* map_len);
EXPORT void __cudl_rt_trap(const char* what, const char* file, int line) __attribute__((noreturn));

static std::atomic<unsigned long long> g_next_block;
static std::atomic<int> g_abort;
static std::atomic<int> g_cancel;  // set by cudl_cancel()
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
    tid_of(w, w->L->tid);
    memcpy(w->L->bid, w->bid, sizeof w->bid);
    snprintf(w->L->msg, sizeof w->L->msg, "%s", msg ? msg : "");
    g_abort.store(1);
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
    if (sig == SIGFPE) {
        status = 2;
        msg = "arithmetic exception (integer division by zero?)";
    } else if (w->cur && w->stacks.base &&
               ((addr >= (unsigned long long)w->stacks.base && addr < (unsigned long long)(w->stacks.base + w->stacks.len)) ||
                (addr < (unsigned long long)w->cur->stack_lo && addr + (1ull << 20) > (unsigned long long)w->cur->stack_lo))) {
        status = 3;  // a fiber ran into (or jumped over) the guard page below its stack
    } else if (!w->cur && addr < w->stack_top && addr + (64ull << 20) > w->stack_top) {
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
static Fiber* next_runnable(Worker* w, unsigned from) {
    for (unsigned i = from, n = (unsigned)w->fibers.size(); i < n; i++)
        if (w->fibers[i].state == RUN) return &w->fibers[i];
    return nullptr;
}
static void to_scheduler(Worker* w, Fiber* f) {
    Fiber* nx = g_abort.load(std::memory_order_relaxed) ? nullptr : next_runnable(w, f->lin + 1);
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
            for (unsigned k = 0; k < nl; k++) if ((g >> k) & 1) res[k] = warp_result(base, nl, g, k);
            for (unsigned k = 0; k < nl; k++)
                if ((g >> k) & 1) { base[k].result = res[k]; base[k].state = RUN; }
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

// Why a block cannot go on: a message naming the barrier or warp operation.
static std::string stuck_message(Worker* w, unsigned n) {
    char buf[700];
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
        snprintf(buf, sizeof buf, "%s at %s:%d in warp %u of block (%u,%u,%u): mask 0x%08x names lanes that did not "
                 "reach it (they exited or wait elsewhere)", g_opnames[warp->op], warp->file, warp->line,
                 warp->lin / 32, w->bid[0], w->bid[1], w->bid[2], warp->mask);
    } else {
        snprintf(buf, sizeof buf, "__syncthreads() at %s:%d reached by only %u of %u threads of block (%u,%u,%u)%s",
                 bar->file, bar->line, at_bar, n, w->bid[0], w->bid[1], w->bid[2],
                 done ? " (the others returned before it: a barrier after an early return?)" : "");
    }
    return buf;
}

// Run one block with every thread as a fiber; false on a barrier/warp error (message in w->error).
static bool run_block_fibers(Worker* w, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        Fiber& f = w->fibers[i];
        f.state = RUN;
        f.lin = i;
        start_fiber(w, &f);
    }
    for (;;) {
        unsigned live = 0, at_bar = 0;
        if (Fiber* first = next_runnable(w, 0)) run_fiber(w, first);  // runs the whole round
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
            if (same) {
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
    if (was && g_cancel.load(std::memory_order_relaxed)) {  // cancelled while formatting: leave now
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

// ------------------------------------------------------------------ the launch
static void worker_main(cudl_launch* L) {
    Worker w;
    w.L = L;
    w.stack_top = (unsigned long long)__builtin_frame_address(0);
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
    for (;;) {
        if (g_abort.load(std::memory_order_relaxed)) break;
        unsigned long long b = g_next_block.fetch_add(1);
        if (b >= nblocks) break;
        w.bid[0] = (unsigned)(b % L->grid[0]);
        w.bid[1] = (unsigned)((b / L->grid[0]) % L->grid[1]);
        w.bid[2] = (unsigned)(b / ((unsigned long long)L->grid[0] * L->grid[1]));
        unsigned* info = w.info;
        memcpy(info, w.bid, 12);
        memcpy(info + 3, L->block, 12);
        memcpy(info + 6, L->grid, 12);
        info[9] = info[10] = info[11] = 0;
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
    }
    w.in_kernel = false;
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
static const int MAX_WORKERS = 512;
static pthread_t g_pool[MAX_WORKERS];
static std::atomic<int> g_pool_n;
static std::mutex g_launch_mu;
static void on_sigint(int) { cudl_cancel(); }  // Ctrl-C during a launch from Python's main thread  // one launch at a time per process (block counter and abort flag are global)

EXPORT void cudl_launch_kernel(cudl_launch* L) {
    std::lock_guard<std::mutex> g(g_launch_mu);
    if (!g_page) g_page = (size_t)sysconf(_SC_PAGESIZE);
    L->status = 0;
    L->msg[0] = 0;
    g_next_block.store(0);
    g_abort.store(0);
    g_cancel.store(0);
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
    std::vector<std::thread> pool;
    g_pool_n.store(0);
    for (int i = 0; i < nw; i++) {
        pool.emplace_back(worker_main, L);
        g_pool[i] = pool.back().native_handle();
        g_pool_n.store(i + 1);
    }
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
