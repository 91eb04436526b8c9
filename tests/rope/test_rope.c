/*
 * test_rope.c — RoPE (attn_rope.h) against closed forms, against Hugging
 * Face transformers (fixtures in tests/rope/reference/, written by
 * make_rope_reference.py with transformers' own code), in half storage,
 * and on bad input.
 *
 * Shape legend: x [B, L, H, D]  positions [B, L]  R rotary width, F = R / 2
 * frequencies; NEOX pairs (f, f + F), GPT-J pairs (2f, 2f + 1).
 *
 * Tolerances: tests/support/tolerances.h, ROPE_*.
 */
#include "testutil.h"
#include "tolerances.h"

#include "attn_io.h"
#include "attn_rope.h"
#include "base/dtype.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */

/* A contiguous tensor of any storage dtype over its own buffer. */
typedef struct {
    attn_tensor t;
    size_t bytes;
} owned_tensor;

static owned_tensor tensor_new(attn_dtype dtype, int64_t b, int64_t l, int64_t h, int64_t d) {
    owned_tensor o;
    o.bytes = (size_t)(b * l * h * d) * attn_dtype_size(dtype);
    o.t = attn_tensor_view(calloc(1, o.bytes), dtype, b, l, h, d);
    assert_non_null(o.t.data);
    return o;
}

static owned_tensor tensor_copy(const owned_tensor *src) {
    owned_tensor o = *src;
    o.t.data = malloc(src->bytes);
    assert_non_null(o.t.data);
    memcpy(o.t.data, src->t.data, src->bytes);
    return o;
}

static void tensor_free(owned_tensor *o) {
    free(o->t.data);
    o->t.data = NULL;
}

static size_t element_index(const attn_tensor *t, int64_t b, int64_t l, int64_t h, int64_t d) {
    return (size_t)(b * t->stride[0] + l * t->stride[1] + h * t->stride[2] + d);
}

static double get(const attn_tensor *t, int64_t b, int64_t l, int64_t h, int64_t d) {
    const size_t i = element_index(t, b, l, h, d);
    switch (t->dtype) {
    case ATTN_F16: return dtype_f16_to_f32(((const uint16_t *)t->data)[i]);
    case ATTN_BF16: return dtype_bf16_to_f32(((const uint16_t *)t->data)[i]);
    default: return ((const float *)t->data)[i];
    }
}

/* Stores v rounded to the tensor's type. */
static void set(attn_tensor *t, int64_t b, int64_t l, int64_t h, int64_t d, double v) {
    const size_t i = element_index(t, b, l, h, d);
    switch (t->dtype) {
    case ATTN_F16: ((uint16_t *)t->data)[i] = dtype_f64_to_f16(v); break;
    case ATTN_BF16: ((uint16_t *)t->data)[i] = dtype_f64_to_bf16(v); break;
    default: ((float *)t->data)[i] = (float)v; break;
    }
}

#define FOR_EACH_ELEMENT(t, b, l, h, d)                     \
    for (int64_t b = 0; b < (t)->shape[0]; b++)             \
        for (int64_t l = 0; l < (t)->shape[1]; l++)         \
            for (int64_t h = 0; h < (t)->shape[2]; h++)     \
                for (int64_t d = 0; d < (t)->shape[3]; d++)

/* N(0, 1) values with 8 significant bits, |x| in [2^-6, 8]: exact in every
 * storage type, so one input means the same numbers in all three, and no
 * zeros (whose sign a rotation may flip). */
static void fill_storable(attn_tensor *t, test_rng *rng) {
    FOR_EACH_ELEMENT(t, b, l, h, d) {
        double v = test_rng_normal(rng);
        const double sign = v < 0 ? -1 : 1;
        v = fmin(fmax(fabs(v), 0x1p-6), 8.0);
        int e;
        const double m = frexp(v, &e);
        set(t, b, l, h, d, sign * ldexp(round(m * 256) / 256, e));
    }
}

/* The width paired with width d of a row (d itself past the rotary width). */
static int64_t partner(int64_t d, int64_t rotary_dim, attn_rope_pairing pairing) {
    if (d >= rotary_dim) return d;
    if (pairing == ATTN_ROPE_GPTJ) return d ^ 1;
    return d < rotary_dim / 2 ? d + rotary_dim / 2 : d - rotary_dim / 2;
}

static double pair_norm(const attn_tensor *t, int64_t b, int64_t l, int64_t h, int64_t d, int64_t rotary_dim,
                        attn_rope_pairing pairing) {
    return hypot(get(t, b, l, h, d), get(t, b, l, h, partner(d, rotary_dim, pairing)));
}

static double dot_rows(const attn_tensor *x, int64_t bx, int64_t lx, int64_t hx, const attn_tensor *y, int64_t by,
                       int64_t ly, int64_t hy) {
    double s = 0;
    for (int64_t d = 0; d < x->shape[3]; d++) s += get(x, bx, lx, hx, d) * get(y, by, ly, hy, d);
    return s;
}

static double dot_all(const attn_tensor *x, const attn_tensor *y) {
    double s = 0;
    FOR_EACH_ELEMENT(x, b, l, h, d) s += get(x, b, l, h, d) * get(y, b, l, h, d);
    return s;
}

/* Half codes in an order where neighbours differ by 1 (sign-magnitude to two's complement). */
static int32_t ordered_code(uint16_t h) { return (h & 0x8000u) ? -(int32_t)(h & 0x7FFFu) : (int32_t)h; }

/* --------------------------------------------------------- closed forms */

/* A rotation keeps every pair's norm, and with YaRN's factor m scales it by m. */
static void test_rotation_preserves_norms(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 1);
    const attn_rope_pairing pairings[2] = {ATTN_ROPE_NEOX, ATTN_ROPE_GPTJ};
    for (int pi = 0; pi < 2; pi++)
        for (int yarn = 0; yarn < 2; yarn++) {
            owned_tensor x = tensor_new(ATTN_F32, 3, 17, 4, 40);
            test_fill_normal(&rng, x.t.data, 3 * 17 * 4 * 40, 1.0);
            owned_tensor y = tensor_copy(&x);
            attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
            opt.pairing = pairings[pi];
            if (yarn) {
                opt.scaling = ATTN_ROPE_SCALING_YARN;
                opt.factor = 8;
                opt.original_max_position_embeddings = 64;
            }
            double m = 1;
            assert_ok(attn_rope_frequencies(40, &opt, (double[20]){0}, &m));
            assert_ok(attn_rope_apply(&y.t, NULL, 1000, &opt));
            FOR_EACH_ELEMENT(&x.t, b, l, h, d) {
                const double before = m * pair_norm(&x.t, b, l, h, d, 40, opt.pairing);
                const double after = pair_norm(&y.t, b, l, h, d, 40, opt.pairing);
                assert_true(fabs(after - before) <= ROPE_NORM_REL_FAIL * before);
            }
            for (int64_t b = 0; b < 3; b++)
                for (int64_t l = 0; l < 17; l++)
                    for (int64_t h = 0; h < 4; h++) {
                        const double before = m * sqrt(dot_rows(&x.t, b, l, h, &x.t, b, l, h));
                        const double after = sqrt(dot_rows(&y.t, b, l, h, &y.t, b, l, h));
                        assert_true(fabs(after - before) <= ROPE_NORM_REL_FAIL * before);
                    }
            tensor_free(&x);
            tensor_free(&y);
        }
}

/* Rotating q at p and k at p + delta gives the q.k of q at 0 and k at
 * delta, for p up to 10^6: the relative position is all that is left.  In
 * float angles this fails by far at large p (attn_rope.h). */
