/*
 * hook_names.c — the one hook vocabulary (attn_interp.h, "hook names"):
 * TransformerLens's name of every site, its layout, which attention-module
 * hook it is, and the parsing of every form a name takes.  The attention
 * module's trace (attn_hook_name, attn_hook_from_name) and the decoder's
 * hook points (attn_decoder_hook_name, _suffix, _parse in libattn_model)
 * read their names from here.
 *
 * Shape legend (after any batch axis): L positions (queries), S keys,
 * H heads, d the stream's width, W a head's row width.
 */
#include "interp/interp.h"

#include <stdlib.h>
#include <string.h>

/* Indexed by attn_hook_site. */
static const struct site_row {
    const char *suffix;      /* after "blocks.L.", or the whole name without a layer */
    bool per_layer;
    attn_hook_layout layout;
    int module_hook;         /* the attn_hook of the module's trace, or -1          */
} sites[ATTN_HOOK_SITES] = {
    [ATTN_HOOK_SITE_EMBED] = {"hook_embed", false, ATTN_HOOK_ROWS, -1},
    [ATTN_HOOK_SITE_RESID_PRE] = {"hook_resid_pre", true, ATTN_HOOK_ROWS, -1},
    [ATTN_HOOK_SITE_Q] = {"attn.hook_q", true, ATTN_HOOK_HEADS, ATTN_HOOK_Q},
    [ATTN_HOOK_SITE_K] = {"attn.hook_k", true, ATTN_HOOK_HEADS, ATTN_HOOK_K},
    [ATTN_HOOK_SITE_V] = {"attn.hook_v", true, ATTN_HOOK_HEADS, ATTN_HOOK_V},
    [ATTN_HOOK_SITE_ROT_Q] = {"attn.hook_rot_q", true, ATTN_HOOK_HEADS, -1},
    [ATTN_HOOK_SITE_ROT_K] = {"attn.hook_rot_k", true, ATTN_HOOK_HEADS, -1},
    [ATTN_HOOK_SITE_ATTN_SCORES] = {"attn.hook_attn_scores", true, ATTN_HOOK_HEADS_FIRST, ATTN_HOOK_ATTN_SCORES},
    [ATTN_HOOK_SITE_PATTERN] = {"attn.hook_pattern", true, ATTN_HOOK_HEADS_FIRST, ATTN_HOOK_PATTERN},
    [ATTN_HOOK_SITE_Z] = {"attn.hook_z", true, ATTN_HOOK_HEADS, ATTN_HOOK_Z},
    [ATTN_HOOK_SITE_ATTN_OUT] = {"hook_attn_out", true, ATTN_HOOK_ROWS, ATTN_HOOK_ATTN_OUT},
    [ATTN_HOOK_SITE_RESID_MID] = {"hook_resid_mid", true, ATTN_HOOK_ROWS, -1},
    [ATTN_HOOK_SITE_MLP_OUT] = {"hook_mlp_out", true, ATTN_HOOK_ROWS, -1},
    [ATTN_HOOK_SITE_RESID_POST] = {"hook_resid_post", true, ATTN_HOOK_ROWS, -1},
    [ATTN_HOOK_SITE_LN_FINAL] = {"ln_final.hook_normalized", false, ATTN_HOOK_ROWS, -1},
    [ATTN_HOOK_SITE_RESULT] = {"attn.hook_result", true, ATTN_HOOK_HEADS, ATTN_HOOK_RESULT},
    [ATTN_HOOK_SITE_LN_FINAL_SCALE] = {"ln_final.hook_scale", false, ATTN_HOOK_ROWS, -1},
    [ATTN_HOOK_SITE_Q_INPUT] = {"hook_q_input", true, ATTN_HOOK_HEADS, -1},
    [ATTN_HOOK_SITE_K_INPUT] = {"hook_k_input", true, ATTN_HOOK_HEADS, -1},
    [ATTN_HOOK_SITE_V_INPUT] = {"hook_v_input", true, ATTN_HOOK_HEADS, -1},
    [ATTN_HOOK_SITE_LN1_SCALE] = {"ln1.hook_scale", true, ATTN_HOOK_ROWS, -1},
    [ATTN_HOOK_SITE_LN1_NORMALIZED] = {"ln1.hook_normalized", true, ATTN_HOOK_ROWS, -1},
    [ATTN_HOOK_SITE_LN2_SCALE] = {"ln2.hook_scale", true, ATTN_HOOK_ROWS, -1},
    [ATTN_HOOK_SITE_LN2_NORMALIZED] = {"ln2.hook_normalized", true, ATTN_HOOK_ROWS, -1},
    [ATTN_HOOK_SITE_MLP_PRE] = {"mlp.hook_pre", true, ATTN_HOOK_ROWS, -1},
    [ATTN_HOOK_SITE_MLP_PRE_LINEAR] = {"mlp.hook_pre_linear", true, ATTN_HOOK_ROWS, -1},
    [ATTN_HOOK_SITE_MLP_POST] = {"mlp.hook_post", true, ATTN_HOOK_ROWS, -1},
};

static bool site_valid(attn_hook_site site) { return (unsigned)site < ATTN_HOOK_SITES; }

const char *attn_hook_site_suffix(attn_hook_site site) { return site_valid(site) ? sites[site].suffix : NULL; }

int attn_hook_site_per_layer(attn_hook_site site) { return site_valid(site) && sites[site].per_layer; }

