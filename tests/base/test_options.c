/*
 * test_options.c — the table of attn_sdpa_options (attn_sdpa_option): it
 * covers the struct, field by field, with nothing left over but padding;
 * its rows say what the interfaces made from it need (a choice's flag
 * takes exactly its names, a flag has a --help group, a Python keyword two
 * rows share has one default); and the interfaces agree with it: every
 * flag is accepted by `attn sdpa` and shown by its --help, in the table's
 * order within its group.
 */
#include "testutil.h"

#include "attn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct span {
    size_t offset, size;
    const char *row;
} span;

/* The fields a row's kind spans, as attn.h's attn_option_kind lists them. */
static int fields_of(const attn_sdpa_option_info *row, span *out) {
    size_t sizes[3] = {0};
    int n = 1;
    switch (row->kind) {
    case ATTN_OPTION_SWITCH:
    case ATTN_OPTION_INT: sizes[0] = sizeof(int); break;
    case ATTN_OPTION_CHOICE: sizes[0] = sizeof(attn_kernel); break;
    case ATTN_OPTION_FLOAT: sizes[0] = sizeof(float); break;
    case ATTN_OPTION_POSITION: sizes[0] = sizeof(int64_t); break;
    case ATTN_OPTION_WINDOW: n = 3, sizes[0] = sizeof(int), sizes[1] = sizes[2] = sizeof(int64_t); break;
    case ATTN_OPTION_PER_BATCH:
    case ATTN_OPTION_PER_HEAD: sizes[0] = sizeof(void *); break;
    case ATTN_OPTION_BOOL_TABLE:
    case ATTN_OPTION_FLOAT_TABLE: n = 2, sizes[0] = sizeof(void *), sizes[1] = 4 * sizeof(int64_t); break;
    case ATTN_OPTION_BUFFER: n = 2, sizes[0] = sizeof(void *), sizes[1] = sizeof(size_t); break;
    case ATTN_OPTION_CALLBACK: n = 2, sizes[0] = sizeof(attn_progress_fn), sizes[1] = sizeof(void *); break;
    default: fail_msg("row %s: kind %d unknown", row->name, (int)row->kind);
    }
    for (int i = 0; i < n; i++) out[i] = (span){row->offset[i], sizes[i], row->name};
    return n;
}

