/*
 * demo.h — the prose of `attn demo`, apart from its code: one table of
 * strings per language (text_en.c, text_zh.c), printed by the one set of
 * printers in cmd_demo.c.  A comment names the printf arguments of each
 * string that takes some.
 */
#ifndef ATTN_DEMO_H
#define ATTN_DEMO_H

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

#endif /* ATTN_DEMO_H */
