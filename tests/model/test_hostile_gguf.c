/*
 * test_hostile_gguf.c — bad GGUF inputs, one table, two ways in.
 *
 * Every row is a file built byte by byte here (tests/support/gguf_builder.c,
 * from ggml's docs/gguf.md, never by a GGUF writer) with one thing wrong:
 * the magic, the version, the counts, every length and count of the
 * metadata (near 2^64 included, and count x element size overflowing), value
 * types, bools, nesting, duplicate keys, general.alignment, tensor infos
 * (n_dims, dims that are 0, past int64 or whose product overflows, unknown
 * and removed types, rows that are not whole blocks), names, tensor data
 * outside the file, misaligned or overlapping, a data section past the end,
 * truncation inside each part.  Each row runs
 *   - through attn_gguf_parse (from memory): the row's status, nothing
 *     handed back, a message with the row's keyword (which names the key or
 *     tensor where there is one);
 *   - through attn_gguf_open (the mmap wrapper), from a file: the same, and
 *     the path in the message.
 * Then things that are not GGUF files at all (a directory, a FIFO, a link to
 * /dev/zero, a socket, a missing file, /proc) through attn_gguf_open: refused
 * at once, without blocking; and every prefix of a small valid file, both
 * ways: refused as a truncation.  The process's peak memory stays small
 * however much a header claims.
 */
#define _DEFAULT_SOURCE /* symlink, mkfifo */

#include "testutil.h"
#include "gguf_builder.h"

