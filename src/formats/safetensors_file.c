/*
 * safetensors_file.c — safetensors files mapped read-only and parsed from
 * the mapping (safetensors.c), one file or the shards of a checkpoint's
 * index (model.safetensors.index.json), checked against the index; and
 * attn_safetensors_free, which unmaps them (the parser below never maps).
 *
 * Files are opened as every input of attn is (src/io/file.h): regular
 * files only, without blocking.
 */
#include "formats/safetensors.h"

#include "formats/quote.h"
#include "io/file.h"

#include <stdlib.h>
#include <sys/mman.h>

void attn_safetensors_free(attn_safetensors *st) {
    if (!st) return;
    for (int64_t i = 0; i < st->n_shards; i++)
        if (st->shards[i].mapping) munmap(st->shards[i].mapping, st->shards[i].size);
    attn__safetensors_free(st);
}

/* Deprecated names, until 1.0 (attn_safetensors.h). */
void attn_safetensors_close(attn_safetensors *st) { attn_safetensors_free(st); }
/* End of the deprecated names. */

static char *join_path(const char *dir, size_t dir_len, const char *file) {
    const size_t n = strlen(file);
    char *p = malloc(dir_len + 1 + n + 1);
    if (!p) return NULL;
    memcpy(p, dir, dir_len);
    p[dir_len] = '/';
    memcpy(p + dir_len + 1, file, n + 1);
    return p;
}

/* Shard k of st from path (taken over by the shard: freed on close). */
static attn_status open_shard(attn_safetensors *st, int64_t k, char *path) {
    safetensors_shard *s = &st->shards[k];
    s->file = path;
    void *map = NULL;
    size_t size = 0;
    attn_status status = file_map_regular(path, "safetensors checkpoints", 0, NULL, &map, &size);
    if (status != ATTN_OK) return status;
    s->mapping = map;
    s->size = size;
    return attn__safetensors_parse_shard(st, k, map ? map : (const uint8_t *)"", size);
}

static attn_status open_one(const char *path, attn_safetensors **out) {
    attn_safetensors *st;
    attn_status status = attn__safetensors_new(1, &st);
    if (status != ATTN_OK) return status;
    char *copy = malloc(strlen(path) + 1);
    if (!copy) {
        attn_safetensors_free(st);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot copy a path");
    }
    strcpy(copy, path);
    status = open_shard(st, 0, copy);
    if (status == ATTN_OK) status = attn__safetensors_finish(st);
    if (status != ATTN_OK) {
        attn_safetensors_free(st);
        return status;
    }
    *out = st;
    return ATTN_OK;
}

/* The index at path, its shards in dir (dir_len bytes of dir). */
static attn_status open_index(const char *path, const char *dir, size_t dir_len, attn_safetensors **out) {
    void *map = NULL;
    size_t size = 0;
    attn_status status = file_map_regular(path, "safetensors indexes", 0, NULL, &map, &size);
    if (status != ATTN_OK) return status;
    safetensors_index index;
    status = attn__safetensors_index_parse(map ? map : "", size, &index);
    if (map) munmap(map, size);
    if (status != ATTN_OK) return attn__fail(status, "'%s': %s", path, attn_last_error());
    attn_safetensors *st = NULL;
    status = attn__safetensors_new(index.n_files, &st);
    for (int64_t k = 0; k < index.n_files && status == ATTN_OK; k++) {
        char *shard_path = join_path(dir, dir_len, index.files[k]);
        status = shard_path ? open_shard(st, k, shard_path) : attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot copy a path");
    }
    if (status == ATTN_OK) status = attn__safetensors_finish(st);
    /* Every entry found once, in its own shard; every tensor in the map. */
    uint8_t *listed = status == ATTN_OK ? calloc((size_t)(st->n_tensors ? st->n_tensors : 1), 1) : NULL;
    if (status == ATTN_OK && !listed) status = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot check the index");
    for (int64_t i = 0; i < index.n_entries && status == ATTN_OK; i++) {
        const int64_t t = attn_safetensors_tensor_index(st, index.names[i]);
        const char *file = index.files[index.file_of[i]];
        char quoted[256];
        attn__quote(index.names[i], strlen(index.names[i]), quoted, sizeof quoted);
        if (t < 0)
            status = attn__fail(ATTN_ERR_FORMAT, "'%s': tensor '%s' is not in its shard '%s' (nor in any other)", path,
                                quoted, file);
        else if (st->tensors[t].shard != index.file_of[i])
            status = attn__fail(ATTN_ERR_FORMAT, "'%s': tensor '%s' is mapped to shard '%s', but it is in '%s'", path,
                                quoted, file, index.files[st->tensors[t].shard]);
        else if (listed[t])
            status = attn__fail(ATTN_ERR_FORMAT, "'%s': tensor '%s' appears twice in the weight_map", path, quoted);
        else
            listed[t] = 1;
    }
    for (int64_t t = 0; status == ATTN_OK && st && t < st->n_tensors; t++)
        if (!listed[t]) {
            char quoted[256];
            status = attn__fail(ATTN_ERR_FORMAT, "'%s': tensor '%s' of shard '%s' is not in the weight_map", path,
                                attn__quote(st->tensors[t].name, strlen(st->tensors[t].name), quoted, sizeof quoted),
                                index.files[st->tensors[t].shard]);
        }
    free(listed);
    attn__safetensors_index_free(&index);
    if (status != ATTN_OK) {
        attn_safetensors_free(st);
        return status;
    }
    *out = st;
    return ATTN_OK;
}

static bool ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

attn_status attn_safetensors_open(const char *path, attn_safetensors **out) {
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_safetensors_open: out is NULL");
    *out = NULL;
    if (!path) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_safetensors_open: path is NULL");
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        size_t dir_len = strlen(path);
        while (dir_len > 1 && path[dir_len - 1] == '/') dir_len--;
        char *index = join_path(path, dir_len, "model.safetensors.index.json");
        char *single = join_path(path, dir_len, "model.safetensors");
        attn_status status;
        if (!index || !single)
            status = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot copy a path");
        else if (access(index, F_OK) == 0)
            status = open_index(index, path, dir_len, out);
        else if (access(single, F_OK) == 0)
            status = open_one(single, out);
        else
            status = attn__fail(ATTN_ERR_IO, "'%s' is a directory without model.safetensors.index.json or "
                                "model.safetensors", path);
        free(index);
        free(single);
        return status;
    }
    if (ends_with(path, ".json")) {
        const char *slash = strrchr(path, '/');
        return slash ? open_index(path, path, (size_t)(slash - path), out) : open_index(path, ".", 1, out);
    }
    return open_one(path, out);
}
