/*
 * rope_freqs.c — RoPE's options, checked, and the frequency table of each
 * scaling variant, as transformers computes it (modeling_rope_utils.py, the
 * functions named below), but in double: HF works in float32, whose
 * rounding of inv_freq (a few float ulps, up to 3e-7 relative in the test
 * fixtures) becomes an angle error of p * inv_freq * 3e-7 rad, ~1e-2 rad at
 * p = 10^5 on the fast pairs.
 *
 * Shape legend: R rotary width, F = R / 2, f in [0, F); inv_freq [F];
 *   base table  w_f = theta^(-2f / R)                       (HF: 1 / theta^(2f/R))
 */
#include "rope/rope.h"

#include <math.h>

#define ROPE_PI 3.14159265358979323846

/* A failure naming the option: "attn_rope_options.theta is -1: ...". */
#define rope_fail(status, field, ...) attn__fail(status, "attn_rope_options." field " " __VA_ARGS__)

static bool positive_finite(double v) { return isfinite(v) && v > 0; }

static attn_status check_scaling_fields(const attn_rope_options *o, int64_t rotary_dim) {
    const attn_rope_scaling s = o->scaling;
    if (s == ATTN_ROPE_SCALING_NONE) return ATTN_OK;
    static const char *const names[] = {"none", "linear", "dynamic NTK", "YaRN", "llama3"};
    const char *name = names[s];
    if (!positive_finite(o->factor))
        return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "factor", "is %g: %s scaling needs a positive, finite factor",
                         o->factor, name);
    if (s == ATTN_ROPE_SCALING_LINEAR) return ATTN_OK;
    if (o->original_max_position_embeddings <= 0)
        return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "original_max_position_embeddings",
                         "is %lld: %s scaling needs the pretraining context length (> 0)",
                         (long long)o->original_max_position_embeddings, name);
    if (s == ATTN_ROPE_SCALING_DYNAMIC_NTK) {
        if (o->seq_len < 0)
            return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "seq_len", "is %lld: must be >= 0",
                             (long long)o->seq_len);
        if (rotary_dim <= 2)
            return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "rotary_dim",
                             "is %lld: dynamic NTK scaling raises to the power R / (R - 2), so R must "
                             "exceed 2",
                             (long long)rotary_dim);
        return ATTN_OK;
    }
    if (s == ATTN_ROPE_SCALING_YARN) {
        if (!(o->theta > 1))
            return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "theta",
                             "is %g: YaRN divides by ln(theta) to find its correction range, so theta "
                             "must exceed 1",
                             o->theta);
        /* 0 means HF's default: its code reads `beta_fast or 32`. */
        const double fast = o->beta_fast ? o->beta_fast : 32, slow = o->beta_slow ? o->beta_slow : 1;
        if (!positive_finite(fast) || !positive_finite(slow))
            return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "beta_fast",
                             "and beta_slow are %g and %g: both must be positive and finite (0 = 32 and 1)",
                             o->beta_fast, o->beta_slow);
        if (!(fast > slow))
            return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "beta_fast",
                             "(%g) must exceed beta_slow (%g): they count the rotations over the original "
                             "context of the last pair kept and the first pair fully interpolated",
                             fast, slow);
        if (!(isfinite(o->mscale) && o->mscale >= 0) || !(isfinite(o->mscale_all_dim) && o->mscale_all_dim >= 0))
            return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "mscale",
                             "and mscale_all_dim are %g and %g: both must be finite and >= 0 (0 = unset)",
                             o->mscale, o->mscale_all_dim);
        return ATTN_OK;
    }
    /* LLAMA3 */
    if (!positive_finite(o->low_freq_factor))
        return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "low_freq_factor",
                         "is %g: llama3 scaling needs a positive, finite value (Llama 3.1: 1)", o->low_freq_factor);
    if (!(isfinite(o->high_freq_factor) && o->high_freq_factor > o->low_freq_factor))
        return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "high_freq_factor",
                         "is %g: llama3 scaling needs a finite value above low_freq_factor (%g; Llama 3.1: 4)",
                         o->high_freq_factor, o->low_freq_factor);
    return ATTN_OK;
}

/* HF's get_mscale (in _compute_yarn_parameters): 1 for no extension,
 * else 0.1 * mscale * ln(scale) + 1. */
