/*
 * isa_list.h — the instruction sets a test runs the flash kernels on: the
 * library's registry (src/isa/isa.h: attn__isa_count, attn__isa_name,
 * attn__isa_supported), never a list written in a test, so that an ISA
 * added to the registry is tested with no test edited.  The usual loop:
 *
 *     for (int i = 0; i < attn__isa_count(); i++) {
 *         if (!test_isa_use(i)) continue;   // this CPU or build lacks it
 *         ... attn__isa_name(i) for labels ...
 *     }
 *     test_isa_restore();
 */
#ifndef ATTN_TEST_ISA_LIST_H
#define ATTN_TEST_ISA_LIST_H

#include "isa/isa.h"

#include <stdbool.h>

/* test_isa_use's argument for the automatic choice (the environment's). */
#define TEST_ISA_AUTO (-1)

/* Sends every flash call to ISA i (TEST_ISA_AUTO: the automatic choice):
 * true when it does, false when this CPU or build lacks the ISA.  Any
 * other refusal of a name the registry gave fails the running test. */
bool test_isa_use(int i);
/* Back to the automatic choice and the environment's (ATTN_KERNEL=ref
 * included); fails the running test if the library refuses. */
void test_isa_restore(void);

#endif /* ATTN_TEST_ISA_LIST_H */