static void test_dot_depends_only_on_the_difference(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 2);
    const int64_t starts[] = {0, 1, 17, 1000, 65536, 1000000};
    const int64_t deltas[] = {0, 3, -5, 100, 4097};
    const int n_starts = sizeof starts / sizeof starts[0], n_deltas = sizeof deltas / sizeof deltas[0];
    for (int pairing = 0; pairing < 2; pairing++) {
        /* One q row and one k row, copied to every (start, delta) slot. */
        owned_tensor q = tensor_new(ATTN_F32, 1, n_starts * n_deltas, 1, 128);
        owned_tensor k = tensor_new(ATTN_F32, 1, n_starts * n_deltas, 1, 128);
        float q0[128], k0[128];
        test_fill_normal(&rng, q0, 128, 1.0);
        test_fill_normal(&rng, k0, 128, 1.0);
        int64_t pos_q[6 * 5], pos_k[6 * 5];
        for (int s = 0; s < n_starts; s++)
            for (int e = 0; e < n_deltas; e++) {
                const int r = s * n_deltas + e;
                memcpy((float *)q.t.data + r * 128, q0, sizeof q0);
                memcpy((float *)k.t.data + r * 128, k0, sizeof k0);
                pos_q[r] = starts[s];
                pos_k[r] = starts[s] + deltas[e];
            }
        attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
        opt.pairing = (attn_rope_pairing)pairing;
        opt.theta = 1e6;
        assert_ok(attn_rope_apply(&q.t, pos_q, 0, &opt));
        assert_ok(attn_rope_apply(&k.t, pos_k, 0, &opt));
        double qn = 0, kn = 0;
        for (int d = 0; d < 128; d++) qn += (double)q0[d] * q0[d], kn += (double)k0[d] * k0[d];
        const double scale = sqrt(qn) * sqrt(kn);
        for (int e = 0; e < n_deltas; e++) {
            const double at_zero = dot_rows(&q.t, 0, e, 0, &k.t, 0, e, 0); /* start 0 */
            for (int s = 1; s < n_starts; s++) {
                const int r = s * n_deltas + e;
                const double got = dot_rows(&q.t, 0, r, 0, &k.t, 0, r, 0);
                if (fabs(got - at_zero) > ROPE_DOT_REL_FAIL * scale)
                    print_error("pairing %d p %lld delta %lld: q.k %.9g, at p = 0 %.9g\n", pairing,
                                (long long)starts[s], (long long)deltas[e], got, at_zero);
                assert_true(fabs(got - at_zero) <= ROPE_DOT_REL_FAIL * scale);
            }
        }
        tensor_free(&q);
        tensor_free(&k);
    }
}

/* backward is the transpose, <R x, y> = <x, R^T y>, for any attention
 * factor; with m = 1 it is also the inverse; with m it gives m^2 x back. */
static void test_backward_is_transpose_and_inverse(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 3);
    for (int pairing = 0; pairing < 2; pairing++)
        for (int yarn = 0; yarn < 2; yarn++) {
            attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
            opt.pairing = (attn_rope_pairing)pairing;
            opt.rotary_dim = 24;
            if (yarn) {
                opt.scaling = ATTN_ROPE_SCALING_YARN;
                opt.factor = 16;
                opt.original_max_position_embeddings = 512;
            }
            double m = 1;
            assert_ok(attn_rope_frequencies(40, &opt, (double[12]){0}, &m));
            owned_tensor x = tensor_new(ATTN_F32, 2, 13, 3, 40), y = tensor_new(ATTN_F32, 2, 13, 3, 40);
            test_fill_normal(&rng, x.t.data, 2 * 13 * 3 * 40, 1.0);
            test_fill_normal(&rng, y.t.data, 2 * 13 * 3 * 40, 1.0);
            int64_t positions[2 * 13];
            for (int i = 0; i < 2 * 13; i++) positions[i] = test_rng_range(&rng, 200000) - 1000;
            owned_tensor rx = tensor_copy(&x), rty = tensor_copy(&y);
            assert_ok(attn_rope_apply(&rx.t, positions, 0, &opt));
            assert_ok(attn_rope_backward(&rty.t, positions, 0, &opt));
            const double lhs = dot_all(&rx.t, &y.t), rhs = dot_all(&x.t, &rty.t);
            const double scale = m * sqrt(dot_all(&x.t, &x.t)) * sqrt(dot_all(&y.t, &y.t));
            assert_true(fabs(lhs - rhs) <= ROPE_ROUNDTRIP_REL_FAIL * scale);
            /* backward after apply: m^2 x on the rotated widths, x on the tail
             * (which the attention factor does not touch, as in HF) */
            assert_ok(attn_rope_backward(&rx.t, positions, 0, &opt));
            FOR_EACH_ELEMENT(&x.t, b, l, h, d) {
                const double want = (d < 24 ? m * m : 1) * get(&x.t, b, l, h, d);
                const double tol = ROPE_ROUNDTRIP_REL_FAIL * m * m * pair_norm(&x.t, b, l, h, d, 24, opt.pairing);
                assert_true(fabs(get(&rx.t, b, l, h, d) - want) <= tol);
            }
            tensor_free(&x), tensor_free(&y), tensor_free(&rx), tensor_free(&rty);
        }
}

/* Widths [R, D) are not touched, bit for bit, in every dtype (a NaN with a
 * payload included); position 0 is the identity on the rotated ones. */
static void test_tail_and_position_zero_are_untouched(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 4);
    const attn_dtype dtypes[3] = {ATTN_F32, ATTN_F16, ATTN_BF16};
    for (int di = 0; di < 3; di++)
        for (int pairing = 0; pairing < 2; pairing++) {
            owned_tensor x = tensor_new(dtypes[di], 2, 7, 3, 80);
            fill_storable(&x.t, &rng);
            /* a signalling NaN in the tail: any load-and-store would quiet it */
            const size_t tail = element_index(&x.t, 1, 3, 2, 79);
            if (dtypes[di] == ATTN_F32) ((uint32_t *)x.t.data)[tail] = 0x7F800001u;
            else ((uint16_t *)x.t.data)[tail] = dtypes[di] == ATTN_F16 ? 0x7C01u : 0x7F81u;
            owned_tensor y = tensor_copy(&x);
            attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
            opt.pairing = (attn_rope_pairing)pairing;
            opt.rotary_dim = 34; /* an odd number of pairs */
            assert_ok(attn_rope_apply(&y.t, NULL, 12345, &opt));
            const size_t size = attn_dtype_size(dtypes[di]);
            FOR_EACH_ELEMENT(&x.t, b, l, h, d) {
                const size_t i = element_index(&x.t, b, l, h, d) * size;
                if (d >= 34) assert_memory_equal((char *)x.t.data + i, (char *)y.t.data + i, size);
            }
            /* every position 0: the identity, bit for bit */
            owned_tensor z = tensor_copy(&x);
            int64_t zeros[2 * 7] = {0};
            assert_ok(attn_rope_apply(&z.t, zeros, 0, &opt));
            assert_memory_equal(x.t.data, z.t.data, x.bytes);
            tensor_free(&x), tensor_free(&y), tensor_free(&z);
        }
}

/* NEOX and GPT-J are one rotation under the permutation that sends NEOX's
 * widths f and f + F to GPT-J's 2f and 2f + 1: bit for bit, tail included. */
static void test_neox_and_gptj_are_a_permutation_apart(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 5);
    const int64_t D = 72, R = 48, F = R / 2;
    owned_tensor neox = tensor_new(ATTN_F32, 2, 9, 2, D);
    test_fill_normal(&rng, neox.t.data, 2 * 9 * 2 * D, 1.0);
    owned_tensor gptj = tensor_copy(&neox);
    FOR_EACH_ELEMENT(&neox.t, b, l, h, d) {
        const int64_t to = d < F ? 2 * d : d < R ? 2 * (d - F) + 1 : d;
        set(&gptj.t, b, l, h, to, get(&neox.t, b, l, h, d));
    }
    attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
    opt.rotary_dim = R;
    opt.theta = 5e5;
    int64_t positions[2 * 9];
    for (int i = 0; i < 2 * 9; i++) positions[i] = 7919 * i;
    assert_ok(attn_rope_apply(&neox.t, positions, 0, &opt));
    opt.pairing = ATTN_ROPE_GPTJ;
    assert_ok(attn_rope_apply(&gptj.t, positions, 0, &opt));
    FOR_EACH_ELEMENT(&neox.t, b, l, h, d) {
        const int64_t to = d < F ? 2 * d : d < R ? 2 * (d - F) + 1 : d;
        assert_true(get(&gptj.t, b, l, h, to) == get(&neox.t, b, l, h, d));
    }
    tensor_free(&neox), tensor_free(&gptj);
}

/* Linear scaling by f at position p is no scaling at p / f: bit for bit
 * for f = 2 and 4 (dividing by a power of two is exact), to rounding for 3. */