static double yarn_mscale(double scale, double mscale) {
    return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

attn_status attn__rope_plan_init(rope_plan *p, int64_t head_dim, const attn_rope_options *opt) {
    memset(p, 0, sizeof *p);
    static const attn_rope_options defaults = ATTN_ROPE_OPTIONS_INIT;
    attn_status st = options_copy(&p->opt, sizeof p->opt, &defaults, opt, "attn_rope_options");
    if (st) return st;
    attn_rope_options *o = &p->opt;
    if (head_dim <= 0)
        return attn__fail(ATTN_ERR_SHAPE, "the head width D must be positive, got %lld", (long long)head_dim);
    if (o->pairing != ATTN_ROPE_NEOX && o->pairing != ATTN_ROPE_GPTJ)
        return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "pairing", "is %d: must be ATTN_ROPE_NEOX or ATTN_ROPE_GPTJ",
                         (int)o->pairing);
    if (o->rotary_dim < 0 || o->rotary_dim > head_dim)
        return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "rotary_dim", "is %lld: must be in [0, D = %lld] (0 = D)",
                         (long long)o->rotary_dim, (long long)head_dim);
    const int64_t rotary_dim = o->rotary_dim ? o->rotary_dim : head_dim;
    if (rotary_dim % 2) {
        if (o->rotary_dim)
            return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "rotary_dim",
                             "is %lld: odd, but widths rotate in pairs, so the rotary width must be even",
                             (long long)rotary_dim);
        return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "rotary_dim",
                         "is 0, and the head width D = %lld is odd: widths rotate in pairs, so set rotary_dim "
                         "to an even width below D",
                         (long long)head_dim);
    }
    if ((int)o->scaling < ATTN_ROPE_SCALING_NONE || (int)o->scaling > ATTN_ROPE_SCALING_LLAMA3)
        return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "scaling",
                         "is %d: must be ATTN_ROPE_SCALING_NONE, _LINEAR, _DYNAMIC_NTK, _YARN or _LLAMA3",
                         (int)o->scaling);
    if (o->inv_freq) {
        if (o->scaling != ATTN_ROPE_SCALING_NONE)
            return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "inv_freq",
                             "is given with scaling %d: a table of your own replaces theta and the "
                             "scaling, so scaling must be ATTN_ROPE_SCALING_NONE",
                             (int)o->scaling);
        for (int64_t f = 0; f < rotary_dim / 2; f++)
            if (!isfinite(o->inv_freq[f]))
                return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_rope_options.inv_freq[%lld] is %g: must be finite",
                                  (long long)f, o->inv_freq[f]);
    } else if (!positive_finite(o->theta)) {
        return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "theta",
                         "is %g: the base must be positive and finite (ATTN_ROPE_OPTIONS_INIT sets 10000)",
                         o->theta);
    }
    if ((st = check_scaling_fields(o, rotary_dim))) return st;
    if (o->attention_factor != 0 && !positive_finite(o->attention_factor))
        return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "attention_factor",
                         "is %g: must be positive and finite, or 0 for the variant's default",
                         o->attention_factor);
    if (o->threads < 0)
        return rope_fail(ATTN_ERR_INVALID_ARGUMENT, "threads", "is %d: must be >= 0 (0 = default)", o->threads);

    p->dim = head_dim;
    p->rotary_dim = rotary_dim;
    p->freqs = rotary_dim / 2;
    if (o->scaling == ATTN_ROPE_SCALING_YARN) {
        if (!o->beta_fast) o->beta_fast = 32;
        if (!o->beta_slow) o->beta_slow = 1;
    }
    p->attention_factor = o->attention_factor;
    if (p->attention_factor == 0) {
        p->attention_factor = 1.0;
        /* _compute_yarn_parameters: `if mscale and mscale_all_dim` — one alone is ignored. */
        if (o->scaling == ATTN_ROPE_SCALING_YARN)
            p->attention_factor = o->mscale && o->mscale_all_dim
                                      ? yarn_mscale(o->factor, o->mscale) / yarn_mscale(o->factor, o->mscale_all_dim)
                                      : yarn_mscale(o->factor, 1.0);
    }
    return ATTN_OK;
}

/* w_f = base^(-2f / R) for f in [0, F). */
static void base_table(double base, int64_t rotary_dim, double *w) {
    for (int64_t f = 0; f < rotary_dim / 2; f++) w[f] = pow(base, -(double)(2 * f) / (double)rotary_dim);
}

