/*
 * cli_files.h — what the tests of the attn program share: the .npy files
 * they hand it and read back, closeness of what it wrote, and a random
 * case's mask and scale options as command-line flags.  Every helper fails
 * the running cmocka test on error.
 */
#ifndef ATTN_TEST_CLI_FILES_H
#define ATTN_TEST_CLI_FILES_H

#include "oracle.h"

#include <stddef.h>

/* Writes data (count = prod(shape) elements of dtype) as a .npy file. */
void test_save_array(const char *path, attn_dtype dtype, int ndim, const int64_t *shape, const void *data);
void test_save_f32(const char *path, int ndim, const int64_t *shape, const float *data);
/* Reads a .npy file converted to dtype (attn_array_convert); free it with
 * attn_array_free. */
attn_array test_load_array(const char *path, attn_dtype dtype);
/* Reads a float32 file and checks its rank and every dimension; the data,
 * malloc'd (the caller frees). */
float *test_load_f32(const char *path, int ndim, const int64_t *shape);
/* max |want - got| <= rel * max(1, max |want|), and no NaN in got. */
void test_expect_close(const char *what, const float *want, const float *got, int64_t n, double rel);
/* The flags of a random case's scale and masks (" --scale 0.3 --causal
 * --key-lengths DIR/lens.npy ..."), its key lengths, mask and bias written
 * to lens.npy, mask.npy and bias.npy in the temporary directory. */
void random_case_cli_flags(const random_case *rc, char *flags, size_t size);

#endif
