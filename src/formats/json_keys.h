/*
 * json_keys.h — duplicate keys in a parsed JSON document (cJSON keeps every
 * member of an object, and its lookups find the first; Python's json, which
 * transformers reads config.json with, keeps the last).  A file whose
 * meaning depends on which reader reads it is refused instead.
 */
#ifndef ATTN_FORMATS_JSON_KEYS_H
#define ATTN_FORMATS_JSON_KEYS_H

#include "base/base.h"

#include <cjson/cJSON.h>

/* ATTN_ERR_FORMAT naming file, the key given twice and the object holding
 * it ("the top level", or a path such as "rope_scaling"), for the first
 * object under root (depth first) with a key given twice; ATTN_OK when
 * every object's keys are distinct. */
attn_status attn__json_unique_keys(const cJSON *root, const char *file);

#endif /* ATTN_FORMATS_JSON_KEYS_H */