static void test_linear_scaling_divides_positions(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 6);
    const double factors[3] = {2, 4, 3};
    for (int fi = 0; fi < 3; fi++) {
        const int64_t f = (int64_t)factors[fi];
        owned_tensor scaled = tensor_new(ATTN_F32, 1, 11, 2, 64);
        test_fill_normal(&rng, scaled.t.data, 11 * 2 * 64, 1.0);
        owned_tensor plain = tensor_copy(&scaled);
        int64_t p_scaled[11], p_plain[11];
        for (int i = 0; i < 11; i++) p_plain[i] = 977 * i * i, p_scaled[i] = f * p_plain[i];
        attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
        assert_ok(attn_rope_apply(&plain.t, p_plain, 0, &opt));
        opt.scaling = ATTN_ROPE_SCALING_LINEAR;
        opt.factor = factors[fi];
        assert_ok(attn_rope_apply(&scaled.t, p_scaled, 0, &opt));
        if (f != 3) {
            assert_memory_equal(plain.t.data, scaled.t.data, plain.bytes);
        } else {
            FOR_EACH_ELEMENT(&plain.t, b, l, h, d) {
                const double tol = ROPE_ROUNDTRIP_REL_FAIL * pair_norm(&plain.t, b, l, h, d, 64, ATTN_ROPE_NEOX);
                assert_true(fabs(get(&plain.t, b, l, h, d) - get(&scaled.t, b, l, h, d)) <= tol);
            }
        }
        tensor_free(&scaled), tensor_free(&plain);
    }
}

/* The tables by their closed forms: the base table, linear, YaRN's three
 * regions and attention factor, llama3's bands, dynamic NTK's base, a
 * caller's table, and cos/sin from them. */
static void test_frequency_tables(void **state) {
    (void)state;
    enum { D = 64, F = 32 };
    double base[F], w[F], m;
    attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
    assert_ok(attn_rope_frequencies(D, NULL, base, &m));
    assert_true(m == 1 && base[0] == 1);
    for (int f = 0; f < F; f++) assert_true(fabs(base[f] - pow(10000.0, -2.0 * f / D)) <= ROPE_F64_REL_FAIL * base[f]);

    opt.scaling = ATTN_ROPE_SCALING_LINEAR;
    opt.factor = 8;
    assert_ok(attn_rope_frequencies(D, &opt, w, &m));
    for (int f = 0; f < F; f++) assert_true(w[f] == base[f] / 8);

    /* YaRN, original 4096, theta 1e4, R 64: pair f turns 4096 w_f / (2 pi)
     * times over the original context; the ramp runs from the pair that
     * turns beta_fast = 32 times (rounded down) to the one that turns
     * beta_slow = 1 time (rounded up): pairs 10 and 23. */
    opt = (attn_rope_options)ATTN_ROPE_OPTIONS_INIT;
    opt.scaling = ATTN_ROPE_SCALING_YARN;
    opt.factor = 16;
    opt.original_max_position_embeddings = 4096;
    assert_ok(attn_rope_frequencies(D, &opt, w, &m));
    const double two_pi = 2 * 3.14159265358979323846;
    const int low = (int)floor(D * log(4096 / (32 * two_pi)) / (2 * log(10000.0)));
    const int high = (int)ceil(D * log(4096 / (1 * two_pi)) / (2 * log(10000.0)));
    assert_int_equal(low, 10);
    assert_int_equal(high, 23);
    for (int f = 0; f <= low; f++) assert_true(w[f] == base[f]);
    for (int f = high; f < F; f++) assert_true(w[f] == base[f] / 16);
    for (int f = low + 1; f < high; f++) {
        const double ramp = (double)(f - low) / (high - low);
        assert_true(fabs(w[f] - (base[f] / 16 * ramp + base[f] * (1 - ramp))) <= ROPE_F64_REL_FAIL * w[f]);
    }
    assert_true(fabs(m - (0.1 * log(16) + 1)) <= ROPE_ATTENTION_FACTOR_REL_FAIL * m);
    opt.mscale = 0.5; /* alone: ignored, as in HF */
    assert_ok(attn_rope_frequencies(D, &opt, w, &m));
    assert_true(fabs(m - (0.1 * log(16) + 1)) <= ROPE_ATTENTION_FACTOR_REL_FAIL * m);
    opt.mscale_all_dim = 1.0;
    assert_ok(attn_rope_frequencies(D, &opt, w, &m));
    const double ratio = (0.05 * log(16) + 1) / (0.1 * log(16) + 1);
    assert_true(fabs(m - ratio) <= ROPE_ATTENTION_FACTOR_REL_FAIL * m);
    opt.attention_factor = 1.25; /* given: used as it is */
    assert_ok(attn_rope_frequencies(D, &opt, w, &m));
    assert_true(m == 1.25);

    /* llama3, factor 8, bands 1 and 4 of 256 positions: wavelengths below
     * 64 kept, above 256 divided by 8, smooth between. */
    opt = (attn_rope_options)ATTN_ROPE_OPTIONS_INIT;
    opt.scaling = ATTN_ROPE_SCALING_LLAMA3;
    opt.factor = 8;
    opt.original_max_position_embeddings = 256;
    opt.low_freq_factor = 1;
    opt.high_freq_factor = 4;
    assert_ok(attn_rope_frequencies(D, &opt, w, &m));
    int kept = 0, divided = 0, smooth = 0;
    for (int f = 0; f < F; f++) {
        const double wavelength = 2 * 3.14159265358979323846 / base[f];
        if (wavelength < 64) {
            assert_true(w[f] == base[f]);
            kept++;
        } else if (wavelength > 256) {
            assert_true(w[f] == base[f] / 8);
            divided++;
        } else {
            assert_true(w[f] < base[f] && w[f] > base[f] / 8);
            smooth++;
        }
    }
    assert_true(kept > 0 && divided > 0 && smooth > 0);

    /* dynamic NTK: the base table up to the original length, then theta grown */
    opt = (attn_rope_options)ATTN_ROPE_OPTIONS_INIT;
    opt.scaling = ATTN_ROPE_SCALING_DYNAMIC_NTK;
    opt.factor = 2;
    opt.original_max_position_embeddings = 2048;
    opt.seq_len = 2048;
    assert_ok(attn_rope_frequencies(D, &opt, w, &m));
    assert_memory_equal(w, base, sizeof base);
    opt.seq_len = 8192;
    assert_ok(attn_rope_frequencies(D, &opt, w, &m));
    const double grown = 10000.0 * pow(2.0 * 8192 / 2048 - 1, 64.0 / 62);
    for (int f = 0; f < F; f++) assert_true(fabs(w[f] - pow(grown, -2.0 * f / D)) <= ROPE_F64_REL_FAIL * w[f]);

    /* a table of one's own, and cos/sin from whatever table is in use */
    double mine[F];
    for (int f = 0; f < F; f++) mine[f] = 0.5 / (f + 1);
    opt = (attn_rope_options)ATTN_ROPE_OPTIONS_INIT;
    opt.inv_freq = mine;
    opt.attention_factor = 1.5;
    assert_ok(attn_rope_frequencies(D, &opt, w, &m));
    assert_memory_equal(w, mine, sizeof mine);
    float c[3 * F], s[3 * F];
    const int64_t positions[3] = {-7, 0, 1000003};
    assert_ok(attn_rope_cos_sin(D, positions, 3, 0, &opt, c, s));
    for (int i = 0; i < 3; i++)
        for (int f = 0; f < F; f++) {
            assert_true(c[i * F + f] == (float)(1.5 * cos((double)positions[i] * mine[f])));
            assert_true(s[i * F + f] == (float)(1.5 * sin((double)positions[i] * mine[f])));
        }
    assert_ok(attn_rope_cos_sin(D, NULL, 3, 5, NULL, c, s));
    assert_true(c[2 * F + 1] == (float)cos(7 * base[1]) && s[2 * F + 1] == (float)sin(7 * base[1]));
}

/* Positions: an array equals the offset it spells; batches read their own
 * row of it; a negative position is the inverse rotation (m = 1). */
