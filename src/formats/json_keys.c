/*
 * json_keys.c — duplicate keys in a parsed JSON document (json_keys.h).
 */
#include "formats/json_keys.h"

#include "formats/quote.h"

#include <stdlib.h>

static int by_name(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* The key of obj's members given twice, or NULL (or *oom). */
static const char *duplicate_in(const cJSON *obj, bool *oom) {
    size_t n = 0;
    for (const cJSON *c = obj->child; c; c = c->next) n += c->string != NULL;
    if (n < 2) return NULL;
    if (n <= 16) {
        for (const cJSON *a = obj->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (a->string && b->string && strcmp(a->string, b->string) == 0) return a->string;
        return NULL;
    }
    const cJSON **members = malloc(n * sizeof *members);
    if (!members) {
        *oom = true;
        return NULL;
    }
    size_t i = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        if (c->string) members[i++] = c;
    qsort(members, n, sizeof *members, by_name);
    const char *dup = NULL;
    for (i = 1; i < n && !dup; i++)
        if (strcmp(members[i - 1]->string, members[i]->string) == 0) dup = members[i]->string;
    free(members);
    return dup;
}

/* Depth first under item, whose place is path[0 .. len). */
static attn_status walk(const cJSON *item, const char *file, char *path, size_t len, size_t cap, int depth) {
    if (depth > 64) return ATTN_OK; /* cJSON's own nesting limit is lower */
    if (cJSON_IsObject(item)) {
        bool oom = false;
        const char *dup = duplicate_in(item, &oom);
        if (oom) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory checking its keys", file);
        if (dup) {
            char key[160];
            attn__quote(dup, strlen(dup), key, sizeof key);
            return attn__fail(ATTN_ERR_FORMAT, "%s: the key \"%s\" is given twice in %s%s%s (readers disagree on "
                              "which one counts: Python's json takes the last, cJSON the first)", file, key,
                              len ? "\"" : "the top-level object", len ? path : "", len ? "\"" : "");
        }
    }
    if (!cJSON_IsObject(item) && !cJSON_IsArray(item)) return ATTN_OK;
    int index = 0;
    for (const cJSON *c = item->child; c; c = c->next, index++) {
        size_t n = len;
        if (c->string) n += (size_t)snprintf(path + len, len < cap ? cap - len : 0, "%s%s", len ? "." : "", c->string);
        else n += (size_t)snprintf(path + len, len < cap ? cap - len : 0, "[%d]", index);
        if (n >= cap) n = cap - 1;
        attn_status st = walk(c, file, path, n, cap, depth + 1);
        path[len] = '\0';
        if (st) return st;
    }
    return ATTN_OK;
}

attn_status attn__json_unique_keys(const cJSON *root, const char *file) {
    char path[256] = "";
    return walk(root, file, path, 0, sizeof path, 0);
}
