/*
 * test_dtype.c — the half-precision conversions of src/base/dtype.h:
 * widening is exact, narrowing rounds to nearest even.
 *
 * The oracle is independent of the bit tricks under test: a sorted table
 * of every non-negative value of the format (decoded by the widening
 * functions, themselves checked against ldexp here), and the rule "below
 * the midpoint of the two neighbours: the lower one; above: the upper one;
 * at it: the one with the even code".  Midpoints of neighbours have at
 * most 12 significant bits, so they are exact in float and double and the
 * comparison is exact.  Past the largest finite value the upper neighbour
 * is the format's next power of two, encoded as infinity: that is IEEE's
 * overflow rule.
 *
 * Inputs: every half and bfloat16 (round trips), every tie and both of its
 * float neighbours, every float whose dropped bits are a boundary pattern
 * (0, 1, just below and above half, all ones) for every value of the kept
 * bits, a few million random bit patterns; for the double versions, ties
 * and their double neighbours, which (float) alone would round wrongly.
 */
#include "testutil.h"

#include "base/dtype.h"

#include <math.h>
#include <stdlib.h>

/* The non-negative values of a 16-bit format, ascending, with their codes:
 * the finite ones, then the overflow neighbour (the next power of two,
 * code = infinity). */
typedef struct {
    double value[1 << 15];
    uint16_t code[1 << 15];
    int count;
} format_table;

static format_table f16_table, bf16_table;

static double f16_decode_independently(uint16_t h) {
    const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    const double magnitude = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -magnitude : magnitude;
}

static double bf16_decode_independently(uint16_t h) {
    const int e = (h >> 7) & 0xFF, m = h & 0x7F;
    const double magnitude = e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
    return (h & 0x8000) ? -magnitude : magnitude;
}

static void build_tables(void) {
    f16_table.count = 0;
    for (uint32_t h = 0; h < 0x7C00u; h++) {
        f16_table.value[f16_table.count] = dtype_f16_to_f32((uint16_t)h);
        f16_table.code[f16_table.count++] = (uint16_t)h;
    }
    f16_table.value[f16_table.count] = 65536.0;
    f16_table.code[f16_table.count++] = 0x7C00u;
    bf16_table.count = 0;
    for (uint32_t h = 0; h < 0x7F80u; h++) {
        bf16_table.value[bf16_table.count] = dtype_bf16_to_f32((uint16_t)h);
        bf16_table.code[bf16_table.count++] = (uint16_t)h;
    }
    bf16_table.value[bf16_table.count] = ldexp(1.0, 128);
    bf16_table.code[bf16_table.count++] = 0x7F80u;
}

/* Round-to-nearest-even of a finite or infinite x, by the table. */
static uint16_t oracle_round(const format_table *t, double x) {
    const uint16_t sign = signbit(x) ? 0x8000u : 0;
    const double a = fabs(x);
    if (a >= t->value[t->count - 1]) return (uint16_t)(sign | t->code[t->count - 1]);
    int lo = 0, hi = t->count - 1; /* value[lo] <= a < value[hi] */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (t->value[mid] <= a) lo = mid; else hi = mid;
    }
    const double midpoint = (t->value[lo] + t->value[hi]) / 2; /* exact: few significant bits */
    int pick;
    if (a < midpoint) pick = lo;
    else if (a > midpoint) pick = hi;
    else pick = (t->code[lo] & 1u) ? hi : lo;
    return (uint16_t)(sign | t->code[pick]);
}

static float float_of_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Checks dtype_f32_to_f16 and dtype_f32_to_bf16 on f and -f; counts failures (prints the first few). */
static int failures;
static void check_float(float f) {
    if (isnan(f)) return;
    for (int s = 0; s < 2; s++, f = -f) {
        const uint16_t want16 = oracle_round(&f16_table, f), got16 = dtype_f32_to_f16(f);
        const uint16_t wantb = oracle_round(&bf16_table, f), gotb = dtype_f32_to_bf16(f);
        if (got16 != want16 && failures++ < 10)
            print_error("f32 -> f16 of %a: got 0x%04x, want 0x%04x\n", (double)f, got16, want16);
        if (gotb != wantb && failures++ < 10)
            print_error("f32 -> bf16 of %a: got 0x%04x, want 0x%04x\n", (double)f, gotb, wantb);
    }
}

static void test_widening_is_exact(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const double f16 = dtype_f16_to_f32((uint16_t)h), bf = dtype_bf16_to_f32((uint16_t)h);
        if ((h & 0x7C00u) == 0x7C00u) {
            assert_true((h & 0x3FFu) ? isnan(f16) : isinf(f16));
        } else {
            assert_true(f16 == f16_decode_independently((uint16_t)h));
        }
        if ((h & 0x7F80u) == 0x7F80u) {
            assert_true((h & 0x7Fu) ? isnan(bf) : isinf(bf));
        } else {
            assert_true(bf == bf16_decode_independently((uint16_t)h));
        }
        assert_int_equal(signbit(f16) != 0, (h & 0x8000u) != 0);
        assert_int_equal(signbit(bf) != 0, (h & 0x8000u) != 0);
    }
}

static void test_every_half_round_trips(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const uint16_t code = (uint16_t)h;
        const bool f16_nan = (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu);
        const bool bf16_nan = (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu);
        /* A NaN comes back quiet, with its sign and payload. */
        assert_int_equal(dtype_f32_to_f16(dtype_f16_to_f32(code)), f16_nan ? (h | 0x0200u) : h);
        assert_int_equal(dtype_f32_to_bf16(dtype_bf16_to_f32(code)), bf16_nan ? (h | 0x0040u) : h);
        assert_int_equal(dtype_f64_to_f16(dtype_f16_to_f32(code)), f16_nan ? (h | 0x0200u) : h);
        assert_int_equal(dtype_f64_to_bf16(dtype_bf16_to_f32(code)), bf16_nan ? (h | 0x0040u) : h);
    }
}

