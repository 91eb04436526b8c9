/*
 * flash_dispatch.c — which instruction set the flash kernel runs on.
 *
 * One table of micro-kernels (flash.h) is chosen once, at first use: the
 * portable one first, then the best the CPU supports (__builtin_cpu_supports),
 * unless $ATTN_ARCH forces a path:
 *   ATTN_ARCH=ref      every attention call runs on the reference kernel
 *   ATTN_ARCH=generic  the portable C micro-kernels
 *   ATTN_ARCH=avx2     AVX2 + FMA      ATTN_ARCH=avx512  AVX-512 F/BW/VL/DQ
 * A forced path the CPU lacks, or an unknown name, falls back to the
 * automatic choice.  ATTN_ARCH_DEBUG=1 prints the choice and the reason once
 * to stderr: the library's only print, made on the user's explicit request.
 */
#include "core/internal.h"
#include "flash/flash.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The paths, in increasing order of preference. */
enum isa { ISA_UNSET = 0, ISA_REF, ISA_GENERIC, ISA_AVX2, ISA_AVX512, ISA_COUNT };
static const char *const isa_names[ISA_COUNT] = {"unset", "ref", "generic", "avx2", "avx512"};

static atomic_int chosen_isa = ISA_UNSET;
static atomic_flag debug_printed = ATOMIC_FLAG_INIT;

static bool isa_supported(enum isa isa) {
    switch (isa) {
    case ISA_REF:
    case ISA_GENERIC:
        return true;
#if defined(__x86_64__)
    case ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case ISA_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
    default:
        return false;
    }
}

static enum isa best_supported(void) {
    for (int isa = ISA_COUNT - 1; isa > ISA_GENERIC; isa--)
        if (isa_supported((enum isa)isa)) return (enum isa)isa;
    return ISA_GENERIC;
}

static enum isa isa_from_name(const char *name) {
    for (int isa = ISA_REF; isa < ISA_COUNT; isa++)
        if (strcmp(name, isa_names[isa]) == 0) return (enum isa)isa;
    return ISA_UNSET;
}

static void debug_report(enum isa isa, const char *reason) {
    const char *debug = getenv("ATTN_ARCH_DEBUG");
    if (!debug || !*debug || strcmp(debug, "0") == 0) return;
    if (atomic_flag_test_and_set(&debug_printed)) return;
    fprintf(stderr, "attn: instruction set %s (%s)\n", isa_names[isa], reason);
}

/* The automatic choice, or $ATTN_ARCH when it names a supported path. */
static enum isa isa_from_environment(void) {
    const char *env = getenv("ATTN_ARCH");
    enum isa best = best_supported();
    if (!env || !*env) {
        debug_report(best, "best the CPU supports");
        return best;
    }
    enum isa wanted = isa_from_name(env);
    if (wanted == ISA_UNSET) {
        debug_report(best, "ATTN_ARCH names no known path (ref, generic, avx2, avx512); "
                           "using the best the CPU supports");
        return best;
    }
    if (!isa_supported(wanted)) {
        debug_report(best, "ATTN_ARCH names a path this CPU or build lacks; using the best "
                           "the CPU supports");
        return best;
    }
    debug_report(wanted, "forced by ATTN_ARCH");
    return wanted;
}

static enum isa current_isa(void) {
    int isa = atomic_load_explicit(&chosen_isa, memory_order_acquire);
    if (isa == ISA_UNSET) {
        /* Racing first calls compute the same answer; the first store wins. */
        int expected = ISA_UNSET;
        int found = (int)isa_from_environment();
        atomic_compare_exchange_strong(&chosen_isa, &expected, found);
        isa = atomic_load_explicit(&chosen_isa, memory_order_acquire);
    }
    return (enum isa)isa;
}

const flash_kernels *flash_kernels_active(void) {
    switch (current_isa()) {
#if defined(__x86_64__)
    case ISA_AVX512:
        return &flash_kernels_avx512;
    case ISA_AVX2:
        return &flash_kernels_avx2;
#endif
    default:
        return &flash_kernels_generic;
    }
}

const char *attn_isa_name(void) { return isa_names[current_isa()]; }

bool attn_dispatch_uses_ref(void) { return current_isa() == ISA_REF; }

attn_status attn_dispatch_force(const char *arch) {
    if (!arch) {
        atomic_store(&chosen_isa, (int)isa_from_environment());
        return ATTN_OK;
    }
    enum isa wanted = isa_from_name(arch);
    if (wanted == ISA_UNSET)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "unknown instruction set \"%s\" (ref, generic, avx2, avx512)", arch);
    if (!isa_supported(wanted))
        return attn_fail(ATTN_ERR_UNSUPPORTED, "this CPU or build cannot run the %s path", arch);
    atomic_store(&chosen_isa, (int)wanted);
    return ATTN_OK;
}
