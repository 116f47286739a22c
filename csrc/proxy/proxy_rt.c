/* The DPU runtime of kernels built for rv32sim (csrc/proxy/rv32sim.c): the services that
 * csrc/emulator/dpu_include's headers call through `__dpuemu_ops` (me, mram_read/write,
 * barriers, mutexes, mem_alloc), written for one RV32 program whose harts are the tasklets.
 *
 * The MRAM transfers obey the hardware's rules as the emulator checks them (8-byte aligned
 * WRAM and MRAM addresses, 8 to 2048 bytes in multiples of 8, inside MRAM); a violation ends
 * the run with a message.  Functions here are the proxy's, not the kernel's: the instruction
 * counts (pimloader/costmodel/counted.py) leave them out and count each DMA call as the one
 * DPU instruction (ldma/sdma) it is on hardware. */
#include <stddef.h>
#include <stdint.h>
#include <dpuemu_rt.h>

#define WRAM_HEAP_BYTES (64u << 10)
#define STACK_BYTES (16u << 10)
#define STACKS_TOP 0x7f0000u
#define MRAM_BASE 0x80000000u
#define MRAM_BYTES (64u << 20)

int main(void);

static uint8_t wram_heap[WRAM_HEAP_BYTES] __attribute__((aligned(8)));
static uint32_t heap_used;
volatile uint32_t proxy_dma_calls, proxy_dma_bytes;

__attribute__((section(".text.start"), naked)) void _start(void)
{
    __asm__ volatile(".word 0xf14022f3\n" /* csrr t0, mhartid (Zicsr, not in rv32im's multilib) */
                     "li t1, %0\n"
                     "mul t0, t0, t1\n"
                     "li sp, %1\n"
                     "sub sp, sp, t0\n"
                     "call proxy_tasklet\n"
                     : : "i"(STACK_BYTES), "i"(STACKS_TOP));
}

static long proxy_ecall(long call, long argument)
{
    register long a0 __asm__("a0") = argument;
    register long t0 __asm__("t0") = call; /* t0, not a7: RV32E has no a7 */
    __asm__ volatile("ecall" : "+r"(a0) : "r"(t0) : "memory");
    return a0;
}

static void proxy_yield(void) { proxy_ecall(124, 0); }

static void proxy_puts(const char *s)
{
    while (*s)
        proxy_ecall(64, *s++);
}

__attribute__((noreturn)) static void proxy_exit(long status)
{
    for (;;)
        proxy_ecall(93, status);
}

__attribute__((noreturn)) void proxy_tasklet(void)
{
    main();
    proxy_exit(0);
}

void *memcpy(void *to, const void *from, size_t n)
{
    uint8_t *d = to;
    const uint8_t *s = from;
    while (n--)
        *d++ = *s++;
    return to;
}

void *memset(void *to, int value, size_t n)
{
    uint8_t *d = to;
    while (n--)
        *d++ = (uint8_t)value;
    return to;
}

static unsigned int proxy_me(void)
{
    register unsigned int id __asm__("a0");
    __asm__ volatile(".word 0xf1402573" : "=r"(id)); /* csrr a0, mhartid */
    return id;
}

__attribute__((noreturn)) static void proxy_fault(const char *rule, const char *detail, const char *file, int line)
{
    (void)line;
    proxy_puts("DPU fault: ");
    proxy_puts(rule);
    proxy_puts(": ");
    proxy_puts(detail);
    proxy_puts(" at ");
    proxy_puts(file);
    proxy_puts("\n");
    proxy_exit(1);
}

static void proxy_check_dma(const char *op, const void *wram, const void *mram, unsigned int n, const char *file, int line)
{
    const uint32_t w = (uint32_t)(uintptr_t)wram, m = (uint32_t)(uintptr_t)mram;
    if (w % 8 || m % 8)
        proxy_fault(op, "WRAM and MRAM addresses must be 8-byte aligned", file, line);
    if (n < 8 || n > 2048 || n % 8)
        proxy_fault(op, "size must be a multiple of 8 from 8 to 2048 bytes", file, line);
    if (m < MRAM_BASE || m - MRAM_BASE + n > MRAM_BYTES)
        proxy_fault(op, "MRAM range outside the DPU's 64 MB", file, line);
    proxy_dma_calls++;
    proxy_dma_bytes += n;
}

static void proxy_ldma(void *to, const void *from, unsigned int n, const char *file, int line)
{
    proxy_check_dma("mram_read", to, from, n, file, line);
    memcpy(to, from, n);
}

static void proxy_sdma(const void *from, void *to, unsigned int n, const char *file, int line)
{
    proxy_check_dma("mram_write", from, to, n, file, line);
    memcpy(to, from, n);
}

struct proxy_barrier {
    uint8_t count, initial_count;
    uint16_t generation;
};

static void proxy_barrier_wait(void *barrier, const char *file, int line)
{
    (void)file, (void)line;
    struct proxy_barrier *b = barrier;
    const uint16_t generation = b->generation;
    if (--b->count == 0) {
        b->count = b->initial_count;
        b->generation++;
        return;
    }
    while (*(volatile uint16_t *)&b->generation == generation)
        proxy_yield();
}

static void proxy_mutex_lock(uint8_t *mutex)
{
    while (*(volatile uint8_t *)mutex)
        proxy_yield();
    *mutex = 1;
}

static bool proxy_mutex_trylock(uint8_t *mutex)
{
    if (*mutex)
        return false;
    *mutex = 1;
    return true;
}

static void proxy_mutex_unlock(uint8_t *mutex) { *mutex = 0; }

static void *proxy_mem_alloc(size_t size, const char *file, int line)
{
    const uint32_t rounded = (uint32_t)(size + 7) & ~7u;
    if (rounded > WRAM_HEAP_BYTES - heap_used)
        proxy_fault("mem_alloc", "the WRAM heap is exhausted", file, line);
    void *block = wram_heap + heap_used;
    heap_used += rounded;
    return block;
}

static void *proxy_mem_reset(void)
{
    heap_used = 0;
    return wram_heap;
}

static uint64_t proxy_perfcounter_get(void) { return 0; }
static uint64_t proxy_perfcounter_config(int config, bool reset_value) { (void)config, (void)reset_value; return 0; }
static void proxy_vprint(const char *format, va_list args) { (void)args; proxy_puts(format); }

static const struct dpuemu_rt_ops proxy_ops = {
    DPUEMU_RT_ABI, proxy_me, proxy_ldma, proxy_sdma, proxy_barrier_wait, proxy_mutex_lock, proxy_mutex_trylock,
    proxy_mutex_unlock, proxy_mem_alloc, proxy_mem_reset, proxy_perfcounter_get, proxy_perfcounter_config,
    proxy_vprint, proxy_fault,
};

const struct dpuemu_rt_ops *__dpuemu_ops = &proxy_ops;
const volatile uint32_t CLOCKS_PER_SEC = 350000000u;
