/*
 * safetensors.h — the parsed set of shards (safetensors.c parses headers
 * and a sharded checkpoint's index from memory and looks tensors up), and
 * what the file wrapper above it needs (safetensors_file.c maps files, reads
 * the index and closes sets; safetensors_off.c stands in for both without
 * cJSON).
 */
#ifndef ATTN_FORMATS_SAFETENSORS_H
#define ATTN_FORMATS_SAFETENSORS_H

#include "attn_safetensors.h"
#include "base/base.h"

/* The reference crate's limit on the header (safetensors' MAX_HEADER_SIZE):
 * a header claiming more is refused before anything is read or parsed. */
#define SAFETENSORS_MAX_HEADER_BYTES 100000000u
/* The largest integer a JSON number (a double, in cJSON) holds exactly. */
#define SAFETENSORS_MAX_EXACT 9007199254740992.0

/* Shards a set may have: each is a file kept mapped, and the index's
 * table of file names (a hash table twice this size) is on the stack.
 * Real checkpoints have a few hundred at most. */
#define SAFETENSORS_MAX_SHARDS 1024

/* One file of a set (or the caller's buffer). */
typedef struct safetensors_shard {
    const uint8_t *base;
    size_t size;
    void *mapping;          /* the mmap of safetensors_file.c, or NULL */
    char *file;             /* its file name, for messages, or NULL    */
    uint64_t data_offset;   /* 8 + the header's length                 */
} safetensors_shard;

struct attn_safetensors {
    safetensors_shard *shards;
    int64_t n_shards;
    attn_safetensors_tensor *tensors;           /* [n_tensors], header order; names malloc'd */
    int64_t n_tensors, cap_tensors;
    const attn_safetensors_tensor **by_name;    /* [n_tensors], sorted by name */
    char **meta_keys, **meta_values;            /* [n_meta], malloc'd          */
    int64_t n_meta;
};

/* An empty set with room for n_shards shards. */
attn_status attn__safetensors_new(int64_t n_shards, attn_safetensors **out);
/* Frees st and all it holds but the shards' mappings, which the parser
 * never makes: attn_safetensors_free (safetensors_file.c) unmaps them
 * first.  NULL is allowed. */
void attn__safetensors_free(attn_safetensors *st);
/* Parses the image base[0 .. size) as shard `shard` of st (its tensors are
 * appended; its metadata kept when shard is 0). */
attn_status attn__safetensors_parse_shard(attn_safetensors *st, int64_t shard, const uint8_t *base, size_t size);
/* After the last shard: the index by name, refusing a name seen twice. */
attn_status attn__safetensors_finish(attn_safetensors *st);

/* A sharded checkpoint's index (model.safetensors.index.json):
 * weight_map's entries, each a tensor name and the number of its shard,
 * and the shards' file names in order of first mention. */
typedef struct safetensors_index {
    int64_t n_entries, n_files;
    char **names;           /* [n_entries] */
    int64_t *file_of;       /* [n_entries] */
    char **files;           /* [n_files]   */
} safetensors_index;

/* Parses an index from json[0 .. len): weight_map must be an object of
 * strings, each a plain file name (no '/', not "." / "..", no leading '.').
 * ATTN_ERR_FORMAT naming the entry. */
attn_status attn__safetensors_index_parse(const char *json, size_t len, safetensors_index *index);
void attn__safetensors_index_free(safetensors_index *index);


#endif /* ATTN_FORMATS_SAFETENSORS_H */
