/*
 * text_en.c — the English prose of `attn demo` (demo.h).
 */
#include "demo.h"

const demo_text demo_text_en = {
    .usage =
        "usage: attn demo [--lang en|zh] [--figures DIR]\n"
        "       attn demo --model MODEL [--lang en|zh] [--plot FILE] [--heads] [--no-cost]\n"
        "\n"
        "Walks through the attention chapter's worked example in the chapter's order:\n"
        "X and the three W, Q, K, V, raw and scaled scores, exp values, weights and\n"
        "outputs of all three positions; the context change and the four controlled\n"
        "interventions of Figure 2; the causal mask; the multi-head shapes; grouped-query\n"
        "attention; why weights are not an explanation, and the n² cost; the exercises\n"
        "with their answers.  Every derived number is computed by libattn.\n"
        "\n"
        "options:\n"
        "  --lang en|zh   language of the walkthrough (default: zh when $LANG starts\n"
        "                 with \"zh\", otherwise en)\n"
        "  --figures DIR  also draw the chapter's three figures from the computed numbers\n"
        "                 into DIR (figure1..3 as .png and .svg; needs cairo)\n"
        "\n"
        "With --model (also: attn model chapter MODEL), the chapter's opening on a real model\n"
        "(Qwen2.5 or Gemma 3 in GGUF, or a checkpoint; scripts/fetch-models.sh fetches two into\n"
        "~/.cache/attn/models):\n"
        "\"我吃了一个苹果\" and \"这台电脑来自苹果\" tokenized, 苹果 the same token with the same\n"
        "embedding; the cosine of the two 苹果 vectors after every layer, beside a same-sense control\n"
        "(我买了一个苹果) and a matched English pair, with what the gap means; the keys each 苹果 reads\n"
        "and the next-token predictions; the model's GQA layout; the causal mask checked on every\n"
        "map; the time and the score cells at 100 and 200 tokens of a real text.  Loading maps the\n"
        "weights as the file stores them (well under a second).\n"
        "  --model MODEL  a GGUF file, or a Hugging Face checkpoint (a directory with config.json,\n"
        "                 model.safetensors and tokenizer.json)\n"
        "  --plot FILE    also draw the two senses' and the control's cosine series as a line plot\n"
        "                 (.png, .svg or .pdf; cairo)\n"
        "  --heads        what 苹果 reads in every head of every layer (default: averaged over heads)\n"
        "  --no-cost      skip the 100- and 200-token timing (§6)\n"
        "\n"
        "  -h, --help     print this help\n"
        "\n"
        "examples:\n"
        "  attn demo --lang zh --figures figs\n"
        "  attn demo --model ~/.cache/attn/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --plot cos.png\n",
    .title = "attn demo — the attention chapter's worked example, step by step",
    .intro = "Every number below is computed by libattn %s; only the chapter's inputs are typed in.",

    .sec_qkv = "§1–2  The input, the parameters, and query / key / value",
    .input_note = "Three positions with two numbers each, hand-filled for teaching (no position encoding,\n"
                  "no bias, one head, every position visible for now).",
    .c_line = "c = √2·ln2 ≈ %s, chosen so that the scaled scores come out as multiples of ln2.",
    .roles = "Q, the query: what a position matches with.  K, the key: what each position offers for\n"
             "matching.  V, the value: the content that is actually mixed.  The three W are parameters\n"
             "(trained, fixed at inference); Q, K, V are intermediate results of this input.",

    .sec_match = "§3  Match first, then turn the scores into shares",
    .query_heading = "Position %d: its query q%d = %s meets every key.",
    .lbl_raw = "raw scores q·k",
    .lbl_scaled = "scaled ÷ √d (d = %d)",
    .lbl_exp = "exp",
    .lbl_weights = "weights = exp ÷ sum",
    .sum = "sum %s",
    .why_sqrt = "Why √d: if the d coordinates of q and k were independent with mean 0 and variance 1,\n"
                "q·k would have standard deviation √d (d = %s → %s).  Dividing by √d cancels\n"
                "that growth, so a wider head does not make the softmax too peaked.  It controls the\n"
                "scale; it is not cosine normalisation.",
    .per_row = "The softmax runs over one query's row (the positions it may read), not over the whole\n"
               "table and not per column: every row of weights sums to 1.  A weight is a share of\n"
               "reading, not a probability: position 3 takes %s of its reading from itself, which does\n"
               "not make it \"the right answer with probability %s\".",

    .sec_mix = "§4  Mix the values by those shares",
    .values_not_keys = "The weights multiply V, not K.  Position 3:",
    .blk_weights = "weights",
    .blk_out = "O = weights·V",
    .shape_note = "X is %s, the match table %s, O %s: the same shape out as in, yet every row now mixes\n"
                  "what the positions offered.  The shares are ≥ 0 and sum to 1, so in this bare single\n"
                  "head each output coordinate stays within the values' range (%s and %s).",
    .context_change = "Change the context: x2 becomes %s; position 3 and every W stay as they were.",
    .lbl_k2v2 = "position 2's k2, v2",
    .lbl_q3_scaled = "q3's scaled scores",
    .lbl_q3_weights = "q3's weights",
    .lbl_o3 = "o3",
    .was = "(was %s)",
    .not_linear = "Position 3's own input did not change; what it read did, so its representation did.\n"
                  "Attention is not a fixed linear mix: the softmax weights change with the input.",
    .interventions = "Controlled interventions on position 3 (Figure 2): q3 and every W fixed; after K and V\n"
                     "are computed, swap in the changed k2, the changed v2, or both.",
    .col_case = "case",
    .col_weights_q3 = "weights of q3",
    .case_name = {"original", "K only", "V only", "both"},
    .two_paths = "\"original\" and \"V only\" have the same weights but different outputs: weight and\n"
                 "content are two causal paths, so the weights alone cannot explain a change in the\n"
                 "output.  (The swaps are analysis interventions, not something inputs do by themselves.)",

    .sec_causal = "§5  The causal mask: no peeking at later positions",
    .causal_intro = "For next-token prediction, position i may read only positions up to i, itself included.",
    .blk_visible = "visible ■  hidden ·",
    .blk_causal_weights = "causal weights",
    .pos2_heading = "Position 2, original input:",
    .lbl_masked = "masked, before normalising",
    .lbl_renorm = "renormalised weights",
    .wrong_way = "The wrong way: keep the unmasked weights %s and just strike the third.\n"
                 "What is left sums to %s, not 1: the struck share was never given back\n"
                 "to the visible positions.",
    .not_serial = "Masking does not make training serial: all positions are still computed at once.\n"
                  "A padding mask hides positions for a different reason; a loss mask (SFT) is a\n"
                  "different thing again.",

    .sec_heads = "§6  Multi-head: several ways of reading, side by side",
    .heads_intro = "Several query/key/value projections in parallel, each attending on its own, then merged:\n"
                   "multi-head attention.  Head 1 is the chapter's head.  Head 2 and W_O are illustrative,\n"
                   "chosen for this demo (the chapter gives only their shapes): head 2 swaps the two\n"
                   "coordinates of its queries and values.  attn_mha_forward computes both heads, the\n"
                   "concatenation and W_O.",
    .blk_head = "head %d",
    .blk_concat = "concat",
    .blk_mh_out = "out = concat·W_O",
    .shape_walk = "shapes: %s",
    .concat_note = "Concatenation per position is not voting or averaging: W_O learns how to combine the\n"
                   "heads.  Real models usually split a fixed total width among the heads.  Self-attention\n"
                   "takes Q, K, V from one sequence; cross-attention takes the queries from one sequence and\n"
                   "the keys and values from another.",

    .sec_gqa = "§7  From the 2017 paper to Qwen3: grouped-query attention",
    .gqa_facts = "The 2017 Transformer: %d heads, keys and values %d wide per head.  Qwen3-0.6B: %d query\n"
                 "heads and %d key/value heads, so each group of %d query heads shares one K and V (less to\n"
                 "store and to read).",
    .gqa_toy = "The same at toy size: %d query heads (W_Q, and head 2's W_Q2) share %d key/value head\n"
               "(the chapter's K and V).",
    .blk_gqa_head = "query head %d weights",
    .gqa_note = "Shared K and V, different queries, different weights.  Qwen3 also uses QK normalisation\n"
                "and rotary position embedding (RoPE); this toy does not reproduce Qwen3.",

    .sec_explain = "§8  Weights are not an explanation",
    .permute_intro = "The output also depends on V, W_O, other heads and layers (Figure 2 above, exercise 3\n"
                     "below).  And without position information, permuting the key/value pairs together\n"
                     "changes nothing.  With the keys and values in the order %s, the map's columns move\n"
                     "with the pairs, but O is the O of §4:",
    .blk_perm_weights = "weights, keys in order %s",
    .no_order = "So bare attention cannot see word order; the next chapter adds position.",
    .cost_intro = "Dense attention matches every position with every position: the score table has n² cells.",
    .cost_cells = "→  %s cells",
    .cost_ratio = "(×%s)",
    .cost_note = "That part of the compute grows by this factor; the whole model need not.  FlashAttention-\n"
                 "style kernels avoid storing the full table; other methods restrict the visible positions.",

    .sec_exercises = "Exercises, with answers",
    .answer = "→ ",
    .ex1_q = "1. Keep Q and K and change only v2 from %s to %s.  How do position 3's weights and\n"
             "   output change?  Which quantities are parameters?",
    .ex1_a1 = "weights stay %s, because Q and K did not change;",
    .ex1_a2 = "W_Q, W_K, W_V are parameters; Q, K, V and the weights are intermediates of this computation.",
    .ex2_q = "2. Causal mask on position 2 of the original input: exp values, weights, output?  Why not\n"
             "   just delete the third original weight?",
    .ex2_a1 = "exp %s, weights %s, o2 = %s;",
    .ex2_a2 = "deleting the third original weight leaves %s:\n"
              "nothing was redistributed among the visible positions.",
    .ex3_q = "3. v1 = v2 = %s; the two weights change from %s to %s.  Compute both outputs.",
    .ex3_a = "The map changed, the output did not: both rows sum to 1 and the two values are equal.\n"
             "The map shows this head's shares of reading; on its own it cannot prove why an answer\n"
             "came out.  (Computed by attn_sdpa_forward with the additive bias log w, for which the\n"
             "softmax returns exactly w.)",
};