static void test_positions_and_offsets(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 7);
    owned_tensor x = tensor_new(ATTN_F32, 2, 6, 3, 32);
    test_fill_normal(&rng, x.t.data, 2 * 6 * 3 * 32, 1.0);
    owned_tensor by_offset = tensor_copy(&x), by_array = tensor_copy(&x);
    int64_t positions[2 * 6];
    for (int i = 0; i < 12; i++) positions[i] = 500 + i % 6;
    assert_ok(attn_rope_apply(&by_offset.t, NULL, 500, NULL));
    assert_ok(attn_rope_apply(&by_array.t, positions, 0, NULL));
    assert_memory_equal(by_offset.t.data, by_array.t.data, x.bytes);

    /* batch 1 at other positions: row by row as single-row calls */
    for (int l = 0; l < 6; l++) positions[6 + l] = 100000 - 37 * l;
    owned_tensor two = tensor_copy(&x);
    assert_ok(attn_rope_apply(&two.t, positions, 0, NULL));
    for (int64_t b = 0; b < 2; b++)
        for (int64_t l = 0; l < 6; l++) {
            attn_tensor row = x.t;
            row.data = (float *)x.t.data + element_index(&x.t, b, l, 0, 0);
            row.shape[0] = row.shape[1] = 1;
            float copy[3 * 32];
            memcpy(copy, row.data, sizeof copy);
            row.data = copy;
            assert_ok(attn_rope_apply(&row, NULL, positions[b * 6 + l], NULL));
            assert_memory_equal(copy, (float *)two.t.data + element_index(&x.t, b, l, 0, 0), sizeof copy);
        }

    /* a negative offset: allowed, and the backward of the positive one */
    owned_tensor negative = tensor_copy(&x), backward = tensor_copy(&x);
    int64_t plus[2 * 6];
    for (int i = 0; i < 12; i++) plus[i] = 1005 - i % 6;
    assert_ok(attn_rope_apply(&negative.t, NULL, -1005, NULL)); /* positions -1005 .. -1000 */
    assert_ok(attn_rope_backward(&backward.t, plus, 0, NULL));
    assert_memory_equal(negative.t.data, backward.t.data, x.bytes);
    tensor_free(&x), tensor_free(&by_offset), tensor_free(&by_array), tensor_free(&two);
    tensor_free(&negative), tensor_free(&backward);
}

/* Strided views give the contiguous result and touch nothing else: q inside
 * a packed [B, L, 3, H, D] qkv buffer, and a [B, H, L, D] (heads-first)
 * layout. */
static void test_strided_views(void **state) {
    (void)state;
    enum { B = 2, L = 5, H = 3, D = 16 };
    test_rng rng;
    test_rng_seed(&rng, 8);
    owned_tensor want = tensor_new(ATTN_F32, B, L, H, D);
    test_fill_normal(&rng, want.t.data, B * L * H * D, 1.0);
    owned_tensor original = tensor_copy(&want);
    attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
    opt.pairing = ATTN_ROPE_GPTJ;
    assert_ok(attn_rope_apply(&want.t, NULL, 3, &opt));

    float packed[B * L * 3 * H * D], packed_before[B * L * 3 * H * D];
    test_fill_normal(&rng, packed, B * L * 3 * H * D, 1.0);
    attn_tensor k = {.data = packed + H * D, .dtype = ATTN_F32, .shape = {B, L, H, D},
                     .stride = {L * 3 * H * D, 3 * H * D, D, 1}};
    FOR_EACH_ELEMENT(&k, b, l, h, d) set(&k, b, l, h, d, get(&original.t, b, l, h, d));
    memcpy(packed_before, packed, sizeof packed);
    assert_ok(attn_rope_apply(&k, NULL, 3, &opt));
    for (size_t i = 0; i < sizeof packed / sizeof packed[0]; i++) {
        const size_t within = i % (3 * H * D);
        if (within < H * D || within >= 2 * H * D) assert_true(packed[i] == packed_before[i]);
    }
    FOR_EACH_ELEMENT(&k, b, l, h, d) assert_true(get(&k, b, l, h, d) == get(&want.t, b, l, h, d));

    float heads_first[B * H * L * D];
    attn_tensor t = {.data = heads_first, .dtype = ATTN_F32, .shape = {B, L, H, D},
                     .stride = {H * L * D, D, L * D, 1}};
    FOR_EACH_ELEMENT(&t, b, l, h, d) set(&t, b, l, h, d, get(&original.t, b, l, h, d));
    assert_ok(attn_rope_apply(&t, NULL, 3, &opt));
    FOR_EACH_ELEMENT(&t, b, l, h, d) assert_true(get(&t, b, l, h, d) == get(&want.t, b, l, h, d));
    tensor_free(&want), tensor_free(&original);
}

/* The same bits for 1, 2, 3 and 7 threads, forward and backward. */
static void test_thread_count_does_not_change_bits(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 9);
    owned_tensor x = tensor_new(ATTN_BF16, 3, 113, 4, 64);
    fill_storable(&x.t, &rng);
    owned_tensor first = {{0}, 0};
    const int threads[4] = {1, 2, 3, 7};
    for (int i = 0; i < 4; i++) {
        owned_tensor y = tensor_copy(&x);
        attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
        opt.threads = threads[i];
        opt.scaling = ATTN_ROPE_SCALING_YARN;
        opt.factor = 4;
        opt.original_max_position_embeddings = 32;
        assert_ok(attn_rope_apply(&y.t, NULL, 77, &opt));
        assert_ok(attn_rope_backward(&y.t, NULL, 12, &opt));
        if (i == 0) first = y;
        else {
            assert_memory_equal(first.t.data, y.t.data, x.bytes);
            tensor_free(&y);
        }
    }
    tensor_free(&first), tensor_free(&x);
}

/* ----------------------------------------------------------- half storage */

/* float16 and bfloat16 tensors: the result is the double rotation rounded
 * once (within u|y| + a of an independent double evaluation), and at most
 * one ulp from the float32 result rounded to the storage type. */
static void test_half_storage(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 10);
    enum { B = 2, L = 33, H = 3, D = 40, R = 40, F = R / 2 };
    const attn_dtype halves[2] = {ATTN_F16, ATTN_BF16};
    const double rel[2] = {ROPE_STORE_F16_REL_FAIL, ROPE_STORE_BF16_REL_FAIL};
    const double abs_[2] = {ROPE_STORE_F16_ABS_FAIL, ROPE_STORE_BF16_ABS_FAIL};
    for (int hi = 0; hi < 2; hi++)
        for (int pairing = 0; pairing < 2; pairing++) {
            owned_tensor x32 = tensor_new(ATTN_F32, B, L, H, D), xh = tensor_new(halves[hi], B, L, H, D);
            fill_storable(&x32.t, &rng);
            FOR_EACH_ELEMENT(&x32.t, b, l, h, d) set(&xh.t, b, l, h, d, get(&x32.t, b, l, h, d));
            owned_tensor y32 = tensor_copy(&x32), yh = tensor_copy(&xh);
            attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
            opt.pairing = (attn_rope_pairing)pairing;
            opt.theta = 1e6;
            assert_ok(attn_rope_apply(&y32.t, NULL, 40000, &opt));
            assert_ok(attn_rope_apply(&yh.t, NULL, 40000, &opt));
            int64_t off_by_one = 0;
            FOR_EACH_ELEMENT(&x32.t, b, l, h, d) {
                /* the double rotation, written out here */
                const int64_t f = pairing == ATTN_ROPE_GPTJ ? d / 2 : d % F;
                const bool first = pairing == ATTN_ROPE_GPTJ ? d % 2 == 0 : d < F;
                const double angle = (double)(40000 + l) * pow(1e6, -2.0 * f / R);
                const double xa = get(&x32.t, b, l, h, first ? d : partner(d, R, opt.pairing));
                const double xb = get(&x32.t, b, l, h, first ? partner(d, R, opt.pairing) : d);
                const double exact = first ? xa * cos(angle) - xb * sin(angle) : xb * cos(angle) + xa * sin(angle);
                const double slack = ROPE_F64_REL_FAIL * (1 + 40000 + l) * hypot(xa, xb);
                const double got = get(&yh.t, b, l, h, d);
                assert_true(fabs(got - exact) <= rel[hi] * fabs(exact) + abs_[hi] + 2 * slack);
                const double got32 = get(&y32.t, b, l, h, d);
                assert_true(fabs(got32 - exact) <= ROPE_STORE_F32_REL_FAIL * fabs(exact) + ROPE_STORE_F32_ABS_FAIL +
                                                       2 * slack);
                const uint16_t rounded32 = halves[hi] == ATTN_F16 ? dtype_f32_to_f16((float)got32)
                                                                  : dtype_f32_to_bf16((float)got32);
                const uint16_t code = ((const uint16_t *)yh.t.data)[element_index(&yh.t, b, l, h, d)];
                const int32_t ulps = abs(ordered_code(code) - ordered_code(rounded32));
                assert_true(ulps <= ROPE_HALF_VS_F32_ULP_FAIL);
                off_by_one += ulps;
            }
            /* ties are rare: almost every value is the float32 result rounded */
            assert_true(off_by_one * 100 < B * L * H * D);
            tensor_free(&x32), tensor_free(&xh), tensor_free(&y32), tensor_free(&yh);
        }

    /* A result just above a tie of the storage type, closer than float32 can
     * tell: at the angle pi/2 (cos = 6.1e-17 in double, sin = 1 exactly)
     * with x = (1, 1024) and m = 1 + u, the second width is
     * m (1 + 1024 * 6.1e-17) = (1 + u)(1 + 6.3e-14).  Rounded once that is
     * 1 + 2u, the upper neighbour; through float32 it becomes the tie 1 + u
     * and rounds to the even 1.  (The first width, -1024 m + 6.1e-17 m, is
     * just inside the tie at 1024: -1024 either way.) */
    const double quarter_turn = 1.5707963267948966;
    for (int hi = 0; hi < 2; hi++) {
        const double u = hi ? ROPE_STORE_BF16_REL_FAIL : ROPE_STORE_F16_REL_FAIL;
        uint16_t row[2];
        attn_tensor x = attn_tensor_view(row, halves[hi], 1, 1, 1, 2);
        set(&x, 0, 0, 0, 0, 1.0);
        set(&x, 0, 0, 0, 1, 1024.0);
        attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
        opt.inv_freq = &quarter_turn;
        opt.attention_factor = 1 + u;
        assert_ok(attn_rope_apply(&x, NULL, 1, &opt));
        assert_true(get(&x, 0, 0, 0, 1) == 1 + 2 * u);
        assert_true(get(&x, 0, 0, 0, 0) == -1024.0);
    }
}

