/*
 * cli_model_patch.h — the text of `attn model trace`'s --patch and
 * --ablate (its grammar and its messages; the patches themselves are the
 * library's: attn_model_patch in attn_model_interp.h, the hook names its
 * one vocabulary, attn_hook_parse).
 *
 *   --patch  HOOK[@POS,POS..][:HEAD,HEAD..]          from the source run
 *   --ablate HOOK[@POS,POS..]:HEAD,HEAD..=zero|mean  zero or mean ablation
 *   --attribute HOOK[@POS,POS..]                     attribution patching
 *
 * HOOK is a full hook name (blocks.3.attn.hook_z), blocks.*.NAME or the
 * bare per-layer NAME (attn.hook_z, hook_resid_pre): both of the last mean
 * every layer (ATTN_ALL).  Positions: integers, negative from the end of
 * each run, or 'all'; heads likewise (only where the hook has a heads axis).
 */
#ifndef ATTN_CLI_MODEL_PATCH_H
#define ATTN_CLI_MODEL_PATCH_H

#include "attn_model_interp.h"

#include <stdbool.h>
#include <stddef.h>

enum { CLI_PATCH_SELECT_MAX = 64 };

/* A parsed patch and the storage its position and head lists point into
 * (so it must not be copied: p points into it). */
typedef struct cli_model_patch {
    attn_model_patch p;
    int64_t positions[CLI_PATCH_SELECT_MAX];
    int64_t heads[CLI_PATCH_SELECT_MAX];
} cli_model_patch;

/* What the text is for, which also names the flag in messages. */
typedef enum cli_patch_flag {
    CLI_PATCH = 0,    /* --patch HOOK[@POS][:HEADS]                          */
    CLI_ABLATE = 1,   /* --ablate ...=zero|mean (the kind read from the text) */
    CLI_ATTRIBUTE = 2 /* --attribute HOOK[@POS]: a patch estimated, no heads  */
} cli_patch_flag;

/* Parses text as flag's argument for a model of n_layers layers; false
 * with the message (naming the flag and the text) in err. */
bool cli_model_patch_parse(const char *text, cli_patch_flag flag, int64_t n_layers, cli_model_patch *out, char *err,
                           size_t esize);

#endif /* ATTN_CLI_MODEL_PATCH_H */
