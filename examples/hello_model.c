/* A GGUF file through libattn_model: the smallest one, held in memory (a
 * key and a tensor of four float32s), parsed, and its tensor converted.
 * hello_model [FILE.gguf] reads FILE instead and prints its architecture
 * and tensor count. */
#include <attn_gguf.h>
#include <stdio.h>

static const unsigned char tiny[] = {
    'G', 'G', 'U', 'F', 3, 0, 0, 0,             /* magic, version 3          */
    1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, /* 1 tensor, 1 key         */
    20, 0, 0, 0, 0, 0, 0, 0, 'g', 'e', 'n', 'e', 'r', 'a', 'l', '.', 'a', 'r', 'c', 'h', 'i', 't', 'e', 'c', 't',
    'u', 'r', 'e', 8, 0, 0, 0,                  /* key, type string          */
    5, 0, 0, 0, 0, 0, 0, 0, 'l', 'l', 'a', 'm', 'a',
    1, 0, 0, 0, 0, 0, 0, 0, 'w', 1, 0, 0, 0,    /* tensor "w", 1 dimension   */
    4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,         /* 4 elements, F32           */
    0, 0, 0, 0, 0, 0, 0, 0,                     /* offset 0                  */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* to byte 128 */
    0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64}; /* 1 2 3 4 */

int main(int argc, char **argv) {
    attn_gguf *g;
    attn_status st = argc > 1 ? attn_gguf_open(argv[1], &g) : attn_gguf_parse(tiny, sizeof tiny, &g);
    const char *arch;
    size_t len;
    if (st != ATTN_OK || attn_gguf_get_string(g, "general.architecture", &arch, &len) != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", attn_last_error());
        attn_gguf_free(g);
        return 1;
    }
    attn_gguf_info info;
    attn_gguf_describe(g, &info);
    printf("architecture %.*s, %lld tensors\n", (int)len, arch, (long long)info.n_tensors);
    attn_gguf_tensor t;
    float row[4];
    if (argc == 1 && (attn_gguf_find_tensor(g, "w", &t) != ATTN_OK ||
                      attn_gguf_dequantize_rows(g, &t, 0, 1, row) != ATTN_OK)) {
        fprintf(stderr, "attn: %s\n", attn_last_error());
        attn_gguf_free(g);
        return 1;
    }
    if (argc == 1) printf("w = [%g, %g, %g, %g]\n", row[0], row[1], row[2], row[3]);
    attn_gguf_free(g);
    return 0;
}