attn_hook_layout attn_hook_site_layout(attn_hook_site site) {
    return site_valid(site) ? sites[site].layout : ATTN_HOOK_LAYOUT_NONE;
}

const char *attn_hook_site_name(attn_hook_site site, int64_t layer, char *buf, size_t size) {
    if (!site_valid(site) || !buf || size == 0) return NULL;
    const int n = sites[site].per_layer ? snprintf(buf, size, "blocks.%lld.%s", (long long)layer, sites[site].suffix)
                                        : snprintf(buf, size, "%s", sites[site].suffix);
    return n < 0 || (size_t)n >= size ? NULL : buf;
}

/* The last part of a site's name: "hook_pattern" (what attn_hook_name
 * shows, a pointer into the table). */
static const char *last_part(attn_hook_site site) {
    const char *dot = strrchr(sites[site].suffix, '.');
    return dot ? dot + 1 : sites[site].suffix;
}

/* The site whose suffix is exactly text (n bytes), or -1. */
static int site_of_suffix(const char *text, size_t n) {
    for (int s = 0; s < ATTN_HOOK_SITES; s++)
        if (strlen(sites[s].suffix) == n && memcmp(sites[s].suffix, text, n) == 0) return s;
    return -1;
}

/* "3." at text: the layer (digits only; saturated at INT64_MAX, the range is
 * the caller's check) and the suffix after the dot; false otherwise. */
static bool take_layer(const char *text, int64_t *layer, const char **rest) {
    int64_t l = 0;
    const char *p = text;
    for (; *p >= '0' && *p <= '9'; p++) l = l > (INT64_MAX - (*p - '0')) / 10 ? INT64_MAX : l * 10 + (*p - '0');
    if (p == text || *p != '.') return false;
    *layer = l;
    *rest = p + 1;
    return true;
}

attn_status attn_hook_parse(const char *name, unsigned forms, attn_hook_site *site, int64_t *layer) {
    if (!name || !site || !layer)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_hook_parse: %s is NULL",
                          !name ? "name" : !site ? "site" : "layer");
    bool bad_layer = false;
    int found = -1;
    int64_t l = -1;
    if (strncmp(name, "blocks.", 7) == 0) {
        /* blocks.L.SUFFIX, or blocks.*.SUFFIX: a per-layer site's suffix. */
        const char *rest = NULL;
        if ((forms & ATTN_HOOK_NAME_ANY_LAYER) && strncmp(name + 7, "*.", 2) == 0) rest = name + 9;
        else if (!take_layer(name + 7, &l, &rest)) bad_layer = true;
        const int s = rest ? site_of_suffix(rest, strlen(rest)) : -1;
        if (s >= 0 && sites[s].per_layer) found = s;
        else l = -1;
    } else {
        /* A site without a layer by its whole name, or a per-layer site's
         * suffix alone (every layer). */
        const int s = site_of_suffix(name, strlen(name));
        if (s >= 0 && (!sites[s].per_layer || (forms & ATTN_HOOK_NAME_SUFFIX))) found = s;
    }
    if (found < 0 && (forms & ATTN_HOOK_NAME_SHORT)) {
        /* "blocks.0.attn.hook_q" -> "hook_q" -> "q" */
        const char *dot = strrchr(name, '.');
        const char *bare = dot ? dot + 1 : name;
        if (strncmp(bare, "hook_", 5) == 0) bare += 5;
        for (int s = 0; s < ATTN_HOOK_SITES && found < 0; s++)
            if (strcmp(bare, last_part((attn_hook_site)s) + 5) == 0) found = s;
        l = -1;
    }
    if (found < 0) {
        if (bad_layer)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "hook '%s': expected blocks.LAYER.NAME with LAYER >= 0",
                              name);
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "hook '%s' is not a hook point (blocks.L.hook_resid_pre, blocks.L.attn.hook_q, "
                          "blocks.L.attn.hook_pattern, ..., hook_embed, ln_final.hook_normalized: "
                          "docs/model-trace.md)", name);
    }
    *site = (attn_hook_site)found;
    *layer = l;
    return ATTN_OK;
}

/* ------------------------------------------ the attention module's hooks */

const char *attn_hook_name(attn_hook hook) {
    for (int s = 0; (unsigned)hook < ATTN_HOOK_COUNT && s < ATTN_HOOK_SITES; s++)
        if (sites[s].module_hook == (int)hook) return last_part((attn_hook_site)s);
    return NULL;
}

attn_status attn_hook_from_name(const char *name, attn_hook *hook) {
    if (!name || !hook)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_hook_from_name: %s is NULL", !name ? "name" : "hook");
    attn_hook_site site;
    int64_t layer;
    const unsigned every = ATTN_HOOK_NAME_ANY_LAYER | ATTN_HOOK_NAME_SUFFIX | ATTN_HOOK_NAME_SHORT;
    if (attn_hook_parse(name, every, &site, &layer) == ATTN_OK && sites[site].module_hook >= 0) {
        *hook = (attn_hook)sites[site].module_hook;
        return ATTN_OK;
    }
    /* "expected hook_q, hook_k, ... or hook_attn_out", in attn_hook's order */
    char expected[256] = "";
    for (int h = 0; h < ATTN_HOOK_COUNT; h++) {
        const size_t n = strlen(expected);
        snprintf(expected + n, sizeof expected - n, "%s%s", h == 0 ? "" : h == ATTN_HOOK_COUNT - 1 ? " or " : ", ",
                 attn_hook_name((attn_hook)h));
    }
    return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "unknown hook '%s' (expected %s)", name, expected);
}