static int by_offset(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Every byte of attn_sdpa_options after struct_size lies in one row's
 * fields, or is the padding the compiler puts before a field of its
 * alignment (or at the end): a field without a row leaves a gap. */
static void the_rows_cover_the_struct(void **state) {
    (void)state;
    span spans[64];
    int n = 0;
    for (int i = 0; attn_sdpa_option(i); i++) {
        assert_true(n + 3 <= 64);
        n += fields_of(attn_sdpa_option(i), spans + n);
    }
    assert_null(attn_sdpa_option(-1));
    qsort(spans, (size_t)n, sizeof spans[0], by_offset);
    size_t end = sizeof(size_t); /* struct_size */
    for (int i = 0; i < n; i++) {
        const size_t alignment = spans[i].size < 8 ? spans[i].size : 8;
        if (spans[i].offset != align_up(end, alignment))
            fail_msg("%s starts at byte %zu, but the field before it ends at %zu: %s", spans[i].row, spans[i].offset,
                     end, spans[i].offset < end ? "two rows overlap" : "a field there has no row");
        end = spans[i].offset + spans[i].size;
    }
    if (align_up(end, 8) != sizeof(attn_sdpa_options) || sizeof(attn_sdpa_options) - end >= sizeof(int))
        fail_msg("the rows end at byte %zu of %zu: a field at the end has no row", end, sizeof(attn_sdpa_options));
    print_message("%d fields in the table's rows cover attn_sdpa_options (%zu bytes)\n", n, sizeof(attn_sdpa_options));
}

static void the_rows_are_consistent(void **state) {
    (void)state;
    for (int i = 0; attn_sdpa_option(i); i++) {
        const attn_sdpa_option_info *row = attn_sdpa_option(i);
        assert_non_null(row->name);
        assert_non_null(row->default_text);
        assert_non_null(row->help);
        assert_true((row->choices != NULL) == (row->kind == ATTN_OPTION_CHOICE));
        assert_true((row->python != NULL) == (row->python_default != NULL));
        for (int j = 0; j < i; j++) {
            const attn_sdpa_option_info *other = attn_sdpa_option(j);
            if (!strcmp(row->name, other->name)) fail_msg("two rows named %s", row->name);
            if (row->python && other->python && !strcmp(row->python, other->python) &&
                strcmp(row->python_default, other->python_default))
                fail_msg("%s and %s share the keyword %s but not its default", other->name, row->name, row->python);
            for (int f = 0; f < 2 && row->flags[f].name; f++)
                for (int g = 0; g < 2 && other->flags[g].name; g++)
                    if (!strcmp(row->flags[f].name, other->flags[g].name)) fail_msg("two rows take %s", row->flags[f].name);
        }
        for (int f = 0; f < 2 && row->flags[f].name; f++) {
            const attn_option_flag *flag = &row->flags[f];
            if (!row->group) fail_msg("%s has a flag but no --help group", row->name);
            assert_non_null(flag->help);
            assert_int_equal(strncmp(flag->name, "--", 2), 0);
            if (row->kind == ATTN_OPTION_CHOICE) { /* "--kernel auto|ref|flash": exactly its names */
                char names[256] = "";
                for (int c = 0; row->choices[c]; c++)
                    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", c ? "|" : "", row->choices[c]);
                if (!flag->value || strcmp(flag->value, names)) fail_msg("%s takes %s, its choices are %s", flag->name,
                                                                       flag->value ? flag->value : "nothing", names);
            }
            if ((flag->value == NULL) != (row->kind == ATTN_OPTION_SWITCH))
                fail_msg("%s: a flag takes no value exactly when its option is a switch", flag->name);
            if ((row->kind == ATTN_OPTION_FLOAT || row->kind == ATTN_OPTION_INT) && !(row->min < row->max))
                fail_msg("%s: no range for its values", flag->name);
        }
    }
}

/* attn sdpa takes every flag (--list-options), and its --help shows them
 * in the table's order within each group. */
static void sdpa_takes_and_shows_every_flag(void **state) {
    (void)state;
    char *list, *help;
    assert_int_equal(test_run_cli(&list, "sdpa --list-options"), 0);
    assert_int_equal(test_run_cli(&help, "sdpa --help"), 0);
    const char *last_in_group[8] = {0}, *groups[8] = {0};
    int flags = 0;
    for (int i = 0; attn_sdpa_option(i); i++) {
        const attn_sdpa_option_info *row = attn_sdpa_option(i);
        int g = 0;
        while (groups[g] && row->group && strcmp(groups[g], row->group)) g++;
        for (int f = 0; f < 2 && row->flags[f].name; f++, flags++) {
            char line[128];
            snprintf(line, sizeof line, "%s%s%s\n", row->flags[f].name, row->flags[f].value ? " " : "",
                     row->flags[f].value ? row->flags[f].value : "");
            if (!strstr(list, line)) fail_msg("attn sdpa --list-options lacks %s", line);
            snprintf(line, sizeof line, "\n  %s ", row->flags[f].name);
            const char *at = strstr(help, line);
            if (!at) fail_msg("attn sdpa --help does not show %s", row->flags[f].name);
            if (last_in_group[g] && at < last_in_group[g])
                fail_msg("attn sdpa --help shows %s before a flag the table puts before it", row->flags[f].name);
            groups[g] = row->group;
            last_in_group[g] = at;
        }
    }
    print_message("%d flags, all taken and shown by attn sdpa\n", flags);
    free(list);
    free(help);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_rows_cover_the_struct),
        cmocka_unit_test(the_rows_are_consistent),
        cmocka_unit_test(sdpa_takes_and_shows_every_flag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
