/*
 * cli_model_patch.c — parsing --patch and --ablate (cli_model_patch.h).
 * The hook name goes through the library's one parser (attn_hook_parse);
 * whether a hook has heads, or rows a mean can be taken over, is its
 * layout in the library's table (attn_hook_site_layout).
 */
#include "cli_model_patch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool say(char *err, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool say(char *err, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return false;
}

/* "3,-1,5" into out (at most CLI_PATCH_SELECT_MAX); false on anything else. */
static bool parse_list(const char *text, size_t len, int64_t *out, int64_t *n) {
    *n = 0;
    if (len == 0) return false;
    char buf[512];
    if (len >= sizeof buf) return false;
    memcpy(buf, text, len);
    buf[len] = '\0';
    for (char *p = buf; *p;) {
        char *end;
        const long long v = strtoll(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0') || *n >= CLI_PATCH_SELECT_MAX) return false;
        out[(*n)++] = v;
        p = *end ? end + 1 : end;
    }
    return true;
}

bool cli_model_patch_parse(const char *text, cli_patch_flag flag, int64_t n_layers, cli_model_patch *out, char *err,
                           size_t esize) {
    memset(out, 0, sizeof *out);
    attn_model_patch *p = &out->p;
    p->kind = ATTN_MODEL_PATCH_SOURCE;
    p->positions = out->positions;
    p->heads = out->heads;
    const bool ablate = flag == CLI_ABLATE;
    const char *what = ablate ? "--ablate" : flag == CLI_ATTRIBUTE ? "--attribute" : "--patch";
    size_t hook_len = strcspn(text, "@:=");
    char hook[160];
    if (hook_len == 0 || hook_len >= sizeof hook) return say(err, esize, "%s '%s': no hook name first", what, text);
    memcpy(hook, text, hook_len);
    hook[hook_len] = '\0';
    const char *rest = text + hook_len;
    /* "blocks.*.NAME" and a bare per-layer NAME both mean every layer. */
    attn_hook_site site;
    int64_t layer;
    if (attn_hook_parse(hook, ATTN_HOOK_NAME_ANY_LAYER | ATTN_HOOK_NAME_SUFFIX, &site, &layer) != ATTN_OK ||
        site >= (attn_hook_site)ATTN_DECODER_HOOK_POINTS)
        return say(err, esize, "%s '%s': '%s' is not a hook point (blocks.L.hook_resid_pre, blocks.L.attn.hook_z, "
                               "... : attn model trace --help lists them)", what, text, hook);
    if (!attn_hook_site_per_layer(site))
        return say(err, esize, "%s '%s': %s has no layer and cannot be patched here (record it with --hooks)", what,
                   text, hook);
    if (layer >= n_layers)
        return say(err, esize, "%s '%s': layer %lld, the model has %lld (0..%lld)", what, text, (long long)layer,
                   (long long)n_layers, (long long)(n_layers - 1));
    const attn_hook_layout layout = attn_hook_site_layout(site);
    if (flag == CLI_ATTRIBUTE &&
        (layout == ATTN_HOOK_HEADS_FIRST || site == (attn_hook_site)ATTN_DECODER_HOOK_Q_INPUT ||
         site == (attn_hook_site)ATTN_DECODER_HOOK_K_INPUT || site == (attn_hook_site)ATTN_DECODER_HOOK_V_INPUT))
        return say(err, esize, "--attribute '%s': %s cannot be estimated (scores and pattern rows are per query "
                               "and key; hook_q/k/v_input have no gradient: estimate hook_resid_pre or attn.hook_q)",
                   text, hook);
    p->point = (attn_decoder_hook_point)site;
    p->layer = layer; /* -1 = ATTN_ALL: every layer */
    if (*rest == '@') {
        const size_t n = strcspn(rest + 1, ":=");
        if (!(n == 3 && strncmp(rest + 1, "all", 3) == 0) && !parse_list(rest + 1, n, out->positions, &p->n_positions))
            return say(err, esize, "%s '%s': positions '%.*s': expected integers separated by commas "
                                   "(negative: from the end; -1 the last token) or 'all'", what, text, (int)n, rest + 1);
        rest += 1 + n;
    }
    if (*rest == ':' && flag == CLI_ATTRIBUTE)
        return say(err, esize, "--attribute '%s': every head is estimated at once (no :HEADS)", text);
    if (*rest == ':') {
        const size_t n = strcspn(rest + 1, "=");
        if (!(n == 3 && strncmp(rest + 1, "all", 3) == 0) && !parse_list(rest + 1, n, out->heads, &p->n_heads))
            return say(err, esize, "%s '%s': heads '%.*s': expected head indices separated by commas or 'all'", what,
                       text, (int)n, rest + 1);
        if (layout == ATTN_HOOK_ROWS)
            return say(err, esize, "%s '%s': %s has no heads axis (heads apply to q, k, v, rot_q, rot_k, "
                                   "attn_scores, pattern and z)", what, text, hook);
        rest += 1 + n;
    }
    if (ablate) {
        if (*rest != '=' || (strcmp(rest + 1, "zero") != 0 && strcmp(rest + 1, "mean") != 0))
            return say(err, esize, "--ablate '%s': expected HOOK[@POSITIONS]:HEADS=zero or =mean", text);
        p->kind = strcmp(rest + 1, "zero") == 0 ? ATTN_MODEL_ABLATE_ZERO : ATTN_MODEL_ABLATE_MEAN;
        if (p->kind == ATTN_MODEL_ABLATE_MEAN && layout == ATTN_HOOK_HEADS_FIRST)
            return say(err, esize, "--ablate '%s': mean ablation averages over positions, which a pattern or score "
                                   "row cannot take (use =zero, or ablate hook_z)", text);
    } else if (*rest) {
        return say(err, esize, "%s '%s': unexpected '%s' (expected HOOK[@POSITIONS]%s)", what, text, rest,
                   flag == CLI_ATTRIBUTE ? "" : "[:HEADS]");
    }
    return true;
}
