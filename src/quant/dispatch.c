/*
 * dispatch.c — which micro-kernel table (quant.h) the quantized products
 * run on.  Kept apart from src/flash/dispatch.c on purpose, and small: the
 * same rules, to be folded into one registry of instruction sets.
 *
 * The tables, portable first, in increasing order of preference, are the
 * `isas` list below.  At first use, thread-safely, each is completed from
 * the one before it (an entry left NULL is the lower ISA's; the fast group
 * goes as a whole when the CPU lacks what it needs, fast_supported()), then
 * one is chosen: the best the CPU supports, unless the environment says
 *   ATTN_ARCH=generic|avx2|avx512   that instruction set (one the CPU or
 *                                   build lacks falls back to the best)
 *   ATTN_KERNEL=ref, ATTN_ARCH=ref  every call runs on the reference
 *   ATTN_ARCH_DEBUG=1               the choice printed once on stderr (the
 *                                   user's explicit request)
 */
#include "quant/quant.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const quant_kernels *const isas[] = {
    &attn__quant_kernels_generic,
    &attn__quant_kernels_avx2,
    &attn__quant_kernels_avx512,
};
enum { ISA_COUNT = sizeof isas / sizeof isas[0] };

static quant_kernels complete[ISA_COUNT];
static pthread_once_t complete_once = PTHREAD_ONCE_INIT;
static atomic_int chosen_isa = -1;
static atomic_int ref_forced = 0;
static atomic_flag debug_printed = ATOMIC_FLAG_INIT;

bool attn__quant_absent(void) { return false; }

static bool isa_supported(int i) { return !isas[i]->supported || isas[i]->supported(); }

/* Table i with every gap filled from table i - 1 (already complete). */
static void complete_tables(void) {
    complete[0] = *isas[0];
    for (int i = 1; i < ISA_COUNT; i++) {
        const quant_kernels *below = &complete[i - 1];
        quant_kernels t = *isas[i];
        if (!t.f32_tile) { /* the decode kernels share the tile's order: they go with it */
            t.f32_tile = below->f32_tile;
            t.f32_mr = below->f32_mr, t.f32_nr = below->f32_nr;
            t.f32_lanes = below->f32_lanes, t.f32_kstep = below->f32_kstep;
            memcpy(t.f32_gemv, below->f32_gemv, sizeof t.f32_gemv);
        }
        for (int q = 0; q < QT_COUNT; q++)
            if (!t.dequant[q]) t.dequant[q] = below->dequant[q];
        const bool fast_ok = isa_supported(i) && (!t.fast_supported || t.fast_supported());
        if (!t.q8_tile || !fast_ok) {
            t.fast_isa = below->fast_isa;
            t.fast_supported = below->fast_supported;
            t.q8_tile = below->q8_tile;
            t.q8_mr = below->q8_mr, t.q8_nr = below->q8_nr, t.q8_nrv = below->q8_nrv;
            t.quantize = below->quantize;
            memcpy(t.unpack, below->unpack, sizeof t.unpack);
            memcpy(t.q8_gemv, below->q8_gemv, sizeof t.q8_gemv);
        } else {
            if (!t.quantize) t.quantize = below->quantize;
            for (int q = 0; q < QT_COUNT; q++)
                if (!t.unpack[q]) t.unpack[q] = below->unpack[q];
        }
        complete[i] = t;
    }
}

static int best_supported(void) {
    for (int i = ISA_COUNT - 1; i > 0; i--)
        if (isa_supported(i)) return i;
    return 0;
}

static int isa_from_name(const char *name) {
    for (int i = 0; i < ISA_COUNT; i++)
        if (strcmp(name, isas[i]->isa) == 0) return i;
    return -1;
}

static bool env_is(const char *name, const char *value) {
    const char *env = getenv(name);
    return env && strcmp(env, value) == 0;
}

static void debug_report(int isa, bool ref, const char *reason) {
    const char *debug = getenv("ATTN_ARCH_DEBUG");
    if (!debug || !*debug || strcmp(debug, "0") == 0 || atomic_flag_test_and_set(&debug_printed)) return;
    fprintf(stderr, "attn: quantized products: instruction set %s (%s); precision fast: %s%s\n", isas[isa]->isa,
            reason, complete[isa].fast_isa,
            ref ? "; every call runs on the reference (ATTN_KERNEL=ref)" : "");
}

static void choose_from_environment(void) {
    const char *env = getenv("ATTN_ARCH"), *reason = "best the CPU supports";
    int isa = best_supported();
    if (env && *env && strcmp(env, "ref") != 0) {
        int wanted = isa_from_name(env);
        if (wanted < 0) reason = "ATTN_ARCH names no known instruction set; using the best the CPU supports";
        else if (!isa_supported(wanted))
            reason = "ATTN_ARCH names an instruction set this CPU or build lacks; using the best it supports";
        else isa = wanted, reason = "forced by ATTN_ARCH";
    }
    const bool ref = env_is("ATTN_KERNEL", "ref") || env_is("ATTN_ARCH", "ref");
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

const quant_kernels *attn__quant_active(void) { return &complete[current_isa()]; }

bool attn__quant_forces_ref(void) {
    current_isa();
    return atomic_load_explicit(&ref_forced, memory_order_acquire) == 1;
}

const char *attn_quant_isa(attn_precision precision) {
    const quant_kernels *k = attn__quant_active();
    if (attn__quant_forces_ref()) return "ref";
    return precision == ATTN_PRECISION_FAST ? k->fast_isa : k->isa;
}

int attn_quant_decode_rows(attn_precision precision) {
    const quant_kernels *k = attn__quant_active();
    return precision == ATTN_PRECISION_FAST ? k->q8_mr : k->f32_mr;
}

attn_status attn__quant_force(const char *arch) {
    current_isa();
    if (!arch) {
        choose_from_environment();
        return ATTN_OK;
    }
    if (strcmp(arch, "ref") == 0) {
        atomic_store(&ref_forced, 1);
        return ATTN_OK;
    }
    int wanted = isa_from_name(arch);
    if (wanted < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "unknown instruction set \"%s\" (there are generic, avx2, avx512, and \"ref\")", arch);
    if (!isa_supported(wanted)) return attn__fail(ATTN_ERR_UNSUPPORTED, "this CPU or build cannot run the %s path", arch);
    atomic_store(&chosen_isa, wanted);
    atomic_store(&ref_forced, 0);
    return ATTN_OK;
}
