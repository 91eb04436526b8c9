/*
 * isa_list.c — the instruction sets of the tests, from the library's
 * registry (isa_list.h).
 */
#include "isa_list.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

bool test_isa_use(int i) {
    if (i == TEST_ISA_AUTO) {
        test_isa_restore();
        return true;
    }
    const attn_status st = attn__isa_force(attn__isa_name(i));
    if (st == ATTN_ERR_UNSUPPORTED) return false;
    assert_int_equal(st, ATTN_OK);
    return true;
}

void test_isa_restore(void) { assert_int_equal(attn__isa_force(NULL), ATTN_OK); }
