#include "testutil.h"
#include "attn_tokenizer.h"
static void nothing(void **state) { (void)state; }
int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(nothing)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