/* ------------------------------------------------------- Hugging Face */

/* params.npy's order (make_rope_reference.py's PARAM_NAMES). */
enum {
    P_HEAD_DIM, P_PAIRING, P_ROTARY_DIM, P_THETA, P_SCALING, P_FACTOR, P_ORIGINAL_MAX, P_SEQ_LEN, P_BETA_FAST,
    P_BETA_SLOW, P_MSCALE, P_MSCALE_ALL_DIM, P_YARN_NO_TRUNCATE, P_LOW_FREQ_FACTOR, P_HIGH_FREQ_FACTOR,
    P_ATTENTION_FACTOR, P_HF_ATTENTION_FACTOR, P_COUNT
};

static void load_fixture(const char *name, const char *file, attn_dtype dtype, attn_array *a) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/rope/reference/%s/%s", ATTN_SOURCE_DIR, name, file);
    assert_ok(attn_npy_load(path, a));
    assert_int_equal(a->dtype, dtype);
}

/* got (a rotation of x at positions) against want [B, L, H, D] float64:
 * u|want| + a + ROPE_F64_REL_FAIL (1 + |p| · angle_scale) m |pair| per
 * element, and the tail bit for bit.  angle_scale is 0 when both sides
 * used the same table (their angles are the same double products). */
static void compare_with(const attn_tensor *got, const attn_tensor *x, const double *want, const int64_t *positions,
                         int64_t rotary_dim, attn_rope_pairing pairing, double m, double angle_scale,
                         const char *what) {
    const double rel = got->dtype == ATTN_F16    ? ROPE_STORE_F16_REL_FAIL
                       : got->dtype == ATTN_BF16 ? ROPE_STORE_BF16_REL_FAIL
                                                 : ROPE_STORE_F32_REL_FAIL;
    const double abs_ = got->dtype == ATTN_F16    ? ROPE_STORE_F16_ABS_FAIL
                        : got->dtype == ATTN_BF16 ? ROPE_STORE_BF16_ABS_FAIL
                                                  : ROPE_STORE_F32_ABS_FAIL;
    double worst = 0;
    int bad = 0;
    size_t i = 0;
    FOR_EACH_ELEMENT(got, b, l, h, d) {
        const double w = want[i++], g = get(got, b, l, h, d);
        if (d >= rotary_dim) {
            bad += g != get(x, b, l, h, d);
            continue;
        }
        const double p = fabs((double)positions[b * got->shape[1] + l]);
        const double slack = ROPE_F64_REL_FAIL * (1 + p * angle_scale) * m * pair_norm(x, b, l, h, d, rotary_dim, pairing);
        const double tol = rel * fabs(w) + abs_ + 2 * slack;
        const double err = fabs(g - w);
        if (err / tol > worst) worst = err / tol;
        if (err > tol && bad++ < 5)
            print_error("%s [%lld, %lld, %lld, %lld]: got %.9g, want %.9g (tolerance %.3g)\n", what, (long long)b,
                        (long long)l, (long long)h, (long long)d, g, w, tol);
    }
    assert_int_equal(bad, 0);
    assert_true(worst <= 1);
}

