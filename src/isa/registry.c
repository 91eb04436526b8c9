/*
 * registry.c — the instruction sets this build knows, each one's tables
 * completed from the portable ISA's, and the choice of one per process
 * (isa.h says what the environment can ask).
 *
 * At first use, thread-safely, every table is completed from the portable
 * one (an entry an ISA leaves NULL runs the portable micro-kernel; the
 * optional bf16 kernels of precision fast excepted: they stay NULL where
 * the ISA has none, and the loop nest then runs the exact path), then one
 * ISA is chosen: the best the CPU supports (its supported()), unless the
 * environment says otherwise.
 */
#include "isa/isa.h"

#include "base/base.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The instruction sets, portable first, then in increasing order of
 * preference: one line each, naming the entry attn__isa_<name> that its
 * folder src/isa/<folder>/ defines. */
#define ISA_LIST(ISA) \
    ISA(generic)      \
    ISA(avx2)         \
    ISA(avx512)

#define ISA_DECLARE(name) extern const isa_desc attn__isa_##name;
ISA_LIST(ISA_DECLARE)
#define ISA_ENTRY(name) &attn__isa_##name,
static const isa_desc *const isas[] = {ISA_LIST(ISA_ENTRY)};
enum { ISA_COUNT = sizeof isas / sizeof isas[0] };

/* The tables of isas[i], one per kind of micro-kernel, with every NULL
 * entry taken from the portable ISA's. */
typedef struct isa_tables {
    ukernel_table flash;
} isa_tables;
static isa_tables complete[ISA_COUNT];
static pthread_once_t complete_once = PTHREAD_ONCE_INIT;

/* The choice, as indices into isas / complete; -1 while unset. */
static atomic_int chosen_isa = -1;
static atomic_int ref_forced = -1; /* -1 unset, 0 no, 1 yes */
static atomic_flag debug_printed = ATOMIC_FLAG_INIT;

/* An ISA's attention table with each entry that it leaves NULL (or 0)
 * taken from the portable table (own NULL: the portable table whole).  The
 * tile shapes travel with the tile kernels: an ISA without its own qk_tile
 * takes the portable shape too. */
static ukernel_table complete_flash(const ukernel_table *own, const ukernel_table *portable) {
    if (!own) return *portable;
    ukernel_table t = *own;
    if (!t.qk_tile) {
        t.tile_rows = portable->tile_rows;
        t.key_block = portable->key_block;
        t.tile_keys = portable->tile_keys;
    }
    if (!t.block_keys) t.block_keys = portable->block_keys;
#define FILL(entry) \
    if (!t.entry) t.entry = portable->entry
    FILL(exp2_n);
    FILL(softcap_n);
    FILL(qk_tile);
    FILL(softmax_tile);
    FILL(pv_tile);
    FILL(probs_tile);
    /* the portable mask's lanes are the portable tile's: an ISA with
     * its own tile shape and no mask_tile keeps NULL (the loop nest then
     * masks row by row) */
    if (!t.mask_tile && t.tile_rows == portable->tile_rows) t.mask_tile = portable->mask_tile;
    FILL(qk_rows);
    FILL(softmax_rows);
    FILL(pv_rows);
    FILL(qk_rows_half);
    FILL(pv_rows_half);
    FILL(probs_rows);
    FILL(all_finite);
    FILL(widen);
    FILL(narrow);
    FILL(gemm);
    FILL(p_ds);
#undef FILL
    if (!t.peak_chunk) {
        t.peak_chunk = portable->peak_chunk;
        t.peak_lanes = portable->peak_lanes;
        t.peak_isa = portable->peak_isa;
    }
    return t;
}

static void complete_tables(void) {
    for (int i = 0; i < ISA_COUNT; i++) complete[i].flash = complete_flash(isas[i]->flash, isas[0]->flash);
}

static bool isa_supported(int i) { return !isas[i]->supported || isas[i]->supported(); }

static int best_supported(void) {
    for (int i = ISA_COUNT - 1; i > 0; i--)
        if (isa_supported(i)) return i;
    return 0;
}

static int isa_from_name(const char *name) {
    for (int i = 0; i < ISA_COUNT; i++)
        if (strcmp(name, isas[i]->name) == 0) return i;
    return -1;
}