#include "attn.h"
#include "attn_gguf.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* The test's own peak resident set size, however large the rows' headers
 * claim their contents to be (a few megabytes without the sanitizers;
 * AddressSanitizer's shadow memory adds tens). */
#define HOSTILE_RSS_LIMIT_KB (256L * 1024)

/* Value types and tensor types, as the file numbers them. */
enum { U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32V = 6, BOOL = 7, STR = 8, ARR = 9, U64 = 10,
       I64 = 11, F64V = 12 };
enum { T_F32 = 0, T_F16 = 1, T_Q8_0 = 8, T_Q4_K = 12, T_I64 = 27 };

/* ------------------------------------------------------------ the rows */

static void arch(gguf_bytes *b) { gb_kv_string(b, "general.architecture", "llama"); }
/* A file of one key, then one tensor info (dims given), the data section
 * padded to 32 and data_bytes of zeros. */
static void one_tensor(gguf_bytes *b, const char *name, uint32_t n_dims, const uint64_t *dims, uint32_t type,
                       uint64_t offset, size_t data_bytes) {
    gb_header(b, 3, 1, 1);
    arch(b);
    gb_tensor(b, name, n_dims, dims, type, offset);
    gb_pad(b, 32);
    gb_zeros(b, data_bytes);
}
static const uint64_t d4[] = {4}, d32[] = {32}, d64[] = {64};

#define ROW(fn) static void fn(gguf_bytes *b)
/* ---- not GGUF, or not this GGUF */
ROW(empty) { (void)b; }
ROW(bad_magic) { gb_raw(b, "GGML", 4), gb_u32(b, 3), gb_u64(b, 0), gb_u64(b, 0); }
ROW(three_bytes) { gb_raw(b, "GGU", 3); }
ROW(magic_only) { gb_raw(b, "GGUF", 4); }
ROW(npy_file) { gb_raw(b, "\x93NUMPY\x01\x00", 8); }
ROW(version_0) { gb_header(b, 0, 0, 0); }
ROW(version_1) { gb_header(b, 1, 0, 0); }
ROW(version_4) { gb_header(b, 4, 0, 0); }
ROW(big_endian) { gb_raw(b, "GGUF", 4), gb_u32(b, 0x03000000u), gb_u64(b, 0), gb_u64(b, 0); }
/* ---- the header's counts */
ROW(header_cut) { gb_raw(b, "GGUF", 4), gb_u32(b, 3), gb_u32(b, 0); }
ROW(key_count_2_64) { gb_header(b, 3, 0, UINT64_MAX), arch(b); }
ROW(key_count_past_file) { gb_header(b, 3, 0, 3), arch(b); }
ROW(key_count_past_bytes) { gb_header(b, 3, 0, 4), arch(b); }
ROW(tensor_count_2_60) { gb_header(b, 3, 1ull << 60, 1), arch(b); }
ROW(tensor_count_past_file) { gb_header(b, 3, 2, 1), arch(b), gb_tensor(b, "w", 1, d4, T_F32, 0); }
/* ---- keys */
ROW(key_length_2_64) { gb_header(b, 3, 0, 1), gb_u64(b, UINT64_MAX), gb_raw(b, "general", 7); }
ROW(key_length_past_end) { gb_header(b, 3, 0, 1), gb_u64(b, 100), gb_raw(b, "general.name", 12); }
ROW(key_empty) { gb_header(b, 3, 0, 1), gb_key(b, "", U32), gb_u32(b, 1); }
ROW(key_with_nul) { gb_header(b, 3, 0, 1), gb_strn(b, "gen\0eral", 8), gb_u32(b, U32), gb_u32(b, 1); }
ROW(key_65536_bytes) {
    gb_header(b, 3, 0, 1);
    gb_u64(b, 65536);
    for (int i = 0; i < 65536; i++) gb_u8(b, 'k');
    gb_u32(b, U32), gb_u32(b, 1);
}
ROW(key_duplicate) { gb_header(b, 3, 0, 3), arch(b), gb_kv_u32(b, "llama.block_count", 2), arch(b); }
/* ---- values */
ROW(value_type_13) { gb_header(b, 3, 0, 1), gb_key(b, "llama.odd", 13), gb_u32(b, 0); }
ROW(value_type_2_32) { gb_header(b, 3, 0, 1), gb_key(b, "llama.odd", UINT32_MAX), gb_u32(b, 0); }
ROW(value_type_cut) { gb_header(b, 3, 0, 1), gb_str(b, "llama.odd"), gb_u16(b, 4); }
ROW(value_cut) { gb_header(b, 3, 0, 1), gb_key(b, "llama.u64", U64), gb_u32(b, 1); }
ROW(bool_2) { gb_header(b, 3, 0, 1), gb_key(b, "llama.flag", BOOL), gb_u8(b, 2); }
ROW(string_length_2_64) { gb_header(b, 3, 0, 1), gb_key(b, "general.name", STR), gb_u64(b, UINT64_MAX), gb_raw(b, "x", 1); }
ROW(string_cut) { gb_header(b, 3, 0, 1), gb_key(b, "general.name", STR), gb_u64(b, 10), gb_raw(b, "abc", 3); }
/* ---- arrays */
ROW(array_count_2_64) { gb_header(b, 3, 0, 1), gb_key(b, "tok.ids", ARR), gb_array(b, U8, UINT64_MAX); }
ROW(array_bytes_overflow) { /* 2^62 x 8 bytes wraps a uint64 to 0 */
    gb_header(b, 3, 0, 1), gb_key(b, "tok.ids", ARR), gb_array(b, U64, 1ull << 62), gb_u64(b, 1);
}
ROW(array_strings_2_61) { gb_header(b, 3, 0, 1), gb_key(b, "tok.tokens", ARR), gb_array(b, STR, 1ull << 61), gb_str(b, "a"); }
ROW(array_elem_type_13) { gb_header(b, 3, 0, 1), gb_key(b, "tok.ids", ARR), gb_array(b, 13, 1), gb_u32(b, 0); }
ROW(array_header_cut) { gb_header(b, 3, 0, 1), gb_key(b, "tok.ids", ARR), gb_u16(b, U8); }
ROW(array_string_lies) {
    gb_header(b, 3, 0, 1), gb_key(b, "tok.tokens", ARR), gb_array(b, STR, 2), gb_str(b, "ok");
    gb_u64(b, 1000), gb_raw(b, "abc", 3);
}
ROW(array_bool_7) { gb_header(b, 3, 0, 1), gb_key(b, "tok.flags", ARR), gb_array(b, BOOL, 3), gb_u8(b, 1), gb_u8(b, 0), gb_u8(b, 7); }
ROW(array_nested_17) {
    gb_header(b, 3, 0, 1), gb_key(b, "deep", ARR);
    for (int i = 0; i < 16; i++) gb_array(b, ARR, 1);
    gb_array(b, U8, 0);
}
ROW(array_nested_count_lies) { gb_header(b, 3, 0, 1), gb_key(b, "deep", ARR), gb_array(b, ARR, 3), gb_array(b, U8, 0); }
/* ---- general.alignment */
ROW(alignment_u64) { gb_header(b, 3, 0, 1), gb_key(b, "general.alignment", U64), gb_u64(b, 32); }
ROW(alignment_0) { gb_header(b, 3, 0, 1), gb_kv_u32(b, "general.alignment", 0); }
ROW(alignment_48) { gb_header(b, 3, 0, 1), gb_kv_u32(b, "general.alignment", 48); }
/* ---- tensor infos */
ROW(n_dims_0) { one_tensor(b, "w", 0, d4, T_F32, 0, 16); }
ROW(n_dims_5) {
    const uint64_t d[] = {4, 1, 1, 1, 1};
    one_tensor(b, "w", 5, d, T_F32, 0, 16);
}
ROW(dim_0) {
    const uint64_t d[] = {4, 0};
    one_tensor(b, "blk.0.attn_q.weight", 2, d, T_F32, 0, 16);
}
ROW(dim_2_63) {
    const uint64_t d[] = {4, 1ull << 63};
    one_tensor(b, "w", 2, d, T_F32, 0, 16);
}
ROW(dims_product_overflows) {
    const uint64_t d[] = {1ull << 32, 1ull << 32};
    one_tensor(b, "w", 2, d, T_F32, 0, 16);
}
ROW(bytes_overflow) {
    const uint64_t d[] = {1ull << 62};
    one_tensor(b, "w", 1, d, T_I64, 0, 16);
}
/* Cut inside an info: a name long enough that the info's least size (33
 * bytes) still fits, so that the cut is found where it is. */
#define LONG_NAME "blk.0.attn_q.weight"
ROW(dims_cut) { gb_header(b, 3, 1, 0), gb_str(b, LONG_NAME), gb_u32(b, 2), gb_u64(b, 4), gb_u32(b, 1); }
ROW(type_99) { one_tensor(b, "w", 1, d32, 99, 0, 128); }
ROW(type_4_removed) { one_tensor(b, "w", 1, d32, 4, 0, 128); }
ROW(row_not_whole_blocks) {
    const uint64_t d[] = {100, 2};
    one_tensor(b, "blk.0.ffn_down.weight", 2, d, T_Q4_K, 0, 512);
}
ROW(tensor_name_empty) { one_tensor(b, "", 1, d4, T_F32, 0, 16); }
ROW(tensor_name_2_64) { gb_header(b, 3, 1, 0), gb_u64(b, UINT64_MAX), gb_raw(b, LONG_NAME LONG_NAME, 38); }
ROW(tensor_name_nul) {
    gb_header(b, 3, 1, 0), gb_strn(b, "w\0x", 3), gb_u32(b, 1), gb_u64(b, 4), gb_u32(b, T_F32), gb_u64(b, 0);
    gb_pad(b, 32), gb_zeros(b, 16);
}
ROW(tensor_name_duplicate) {
    gb_header(b, 3, 2, 0), gb_tensor(b, "w", 1, d4, T_F32, 0), gb_tensor(b, "w", 1, d4, T_F32, 32);
    gb_pad(b, 32), gb_zeros(b, 48);
}
ROW(offset_misaligned) { one_tensor(b, "w", 1, d4, T_F32, 4, 32); }
ROW(data_past_end) { one_tensor(b, "token_embd.weight", 1, d64, T_F32, 0, 255); }
ROW(offset_past_end) { one_tensor(b, "w", 1, d4, T_F32, 64, 32); }
ROW(offset_near_2_64) { one_tensor(b, "w", 1, d4, T_F32, UINT64_MAX - 31, 32); }
ROW(q8_bytes_do_not_fit) { one_tensor(b, "output.weight", 1, d64, T_Q8_0, 0, 34); } /* 2 blocks need 68 */
ROW(tensors_overlap) {
    gb_header(b, 3, 2, 0), gb_tensor(b, "a", 1, d32, T_F32, 0), gb_tensor(b, "b", 1, d4, T_F32, 96);
    gb_pad(b, 32), gb_zeros(b, 128);
}
ROW(data_section_past_end) { gb_header(b, 3, 1, 0), gb_tensor(b, "w", 1, d4, T_F32, 0); }
ROW(offset_cut) { gb_header(b, 3, 1, 0), gb_str(b, LONG_NAME), gb_u32(b, 1), gb_u64(b, 4), gb_u32(b, T_F32), gb_u32(b, 0); }
ROW(type_cut) { gb_header(b, 3, 1, 0), gb_str(b, LONG_NAME), gb_u32(b, 1), gb_u64(b, 4), gb_u16(b, T_F32); }
#undef ROW

typedef struct hostile {
    const char *name;
    void (*build)(gguf_bytes *b);
    attn_status status;
    const char *keyword;
} hostile;

#define FMT ATTN_ERR_FORMAT
#define UNS ATTN_ERR_UNSUPPORTED
#define OVF ATTN_ERR_OVERFLOW
static const hostile rows[] = {
    {"empty", empty, FMT, "truncated: 0 bytes"},
    {"bad-magic", bad_magic, FMT, "not a GGUF file: it starts with 'GGML'"},
    {"three-bytes", three_bytes, FMT, "truncated: the magic 'GGUF' needs 4 bytes"},
    {"magic-only", magic_only, FMT, "truncated: the version needs 4 bytes"},
    {"npy-file", npy_file, FMT, "not a GGUF file: it starts with '\\x93NUM'"},
    {"version-0", version_0, UNS, "GGUF version 0 is not supported"},
    {"version-1", version_1, UNS, "GGUF version 1 is not supported"},
    {"version-4", version_4, UNS, "GGUF version 4 is not supported (versions 2 and 3 are)"},
    {"big-endian", big_endian, UNS, "a big-endian GGUF file"},
    {"header-cut", header_cut, FMT, "the header: truncated: the tensor count needs 8 bytes"},
    {"key-count-2^64", key_count_2_64, FMT, "claims 18446744073709551615 metadata keys"},
    {"key-count-past-file", key_count_past_file, FMT, "key 2 of 3: truncated: its name needs 8 bytes"},
    {"key-count-past-bytes", key_count_past_bytes, FMT, "the header claims 4 metadata keys; the 45 bytes after it hold at most 3 (the file is truncated"},
    {"tensor-count-2^60", tensor_count_2_60, FMT, "claims 1152921504606846976 tensors"},
    {"tensor-count-past-file", tensor_count_past_file, FMT, "the tensor infos: the header claims 2 tensors; the 33 bytes after the metadata hold at most 1 (the file is truncated"},
    {"key-length-2^64", key_length_2_64, FMT, "key 1 of 1: its name: its length 18446744073709551615 runs past the end"},
    {"key-length-past-end", key_length_past_end, FMT, "its name: its length 100 runs past the end of the file (12 bytes left)"},
    {"key-empty", key_empty, FMT, "key 1 of 1: an empty name"},
    {"key-with-nul", key_with_nul, FMT, "key 1 of 1: a name holding a NUL byte"},
    {"key-65536-bytes", key_65536_bytes, FMT, "a name of 65536 bytes (the format allows 65535)"},
    {"key-duplicate", key_duplicate, FMT, "key 'general.architecture' appears twice (keys 1 and 3)"},
    {"value-type-13", value_type_13, FMT, "key 'llama.odd': unknown value type 13"},
    {"value-type-2^32", value_type_2_32, FMT, "key 'llama.odd': unknown value type 4294967295"},
    {"value-type-cut", value_type_cut, FMT, "key 'llama.odd': truncated: its value type needs 4 bytes"},
    {"value-cut", value_cut, FMT, "key 'llama.u64': truncated: uint64 needs 8 bytes"},
    {"bool-2", bool_2, FMT, "key 'llama.flag': a bool holds 2"},
    {"string-length-2^64", string_length_2_64, FMT, "key 'general.name': the string: its length 18446744073709551615"},
    {"string-cut", string_cut, FMT, "key 'general.name': the string: its length 10 runs past the end of the file (3 bytes left)"},
    {"array-count-2^64", array_count_2_64, FMT, "key 'tok.ids': an array of 18446744073709551615 uint8 elements"},
    {"array-bytes-overflow", array_bytes_overflow, FMT, "key 'tok.ids': an array of 4611686018427387904 uint64 elements"},
    {"array-strings-2^61", array_strings_2_61, FMT, "key 'tok.tokens': an array of 2305843009213693952 string elements"},
    {"array-elem-type-13", array_elem_type_13, FMT, "key 'tok.ids': an array of unknown value type 13"},
    {"array-header-cut", array_header_cut, FMT, "key 'tok.ids': truncated: the array's element type needs 4 bytes"},
    {"array-string-lies", array_string_lies, FMT, "key 'tok.tokens': the string: its length 1000 runs past the end"},
    {"array-bool-7", array_bool_7, FMT, "key 'tok.flags': element 2 of a bool array holds 7"},
    {"array-nested-17-deep", array_nested_17, UNS, "key 'deep': arrays nested more than 16 deep"},
    {"array-nested-count-lies", array_nested_count_lies, FMT, "key 'deep': an array of 3 array elements"},
    {"alignment-uint64", alignment_u64, FMT, "key 'general.alignment' is a uint64; it must be a uint32"},
    {"alignment-0", alignment_0, FMT, "key 'general.alignment' is 0; it must be a power of two"},
    {"alignment-48", alignment_48, FMT, "key 'general.alignment' is 48; it must be a power of two"},
    {"n-dims-0", n_dims_0, FMT, "tensor 'w': 0 dimensions (a GGUF tensor has 1 to 4)"},
    {"n-dims-5", n_dims_5, FMT, "tensor 'w': 5 dimensions (a GGUF tensor has 1 to 4)"},
    {"dim-0", dim_0, FMT, "tensor 'blk.0.attn_q.weight': dimension 1 is 0"},
    {"dim-2^63", dim_2_63, OVF, "tensor 'w': dimension 1 is 9223372036854775808, past the int64 range"},
    {"dims-product-overflows", dims_product_overflows, OVF, "tensor 'w': dimensions 4294967296 x 4294967296 x 1 x 1: the element count overflows"},
    {"bytes-overflow", bytes_overflow, OVF, "tensor 'w': 4611686018427387904 elements of I64: the byte size overflows"},
    {"dims-cut", dims_cut, FMT, "tensor '" LONG_NAME "': truncated: its dimensions needs 8 bytes"},
    {"type-cut", type_cut, FMT, "tensor '" LONG_NAME "': truncated: its type needs 4 bytes"},
    {"type-99", type_99, FMT, "tensor 'w': unknown tensor type 99"},
    {"type-4-removed", type_4_removed, FMT, "tensor 'w': unknown tensor type 4"},
    {"row-not-whole-blocks", row_not_whole_blocks, FMT, "tensor 'blk.0.ffn_down.weight': rows of 100 elements are not whole Q4_K blocks"},
    {"tensor-name-empty", tensor_name_empty, FMT, "tensor 1 of 1: an empty name"},
    {"tensor-name-2^64", tensor_name_2_64, FMT, "tensor 1 of 1: its name: its length 18446744073709551615"},
    {"tensor-name-nul", tensor_name_nul, FMT, "tensor 1 of 1: a name holding a NUL byte"},
    {"tensor-name-duplicate", tensor_name_duplicate, FMT, "two tensors are called 'w' (tensors 1 and 2)"},
    {"offset-misaligned", offset_misaligned, FMT, "tensor 'w': its offset 4 is not a multiple of the alignment 32"},
    {"data-past-end", data_past_end, FMT, "tensor 'token_embd.weight': its 256 bytes at offset 0"},
    {"offset-past-end", offset_past_end, FMT, "tensor 'w': its 16 bytes at offset 64"},
    {"offset-near-2^64", offset_near_2_64, FMT, "tensor 'w': its 16 bytes at offset 18446744073709551584"},
    {"q8-bytes-do-not-fit", q8_bytes_do_not_fit, FMT, "tensor 'output.weight': its 68 bytes at offset 0"},
    {"tensors-overlap", tensors_overlap, FMT, "tensors 'a' and 'b' overlap: 'a' holds bytes"},
    {"data-section-past-end", data_section_past_end, FMT, "truncated: the tensor data start at byte"},
    {"offset-cut", offset_cut, FMT, "tensor '" LONG_NAME "': truncated: its offset needs 8 bytes"},
};
#define N_ROWS (sizeof rows / sizeof rows[0])

/* ---------------------------------------------------------------- checks */

/* Failures are printed and counted (test_row_failed), so that one run shows
 * every row that goes wrong; each test fails at its end if any did. */

/* One call's refusal: the status, no attn_gguf handed back, the keyword
 * and (through a file) the path in the message. */
static void check_refusal(const char *row, const char *call, attn_status st, const attn_gguf *g, attn_status want,
                          const char *path, const char *keyword) {
    const char *msg = attn_last_error();
    if (st != want || (path && !strstr(msg, path)) || !strstr(msg, keyword))
        test_row_failed("%s: %s: status %d '%s' (want %d '%s'), message \"%s\" (want%s%s \"%s\")", row, call, (int)st,
                   attn_status_str(st), (int)want, attn_status_str(want), msg, path ? " the path and" : "", "",
                   keyword);
    if (g) test_row_failed("%s: %s failed but handed back a file", row, call);
}

static void check_bytes(const char *row, const uint8_t *data, size_t size, attn_status want, const char *keyword) {
    if (!data) data = (const uint8_t *)""; /* the empty row builds nothing */
    attn_gguf *g = NULL;
    attn_status st = attn_gguf_parse(data, size, &g);
    check_refusal(row, "attn_gguf_parse", st, g, want, NULL, keyword);
    if (st == ATTN_OK) attn_gguf_free(g);
    char path[600];
    snprintf(path, sizeof path, "%s/%s.gguf", test_tmpdir(), row);
    assert_int_equal(test_write_file(path, data, size), 0);
    g = NULL;
    st = attn_gguf_open(path, &g);
    check_refusal(row, "attn_gguf_open", st, g, want, path, keyword);
    if (st == ATTN_OK) attn_gguf_free(g);
    unlink(path);
}

static void every_row(void **state) {
    (void)state;
    for (size_t r = 0; r < N_ROWS; r++) {
        gguf_bytes b = {0};
        rows[r].build(&b);
        check_bytes(rows[r].name, b.data, b.len, rows[r].status, rows[r].keyword);
        gb_free(&b);
    }
    print_message("%zu hostile GGUF rows, each through attn_gguf_parse and attn_gguf_open\n", N_ROWS);
    test_assert_no_row_failed();
}

/* The table's controls: one step short of a refused row is accepted. */
static void near_misses_are_accepted(void **state) {
    (void)state;
    attn_gguf *g;
    /* Arrays nested 16 deep (the limit). */
    gguf_bytes b = {0};
    gb_header(&b, 3, 0, 1), gb_key(&b, "deep", ARR);
    for (int i = 0; i < 15; i++) gb_array(&b, ARR, 1);
    gb_array(&b, U8, 0);
    if (attn_gguf_parse(b.data, b.len, &g) != ATTN_OK) fail_msg("16-deep arrays: %s", attn_last_error());
    attn_gguf_free(g);
    gb_free(&b);
    /* A key of 65535 bytes; alignment 1; a tensor that ends at the file's last byte; trailing bytes after the data. */
    gb_header(&b, 3, 1, 2);
    gb_u64(&b, 65535);
    for (int i = 0; i < 65535; i++) gb_u8(&b, 'k');
    gb_u32(&b, U32), gb_u32(&b, 1);
    gb_kv_u32(&b, "general.alignment", 1);
    gb_tensor(&b, "w", 1, d64, T_Q8_0, 0);
    gb_zeros(&b, 68);
    if (attn_gguf_parse(b.data, b.len, &g) != ATTN_OK) fail_msg("a 65535-byte key: %s", attn_last_error());
    attn_gguf_free(g);
    gb_zeros(&b, 5);
    if (attn_gguf_parse(b.data, b.len, &g) != ATTN_OK) fail_msg("trailing bytes: %s", attn_last_error());
    attn_gguf_free(g);
    gb_free(&b);
}

/* A small valid file of every part: keys of several types (an array of
 * strings, a nested array), three tensors of three types, the last one
 * ending at the file's last byte, so that every shorter prefix is a
 * truncation somewhere. */
static void valid_small(gguf_bytes *b) {
    gb_header(b, 3, 3, 6);
    arch(b);
    gb_kv_u32(b, "general.alignment", 32);
    gb_kv_u32(b, "llama.block_count", 2);
    gb_key(b, "tokenizer.ggml.tokens", ARR), gb_array(b, STR, 2), gb_str(b, "a"), gb_str(b, "bc");
    gb_key(b, "nested", ARR), gb_array(b, ARR, 1), gb_array(b, U8, 1), gb_u8(b, 9);
    gb_key(b, "flag", BOOL), gb_u8(b, 1);
    const uint64_t q8[] = {32, 2}, q4k[] = {256};
    gb_tensor(b, "a", 1, d4, T_F32, 0);
    gb_tensor(b, "b", 2, q8, T_Q8_0, 32);
    gb_tensor(b, "c", 1, q4k, T_Q4_K, 128);
    gb_pad(b, 32);
    for (int i = 0; i < 4; i++) gb_f32(b, (float)i);
    gb_zeros(b, 16 + 68 + 28 + 144);
}

static void every_prefix(void **state) {
    (void)state;
    gguf_bytes b = {0};
    valid_small(&b);
    attn_gguf *g;
    if (attn_gguf_parse(b.data, b.len, &g) != ATTN_OK) fail_msg("the valid file: %s", attn_last_error());
    attn_gguf_free(g);
    for (size_t n = 0; n < b.len; n++) {
        char row[64];
        snprintf(row, sizeof row, "prefix-%zu-of-%zu", n, b.len);
        check_bytes(row, b.data, n, ATTN_ERR_FORMAT, n == 0 ? "truncated" : n < 4 ? "truncated" : "");
        if (test_rows_failed()) break; /* one prefix's failure is enough to read */
        /* Each refusal says the file is cut short: "truncated", a length
         * that "runs past the end", a tensor whose data "run past the end". */
        if (!strstr(attn_last_error(), "truncated") && !strstr(attn_last_error(), "past the end"))
            test_row_failed("%s: refused, but not as a truncation: %s", row, attn_last_error());
    }
    print_message("every prefix of a %zu-byte valid file refused, through attn_gguf_parse and attn_gguf_open\n",
                  b.len);
    gb_free(&b);
    test_assert_no_row_failed();
}

/* Things that are not regular files, through attn_gguf_open. */
static void not_regular_files(void **state) {
    (void)state;
    char path[600];
    attn_gguf *g = NULL;
    snprintf(path, sizeof path, "%s/dir.gguf", test_tmpdir());
    assert_int_equal(mkdir(path, 0755), 0);
    check_refusal("directory", "attn_gguf_open", attn_gguf_open(path, &g), g, ATTN_ERR_IO, path, "it is a directory");
    snprintf(path, sizeof path, "%s/fifo.gguf", test_tmpdir());
    assert_int_equal(mkfifo(path, 0600), 0);
    double t0 = test_now();
    check_refusal("fifo", "attn_gguf_open", attn_gguf_open(path, &g), g, ATTN_ERR_IO, path, "it is a FIFO");
    if (test_now() - t0 > 5) test_row_failed("fifo: attn_gguf_open took %.1f s", test_now() - t0);
    snprintf(path, sizeof path, "%s/zero.gguf", test_tmpdir());
    assert_int_equal(symlink("/dev/zero", path), 0);
    check_refusal("dev-zero", "attn_gguf_open", attn_gguf_open(path, &g), g, ATTN_ERR_IO, path,
                  "it is a character device");
    snprintf(path, sizeof path, "%s/missing.gguf", test_tmpdir());
    check_refusal("missing", "attn_gguf_open", attn_gguf_open(path, &g), g, ATTN_ERR_IO, path,
                  "No such file or directory");
    snprintf(path, sizeof path, "%s/dangling.gguf", test_tmpdir());
    assert_int_equal(symlink("/nonexistent/attn.gguf", path), 0);
    check_refusal("dangling-link", "attn_gguf_open", attn_gguf_open(path, &g), g, ATTN_ERR_IO, path,
                  "No such file or directory");
    snprintf(path, sizeof path, "%s/proc.gguf", test_tmpdir());
    assert_int_equal(symlink("/proc/self/status", path), 0); /* regular, size 0, not empty */
    check_refusal("proc-file", "attn_gguf_open", attn_gguf_open(path, &g), g, ATTN_ERR_FORMAT, path,
                  "truncated: 0 bytes");
    snprintf(path, sizeof path, "%s/sock.gguf", test_tmpdir());
    test_make_socket(path);
    check_refusal("socket", "attn_gguf_open", attn_gguf_open(path, &g), g, ATTN_ERR_IO, path, "it is a socket");
    test_assert_no_row_failed();
}

static void memory_stayed_small(void **state) {
    (void)state;
    struct rusage ru;
    assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
    print_message("peak resident set size after every row: %ld KiB\n", ru.ru_maxrss);
    if (ru.ru_maxrss > HOSTILE_RSS_LIMIT_KB)
        fail_msg("the test peaked at %ld KiB, over %ld KiB: a hostile header was believed", ru.ru_maxrss,
                 HOSTILE_RSS_LIMIT_KB);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_row),
        cmocka_unit_test(near_misses_are_accepted),
        cmocka_unit_test(every_prefix),
        cmocka_unit_test(not_regular_files),
        cmocka_unit_test(memory_stayed_small),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
