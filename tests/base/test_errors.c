/*
 * test_errors.c — bad input to the library gets a status code and a message
 * naming the argument, never a crash; the documented NaN policy holds.
 */
#include "testutil.h"

#include "attn.h"
#include "attn_chapter.h"
#include "attn_interp.h"
#include "attn_io.h"
#include "attn_machine.h"
#include "attn_viz.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

static float q_buf[64], k_buf[64], v_buf[64], o_buf[64];

static void null_pointers(void **state) {
    (void)state;
    attn_tensor q = attn_tensor_2d(q_buf, 3, 2), k = attn_tensor_2d(k_buf, 3, 2),
                v = attn_tensor_2d(v_buf, 3, 2), o = attn_tensor_2d(o_buf, 3, 2);
    assert_refused(attn_sdpa_forward(NULL, &k, &v, NULL, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "q");
    assert_refused(attn_sdpa_forward(&q, NULL, &v, NULL, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "k");
    assert_refused(attn_sdpa_forward(&q, &k, NULL, NULL, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "v");
    assert_refused(attn_sdpa_forward(&q, &k, &v, NULL, NULL, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "out");
    attn_tensor bad = q;
    bad.data = NULL;
    assert_refused(attn_sdpa_forward(&bad, &k, &v, NULL, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "q->data");
    assert_refused(attn_linear_forward(NULL, 1, 1, k_buf, NULL, 1, o_buf), ATTN_ERR_INVALID_ARGUMENT, "x");
    assert_refused(attn_mha_forward(NULL, q_buf, 1, 1, NULL, 0, NULL, o_buf, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "module");
    size_t bytes;
    assert_refused(attn_sdpa_workspace_size(&q, &k, &v, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "bytes");
    assert_refused(attn_sdpa_scores(&q, &k, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "scores");
    assert_int_equal(attn_sdpa_workspace_size(&q, &k, &v, NULL, &bytes), ATTN_OK);
}

static void bad_sizes(void **state) {
    (void)state;
    attn_tensor q = attn_tensor_2d(q_buf, 3, 2), k = attn_tensor_2d(k_buf, 3, 2),
                v = attn_tensor_2d(v_buf, 3, 2), o = attn_tensor_2d(o_buf, 3, 2);
    attn_tensor zero = attn_tensor_2d(q_buf, 0, 2);
    assert_refused(attn_sdpa_forward(&zero, &k, &v, NULL, &o, NULL, NULL), ATTN_ERR_SHAPE, "positions must be positive");
    attn_tensor neg = attn_tensor_2d(k_buf, 3, -2);
    assert_refused(attn_sdpa_forward(&q, &neg, &v, NULL, &o, NULL, NULL), ATTN_ERR_SHAPE, "width must be positive");
    attn_tensor k3 = attn_tensor_2d(k_buf, 3, 3);
    assert_refused(attn_sdpa_forward(&q, &k3, &v, NULL, &o, NULL, NULL), ATTN_ERR_SHAPE, "share D");
    attn_tensor v4 = attn_tensor_2d(v_buf, 4, 2);
    assert_refused(attn_sdpa_forward(&q, &k, &v4, NULL, &o, NULL, NULL), ATTN_ERR_SHAPE, "v must match k");
    attn_tensor o5 = attn_tensor_2d(o_buf, 5, 2);
    assert_refused(attn_sdpa_forward(&q, &k, &v, NULL, &o5, NULL, NULL), ATTN_ERR_SHAPE, "out is");
    /* 3 query heads cannot share 2 kv heads. */
    attn_tensor q3 = attn_tensor_3d(q_buf, 2, 3, 2), k2 = attn_tensor_3d(k_buf, 2, 2, 2),
                v2 = attn_tensor_3d(v_buf, 2, 2, 2), o3 = attn_tensor_3d(o_buf, 2, 3, 2);
    assert_refused(attn_sdpa_forward(&q3, &k2, &v2, NULL, &o3, NULL, NULL), ATTN_ERR_SHAPE, "not a multiple");
    attn_tensor strided = q;
    strided.stride[3] = 2;
    assert_refused(attn_sdpa_forward(&strided, &k, &v, NULL, &o, NULL, NULL), ATTN_ERR_SHAPE, "contiguous");
}

static void overflowing_sizes(void **state) {
    (void)state;
    attn_tensor k = attn_tensor_2d(k_buf, 3, 2), v = attn_tensor_2d(v_buf, 3, 2);
    attn_tensor huge = attn_tensor_4d(q_buf, INT64_MAX / 4, 4, 4, 2);
    attn_tensor o = attn_tensor_2d(o_buf, 3, 2);
    assert_refused(attn_sdpa_forward(&huge, &k, &v, NULL, &o, NULL, NULL), ATTN_ERR_OVERFLOW, "overflow");
    attn_tensor q = attn_tensor_4d(q_buf, 1, (int64_t)1 << 40, 1, 2), kbig = attn_tensor_4d(k_buf, 1, (int64_t)1 << 40, 1, 2);
    assert_refused(attn_sdpa_workspace_size(&q, &kbig, NULL, NULL, &(size_t){0}), ATTN_ERR_OVERFLOW, "score table");
    assert_refused(attn_linear_forward(q_buf, INT64_MAX / 2, 4, k_buf, NULL, 2, o_buf), ATTN_ERR_OVERFLOW, "overflow");
    attn_mha m = {.struct_size = sizeof(attn_mha), .d_model = 2, .heads = INT64_MAX / 2, .head_dim = 4, .d_out = 2, .wq = k_buf, .wk = k_buf, .wv = k_buf, .wo = k_buf};
    assert_refused(attn_mha_forward(&m, q_buf, 1, 1, NULL, 0, NULL, o_buf, NULL, NULL), ATTN_ERR_OVERFLOW, "overflow");
}

static void bad_options(void **state) {
    (void)state;
    attn_tensor q = attn_tensor_2d(q_buf, 3, 2), k = attn_tensor_2d(k_buf, 3, 2),
                v = attn_tensor_2d(v_buf, 3, 2), o = attn_tensor_2d(o_buf, 3, 2);
    attn_sdpa_options opt = {.struct_size = sizeof(attn_sdpa_options), .scale = -1};
    assert_refused(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "scale");
    opt = (attn_sdpa_options){.struct_size = sizeof(attn_sdpa_options), .scale = NAN};
    assert_refused(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "scale");
    opt = (attn_sdpa_options){.struct_size = sizeof(attn_sdpa_options), .window = 1, .window_left = -2};
    assert_refused(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "window");
    int64_t lens[1] = {4};
    opt = (attn_sdpa_options){.struct_size = sizeof(attn_sdpa_options), .key_lengths = lens};
    assert_refused(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "key_lengths[0]");
    uint8_t mask[9] = {1};
    opt = (attn_sdpa_options){.struct_size = sizeof(attn_sdpa_options), .mask = mask, .mask_shape = {1, 1, 3, 2}};
    assert_refused(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL), ATTN_ERR_SHAPE, "mask");
    opt = (attn_sdpa_options){.struct_size = sizeof(attn_sdpa_options), .bias = q_buf, .bias_shape = {2, 1, 3, 3}};
    assert_refused(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL), ATTN_ERR_SHAPE, "bias");
    opt = (attn_sdpa_options){.struct_size = sizeof(attn_sdpa_options), .kernel = (attn_kernel)7};
    assert_refused(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "kernel");
    opt = (attn_sdpa_options){.struct_size = sizeof(attn_sdpa_options), .threads = -1};
    assert_refused(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "threads");
    char small[8];
    opt = (attn_sdpa_options){.struct_size = sizeof(attn_sdpa_options), .workspace = small, .workspace_size = sizeof small};
    assert_refused(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "workspace");
}

/* A caller-provided workspace of the queried size is used, and the result
 * equals the self-allocating call bit for bit. */
static void caller_workspace(void **state) {
    (void)state;
    for (int i = 0; i < 64; i++) { q_buf[i] = (float)sin(i); k_buf[i] = (float)cos(i); v_buf[i] = (float)(i % 7); }
    attn_tensor q = attn_tensor_2d(q_buf, 4, 3), k = attn_tensor_2d(k_buf, 5, 3), v = attn_tensor_2d(v_buf, 5, 2);
    float a[8], b[8];
    attn_tensor oa = attn_tensor_2d(a, 4, 2), ob = attn_tensor_2d(b, 4, 2);
    size_t bytes = 0;
    assert_int_equal(attn_sdpa_workspace_size(&q, &k, &v, NULL, &bytes), ATTN_OK);
    assert_true(bytes > 0);
    void *ws = test_malloc(bytes);
    attn_sdpa_options opt = {.struct_size = sizeof(attn_sdpa_options), .workspace = ws, .workspace_size = bytes};
    assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &oa, NULL, NULL), ATTN_OK);
    assert_int_equal(attn_sdpa_forward(&q, &k, &v, NULL, &ob, NULL, NULL), ATTN_OK);
    assert_memory_equal(a, b, sizeof a);
    test_free(ws);
}

/* Documented policy: NaN/Inf in q, k, v propagate into the rows that read
 * them; attn_check_finite finds them. */
static void non_finite_inputs_propagate(void **state) {
    (void)state;
    for (int i = 0; i < 64; i++) { q_buf[i] = 0.1f * (float)i; k_buf[i] = 0.2f; v_buf[i] = 1.0f; }
    k_buf[2 * 2] = NAN; /* key 2 */
    attn_tensor q = attn_tensor_2d(q_buf, 3, 2), k = attn_tensor_2d(k_buf, 3, 2),
                v = attn_tensor_2d(v_buf, 3, 2), o = attn_tensor_2d(o_buf, 3, 2);
    assert_int_equal(attn_sdpa_forward(&q, &k, &v, NULL, &o, NULL, NULL), ATTN_OK);
    assert_true(isnan(o_buf[0]));
    /* Under a causal mask only the last row sees key 2. */
    attn_sdpa_options opt = {.struct_size = sizeof(attn_sdpa_options), .causal = 1};
    assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL), ATTN_OK);
    assert_false(isnan(o_buf[0]));
    assert_true(isnan(o_buf[4]));
    int64_t where = -1;
    assert_refused(attn_check_finite(k_buf, 6, &where), ATTN_ERR_NONFINITE, "index 4");
    assert_int_equal(where, 4);
    assert_int_equal(attn_check_finite(v_buf, 6, NULL), ATTN_OK);
}

/* Tensors carry their dtype: every kernel takes float16 and bfloat16
 * storage (tests/flash/test_half checks the numbers), and an unknown dtype
 * is an invalid argument, not a guess. */
static void dtypes_the_kernels_take_and_refuse(void **state) {
    (void)state;
    uint16_t half[6] = {0};
    attn_tensor q = attn_tensor_2d(q_buf, 3, 2), k = attn_tensor_2d(k_buf, 3, 2),
                v = attn_tensor_2d(v_buf, 3, 2), o = attn_tensor_2d(o_buf, 3, 2);
    float dq_buf[6];
    attn_tensor dq = attn_tensor_2d(dq_buf, 3, 2), dout = attn_tensor_2d(v_buf, 3, 2);
    attn_tensor kh = attn_tensor_view(half, ATTN_BF16, 1, 3, 1, 2), vh = attn_tensor_view(half, ATTN_F16, 1, 3, 1, 2);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    for (int kernel = ATTN_KERNEL_REF; kernel <= ATTN_KERNEL_FLASH; kernel++) {
        opt.kernel = (attn_kernel)kernel;
        assert_int_equal(attn_sdpa_forward(&q, &kh, &vh, &opt, &o, NULL, NULL), ATTN_OK);
        assert_int_equal(attn_sdpa_backward(&q, &kh, &vh, &opt, NULL, NULL, &dout, &dq, NULL, NULL), ATTN_OK);
    }
    assert_int_equal(attn_sdpa_scores(&q, &kh, NULL, o_buf), ATTN_OK);
    attn_tensor odd = q;
    odd.dtype = (attn_dtype)99;
    assert_refused(attn_sdpa_forward(&odd, &k, &v, NULL, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "q: dtype 99");
    odd.dtype = ATTN_I32; /* an array dtype, not a tensor's */
    assert_refused(attn_sdpa_forward(&odd, &k, &v, NULL, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "q: dtype");
    assert_string_equal(attn_dtype_name(ATTN_BF16), "bfloat16");
    assert_int_equal(attn_dtype_size(ATTN_BF16), 2);
}

/* Option structs grow by struct_size: a zeroed struct is refused with the
 * initialiser's name; an older caller's smaller struct is read up to its
 * size (what lies beyond is not looked at); a newer caller's larger struct
 * is accepted when its unknown tail is zero and refused otherwise. */
static void option_structs_carry_their_size(void **state) {
    (void)state;
    attn_tensor q = attn_tensor_2d(q_buf, 3, 2), k = attn_tensor_2d(k_buf, 3, 2),
                v = attn_tensor_2d(v_buf, 3, 2), o = attn_tensor_2d(o_buf, 3, 2);
    for (int i = 0; i < 6; i++) q_buf[i] = k_buf[i] = v_buf[i] = (float)(i + 1) / 4.0f;
    attn_sdpa_options zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    assert_refused(attn_sdpa_forward(&q, &k, &v, &zeroed, &o, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT,
                   "ATTN_SDPA_OPTIONS_INIT");
    attn_mha m = {0};
    assert_refused(attn_mha_forward(&m, q_buf, 1, 3, NULL, 0, NULL, o_buf, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT,
                   "ATTN_MHA_INIT");

    /* An older caller knew the fields up to `causal` only. */
    struct {
        attn_sdpa_options opt;
    } older;
    memset(&older, 0x7f, sizeof older); /* garbage beyond the old size */
    older.opt.struct_size = offsetof(attn_sdpa_options, align);
    older.opt.scale = 0.0f;
    older.opt.causal = 1;
    float w_older[9], w_new[9];
    assert_int_equal(attn_sdpa_forward(&q, &k, &v, &older.opt, &o, w_older, NULL), ATTN_OK);
    attn_sdpa_options causal = ATTN_SDPA_OPTIONS_INIT;
    causal.causal = 1;
    assert_int_equal(attn_sdpa_forward(&q, &k, &v, &causal, &o, w_new, NULL), ATTN_OK);
    assert_memory_equal(w_older, w_new, sizeof w_new);
    assert_true(w_new[1] == 0.0f); /* row 0 sees key 0 only: causal was read */

    /* A newer caller: its struct is larger. */
    struct {
        attn_sdpa_options opt;
        int64_t newer_field;
    } newer;
    memset(&newer, 0, sizeof newer);
    newer.opt = causal;
    newer.opt.struct_size = sizeof newer;
    assert_int_equal(attn_sdpa_forward(&q, &k, &v, &newer.opt, &o, w_older, NULL), ATTN_OK);
    assert_memory_equal(w_older, w_new, sizeof w_new);
    newer.newer_field = 1;
    assert_refused(attn_sdpa_forward(&q, &k, &v, &newer.opt, &o, NULL, NULL), ATTN_ERR_UNSUPPORTED,
                   "a field this library version does not have");
}

static void status_names(void **state) {
    (void)state;
    assert_string_equal(attn_status_str(ATTN_OK), "ok");
    assert_string_equal(attn_status_str(ATTN_ERR_SHAPE), "shape mismatch");
    assert_string_equal(attn_status_str(ATTN_ERR_TIMEOUT), "timed out");
    assert_string_equal(attn_status_str((attn_status)-1000), "unknown status");
    /* The library's version is the headers' (both come from CMakeLists.txt). */
    assert_string_equal(attn_version(), ATTN_VERSION_STRING);
    assert_int_equal(attn_version_number(), ATTN_VERSION_NUMBER);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(null_pointers),
        cmocka_unit_test(bad_sizes),
        cmocka_unit_test(overflowing_sizes),
        cmocka_unit_test(bad_options),
        cmocka_unit_test(caller_workspace),
        cmocka_unit_test(non_finite_inputs_propagate),
        cmocka_unit_test(status_names),
        cmocka_unit_test(dtypes_the_kernels_take_and_refuse),
        cmocka_unit_test(option_structs_carry_their_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
