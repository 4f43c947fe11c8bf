// shim for the cudl emulator: a failed assert stops the launch with KernelFault (not the Python process)
extern "C" void __cudl_rt_trap(const char* what, const char* file, int line) __attribute__((noreturn));
#undef assert
#define assert(e) ((e) ? (void)0 : __cudl_rt_trap("assertion failed: " #e, __FILE__, __LINE__))