static void test_nan_stays_nan(void **state) {
    (void)state;
    /* A float NaN whose payload lies only in the bits narrowing drops. */
    const float low_payload = float_of_bits(0x7F800001u), negative = float_of_bits(0xFF800001u);
    assert_true(isnan(dtype_f16_to_f32(dtype_f32_to_f16(low_payload))));
    assert_true(isnan(dtype_bf16_to_f32(dtype_f32_to_bf16(low_payload))));
    assert_int_equal(dtype_f32_to_f16(negative) & 0x8000u, 0x8000u);
    assert_int_equal(dtype_f32_to_bf16(negative) & 0x8000u, 0x8000u);
    assert_true(isnan(dtype_f16_to_f32(dtype_f64_to_f16(NAN))));
    assert_true(isnan(dtype_bf16_to_f32(dtype_f64_to_bf16(NAN))));
}

static void test_narrowing_against_the_table(void **state) {
    (void)state;
    failures = 0;
    /* Every tie of each format and the floats on either side of it. */
    const format_table *tables[2] = {&f16_table, &bf16_table};
    for (int t = 0; t < 2; t++)
        for (int i = 0; i + 1 < tables[t]->count; i++) {
            const float mid = (float)((tables[t]->value[i] + tables[t]->value[i + 1]) / 2);
            check_float(mid);
            check_float(nextafterf(mid, 0.0f));
            check_float(nextafterf(mid, INFINITY));
            check_float((float)tables[t]->value[i]);
        }
    /* Boundary patterns of the dropped bits (13 for float16's normals, 16
     * for bfloat16) under every value of the kept bits. */
    static const uint32_t low13[] = {0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF};
    for (uint32_t high = 0; high < (1u << 18); high++) /* sign handled by check_float */
        for (size_t k = 0; k < sizeof low13 / sizeof low13[0]; k++)
            check_float(float_of_bits(high << 13 | low13[k]));
    static const uint32_t low16[] = {0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
    for (uint32_t high = 0; high < (1u << 15); high++)
        for (size_t k = 0; k < sizeof low16 / sizeof low16[0]; k++)
            check_float(float_of_bits(high << 16 | low16[k]));
    /* Random bit patterns: every exponent, subnormals and infinities included. */
    test_rng rng;
    test_rng_seed(&rng, 16);
    for (int i = 0; i < (1 << 22); i++) check_float(float_of_bits((uint32_t)test_rng_next(&rng)));
    check_float(INFINITY);
    check_float(0.0f);
    assert_int_equal(failures, 0);
}

static void test_double_narrowing_rounds_once(void **state) {
    (void)state;
    int fails = 0, naive_wrong = 0;
    test_rng rng;
    test_rng_seed(&rng, 64);
    const format_table *tables[2] = {&f16_table, &bf16_table};
    for (int t = 0; t < 2; t++) {
        uint16_t (*narrow)(double) = t == 0 ? dtype_f64_to_f16 : dtype_f64_to_bf16;
        uint16_t (*narrow_f32)(float) = t == 0 ? dtype_f32_to_f16 : dtype_f32_to_bf16;
        for (int i = 0; i + 1 < tables[t]->count; i++) {
            const double mid = (tables[t]->value[i] + tables[t]->value[i + 1]) / 2;
            /* The tie, its double neighbours (no float between them and the
             * tie: (float) would land on the tie and round it to even), and
             * a random double in the interval. */
            const double span = tables[t]->value[i + 1] - tables[t]->value[i];
            const double xs[4] = {mid, nextafter(mid, 0.0), nextafter(mid, INFINITY),
                                  tables[t]->value[i] + span * test_rng_uniform(&rng)};
            for (int k = 0; k < 4; k++)
                for (int s = 0; s < 2; s++) {
                    const double x = s ? -xs[k] : xs[k];
                    const uint16_t want = oracle_round(tables[t], x), got = narrow(x);
                    if (got != want && fails++ < 10)
                        print_error("f64 -> %s of %a: got 0x%04x, want 0x%04x\n", t ? "bf16" : "f16", x,
                                    got, want);
                    naive_wrong += narrow_f32((float)x) != want;
                }
        }
    }
    /* Doubles beyond the float range, and below its smallest subnormal. */
    const double extremes[] = {1e300, 3.5e38, 1e-300, 1e-46};
    for (size_t k = 0; k < sizeof extremes / sizeof extremes[0]; k++) {
        assert_int_equal(dtype_f64_to_f16(extremes[k]), oracle_round(&f16_table, extremes[k]));
        assert_int_equal(dtype_f64_to_bf16(extremes[k]), oracle_round(&bf16_table, extremes[k]));
        assert_int_equal(dtype_f64_to_bf16(-extremes[k]), oracle_round(&bf16_table, -extremes[k]));
    }
    assert_int_equal(fails, 0);
    /* The test can tell: rounding through (float) first is wrong at the
     * ties' neighbours, which is why dtype.h rounds to odd. */
    assert_true(naive_wrong > 0);
}

static int setup(void **state) {
    (void)state;
    build_tables();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_widening_is_exact),
        cmocka_unit_test(test_every_half_round_trips),
        cmocka_unit_test(test_nan_stays_nan),
        cmocka_unit_test(test_narrowing_against_the_table),
        cmocka_unit_test(test_double_narrowing_rounds_once),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