/* "generic, avx2, avx512": the names this build knows, for messages. */
static void isa_names(char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < ISA_COUNT && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", isas[i]->name);
}

static bool debug_wanted(void) {
    const char *debug = getenv("ATTN_ARCH_DEBUG");
    return debug && *debug && strcmp(debug, "0") != 0;
}

static void debug_report(int isa, bool ref, const char *reason) {
    if (!debug_wanted() || atomic_flag_test_and_set(&debug_printed)) return;
    const ukernel_table *flash = &complete[isa].flash;
    const bool bf16 = flash->bf16_supported && flash->bf16_supported();
    fprintf(stderr, "attn: instruction set %s (%s); precision fast: %s%s%s\n", isas[isa]->name, reason,
            bf16 ? "bf16 dot products on the tile path, " : "runs exact (no native bf16 dot product)",
            bf16 ? flash->bf16_name() : "",
            ref ? "; every call runs on the reference kernel (ATTN_KERNEL=ref)" : "");
}

static bool env_is(const char *name, const char *value) {
    const char *env = getenv(name);
    return env && strcmp(env, value) == 0;
}

/* The environment's choice of ISA (with the reason, for ATTN_ARCH_DEBUG). */
static int isa_from_environment(const char **reason) {
    const char *env = getenv("ATTN_ARCH");
    int best = best_supported();
    *reason = "best the CPU supports";
    if (!env || !*env || strcmp(env, "ref") == 0) return best;
    int wanted = isa_from_name(env);
    if (wanted < 0) {
        *reason = "ATTN_ARCH names no known instruction set; using the best the CPU supports";
        return best;
    }
    if (!isa_supported(wanted)) {
        *reason = "ATTN_ARCH names an instruction set this CPU or build lacks; using the best it supports";
        return best;
    }
    *reason = "forced by ATTN_ARCH";
    return wanted;
}

static bool ref_from_environment(void) { return env_is("ATTN_KERNEL", "ref") || env_is("ATTN_ARCH", "ref"); }

static void choose_from_environment(void) {
    const char *reason;
    int isa = isa_from_environment(&reason);
    bool ref = ref_from_environment();
    atomic_store(&chosen_isa, isa);
    atomic_store(&ref_forced, ref ? 1 : 0);
    debug_report(isa, ref, reason);
}

static pthread_once_t choose_once = PTHREAD_ONCE_INIT;

static int current_isa(void) {
    pthread_once(&complete_once, complete_tables);
    pthread_once(&choose_once, choose_from_environment);
    return atomic_load_explicit(&chosen_isa, memory_order_acquire);
}

int attn__isa_count(void) { return ISA_COUNT; }

const char *attn__isa_name(int i) { return isas[i]->name; }

bool attn__isa_supported(int i) { return isa_supported(i); }

const ukernel_table *attn__isa_flash(int i) {
    pthread_once(&complete_once, complete_tables);
    return &complete[i].flash;
}

int attn__isa_chosen(void) { return current_isa(); }

int attn__isa_widest(void) { return best_supported(); }

bool attn__isa_forces_ref(void) {
    current_isa();
    return atomic_load_explicit(&ref_forced, memory_order_acquire) == 1;
}

const char *attn_isa_name(void) { return isas[current_isa()]->name; }

attn_status attn__isa_force(const char *name) {
    current_isa();
    if (!name) {
        choose_from_environment();
        return ATTN_OK;
    }
    if (strcmp(name, "ref") == 0) {
        atomic_store(&ref_forced, 1);
        return ATTN_OK;
    }
    int wanted = isa_from_name(name);
    if (wanted < 0) {
        char names[128];
        isa_names(names, sizeof names);
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "unknown instruction set \"%s\" (there are %s, and \"ref\" for the "
                          "reference kernel)", name, names);
    }
    if (!isa_supported(wanted))
        return attn__fail(ATTN_ERR_UNSUPPORTED, "this CPU or build cannot run the %s path", name);
    atomic_store(&chosen_isa, wanted);
    atomic_store(&ref_forced, 0);
    return ATTN_OK;
}
