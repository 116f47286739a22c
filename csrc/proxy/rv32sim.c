/* rv32sim: an instruction-counting simulator of RV32IM (and RV32E) user code, the proxy ISA
 * on which pimloader counts the instructions its DPU kernels execute (docs/cost_model.md,
 * "Instruction counts, counted").
 *
 * It runs one statically linked ELF32 (built with csrc/proxy/proxy.ld and proxy_rt.c) as
 * NR harts, one per DPU tasklet, scheduled cooperatively: a hart runs until it yields (the
 * runtime's barrier and mutex waits) or exits, then the next runnable hart runs.  No
 * preemption, so the runtime's barriers and mutexes need no atomics.  Two memories:
 *   program + WRAM  [0, PROG_BYTES)              text, data, bss, heap, stacks
 *   MRAM            [MRAM_BASE, MRAM_BASE + 64 MB)
 * An access outside them, a misaligned word or half, an unknown instruction: the run stops
 * with a message naming the hart, the pc and the address (exit status 2).
 *
 * Counts: instructions per hart, per hart and pc (a histogram, [harts][text words] uint64,
 * that the caller maps to functions with the ELF's symbols) and per instruction class.
 *
 * Usage: rv32sim ELF --harts N [--mram-in FILE] [--mram-out FILE BYTES] [--histogram FILE]
 *                [--wram-in FILE] [--budget INSTRUCTIONS]  (default 2e10: beyond it the run
 *                is taken for a hang)
 * The MRAM image is loaded at MRAM_BASE (the start of the kernel's MRAM) and, after the run,
 * the first BYTES of MRAM are written out.  --wram-in writes what the host put in WRAM
 * symbols (a kernel's __host arguments) over the loaded program: records of a little-endian
 * uint32 address, a uint32 length and the bytes.  A JSON summary goes to stdout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG_BYTES (8u << 20)
#define MRAM_BASE 0x80000000u
#define MRAM_BYTES (64u << 20)
#define MAX_HARTS 24

enum { ECALL_EXIT = 93, ECALL_YIELD = 124, ECALL_PUTCHAR = 64 };
enum { CLASS_ALU, CLASS_MUL, CLASS_DIV, CLASS_LOAD, CLASS_STORE, CLASS_BRANCH, CLASS_JUMP, CLASS_SYSTEM, N_CLASSES };
static const char *const CLASS_NAMES[N_CLASSES] = { "alu", "mul", "div", "load", "store", "branch", "jump", "system" };

struct hart {
    uint32_t x[32], pc;
    int done;
    uint64_t count;
};

struct machine {
    uint8_t *prog, *mram;
    struct hart harts[MAX_HARTS];
    int nr_harts, current;
    uint32_t text_lo, text_hi, text_words; /* the histogram's range */
    uint64_t *histogram, classes[N_CLASSES];
};

static void die(const struct machine *m, const char *what, uint32_t address)
{
    const struct hart *h = &m->harts[m->current];
    fprintf(stderr, "rv32sim: hart %d, pc 0x%08x: %s (address 0x%08x)\n", m->current, h->pc, what, address);
    exit(2);
}

static uint8_t *at(struct machine *m, uint32_t address, uint32_t n)
{
    if (address % n) die(m, "misaligned access", address);
    if ((uint64_t)address + n <= PROG_BYTES) return m->prog + address;
    if (address >= MRAM_BASE && (uint64_t)address - MRAM_BASE + n <= MRAM_BYTES) return m->mram + (address - MRAM_BASE);
    die(m, "access outside program memory and MRAM", address);
    return NULL;
}

static uint32_t load(struct machine *m, uint32_t address, uint32_t n, int sign)
{
    const uint8_t *p = at(m, address, n);
    uint32_t v = 0;
    for (uint32_t i = 0; i < n; i++) v |= (uint32_t)p[i] << (8 * i);
    if (sign && n < 4 && (v >> (8 * n - 1)) & 1) v |= ~0u << (8 * n);
    return v;
}

