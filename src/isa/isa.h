/*
 * isa.h — the registry of instruction sets (registry.c): the ISAs this
 * build knows, portable first, then in increasing order of preference;
 * which of them this CPU runs; the one the process runs on; and each ISA's
 * micro-kernel tables, completed from the portable ISA's so that no entry
 * a caller looks up is NULL.  The loop nests (src/flash/) ask it for their
 * table; tests and benches ask it for the list, never write one.
 *
 * The choice is made once, at first use, thread-safely: the best ISA the
 * CPU supports, unless the environment says otherwise:
 *   ATTN_ARCH=<name>     force that instruction set (generic, avx2, avx512
 *                        today: the registry's names; one the CPU or build
 *                        lacks falls back to the best)
 *   ATTN_KERNEL=ref      every attention call runs on the reference kernel,
 *                        an explicit flash request included (the oracle one
 *                        flag away); ATTN_ARCH=ref is the older spelling of
 *                        the same and still works
 *   ATTN_ARCH_DEBUG=1    print the choice and its reason once to stderr: the
 *                        library's only print, made on the user's explicit
 *                        request
 *
 * An ISA is a folder src/isa/<folder>/ whose sources define its entry,
 * `const isa_desc attn__isa_<name>`, and one line in registry.c's list
 * (docs/kernels.md, "Adding an instruction set").  Every build has every
 * entry: where the instructions cannot be compiled (another architecture,
 * -DATTN_PORTABLE=ON) the entry is ISA_ABSENT(name), a name whose
 * supported() says no.
 *
 * Kinds of micro-kernel.  Each kind is one table type with its contract in
 * a header of its own (the attention kernels: flash_table.h), one pointer
 * in isa_desc, and one completion rule in registry.c.  A second kind — the
 * quantized matrix products, later 8-bit K/V loads or AMX tiles — joins
 * the same way: `const quant_table *quant;` here, each ISA's entry pointing
 * at its table (NULL, or entries left NULL, where it has none: the
 * portable ISA's are used), a `complete_quant` beside `complete_flash` in
 * registry.c and `attn__isa_quant(i)` beside attn__isa_flash.  The ISA, its
 * CPU check and the environment's choice stay one per process for every
 * kind; instructions beyond the ISA's baseline (VNNI, AMX, AVX512-BF16)
 * are optional entries of a kind's table with a check of their own, as
 * flash_table.h's bf16 kernels are (bf16_supported), never ISAs apart.
 */
#ifndef ATTN_ISA_ISA_H
#define ATTN_ISA_ISA_H

#include "isa/flash_table.h"

#include <stdbool.h>

/* One instruction set. */
typedef struct isa_desc {
    const char *name;             /* what ATTN_ARCH names: "generic", "avx2", "avx512" */
    bool (*supported)(void);      /* this CPU (and build) runs it; NULL: always        */
    const ukernel_table *flash;   /* the attention micro-kernels; NULL: the portable's  */
} isa_desc;

/* supported() of an ISA this build cannot compile: always false.  Inline,
 * each folder its own copy, so that an absent ISA's file does not call back
 * into the registry that lists it (a cycle of calls otherwise). */
static inline bool isa_absent(void) { return false; }
/* The entry of such an ISA: its name alone (an ISA folder's #else). */
#define ISA_ABSENT(isa_name) {.name = isa_name, .supported = isa_absent}

/* ------------------------------------------------------------- the list */

/* How many ISAs this build knows; they are numbered 0 (the portable one,
 * "generic", which every CPU runs) to attn__isa_count() − 1, in increasing
 * order of preference. */
int attn__isa_count(void);
/* ISA i's name (what ATTN_ARCH and attn__isa_force take). */
const char *attn__isa_name(int i);
/* Whether this CPU and build run ISA i. */
bool attn__isa_supported(int i);
/* ISA i's attention table, complete (every entry filled but the optional
 * bf16 kernels of precision fast).  Only an ISA that is supported may run. */
const ukernel_table *attn__isa_flash(int i);

/* ----------------------------------------------------------- the choice */

/* The ISA the flash kernels run on in this process: $ATTN_ARCH's when the
 * CPU has it, else the best it has. */
int attn__isa_chosen(void);
/* The widest ISA this CPU runs, whatever ATTN_ARCH says: the machine's FMA
 * peak is that of its widest instructions. */
int attn__isa_widest(void);
/* True when $ATTN_KERNEL=ref (or its old spelling $ATTN_ARCH=ref, or
 * attn__isa_force("ref")) sends every attention call to the reference
 * kernel. */
bool attn__isa_forces_ref(void);
/* For tests and benches: re-selects what the environment selects: an ISA
 * by name, or "ref" (every call on the reference kernel, the ISA
 * unchanged); NULL = the automatic choice and the environment again.
 * ATTN_ERR_INVALID_ARGUMENT for a name the registry lacks,
 * ATTN_ERR_UNSUPPORTED when this CPU or build lacks the ISA.  Not
 * thread-safe against concurrent attention calls. */
attn_status attn__isa_force(const char *name);

#endif /* ATTN_ISA_ISA_H */