static void check_hf_case(const char *name) {
    attn_array params, x, positions, hf_table, twin_table, y_hf, y_f64;
    load_fixture(name, "params.npy", ATTN_F64, &params);
    load_fixture(name, "x.npy", ATTN_F32, &x);
    load_fixture(name, "positions.npy", ATTN_I64, &positions);
    load_fixture(name, "hf_inv_freq.npy", ATTN_F32, &hf_table);
    load_fixture(name, "inv_freq_f64.npy", ATTN_F64, &twin_table);
    load_fixture(name, "y_hf.npy", ATTN_F64, &y_hf);
    load_fixture(name, "y_f64.npy", ATTN_F64, &y_f64);
    assert_int_equal(params.count, P_COUNT);
    assert_int_equal(x.ndim, 4);
    const double *p = params.data;
    const int64_t D = (int64_t)p[P_HEAD_DIM], R = (int64_t)p[P_ROTARY_DIM], F = R / 2;
    assert_int_equal(x.shape[3], D);
    assert_int_equal(hf_table.count, F);

    attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
    opt.pairing = (attn_rope_pairing)p[P_PAIRING];
    opt.theta = p[P_THETA];
    opt.rotary_dim = R;
    opt.scaling = (attn_rope_scaling)p[P_SCALING];
    opt.factor = p[P_FACTOR];
    opt.original_max_position_embeddings = (int64_t)p[P_ORIGINAL_MAX];
    opt.seq_len = (int64_t)p[P_SEQ_LEN];
    opt.beta_fast = p[P_BETA_FAST];
    opt.beta_slow = p[P_BETA_SLOW];
    opt.mscale = p[P_MSCALE];
    opt.mscale_all_dim = p[P_MSCALE_ALL_DIM];
    opt.yarn_no_truncate = (int)p[P_YARN_NO_TRUNCATE];
    opt.low_freq_factor = p[P_LOW_FREQ_FACTOR];
    opt.high_freq_factor = p[P_HIGH_FREQ_FACTOR];
    opt.attention_factor = p[P_ATTENTION_FACTOR];
    const double hf_m = p[P_HF_ATTENTION_FACTOR];

    /* 1. The library's table and factor: HF's to float32 accuracy, the
     *    float64 twin's to double accuracy. */
    double *table = malloc((size_t)F * sizeof *table), m = 0;
    assert_ok(attn_rope_frequencies(D, &opt, table, &m));
    const double hf_bound = ROPE_HF_TABLE_REL_FAIL(opt.theta, opt.scaling ? opt.factor : 1.0);
    for (int64_t f = 0; f < F; f++) {
        const double hf = ((const float *)hf_table.data)[f], twin = ((const double *)twin_table.data)[f];
        if (fabs(table[f] - hf) > hf_bound * table[f] || fabs(table[f] - twin) > ROPE_F64_REL_FAIL * table[f])
            print_error("%s inv_freq[%lld]: attn %.17g, HF (float32) %.9g, twin %.17g\n", name, (long long)f, table[f],
                        hf, twin);
        assert_true(fabs(table[f] - hf) <= hf_bound * table[f]);
        assert_true(fabs(table[f] - twin) <= ROPE_F64_REL_FAIL * table[f]);
    }
    assert_true(fabs(m - hf_m) <= ROPE_ATTENTION_FACTOR_REL_FAIL * hf_m);

    /* 2. The rotation itself, given HF's own table: the pairing, the
     *    signs, the attention factor on cos and sin, the partial width. */
    attn_tensor xt = attn_tensor_view(x.data, ATTN_F32, x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    const size_t bytes = (size_t)x.count * sizeof(float);
    float *y = malloc(bytes);
    memcpy(y, x.data, bytes);
    attn_tensor yt = xt;
    yt.data = y;
    double *hf_as_double = malloc((size_t)F * sizeof *hf_as_double);
    for (int64_t f = 0; f < F; f++) hf_as_double[f] = ((const float *)hf_table.data)[f];
    attn_rope_options with_hf_table = ATTN_ROPE_OPTIONS_INIT;
    with_hf_table.pairing = opt.pairing;
    with_hf_table.rotary_dim = R;
    with_hf_table.inv_freq = hf_as_double;
    with_hf_table.attention_factor = hf_m;
    assert_ok(attn_rope_apply(&yt, positions.data, 0, &with_hf_table));
    compare_with(&yt, &xt, y_hf.data, positions.data, R, opt.pairing, hf_m, 0, name);

    /* 3. End to end with the library's own table, in every storage type. */
    const attn_dtype dtypes[3] = {ATTN_F32, ATTN_F16, ATTN_BF16};
    for (int di = 0; di < 3; di++) {
        owned_tensor s = tensor_new(dtypes[di], x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
        FOR_EACH_ELEMENT(&s.t, b, l, h, d) set(&s.t, b, l, h, d, get(&xt, b, l, h, d));
        assert_ok(attn_rope_apply(&s.t, positions.data, 0, &opt));
        compare_with(&s.t, &xt, y_f64.data, positions.data, R, opt.pairing, m, 1, name);
        tensor_free(&s);
    }
    free(table), free(y), free(hf_as_double);
    attn_array_free(&params), attn_array_free(&x), attn_array_free(&positions), attn_array_free(&hf_table);
    attn_array_free(&twin_table), attn_array_free(&y_hf), attn_array_free(&y_f64);
}

static void test_hugging_face_fixtures(void **state) {
    (void)state;
    static const char *const cases[] = {"qwen25_neox",  "llama31_llama3", "qwen25_yarn", "gptoss_yarn",
                                        "deepseek_yarn", "gptj_partial",   "linear2",     "dynamic_partial"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_hf_case(cases[i]);
}

/* -------------------------------------------------------------- bad input */

/* The call fails with status and a message containing needle, and x is unchanged. */
/* Every tensor of test_bad_input views one buffer of this many floats. */
enum { BAD_INPUT_FLOATS = 2 * 3 * 4 * 8 };

/* The call (forward and backward) fails with status and a message
 * containing needle, and the buffer x views is unchanged. */
static void expect_failure(attn_tensor *x, const int64_t *positions, int64_t offset, const attn_rope_options *opt,
                           attn_status status, const char *needle) {
    float before[BAD_INPUT_FLOATS];
    if (x && x->data) memcpy(before, x->data, sizeof before);
    for (int direction = 0; direction < 2; direction++) {
        const attn_status st = direction ? attn_rope_backward(x, positions, offset, opt)
                                         : attn_rope_apply(x, positions, offset, opt);
        if (st != status || !strstr(attn_last_error(), needle))
            print_error("want status %d and \"%s\", got %d: %s\n", status, needle, st, attn_last_error());
        assert_int_equal(st, status);
        assert_non_null(strstr(attn_last_error(), needle));
    }
    if (x && x->data) assert_memory_equal(before, x->data, sizeof before);
}

static void test_bad_input(void **state) {
    (void)state;
    float data[BAD_INPUT_FLOATS];
    test_rng rng;
    test_rng_seed(&rng, 11);
    test_fill_normal(&rng, data, BAD_INPUT_FLOATS, 1.0);
    attn_tensor x = attn_tensor_4d(data, 2, 3, 4, 8);
    const attn_status BAD = ATTN_ERR_INVALID_ARGUMENT;
    attn_rope_options opt;

#define CASE(setup, status, needle)              \
    do {                                         \
        opt = (attn_rope_options)ATTN_ROPE_OPTIONS_INIT; \
        setup;                                   \
        expect_failure(&x, NULL, 0, &opt, status, needle); \
    } while (0)

    CASE(opt.rotary_dim = 5, BAD, "rotary_dim is 5: odd");
    CASE(opt.rotary_dim = 10, BAD, "rotary_dim is 10: must be in [0, D = 8]");
    CASE(opt.rotary_dim = -2, BAD, "rotary_dim");
    CASE(opt.theta = 0, BAD, "theta is 0");
    CASE(opt.theta = -1, BAD, "theta is -1");
    CASE(opt.theta = NAN, BAD, "theta");
    CASE(opt.theta = INFINITY, BAD, "theta");
    CASE(opt.pairing = (attn_rope_pairing)2, BAD, "pairing");
    CASE(opt.scaling = (attn_rope_scaling)9, BAD, "scaling");
    CASE(opt.scaling = (attn_rope_scaling)-1, BAD, "scaling");
    const attn_rope_scaling scaled[4] = {ATTN_ROPE_SCALING_LINEAR, ATTN_ROPE_SCALING_DYNAMIC_NTK, ATTN_ROPE_SCALING_YARN,
                                         ATTN_ROPE_SCALING_LLAMA3};
    const double bad_factors[4] = {0, -2, NAN, INFINITY};
    for (int s = 0; s < 4; s++)
        for (int f = 0; f < 4; f++)
            CASE((opt.scaling = scaled[s], opt.factor = bad_factors[f], opt.original_max_position_embeddings = 64,
                  opt.low_freq_factor = 1, opt.high_freq_factor = 4),
                 BAD, "attn_rope_options.factor");
    CASE((opt.scaling = ATTN_ROPE_SCALING_YARN, opt.factor = 4), BAD, "original_max_position_embeddings is 0");
    CASE((opt.scaling = ATTN_ROPE_SCALING_YARN, opt.factor = 4, opt.original_max_position_embeddings = -5), BAD,
         "original_max_position_embeddings is -5");
    CASE((opt.scaling = ATTN_ROPE_SCALING_LLAMA3, opt.factor = 8, opt.low_freq_factor = 1, opt.high_freq_factor = 4),
         BAD, "original_max_position_embeddings");
    CASE((opt.scaling = ATTN_ROPE_SCALING_DYNAMIC_NTK, opt.factor = 2), BAD, "original_max_position_embeddings");
    CASE((opt.scaling = ATTN_ROPE_SCALING_YARN, opt.factor = 4, opt.original_max_position_embeddings = 64,
          opt.beta_fast = 1, opt.beta_slow = 2),
         BAD, "beta_fast (1) must exceed beta_slow (2)");
    CASE((opt.scaling = ATTN_ROPE_SCALING_YARN, opt.factor = 4, opt.original_max_position_embeddings = 64,
          opt.beta_slow = -1),
         BAD, "beta_fast");
    CASE((opt.scaling = ATTN_ROPE_SCALING_YARN, opt.factor = 4, opt.original_max_position_embeddings = 64,
          opt.mscale = -1),
         BAD, "mscale");
    CASE((opt.scaling = ATTN_ROPE_SCALING_YARN, opt.factor = 4, opt.original_max_position_embeddings = 64,
          opt.theta = 1),
         BAD, "theta is 1: YaRN");
    CASE((opt.scaling = ATTN_ROPE_SCALING_LLAMA3, opt.factor = 8, opt.original_max_position_embeddings = 64),
         BAD, "low_freq_factor is 0");
    CASE((opt.scaling = ATTN_ROPE_SCALING_LLAMA3, opt.factor = 8, opt.original_max_position_embeddings = 64,
          opt.low_freq_factor = 4, opt.high_freq_factor = 4),
         BAD, "high_freq_factor is 4");
    CASE((opt.scaling = ATTN_ROPE_SCALING_DYNAMIC_NTK, opt.factor = 2, opt.original_max_position_embeddings = 64,
          opt.rotary_dim = 2),
         BAD, "rotary_dim is 2: dynamic NTK");
    CASE((opt.scaling = ATTN_ROPE_SCALING_DYNAMIC_NTK, opt.factor = 2, opt.original_max_position_embeddings = 64,
          opt.seq_len = -1),
         BAD, "seq_len is -1");
    CASE(opt.attention_factor = -1, BAD, "attention_factor is -1");
    CASE(opt.attention_factor = NAN, BAD, "attention_factor");
    CASE(opt.threads = -1, BAD, "threads is -1");
    double table[4] = {1, 0.5, 0.25, 0.125};
    CASE((opt.inv_freq = table, opt.scaling = ATTN_ROPE_SCALING_LINEAR, opt.factor = 2), BAD,
         "inv_freq is given with scaling 1");
    table[2] = NAN;
    CASE(opt.inv_freq = table, BAD, "inv_freq[2] is nan");
    CASE(opt.struct_size = 0, BAD, "ATTN_ROPE_OPTIONS_INIT");

    /* positions: the offset's last position must fit; negative ones are fine */
    opt = (attn_rope_options)ATTN_ROPE_OPTIONS_INIT;
    expect_failure(&x, NULL, INT64_MAX - 1, &opt, ATTN_ERR_OVERFLOW, "position_offset");
    assert_ok(attn_rope_apply(&x, NULL, INT64_MAX - 2, &opt)); /* the last position is INT64_MAX */
    assert_ok(attn_rope_apply(&x, NULL, INT64_MIN, &opt));

    /* tensors */
    attn_tensor bad = x;
    bad.dtype = ATTN_I32;
    expect_failure(&bad, NULL, 0, NULL, BAD, "dtype 7 is not a tensor dtype");
    bad = x;
    bad.dtype = ATTN_F64;
    expect_failure(&bad, NULL, 0, NULL, BAD, "dtype 1 is not a tensor dtype");
    bad = x;
    bad.stride[3] = 2;
    bad.shape[3] = 4;
    expect_failure(&bad, NULL, 0, NULL, ATTN_ERR_SHAPE, "contiguous");
    bad = x;
    bad.stride[2] = 0;
    expect_failure(&bad, NULL, 0, NULL, ATTN_ERR_SHAPE, "overlap");
    bad = x;
    bad.stride[1] = 4; /* positions step inside a row */
    expect_failure(&bad, NULL, 0, NULL, ATTN_ERR_SHAPE, "overlap");
    bad = x;
    bad.shape[3] = 7; /* odd width, rotary_dim 0 */
    expect_failure(&bad, NULL, 0, NULL, BAD, "the head width D = 7 is odd");
    bad = x;
    bad.shape[1] = 0;
    expect_failure(&bad, NULL, 0, NULL, ATTN_ERR_SHAPE, "positions must be positive");
    bad = x;
    bad.data = NULL;
    expect_failure(&bad, NULL, 0, NULL, BAD, "->data is NULL");
    expect_failure(NULL, NULL, 0, NULL, BAD, "is NULL");
    assert_int_equal(attn_rope_apply(NULL, NULL, 0, NULL), BAD);
    assert_non_null(strstr(attn_last_error(), "x is NULL"));
    assert_int_equal(attn_rope_backward(NULL, NULL, 0, NULL), BAD);
    assert_non_null(strstr(attn_last_error(), "dy is NULL"));

    /* the table functions */
    double w[4];
    float c[8], s[8];
    assert_int_equal(attn_rope_frequencies(8, NULL, NULL, NULL), BAD);
    assert_non_null(strstr(attn_last_error(), "inv_freq is NULL"));
    assert_int_equal(attn_rope_frequencies(0, NULL, w, NULL), ATTN_ERR_SHAPE);
    assert_int_equal(attn_rope_cos_sin(8, NULL, 0, 0, NULL, c, s), ATTN_ERR_SHAPE);
    assert_non_null(strstr(attn_last_error(), "count"));
    assert_int_equal(attn_rope_cos_sin(8, NULL, 2, 0, NULL, NULL, s), BAD);
    assert_non_null(strstr(attn_last_error(), "cos is NULL"));
    assert_int_equal(attn_rope_cos_sin(8, NULL, 2, INT64_MAX, NULL, c, s), ATTN_ERR_OVERFLOW);
#undef CASE
}

/* ------------------------------------------------ tables per sequence */

/* The configurations of the table tests: both pairings, partial rotary
 * (widths past R pass through), each scaling the decoder runs (YaRN's
 * attention factor m != 1 included), a table of one's own; each in its
 * own storage type. */
typedef struct table_case {
    const char *name;
    attn_dtype dtype;
    int64_t dim;
    attn_rope_options opt;
} table_case;

static const double own_inv_freq[5] = {1.0, 0.3, 0.05, 1e-3, 2e-5};

static int table_cases(table_case *cases) {
    int n = 0;
    const attn_rope_options init = ATTN_ROPE_OPTIONS_INIT;
    cases[n] = (table_case){"neox, whole width", ATTN_F32, 64, init};
    cases[n].opt.theta = 1e6, n++;
    cases[n] = (table_case){"gpt-j, whole width", ATTN_F32, 16, init};
    cases[n].opt.pairing = ATTN_ROPE_GPTJ, n++;
    cases[n] = (table_case){"neox, partial rotary 10 of 26", ATTN_BF16, 26, init};
    cases[n].opt.rotary_dim = 10, n++;
    cases[n] = (table_case){"gpt-j, partial rotary 6 of 10", ATTN_F16, 10, init};
    cases[n].opt.pairing = ATTN_ROPE_GPTJ, cases[n].opt.rotary_dim = 6, n++;
    cases[n] = (table_case){"yarn (m != 1)", ATTN_F32, 32, init};
    cases[n].opt.scaling = ATTN_ROPE_SCALING_YARN, cases[n].opt.factor = 4,
    cases[n].opt.original_max_position_embeddings = 32, n++;
    cases[n] = (table_case){"llama3", ATTN_F32, 16, init};
    cases[n].opt.scaling = ATTN_ROPE_SCALING_LLAMA3, cases[n].opt.factor = 8,
    cases[n].opt.original_max_position_embeddings = 64, cases[n].opt.low_freq_factor = 1,
    cases[n].opt.high_freq_factor = 4, cases[n].opt.theta = 5e5, n++;
    cases[n] = (table_case){"linear, 3 threads", ATTN_F32, 8, init};
    cases[n].opt.scaling = ATTN_ROPE_SCALING_LINEAR, cases[n].opt.factor = 2.5, cases[n].opt.threads = 3, n++;
    cases[n] = (table_case){"a table of one's own", ATTN_F32, 12, init};
    cases[n].opt.inv_freq = own_inv_freq, cases[n].opt.rotary_dim = 10, n++;
    return n;
}

/* attn_rope_apply_table gives attn_rope_apply's bits, at an offset whose
 * positions end exactly where the table does and at scattered explicit
 * positions, after the table grew in uneven steps (crossing its
 * reallocations); its rows are m cos(p w_f), m sin(p w_f) in double as
 * the test computes them from attn_rope_frequencies, and attn_rope_cos_sin's
 * values once rounded to float. */
static void test_table_equals_apply(void **state) {
    (void)state;
    table_case cases[8];
    const int n_cases = table_cases(cases);
    test_rng rng;
    test_rng_seed(&rng, 21);
    const int64_t grow[6] = {1, 17, 16, 40, 41, 1000}; /* 16 shrinks: nothing to do */
    for (int i = 0; i < n_cases; i++) {
        const table_case *tc = &cases[i];
        attn_rope_table *t = NULL;
        assert_ok(attn_rope_table_new(tc->dim, &tc->opt, &t));
        assert_int_equal(attn_rope_table_positions(t), 0);
        for (int g = 0; g < 6; g++) {
            assert_ok(attn_rope_table_reserve(t, grow[g]));
            assert_int_equal(attn_rope_table_positions(t), g == 2 ? 17 : grow[g]);
        }
        owned_tensor x = tensor_new(tc->dtype, 3, 17, 2, tc->dim);
        fill_storable(&x.t, &rng);
        /* offset: positions 983 .. 999, the table's last */
        owned_tensor want = tensor_copy(&x), got = tensor_copy(&x);
        assert_ok(attn_rope_apply(&want.t, NULL, 1000 - 17, &tc->opt));
        assert_ok(attn_rope_apply_table(&got.t, NULL, 1000 - 17, t));
        if (memcmp(want.t.data, got.t.data, x.bytes)) fail_msg("%s: offset: not attn_rope_apply's bits", tc->name);
        tensor_free(&want), tensor_free(&got);
        /* explicit positions [3, 17], any order, repeats and 0 included */
        int64_t positions[3 * 17];
        for (int64_t r = 0; r < 3 * 17; r++) positions[r] = (r * 389 + 7) % 1000;
        positions[5] = 0, positions[6] = 999, positions[7] = 999;
        want = tensor_copy(&x), got = tensor_copy(&x);
        assert_ok(attn_rope_apply(&want.t, positions, 0, &tc->opt));
        assert_ok(attn_rope_apply_table(&got.t, positions, 0, t));
        if (memcmp(want.t.data, got.t.data, x.bytes)) fail_msg("%s: positions: not attn_rope_apply's bits", tc->name);
        tensor_free(&want), tensor_free(&got), tensor_free(&x);

        /* the rows, against an evaluation of the formula here */
        const int64_t F = (tc->opt.rotary_dim ? tc->opt.rotary_dim : tc->dim) / 2;
        double w[32], m;
        float cos_f[32], sin_f[32];
        assert_ok(attn_rope_frequencies(tc->dim, &tc->opt, w, &m));
        const int64_t rows[5] = {0, 1, 16, 17, 999};
        for (int k = 0; k < 5; k++) {
            const double *c, *sn;
            assert_ok(attn_rope_table_row(t, rows[k], &c, &sn));
            assert_ok(attn_rope_cos_sin(tc->dim, &rows[k], 1, 0, &tc->opt, cos_f, sin_f));
            for (int64_t f = 0; f < F; f++) {
                const double angle = (double)rows[k] * w[f];
                if (c[f] != m * cos(angle) || sn[f] != m * sin(angle) || (float)c[f] != cos_f[f] ||
                    (float)sn[f] != sin_f[f])
                    fail_msg("%s: position %lld, frequency %lld: table (%.17g, %.17g), formula (%.17g, %.17g), "
                             "attn_rope_cos_sin (%.9g, %.9g)",
                             tc->name, (long long)rows[k], (long long)f, c[f], sn[f], m * cos(angle), m * sin(angle),
                             cos_f[f], sin_f[f]);
            }
        }
        attn_rope_table_free(t);
    }
}

/* Grown one position at a time (as decoding grows it) across many
 * reallocations, a table holds the same bits as one reserved at once:
 * growth moves rows, never changes them. */
static void test_table_growth(void **state) {
    (void)state;
    attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
    opt.pairing = ATTN_ROPE_GPTJ;
    attn_rope_table *step = NULL, *once = NULL;
    assert_ok(attn_rope_table_new(24, &opt, &step));
    assert_ok(attn_rope_table_new(24, &opt, &once));
    assert_ok(attn_rope_table_reserve(once, 300));
    for (int64_t n = 1; n <= 300; n++) {
        assert_ok(attn_rope_table_reserve(step, n));
        assert_int_equal(attn_rope_table_positions(step), n);
    }
    for (int64_t p = 0; p < 300; p++) {
        const double *c1, *s1, *c2, *s2;
        assert_ok(attn_rope_table_row(step, p, &c1, &s1));
        assert_ok(attn_rope_table_row(once, p, &c2, &s2));
        assert_memory_equal(c1, c2, 12 * sizeof(double));
        assert_memory_equal(s1, s2, 12 * sizeof(double));
    }
    attn_rope_table_free(step);
    attn_rope_table_free(once);
}

/* Large positions (where the angle needs double): the table's rotation is
 * still attn_rope_apply's, bit for bit.  Width 4 keeps 300 000 rows small
 * (32 bytes each). */
static void test_table_large_positions(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 22);
    attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
    opt.theta = 1e6;
    attn_rope_table *t = NULL;
    assert_ok(attn_rope_table_new(4, &opt, &t));
    assert_ok(attn_rope_table_reserve(t, 300000));
    owned_tensor x = tensor_new(ATTN_F32, 1, 5, 3, 4);
    fill_storable(&x.t, &rng);
    const int64_t positions[5] = {299999, 123457, 65536, 65535, 262144};
    owned_tensor want = tensor_copy(&x), got = tensor_copy(&x);
    assert_ok(attn_rope_apply(&want.t, positions, 0, &opt));
    assert_ok(attn_rope_apply_table(&got.t, positions, 0, t));
    assert_memory_equal(want.t.data, got.t.data, x.bytes);
    tensor_free(&want), tensor_free(&got), tensor_free(&x);
    attn_rope_table_free(t);
}

/* Each refusal names its cause and leaves x and the table as they were. */
static void test_table_bad_input(void **state) {
    (void)state;
    const attn_status BAD = ATTN_ERR_INVALID_ARGUMENT;
    attn_rope_table *t = (attn_rope_table *)&t; /* not NULL: the failure must set it */
    attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
    opt.theta = 0;
    assert_refused(attn_rope_table_new(8, &opt, &t), BAD, "theta is 0");
    assert_null(t);
    assert_refused(attn_rope_table_new(8, NULL, NULL), BAD, "out is NULL");
    assert_refused(attn_rope_table_new(0, NULL, &t), ATTN_ERR_SHAPE, "");
    assert_null(t);
    assert_ok(attn_rope_table_new(8, NULL, &t));
    assert_refused(attn_rope_table_reserve(NULL, 4), BAD, "the table is NULL");
    assert_refused(attn_rope_table_reserve(t, -1), ATTN_ERR_SHAPE, "-1 positions");
    assert_ok(attn_rope_table_reserve(t, 4));
    /* more rows than size_t can hold: refused before any allocation */
    assert_refused(attn_rope_table_reserve(t, INT64_MAX), ATTN_ERR_OVERFLOW, "overflow");
    assert_int_equal(attn_rope_table_positions(t), 4);
    assert_int_equal(attn_rope_table_positions(NULL), 0);

    const double *c, *s;
    assert_refused(attn_rope_table_row(NULL, 0, &c, &s), BAD, "the table is NULL");
    assert_refused(attn_rope_table_row(t, 0, NULL, &s), BAD, "cos is NULL");
    assert_refused(attn_rope_table_row(t, 0, &c, NULL), BAD, "sin is NULL");
    assert_refused(attn_rope_table_row(t, 4, &c, &s), ATTN_ERR_SHAPE, "outside the table's [0, 4)");
    assert_refused(attn_rope_table_row(t, -1, &c, &s), ATTN_ERR_SHAPE, "position -1");

    float data[2 * 3 * 1 * 8], before[2 * 3 * 1 * 8];
    test_rng rng;
    test_rng_seed(&rng, 23);
    test_fill_normal(&rng, data, 48, 1.0);
    memcpy(before, data, sizeof data);
    attn_tensor x = attn_tensor_4d(data, 2, 3, 1, 8), narrow = attn_tensor_4d(data, 2, 3, 2, 4);
    int64_t positions[6] = {0, 1, 2, 3, 0, 1};
    assert_refused(attn_rope_apply_table(&x, NULL, 0, NULL), BAD, "the table is NULL");
    assert_refused(attn_rope_apply_table(NULL, NULL, 0, t), BAD, "x is NULL");
    assert_refused(attn_rope_apply_table(&narrow, NULL, 0, t), ATTN_ERR_SHAPE, "x's width is 4");
    assert_refused(attn_rope_apply_table(&x, NULL, -1, t), ATTN_ERR_SHAPE, "negative positions");
    assert_refused(attn_rope_apply_table(&x, NULL, 2, t), ATTN_ERR_SHAPE, "reserve them first");
    assert_refused(attn_rope_apply_table(&x, NULL, INT64_MAX, t), ATTN_ERR_SHAPE, "outside the table's [0, 4)");
    positions[5] = -3;
    assert_refused(attn_rope_apply_table(&x, positions, 0, t), ATTN_ERR_SHAPE, "positions[5] = -3");
    positions[5] = 4;
    assert_refused(attn_rope_apply_table(&x, positions, 0, t), ATTN_ERR_SHAPE, "reserve it first");
    assert_memory_equal(before, data, sizeof data);
    /* the edge itself is inside */
    assert_ok(attn_rope_apply_table(&x, NULL, 1, t));
    attn_rope_table_free(t);
    attn_rope_table_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rotation_preserves_norms),
        cmocka_unit_test(test_dot_depends_only_on_the_difference),
        cmocka_unit_test(test_backward_is_transpose_and_inverse),
        cmocka_unit_test(test_tail_and_position_zero_are_untouched),
        cmocka_unit_test(test_neox_and_gptj_are_a_permutation_apart),
        cmocka_unit_test(test_linear_scaling_divides_positions),
        cmocka_unit_test(test_frequency_tables),
        cmocka_unit_test(test_positions_and_offsets),
        cmocka_unit_test(test_strided_views),
        cmocka_unit_test(test_thread_count_does_not_change_bits),
        cmocka_unit_test(test_half_storage),
        cmocka_unit_test(test_hugging_face_fixtures),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_table_equals_apply),
        cmocka_unit_test(test_table_growth),
        cmocka_unit_test(test_table_large_positions),
        cmocka_unit_test(test_table_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