static void store(struct machine *m, uint32_t address, uint32_t n, uint32_t v)
{
    uint8_t *p = at(m, address, n);
    for (uint32_t i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static int32_t imm_i(uint32_t w) { return (int32_t)w >> 20; }
static int32_t imm_s(uint32_t w) { return ((int32_t)w >> 25 << 5) | ((w >> 7) & 31); }
static int32_t imm_b(uint32_t w)
{
    return ((int32_t)w >> 31 << 12) | ((w << 4) & 0x800) | ((w >> 20) & 0x7e0) | ((w >> 7) & 0x1e);
}
static int32_t imm_j(uint32_t w)
{
    return ((int32_t)w >> 31 << 20) | (w & 0xff000) | ((w >> 9) & 0x800) | ((w >> 20) & 0x7fe);
}

static uint32_t mulh(int64_t a, int64_t b) { return (uint32_t)((a * b) >> 32); }

/* RV32M: funct3 selects the operation. */
static uint32_t muldiv(uint32_t f3, uint32_t a, uint32_t b, int *cls)
{
    int32_t sa = (int32_t)a, sb = (int32_t)b;
    *cls = f3 < 4 ? CLASS_MUL : CLASS_DIV;
    switch (f3) {
    case 0: return a * b;
    case 1: return mulh(sa, sb);
    case 2: return mulh(sa, (int64_t)(uint64_t)b);
    case 3: return (uint32_t)(((uint64_t)a * b) >> 32);
    case 4: return b == 0 ? ~0u : (sa == INT32_MIN && sb == -1) ? a : (uint32_t)(sa / sb);
    case 5: return b == 0 ? ~0u : a / b;
    case 6: return b == 0 ? a : (sa == INT32_MIN && sb == -1) ? 0 : (uint32_t)(sa % sb);
    default: return b == 0 ? a : a % b;
    }
}

static uint32_t alu(uint32_t f3, uint32_t f7, uint32_t a, uint32_t b, int is_imm)
{
    switch (f3) {
    case 0: return (!is_imm && f7 == 0x20) ? a - b : a + b;
    case 1: return a << (b & 31);
    case 2: return (int32_t)a < (int32_t)b;
    case 3: return a < b;
    case 4: return a ^ b;
    case 5: return f7 == 0x20 ? (uint32_t)((int32_t)a >> (b & 31)) : a >> (b & 31);
    case 6: return a | b;
    default: return a & b;
    }
}

static int branch_taken(uint32_t f3, uint32_t a, uint32_t b)
{
    switch (f3) {
    case 0: return a == b;
    case 1: return a != b;
    case 4: return (int32_t)a < (int32_t)b;
    case 5: return (int32_t)a >= (int32_t)b;
    case 6: return a < b;
    case 7: return a >= b;
    default: return -1;
    }
}

/* ecall: t0 the call (RV32E has no a7), a0 its argument.  Returns 1 when the hart gives up the core. */
static int ecall(struct machine *m, struct hart *h)
{
    switch (h->x[5]) {
    case ECALL_EXIT:
        if (h->x[10] != 0) {
            fprintf(stderr, "rv32sim: hart %d exited with status %u\n", m->current, h->x[10]);
            exit(3);
        }
        h->done = 1;
        return 1;
    case ECALL_YIELD: return 1;
    case ECALL_PUTCHAR: fputc((int)(h->x[10] & 0xff), stderr); return 0;
    default: die(m, "unknown ecall", h->x[5]); return 1;
    }
}

/* Executes one instruction of hart h; returns 1 when the hart yields or ends. */
static int step(struct machine *m, struct hart *h)
{
    const uint32_t pc = h->pc, w = load(m, pc, 4, 0);
    const uint32_t rd = (w >> 7) & 31, rs1 = (w >> 15) & 31, rs2 = (w >> 20) & 31;
    const uint32_t f3 = (w >> 12) & 7, f7 = w >> 25, a = h->x[rs1], b = h->x[rs2];
    uint32_t next = pc + 4, value = 0;
    int writes = 1, cls = CLASS_ALU, yields = 0;
    if (pc >= m->text_lo && pc < m->text_hi) m->histogram[(size_t)m->current * m->text_words + (pc - m->text_lo) / 4]++;
    switch (w & 0x7f) {
    case 0x37: value = w & 0xfffff000u; break;
    case 0x17: value = pc + (w & 0xfffff000u); break;
    case 0x6f: value = next; next = pc + (uint32_t)imm_j(w); cls = CLASS_JUMP; break;
    case 0x67: value = next; next = (a + (uint32_t)imm_i(w)) & ~1u; cls = CLASS_JUMP; break;
    case 0x63: {
        int taken = branch_taken(f3, a, b);
        if (taken < 0) die(m, "unknown branch", w);
        if (taken) next = pc + (uint32_t)imm_b(w);
        writes = 0, cls = CLASS_BRANCH;
        break;
    }
    case 0x03: {
        static const int size[8] = { 1, 2, 4, 0, 1, 2, 0, 0 };
        if (!size[f3]) die(m, "unknown load", w);
        value = load(m, a + (uint32_t)imm_i(w), (uint32_t)size[f3], f3 < 4);
        cls = CLASS_LOAD;
        break;
    }
    case 0x23:
        if (f3 > 2) die(m, "unknown store", w);
        store(m, a + (uint32_t)imm_s(w), 1u << f3, b);
        writes = 0, cls = CLASS_STORE;
        break;
    case 0x13: value = alu(f3, f7, a, (f3 == 1 || f3 == 5) ? rs2 : (uint32_t)imm_i(w), 1); break;
    case 0x33: value = f7 == 1 ? muldiv(f3, a, b, &cls) : alu(f3, f7, a, b, 0); break;
    case 0x0f: writes = 0; break; /* fence */
    case 0x73:
        cls = CLASS_SYSTEM;
        if (w == 0x00000073) { writes = 0, yields = ecall(m, h); break; }
        if (f3 == 2 && (w >> 20) == 0xf14) { value = (uint32_t)m->current; break; } /* csrr mhartid */
        die(m, "unsupported system instruction", w);
        break;
    default: die(m, "unknown instruction", w);
    }
    if (writes && rd) h->x[rd] = value;
    h->pc = next;
    h->count++;
    m->classes[cls]++;
    return yields;
}

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc(*n ? *n : 1);
    if (!data || fread(data, 1, *n, f) != *n) { fprintf(stderr, "rv32sim: cannot read %s\n", path); exit(1); }
    fclose(f);
    return data;
}

static uint32_t u32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Copies the ELF32's PT_LOAD segments into the memories; returns the entry point and the
 * range of the executable segment. */
static uint32_t load_elf(struct machine *m, const char *path)
{
    size_t n;
    uint8_t *e = read_file(path, &n);
    if (n < 52 || memcmp(e, "\177ELF\1\1", 6) != 0 || u16(e + 18) != 243) {
        fprintf(stderr, "rv32sim: %s is not a little-endian ELF32 for RISC-V\n", path);
        exit(1);
    }
    const uint32_t phoff = u32(e + 28), phentsize = u16(e + 42), phnum = u16(e + 44);
    for (uint32_t i = 0; i < phnum; i++) {
        const uint8_t *ph = e + phoff + i * phentsize;
        if (u32(ph) != 1) continue; /* PT_LOAD */
        const uint32_t offset = u32(ph + 4), vaddr = u32(ph + 8), filesz = u32(ph + 16), memsz = u32(ph + 20);
        if (offset + (uint64_t)filesz > n || memsz < filesz) { fprintf(stderr, "rv32sim: bad segment\n"); exit(1); }
        if (memsz) {
            uint8_t *to = at(m, vaddr, 1);
            at(m, vaddr + memsz - 1, 1);
            memcpy(to, e + offset, filesz);
        }
        if (u32(ph + 24) & 1) m->text_lo = vaddr, m->text_hi = vaddr + memsz; /* PF_X */
    }
    const uint32_t entry = u32(e + 24);
    free(e);
    return entry;
}

/* Writes the --wram-in records (address, length, bytes) into program memory. */
static void load_wram(struct machine *m, const char *path)
{
    size_t n;
    uint8_t *records = read_file(path, &n);
    for (size_t at_byte = 0; at_byte < n;) {
        if (n - at_byte < 8) { fprintf(stderr, "rv32sim: %s: truncated record\n", path); exit(1); }
        const uint32_t address = u32(records + at_byte), length = u32(records + at_byte + 4);
        if (n - at_byte - 8 < length || (uint64_t)address + length > PROG_BYTES) {
            fprintf(stderr, "rv32sim: %s: record of %u bytes at 0x%08x out of range\n", path, length, address);
            exit(1);
        }
        memcpy(m->prog + address, records + at_byte + 8, length);
        at_byte += 8 + (size_t)length;
    }
    free(records);
}

static void run(struct machine *m, uint64_t budget)
{
    uint64_t executed = 0;
    for (int done = 0; done < m->nr_harts;) {
        struct hart *h = &m->harts[m->current];
        if (!h->done) {
            const uint64_t before = h->count;
            while (!step(m, h)) {}
            executed += h->count - before;
            if (executed > budget) die(m, "instruction budget exhausted: a hang (a barrier no other hart reaches?)", 0);
        }
        done = 0;
        for (int i = 0; i < m->nr_harts; i++) done += m->harts[i].done;
        m->current = (m->current + 1) % m->nr_harts;
    }
}

static void report(const struct machine *m)
{
    uint64_t total = 0;
    printf("{\"harts\": [");
    for (int i = 0; i < m->nr_harts; i++) {
        printf("%s%llu", i ? ", " : "", (unsigned long long)m->harts[i].count);
        total += m->harts[i].count;
    }
    printf("], \"total\": %llu, \"classes\": {", (unsigned long long)total);
    for (int c = 0; c < N_CLASSES; c++)
        printf("%s\"%s\": %llu", c ? ", " : "", CLASS_NAMES[c], (unsigned long long)m->classes[c]);
    printf("}, \"text\": [%u, %u]}\n", m->text_lo, m->text_hi);
}

int main(int argc, char **argv)
{
    static struct machine m;
    const char *elf = NULL, *mram_in = NULL, *mram_out = NULL, *histogram = NULL, *wram_in = NULL;
    unsigned long out_bytes = 0;
    uint64_t budget = 20000000000ull;
    m.nr_harts = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--harts") && i + 1 < argc) m.nr_harts = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mram-in") && i + 1 < argc) mram_in = argv[++i];
        else if (!strcmp(argv[i], "--mram-out") && i + 2 < argc) mram_out = argv[++i], out_bytes = strtoul(argv[++i], 0, 0);
        else if (!strcmp(argv[i], "--histogram") && i + 1 < argc) histogram = argv[++i];
        else if (!strcmp(argv[i], "--wram-in") && i + 1 < argc) wram_in = argv[++i];
        else if (!strcmp(argv[i], "--budget") && i + 1 < argc) budget = strtoull(argv[++i], 0, 0);
        else if (!elf && argv[i][0] != '-') elf = argv[i];
        else { fprintf(stderr, "rv32sim: unknown argument %s\n", argv[i]); return 1; }
    }
    if (!elf || m.nr_harts < 1 || m.nr_harts > MAX_HARTS || out_bytes > MRAM_BYTES) {
        fprintf(stderr, "usage: rv32sim ELF --harts 1..%d [--mram-in F] [--mram-out F BYTES] [--histogram F]\n", MAX_HARTS);
        return 1;
    }
    m.prog = calloc(PROG_BYTES, 1);
    m.mram = calloc(MRAM_BYTES, 1);
    if (!m.prog || !m.mram) { fprintf(stderr, "rv32sim: out of memory\n"); return 1; }
    const uint32_t entry = load_elf(&m, elf);
    m.text_words = (m.text_hi - m.text_lo) / 4;
    m.histogram = calloc((size_t)m.nr_harts * m.text_words + 1, sizeof *m.histogram);
    if (mram_in) {
        size_t n;
        uint8_t *image = read_file(mram_in, &n);
        if (n > MRAM_BYTES) { fprintf(stderr, "rv32sim: MRAM image larger than 64 MB\n"); return 1; }
        memcpy(m.mram, image, n);
        free(image);
    }
    if (wram_in) load_wram(&m, wram_in);
    for (int i = 0; i < m.nr_harts; i++) m.harts[i].pc = entry;
    run(&m, budget);
    if (mram_out) {
        FILE *f = fopen(mram_out, "wb");
        if (!f || fwrite(m.mram, 1, out_bytes, f) != out_bytes || fclose(f)) { perror(mram_out); return 1; }
    }
    if (histogram) {
        FILE *f = fopen(histogram, "wb");
        size_t n = (size_t)m.nr_harts * m.text_words;
        if (!f || fwrite(m.histogram, sizeof *m.histogram, n, f) != n || fclose(f)) { perror(histogram); return 1; }
    }
    report(&m);
    return 0;
}