const demo_model_text demo_model_text_en = {
    .title = "attn demo --model — the chapter's opening on a real model: %s (%s)",
    .intro = "The chapter's two sentences, in Chinese as the chapter has them (苹果 is one token of the\n"
             "model's vocabulary in both), run through the model in float32 by libattn's decoder; every\n"
             "number below is computed, none typed in.",
    .loading = "attn demo: loading %s (its weights as stored)...\n",
    .loaded = "attn demo: loaded in %.1f s (%.0f MiB of weights)\n",
    .no_file = "%s: no such model file (scripts/fetch-models.sh fetches the two models into ~/.cache/attn/models)",

    .sec_tokens = "§1  The same token in two sentences",
    .sentence = "Sentence %c: %s  (%lld tokens)",
    .col_pos = "pos", .col_id = "id", .col_piece = "piece", .col_text = "text",
    .same_token = "%s is token %ld in both sentences (position %lld and position %lld): the same row of the\n"
                  "embedding table is looked up.",
    .embed_equal = "The two embedding vectors are identical, bit for bit (row 0 of the residual stream).",
    .embed_differ = "The two embedding vectors differ: this should not happen (the same id, the same row).",

    .sec_cosine = "§2  The two 苹果 vectors drift apart, layer by layer",
    .cosine_intro = "Cosine similarity of 苹果's vector in sentence A and in sentence B, in the residual stream\n"
                    "after each layer.  1 means the same direction; attention is what lets the different\n"
                    "contexts in (the feed-forward layers act on each position alone).  Beside it, the\n"
                    "control: 苹果 in the same sense with another verb (我吃了一个苹果 / 我买了一个苹果),\n"
                    "then a matched English pair, \"bank\" in two senses (We sat on the grass by the river\n"
                    "bank / She paid the cash into the bank) and in one (… into the bank / She took the cash\n"
                    "to the bank).  gap = control - two senses: how much more the senses drift apart.",
    .col_layer = "layer", .col_senses = "two senses", .col_control = "control", .col_gap = "gap",
    .row_embed = "embedding", .row_layer = "after layer %lld", .row_final = "final norm",
    .cosine_read = "From exactly 1 at the embeddings to %s after the last layer and %s after the final norm\n"
                   "(the vector the output head reads); the lowest cosine is %s, at %s.",
    .plot_title = "cosine of the two 苹果 vectors, layer by layer",
    .plot_x = "0 = the embedding, l + 1 = after layer l, the last point = after the final norm",
    .plot_y = "cosine",
    .wrote = "wrote %s",
    .plot_senses = "two senses (A / B)", .plot_control = "same sense (我吃了 / 我买了一个苹果)",
    .gap_meaningful = "%s: context, not noise.  After the final norm the two senses end at %s; the same-sense\n"
                      "control, %s, at %s: the senses are %s× as far from 1.",
    .gap_noise = "%s: too small to mean anything.  After the final norm the two senses end at %s; the\n"
                 "same-sense control, %s, at %s: only %s× as far from 1, so a change of verb alone\n"
                 "moves the vector about as much, and this model's drift does not show the sense here.",
    .gap_rule = "(Read as context when the two senses end at least 2× as far from 1 as the control.)",

    .sec_reads = "§3  What each 苹果 reads",
    .reads_intro = "Per layer, the three keys 苹果 reads most, averaged over the query heads (weights of the\n"
                   "last row of the map).  Full detail, every head: --heads.",
    .reads_heads_intro = "Every layer and head: the three keys 苹果 reads most.",
    .head_label = "head %lld (kv %lld)",
    .sec_next = "Next-token predictions after each sentence",
    .next_heading = "After sentence %c:",
    .col_rank = "rank", .col_prob = "prob",
    .next_read = "Same last token, different continuations: what the model does with 苹果 depends on what\n"
                 "came before it.  The attention weights above are shares of reading, not the explanation:\n"
                 "what is read (the values), the feed-forward layers and later layers carry the change too.",

    .sec_gqa = "§4  Grouped-query attention, as the file gives it",
    .gqa_line = "%lld query heads, %lld key/value head(s) of width %lld: %lld query heads share each K and V.",
    .gqa_group = "  kv head %lld <- query heads %lld..%lld",
    .gqa_chapter = "The chapter's Qwen3-0.6B: %d query heads, %d key/value heads, %d query heads per K/V head.",

    .sec_mask = "§5  The causal mask in a real map",
    .mask_line = "Over %lld maps (every layer and head of both sentences, %lld cells): the worst |sum of a\n"
                 "row's visible weights - 1| is %s; cells above the diagonal that are not 0: %lld.",
    .mask_note = "Masking hides later positions and renormalises over the visible ones: every row still\n"
                 "sums to 1, and nothing leaks from the future.",

    .sec_cost = "§6  The n² cost on real text",
    .cost_intro = "The text: this walkthrough's own explanatory paragraphs (%lld tokens in this vocabulary),\n"
                  "its first 100 and 200 tokens run through the whole model.",
    .col_tokens = "tokens", .col_seconds = "forward s", .col_cells = "score cells",
    .col_visible = "visible", .col_table = "score table/layer", .col_flash = "flash workspace",
    .cost_read = "Twice the tokens: %s× the score cells, %s× the forward time.  At these lengths the\n"
                 "projections (linear in n) dominate the time; the score table is what grows as n².  The flash\n"
                 "kernel never stores it: its workspace, per tile and thread, is the same at both lengths (it\n"
                 "can exceed a short text's table, and is soon far below a long one's).",
    .cost_skipped = "(skipped: --no-cost)",
};
