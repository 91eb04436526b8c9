/*
 * demo.h — the prose of `attn demo`, apart from its code: one table of
 * strings per language (text_en.c, text_zh.c), printed by the one set of
 * printers in cmd_demo.c.  A comment names the printf arguments of each
 * string that takes some.
 */
#ifndef ATTN_DEMO_H
#define ATTN_DEMO_H

#include <stdbool.h>

typedef struct demo_text {
    const char *usage;
    const char *title, *intro; /* intro: %s = library version */
    /* §1–2 */
    const char *sec_qkv, *input_note, *c_line, *roles;
    /* §3 */
    const char *sec_match, *query_heading; /* %d position, %d position, %s q row */
    const char *lbl_raw, *lbl_scaled;      /* lbl_scaled: %d = d */
    const char *lbl_exp, *lbl_weights, *sum; /* sum: %s */
    const char *why_sqrt;                    /* %s d list, %s √d list */
    const char *per_row;                     /* %s share, %s share */
    /* §4 */
    const char *sec_mix, *values_not_keys, *blk_weights, *blk_out;
    const char *shape_note; /* %s X shape, %s table shape, %s O shape, %s range, %s range */
    const char *context_change; /* %s new x2 */
    const char *lbl_k2v2, *lbl_q3_scaled, *lbl_q3_weights, *lbl_o3, *was; /* was: %s */
    const char *not_linear;
    const char *interventions, *col_case, *col_weights_q3;
    const char *case_name[4];
    const char *two_paths;
    /* §5 */
    const char *sec_causal, *causal_intro, *blk_visible, *blk_causal_weights;
    const char *pos2_heading, *lbl_masked, *lbl_renorm;
    const char *wrong_way; /* %s unmasked weights, %s the sum */
    const char *not_serial;
    /* §6 */
    const char *sec_heads, *heads_intro, *blk_head, *blk_concat, *blk_mh_out; /* blk_head: %d */
    const char *shape_walk; /* %s */
    const char *concat_note;
    /* §7 */
    const char *sec_gqa, *gqa_facts; /* %d %d %d %d %d */
    const char *gqa_toy;             /* %d query heads, %d kv heads */
    const char *blk_gqa_head;        /* %d */
    const char *gqa_note;
    /* §8 */
    const char *sec_explain, *permute_intro; /* %s order */
    const char *blk_perm_weights; /* %s order */
    const char *no_order, *cost_intro, *cost_cells; /* cost_cells: %s */
    const char *cost_ratio;                          /* %s */
    const char *cost_note;
    /* exercises */
    const char *sec_exercises, *answer;
    const char *ex1_q;  /* %s old v2, %s new v2 */
    const char *ex1_a1; /* %s weights */
    const char *ex1_a2;
    const char *ex2_q;
    const char *ex2_a1; /* %s exp, %s weights, %s output */
    const char *ex2_a2; /* %s the sum */
    const char *ex3_q;  /* %s value, %s weights, %s weights */
    const char *ex3_a;
} demo_text;

extern const demo_text demo_text_en, demo_text_zh;

/* The prose of `attn demo --model FILE` (cmd_demo_model.c), the chapter's
 * opening on a real model; the same two tables' style. */
typedef struct demo_model_text {
    const char *title;          /* %s file, %s architecture                        */
    const char *intro;
    const char *loading, *loaded; /* stderr; loading: %s file; loaded: %.1f s, %.0f MiB */
    const char *no_file;        /* %s file                                         */
    /* 1 */
    const char *sec_tokens, *sentence;  /* sentence: %c letter, %s text, %lld tokens */
    const char *col_pos, *col_id, *col_piece, *col_text;
    const char *same_token;     /* %s 苹果, %ld id, %lld pos, %lld pos             */
    const char *embed_equal, *embed_differ;
    /* 2 */
    const char *sec_cosine, *cosine_intro, *col_layer, *col_senses, *col_control, *col_gap;
    const char *row_embed, *row_layer, *row_final; /* row_layer: %lld            */
    const char *cosine_read;    /* %s last layer, %s final norm, %s lowest, %s where */
    const char *plot_title, *plot_x, *plot_y, *wrote; /* wrote: %s             */
    const char *plot_senses, *plot_control; /* the plot's legend                   */
    /* The gap to the same-sense control: %s word, %s senses' cosine, %s the
     * control pair, %s its cosine, %s the ratio of distances from 1. */
    const char *gap_meaningful, *gap_noise, *gap_rule;
    /* 3 */
    const char *sec_reads, *reads_intro, *reads_heads_intro;
    const char *head_label;     /* %lld head, %lld kv head                         */
    const char *sec_next, *next_heading; /* next_heading: %c letter                */
    const char *col_rank, *col_prob;
    const char *next_read;
    /* 4 */
    const char *sec_gqa, *gqa_line; /* %lld Hq, %lld Hkv, %lld Dh, %lld group      */
    const char *gqa_group;      /* %lld kv, %lld first q, %lld last q               */
    const char *gqa_chapter;    /* %d %d %d                                        */
    /* 5 */
    const char *sec_mask, *mask_line; /* %lld maps, %lld cells, %s worst, %lld nonzero */
    const char *mask_note;
    /* 6 */
    const char *sec_cost, *cost_intro; /* %lld tokens of the text                  */
    const char *col_tokens, *col_seconds, *col_cells, *col_visible, *col_table, *col_flash;
    const char *cost_read;      /* %s cells ratio, %s time ratio                   */
    const char *cost_skipped;
} demo_model_text;

extern const demo_model_text demo_model_text_en, demo_model_text_zh;

/* Terminal columns of UTF-8 text: CJK and full-width forms take two. */
int demo_display_width(const char *s);

/* `attn demo --model FILE` (and `attn model chapter FILE`): the options
 * after the demo's own; t chooses the language of both tables. */
typedef struct demo_model_options {
    const char *model, *plot;
    bool heads, no_cost;
} demo_model_options;

/* attn demo --figures DIR, before the walk-through is printed: pictures
 * available, DIR made if missing, a directory, and writable (a file made
 * in it and removed).  CLI_OK, or CLI_DATA_ERROR naming DIR (printed). */
int demo_figures_dir_ready(const char *dir);

int demo_model_run(const demo_text *t, const demo_model_text *mt, const demo_model_options *opt);

#endif /* ATTN_DEMO_H */
