/*
 * npz_fuzz.c — libFuzzer target for the .npz reader (src/formats/npz.c,
 * attn_npz.h): attn model trace's caches and numpy's np.savez /
 * np.savez_compressed archives are files a user may be handed.
 *
 * Input: the archive's bytes, placed in memory (memfd_create) and opened
 * through /proc/self/fd/N.  Whatever the bytes, the reader accepts or
 * refuses with a message; every member it lists is read (CRC-32 checked,
 * inflated when deflated), and an array it returns must hold as many
 * elements as its shape says.  Each member's header alone
 * (attn_npz_read_header) and its stream to /dev/null (attn_npz_extract)
 * must agree with the whole read: a member read whole has that header and
 * streams without error.
 */
#define _GNU_SOURCE /* memfd_create */

#include "attn.h"
#include "attn_io.h"
#include "attn_npz.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_refusal(attn_status status) {
    if (status != ATTN_OK && attn_last_error()[0] == '\0') __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("npz_fuzz", 0);
    if (fd < 0) return 0;
    if (size && write(fd, data, size) != (ssize_t)size) __builtin_trap();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    attn_npz *z = NULL;
    attn_status st = attn_npz_open(path, &z);
    check_refusal(st);
    if (st == ATTN_OK) {
        const int64_t n = attn_npz_count(z);
        if (n < 0) __builtin_trap();
        for (int64_t i = 0; i < n; i++) {
            attn_npz_member m;
            st = attn_npz_member_at(z, i, &m);
            check_refusal(st);
            if (st != ATTN_OK) continue;
            attn_array a = {0}, h = {0};
            const attn_status header = attn_npz_read_header(z, m.name, &h);
            check_refusal(header);
            const attn_status streamed = attn_npz_extract(z, m.name, "/dev/null");
            check_refusal(streamed);
            st = attn_npz_read(z, m.name, &a);
            check_refusal(st);
            if (st == ATTN_OK) {
                int64_t count = 1;
                for (int d = 0; d < a.ndim; d++) count *= a.shape[d];
                if (count != a.count) __builtin_trap();
                if (header != ATTN_OK || streamed != ATTN_OK || h.dtype != a.dtype || h.ndim != a.ndim ||
                    h.count != a.count || memcmp(h.shape, a.shape, sizeof a.shape) != 0 || h.data)
                    __builtin_trap();
                attn_array_free(&a);
            }
        }
        attn_npz_free(z);
    }
    close(fd);
    return 0;
}
