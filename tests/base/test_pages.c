/*
 * test_pages.c — large stream arrays (src/base/pages.h): zero-filled,
 * writable end to end, on a 2 MiB boundary when large, and advised as
 * transparent huge pages exactly when the system allows it and
 * ATTN_HUGE_PAGES does not say 0.
 *
 * The oracle for the advice is the kernel's own account of the mapping,
 * /proc/self/smaps: the VmFlags of the area holding the array carry "hg"
 * (MADV_HUGEPAGE) or not.  Whether the kernel then found a free huge page
 * is its business and not checked (it may not, on fragmented memory).
 * Under AddressSanitizer the bytes just outside the array are poisoned,
 * as they are outside a calloc of its size.
 */

#include "testutil.h"

#include "base/pages.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifdef TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

/* Whether transparent huge pages may be asked for at all: Linux with the
 * sysfs switch at [always] or [madvise]. */
static bool system_has_thp(void) {
#if defined(__linux__)
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char line[128] = {0};
    const bool ok = fgets(line, sizeof line, f) && !strstr(line, "[never]");
    fclose(f);
    return ok;
#else
    return false;
#endif
}

/* 1 when the smaps area holding `at` has the "hg" VmFlag, 0 when it has
 * not, -1 when no area or no VmFlags line was found. */
static int smaps_advised(const void *at) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    bool inside = false;
    int result = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)at >= lo && (uintptr_t)at < hi;
            continue;
        }
        if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            result = strstr(line, " hg") != NULL;
            break;
        }
    }
    fclose(f);
    return result;
}

static bool all_zero(const unsigned char *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i]) return false;
    return true;
}

static void test_empty_and_small_arrays(void **state) {
    (void)state;
    page_array p;
    assert_true(attn__pages_alloc(&p, 0));
    assert_null(p.data);
    attn__pages_free(&p);
    assert_true(attn__pages_alloc(&p, 1000));
    assert_non_null(p.data);
    assert_true(all_zero(p.data, 1000));
    assert_false(p.advised); /* under 2 MiB: nothing to gain */
    memset(p.data, 7, 1000);
    attn__pages_free(&p);
    assert_null(p.owned);
}

/* A large array, 2 MiB-aligned, zero, writable to its last byte, advised
 * as the system and the environment say. */
static void check_large(bool want_advice) {
    const size_t bytes = PAGES_HUGE_BYTES * 5 / 2 + 123; /* two whole huge pages and a piece */
    page_array p;
    assert_true(attn__pages_alloc(&p, bytes));
    assert_non_null(p.data);
    assert_int_equal((uintptr_t)p.data % PAGES_HUGE_BYTES, 0);
    assert_true(all_zero(p.data, bytes));
    memset(p.data, 0xA5, bytes);
    assert_int_equal(((unsigned char *)p.data)[bytes - 1], 0xA5);
    const bool expected = want_advice && system_has_thp();
    assert_int_equal(p.advised, expected);
#if defined(__linux__)
    assert_int_equal(smaps_advised(p.data), expected);
    assert_int_equal(smaps_advised((unsigned char *)p.data + PAGES_HUGE_BYTES), expected);
#endif
#ifdef TEST_ASAN
    assert_true(__asan_address_is_poisoned((unsigned char *)p.data + bytes));
    assert_false(__asan_address_is_poisoned((unsigned char *)p.data + bytes - 1));
    if (p.owned != p.data) assert_true(__asan_address_is_poisoned((unsigned char *)p.data - 1));
#endif
    attn__pages_free(&p);
    assert_null(p.data);
}

static void test_large_array_is_advised(void **state) {
    (void)state;
    unsetenv("ATTN_HUGE_PAGES");
    check_large(true);
}

static void test_environment_turns_the_advice_off(void **state) {
    (void)state;
    setenv("ATTN_HUGE_PAGES", "0", 1);
    check_large(false);
    setenv("ATTN_HUGE_PAGES", "1", 1);
    check_large(true);
    unsetenv("ATTN_HUGE_PAGES");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_and_small_arrays),
        cmocka_unit_test(test_large_array_is_advised),
        cmocka_unit_test(test_environment_turns_the_advice_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
