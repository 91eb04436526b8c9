/*
 * test_train.c — `attn train`: a short run learns (the held-out loss falls
 * to a fraction of its start, the weight on the matching key rises above
 * 1/S), and the same seed prints the same numbers, whatever the thread
 * count.  Ratios are asserted, never times.
 */
#include "testutil.h"
#include "tolerances.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRAIN_STEPS 40

/* Reads "<key> (...): loss X" from the output. */
static double held_out_loss(const char *output, const char *key) {
    const char *at = strstr(output, key);
    if (!at) fail_msg("no '%s' line in:\n%s", key, output);
    at = strstr(at, "loss ");
    double loss;
    if (!at || sscanf(at, "loss %lf", &loss) != 1) fail_msg("no loss after '%s'", key);
    return loss;
}

static void learns(void **state) {
    (void)state;
    char *output;
    int st = test_run_cli(&output, "train --steps %d --seed 5", TRAIN_STEPS);
    if (st) fail_msg("attn train exited %d: %s", st, output);
    double before = held_out_loss(output, "before training"), after = held_out_loss(output, "after training");
    print_message("held-out loss %.4f -> %.4f after %d steps\n", before, after, TRAIN_STEPS);
    if (!(after < TRAIN_LOSS_RATIO_FAIL * before)) fail_msg("loss %.4f -> %.4f: not below %.2f of the start", before, after, TRAIN_LOSS_RATIO_FAIL);
    double w_before, inv_s, w_after;
    const char *line = strstr(output, "mean weight the query puts on the matching key:");
    if (!line || sscanf(line, "mean weight the query puts on the matching key: %lf before training (1/S = %lf), %lf after",
                        &w_before, &inv_s, &w_after) != 3)
        fail_msg("no mean-weight line in:\n%s", output);
    assert_true(w_before < 2 * inv_s);
    assert_true(w_after > w_before);
    assert_non_null(strstr(output, "example 1: query"));
    free(output);
}

/* Same seed: the same output to the byte, for 1 and 2 threads; another
 * seed: another output. */
static void deterministic(void **state) {
    (void)state;
    char *a, *b, *c;
    assert_int_equal(test_run_cli(&a, "train --steps 25 --seed 9 --seq-len 5 --threads 1"), 0);
    assert_int_equal(test_run_cli(&b, "train --steps 25 --seed 9 --seq-len 5 --threads 2"), 0);
    assert_int_equal(test_run_cli(&c, "train --steps 25 --seed 10 --seq-len 5 --threads 1"), 0);
    assert_string_equal(a, b);
    assert_true(strcmp(a, c) != 0);
    free(a); free(b); free(c);
}

static void usage(void **state) {
    (void)state;
    char *output;
    assert_int_equal(test_run_cli(&output, "train --help"), 0);
    assert_non_null(strstr(output, "--seq-len"));
    free(output);
    static const char *const bad[] = {"train --seq-len 1", "train --seq-len 17", "train --steps 0",
                                      "train --seed x", "train --frobnicate"};
    for (int i = 0; i < 5; i++) {
        int st = test_run_cli(&output, "%s", bad[i]);
        if (st != 2) fail_msg("'attn %s' exited %d, want 2: %s", bad[i], st, output);
        free(output);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(learns),
        cmocka_unit_test(deterministic),
        cmocka_unit_test(usage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