/* _compute_yarn_parameters: pair f keeps its frequency (extrapolation)
 * below the correction range [low, high], is divided by factor
 * (interpolation) above it, and blends linearly inside it.  The range's
 * ends are the pairs that turn beta_fast and beta_slow times over the
 * original context:
 *   find_correction_dim(n) = R ln(original / (2 pi n)) / (2 ln theta)
 *   low = floor(find_correction_dim(beta_fast)), high = ceil(...(beta_slow))
 *   (not rounded with truncate = false), clamped to [0, R - 1]
 *   ramp_f = clamp((f - low) / (high - low), 0, 1)     (high += 0.001 if equal)
 *   w'_f   = (w_f / factor) ramp_f + w_f (1 - ramp_f) */
static void yarn_table(const rope_plan *p, double *w) {
    const attn_rope_options *o = &p->opt;
    const double r = (double)p->rotary_dim, original = (double)o->original_max_position_embeddings;
    double low = r * log(original / (o->beta_fast * 2 * ROPE_PI)) / (2 * log(o->theta));
    double high = r * log(original / (o->beta_slow * 2 * ROPE_PI)) / (2 * log(o->theta));
    if (!o->yarn_no_truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = fmax(low, 0.0);
    high = fmin(high, r - 1);
    if (low == high) high += 0.001; /* HF's guard against a zero-width ramp */
    base_table(o->theta, p->rotary_dim, w);
    for (int64_t f = 0; f < p->freqs; f++) {
        const double ramp = fmin(fmax(((double)f - low) / (high - low), 0.0), 1.0);
        w[f] = w[f] / o->factor * ramp + w[f] * (1 - ramp);
    }
}

/* _compute_llama3_parameters: by wavelength 2 pi / w_f against the
 * original context's bands:
 *   wavelength < original / high_freq_factor   kept
 *   wavelength > original / low_freq_factor    divided by factor
 *   between: s = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
 *            w'_f = (1 - s) w_f / factor + s w_f        (continuous at both ends) */
static void llama3_table(const rope_plan *p, double *w) {
    const attn_rope_options *o = &p->opt;
    const double original = (double)o->original_max_position_embeddings;
    const double low_wavelength = original / o->low_freq_factor, high_wavelength = original / o->high_freq_factor;
    base_table(o->theta, p->rotary_dim, w);
    for (int64_t f = 0; f < p->freqs; f++) {
        const double wavelength = 2 * ROPE_PI / w[f];
        if (wavelength < high_wavelength) continue;
        if (wavelength > low_wavelength) {
            w[f] /= o->factor;
        } else {
            const double s = (original / wavelength - o->low_freq_factor) / (o->high_freq_factor - o->low_freq_factor);
            w[f] = (1 - s) * w[f] / o->factor + s * w[f];
        }
    }
}

void attn__rope_inv_freq(const rope_plan *p, double *w) {
    const attn_rope_options *o = &p->opt;
    if (o->inv_freq) {
        memcpy(w, o->inv_freq, (size_t)p->freqs * sizeof *w);
        return;
    }
    switch (o->scaling) {
    case ATTN_ROPE_SCALING_NONE:
        base_table(o->theta, p->rotary_dim, w);
        return;
    case ATTN_ROPE_SCALING_LINEAR: /* _compute_linear_scaling_rope_parameters */
        base_table(o->theta, p->rotary_dim, w);
        for (int64_t f = 0; f < p->freqs; f++) w[f] /= o->factor;
        return;
    case ATTN_ROPE_SCALING_DYNAMIC_NTK: { /* _compute_dynamic_ntk_parameters */
        /* seq_len = max(seq_len, original); at or below the original the
         * bracket is exactly 1 and the base is theta (HF rounds its way
         * there; here it is taken as the identity it is). */
        const double r = (double)p->rotary_dim, original = (double)o->original_max_position_embeddings;
        double base = o->theta;
        if (o->seq_len > o->original_max_position_embeddings)
            base *= pow(o->factor * (double)o->seq_len / original - (o->factor - 1), r / (r - 2));
        base_table(base, p->rotary_dim, w);
        return;
    }
    case ATTN_ROPE_SCALING_YARN:
        yarn_table(p, w);
        return;
    case ATTN_ROPE_SCALING_LLAMA3:
        llama3_table(p, w);
        return;
    }
}
