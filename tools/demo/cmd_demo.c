/*
 * cmd_demo.c — `attn demo`: the chapter's worked example, step by step, in the
 * chapter's order (§1–§8, then the exercises), in English or Chinese.
 *
 * Only the chapter's inputs are typed in here: X, W_Q, W_K = c·I with
 * c = √2·ln2, W_V, the changed x2, exercise 3's values and target weights,
 * the sizes 100 and 200 of the n² count, and the published head counts of §7.
 * The second head and W_O of the multi-head example are illustrative choices
 * of this program (the chapter gives only their shapes), and the output says so.
 * Every derived number is computed by the library (attn_linear_forward,
 * attn_sdpa_scores, attn_sdpa_forward, attn_mha_forward); the only arithmetic
 * done here is exp of the library's scores (without the max-subtraction, to
 * show the chapter's 2, 2, 4), sums and ratios of library results, and n².
 *
 * Layout: the chapter's numbers are computed first into one `chapter` struct;
 * the printers then only format them.  Prose lives in one table of strings per
 * language (demo_text), so both languages share every line of printing code.
 *
 * Shape legend: X [3, 2]  W_Q, W_K, W_V [2, 2]  Q, K, V, O [3, 2]
 *               scores, weights [3, 3] (rows: queries, columns: positions read)
 *               multi-head: concat [3, 4]  W_O [4, 2]  out [3, 2]
 */
#include "cli.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum {
    POS = 3,    /* positions of the example                              */
    WIDTH = 2,  /* numbers per position = d, the query/key width         */
    HEADS = 2,  /* heads of the multi-head and grouped-query examples    */
    EX3 = 2     /* positions of exercise 3 (v1 = v2)                     */
};

/* ------------------------------------------------------------------ text */

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

static const demo_text text_en = {
    .usage =
        "usage: attn demo [--lang en|zh] [--figures DIR]\n"
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
        "  -h, --help     print this help\n",
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

static const demo_text text_zh = {
    .usage =
        "用法：attn demo [--lang en|zh] [--figures DIR]\n"
        "\n"
        "按本章顺序演示注意力的算例：X与三张W，查询Q、键K、值V，原始分数与缩放分数，\n"
        "指数值、权重和三个位置的输出；上下文改动与图2的四种受控检查；因果掩码；多头的\n"
        "尺寸；分组查询注意力；权重为何不等于解释，以及n²的代价；本章练习与参考答案。\n"
        "所有推导出的数都由 libattn 计算。\n"
        "\n"
        "选项：\n"
        "  --lang en|zh   演示的语言（默认：$LANG 以 \"zh\" 开头时为 zh，否则为 en）\n"
        "  --figures DIR  另用算出的数画出本章的三幅图，写入 DIR（figure1..3 的 .png 与 .svg；需要 cairo）\n"
        "  -h, --help     显示本帮助\n",
    .title = "attn demo —— 注意力一章的算例，一步一步算清",
    .intro = "以下每个数都由 libattn %s 计算；手工输入的只有本章给定的输入。",

    .sec_qkv = "§1–2  输入、参数与查询、键、值",
    .input_note = "三个位置，每个位置两个数，都为教学手填（省略位置编码和偏置；一个头；先允许全部位置可见）。",
    .c_line = "设 c = √2·ln2 ≈ %s：这样缩放后的分数正好是 ln2 的倍数，算出的份额很整齐。",
    .roles = "Q叫查询，表示当前位置拿什么去匹配；K叫键，表示各位置提供什么供匹配；V叫值，是最后\n"
             "真正被加权组合的内容。三张W是训练得到的参数（推理时不变）；Q、K、V是本次输入算出的中间结果。",

    .sec_match = "§3  先匹配，再把分数变成份额",
    .query_heading = "位置%d：查询 q%d = %s 分别与三个键做点积。",
    .lbl_raw = "原始分数 q·k",
    .lbl_scaled = "缩放 ÷ √d（d = %d）",
    .lbl_exp = "指数",
    .lbl_weights = "权重 = 指数 ÷ 总和",
    .sum = "总和 %s",
    .why_sqrt = "为什么除以√d：假设q、k的各个坐标彼此独立、均值为0、方差为1，那么q·k的标准差是√d\n"
                "（d = %s → %s）；除以√d把这种增长抵消，免得softmax变得过分集中。\n"
                "这个缩放用于控制尺度，不是余弦归一化。",
    .per_row = "分母只汇总当前查询允许读取的位置：不是整张表一起归一化，也不是按列归一化；每个查询\n"
               "分别形成总和为1的一行份额。权重是读取位置的份额，不是概率：位置3从自己读取%s，\n"
               "不能解释成“它有%s概率是正确答案”。",

    .sec_mix = "§4  按份额组合内容，得到新的表示",
    .values_not_keys = "权重准备好后，拿的是V，不是K。位置3的输出：",
    .blk_weights = "权重",
    .blk_out = "输出 O = 权重·V",
    .shape_note = "输入X是%s，中间的匹配表是%s，输出O是%s：尺寸没变，不代表信息没变，每一行都混合了\n"
                  "各位置提供的内容。份额非负、总和为1，所以在这个单头里每个输出坐标都处在值的对应\n"
                  "坐标范围内（%s 和 %s）。",
    .context_change = "做一次上下文改动：保持位置3和全部W不变，只把位置2改成%s。",
    .lbl_k2v2 = "位置2的键k2、值v2",
    .lbl_q3_scaled = "q3的缩放分数",
    .lbl_q3_weights = "q3的权重",
    .lbl_o3 = "新输出 o3",
    .was = "（原来是%s）",
    .not_linear = "当前位置的原始输入没有变化，读到的上下文变了，最终表示就变了。整个Attention不是固定\n"
                  "线性混合：权重经过softmax，会随着输入改变。",
    .interventions = "拆开做受控检查（图2）：固定q3与全部参数；在算出K、V之后，只替换k2、只替换v2，或两路都换。",
    .col_case = "情形",
    .col_weights_q3 = "q3的权重",
    .case_name = {"原例", "只换K", "只换V", "两路都换"},
    .two_paths = "“原例”和“只换V”权重相同，输出却不同：权重与内容是不同的因果路径，不能只看权重\n"
                 "就解释输出改动。这些替换是用于分析依赖的人工干预，不是说输入变化时K、V会自然独立。",

    .sec_causal = "§5  因果掩码怎样防止偷看答案",
    .causal_intro = "因果掩码（causal mask）为每个查询规定可见范围：位置i只看位置1到i，包括自己。",
    .blk_visible = "可见 ■  遮住 ·",
    .blk_causal_weights = "因果掩码下的权重",
    .pos2_heading = "回到未修改输入，位置2：",
    .lbl_masked = "屏蔽第三项（先屏蔽）",
    .lbl_renorm = "重新归一化的权重",
    .wrong_way = "不能先保留原来的权重%s，只把第三项划掉就结束：剩下的总和是\n"
                 "%s，不是1；被划掉的份额没有重新分配给可见位置。",
    .not_serial = "遮住未来，是限制信息从哪来，并不是让训练必须逐个位置串行计算：所有位置仍可同时算。\n"
                  "补齐长度用的空白位置也可能需要遮挡，那是不同理由的mask；SFT中的损失mask又是另一件事。",

    .sec_heads = "§6  多头让同一位置有多种读取方式",
    .heads_intro = "并行使用多组查询、键、值投影，分别计算注意力，再合并结果，这就是多头注意力。\n"
                   "头1就是本章的单头；头2和W_O是本演示自选的示意参数（本章只给出尺寸）：头2交换\n"
                   "查询和值的两个坐标。attn_mha_forward 算出两个头、拼接和输出投影。",
    .blk_head = "头%d",
    .blk_concat = "拼接",
    .blk_mh_out = "输出 = 拼接·W_O",
    .shape_walk = "尺寸：%s",
    .concat_note = "拼接不是投票，也不等于直接平均；输出投影W_O可以学习怎样组合不同头的结果。真实设计常在\n"
                   "固定总宽度下把通道分给多个头。自注意力的Q、K、V来自同一组序列表示；交叉注意力的查询\n"
                   "来自一组，键和值来自另一组。",

    .sec_gqa = "§7  从原论文走到Qwen3：分组查询注意力GQA",
    .gqa_facts = "2017年的Transformer原论文使用%d个注意力头，每头的键和值都是%d维。Qwen3-0.6B有%d个\n"
                 "查询头、%d个键值头：每%d个查询头一组，共享键和值，减少需要存放和读取的键值表示。",
    .gqa_toy = "缩小来看：%d个查询头（W_Q和头2的W_Q2）共享%d个键值头（本章的K、V）。",
    .blk_gqa_head = "查询头%d的权重",
    .gqa_note = "同组共享K、V，但查询不同，权重也就不同。Qwen3还用了QK归一化和旋转位置编码（RoPE）；\n"
                "这个小算例并不声称复现Qwen3。",

    .sec_explain = "§8  读得多，不代表理由已经被解释清楚",
    .permute_intro = "最终输出还受到V、W_O、其他头和其他层影响（见上面的图2和下面的问题3）。没有位置信息时，\n"
                     "成对交换键和值的排列，加权总和不变。键和值按%s的顺序排列：注意力图的列跟着换位，\n"
                     "输出O却和§4完全一样。",
    .blk_perm_weights = "权重（键按%s的顺序）",
    .no_order = "这样的读取本身不能表达词序；下一章补上位置机制。",
    .cost_intro = "若n个位置都与n个位置配对，普通稠密注意力的匹配表有n²个格子：",
    .cost_cells = "→  %s 个格子",
    .cost_ratio = "（×%s）",
    .cost_note = "这里比较的是这部分计算规模，不能断言整个模型耗时按同样倍数增长。FlashAttention这类\n"
                 "实现可以避免在显存中展开完整注意力矩阵；也有方法限制可见位置。",

    .sec_exercises = "本章练习与参考答案",
    .answer = "答：",
    .ex1_q = "问题1｜追踪两条依赖：固定Q、K，只把v2从%s改为%s，位置3的权重与输出各怎样\n"
             "       变化？哪些量是参数？",
    .ex1_a1 = "权重仍为%s，因为Q、K没有变；",
    .ex1_a2 = "W_Q、W_K、W_V是参数，Q、K、V和权重是本次计算的中间结果。",
    .ex2_q = "问题2｜先屏蔽，再归一化：回到原始输入，对位置2加因果mask。写出指数值、归一化\n"
             "       权重和输出；说明为何不能只删掉原权重第三项。",
    .ex2_a1 = "屏蔽后的指数值为%s，权重为%s，输出 o2 = %s；",
    .ex2_a2 = "原权重删掉第三项后只剩 %s，没有把份额在可见位置间重新分配。",
    .ex3_q = "问题3｜权重变了，内容呢：取v1 = v2 = %s，将两项权重由%s改为%s，算两次输出。",
    .ex3_a = "两次输出相同，因为权重总和都是1且两项V相同。注意力图能显示这一层这一头的读取份额，\n"
             "却不能单独证明最终答案因哪个词产生。（由库计算：attn_sdpa_forward 加上偏置 log w，\n"
             "softmax 正好返回 w。）",
};

/* ------------------------------------------------------------ the numbers */

/* Everything one attention pass over Q, K, V shows.  Rows of the 3×3 tables
 * are queries, columns the positions they read. */
typedef struct {
    float q[POS][WIDTH], k[POS][WIDTH], v[POS][WIDTH];
    float raw[POS][POS];    /* q·k, scale 1                       */
    float scaled[POS][POS]; /* q·k / √d, -inf where hidden       */
    float expv[POS][POS];   /* exp(scaled), no max subtraction    */
    float weights[POS][POS];
    float out[POS][WIDTH];
} pass;

/* The chapter's numbers: inputs (typed in) first, then results (computed). */
typedef struct {
    /* inputs */
    double c;
    float x[POS][WIDTH], x_changed[POS][WIDTH];
    float wq[WIDTH][WIDTH], wk[WIDTH][WIDTH], wv[WIDTH][WIDTH];
    float wq2[WIDTH][WIDTH], wk2[WIDTH][WIDTH], wv2[WIDTH][WIDTH]; /* illustrative */
    float wo[HEADS * WIDTH][WIDTH];                                /* illustrative */
    int perm[POS];
    float ex3_v[WIDTH], ex3_target[2][EX3];
    int64_t n[2];
    int paper_heads, paper_width, qwen_heads, qwen_kv_heads;
    double sqrt_demo_d[3];
    /* results */
    pass base;     /* the original input, every position visible */
    pass changed;  /* x2 -> [0, 2] */
    pass cases[4]; /* Figure 2: original, K only, V only, both */
    pass causal;   /* base Q, K, V under the causal mask */
    pass permuted; /* base Q; K and V rows permuted together */
    float concat[POS][HEADS * WIDTH], mh_out[POS][WIDTH];
    float gqa_weights[HEADS][POS][POS];
    float ex3_weights[2][EX3], ex3_out[2][WIDTH];
    int64_t cells[2];
} chapter;

/* Fills raw, scaled, expv, weights and out of p from its q, k, v. */
static attn_status attend(pass *p, int causal) {
    attn_tensor q = attn_tensor_2d(&p->q[0][0], POS, WIDTH);
    attn_tensor k = attn_tensor_2d(&p->k[0][0], POS, WIDTH);
    attn_tensor v = attn_tensor_2d(&p->v[0][0], POS, WIDTH);
    attn_tensor o = attn_tensor_2d(&p->out[0][0], POS, WIDTH);
    attn_sdpa_options unscaled = ATTN_SDPA_OPTIONS_INIT, opt = ATTN_SDPA_OPTIONS_INIT;
    unscaled.scale = 1.0f;
    unscaled.causal = opt.causal = causal;
    attn_status st;
    if ((st = attn_sdpa_scores(&q, &k, &unscaled, &p->raw[0][0])) ||
        (st = attn_sdpa_scores(&q, &k, &opt, &p->scaled[0][0])) ||
        (st = attn_sdpa_forward(&q, &k, &v, &opt, &o, &p->weights[0][0], NULL)))
        return st;
    /* The chapter shows exp of the scaled scores themselves (2, 2, 4, sum 8);
     * the library subtracts the row maximum first, which changes no weight. */
    for (int i = 0; i < POS; i++)
        for (int j = 0; j < POS; j++) p->expv[i][j] = (float)exp((double)p->scaled[i][j]);
    return ATTN_OK;
}

/* Q = X·W_Q, K = X·W_K, V = X·W_V, then attend.
 *   x: [POS, WIDTH]  wq, wk, wv: [WIDTH, WIDTH] */
static attn_status project_and_attend(pass *p, const float *x, const float *wq, const float *wk,
                                      const float *wv) {
    attn_status st;
    if ((st = attn_linear_forward(x, POS, WIDTH, wq, NULL, WIDTH, &p->q[0][0])) ||
        (st = attn_linear_forward(x, POS, WIDTH, wk, NULL, WIDTH, &p->k[0][0])) ||
        (st = attn_linear_forward(x, POS, WIDTH, wv, NULL, WIDTH, &p->v[0][0])))
        return st;
    return attend(p, 0);
}

/* The chapter's inputs, exactly as it gives them (§2, §4, §7, §8, exercises),
 * plus the illustrative second head and W_O of §6. */
static void chapter_inputs(chapter *ch) {
    memset(ch, 0, sizeof *ch);
    ch->c = sqrt(2.0) * log(2.0);
    const float c = (float)ch->c;
    const float x[POS][WIDTH] = {{1, 0}, {0, 1}, {1, 1}};
    const float identity[WIDTH][WIDTH] = {{1, 0}, {0, 1}};
    const float c_identity[WIDTH][WIDTH] = {{c, 0}, {0, c}};
    const float wv[WIDTH][WIDTH] = {{2, 0}, {0, 1}};
    const float swap[WIDTH][WIDTH] = {{0, 1}, {1, 0}};
    const float wo[HEADS * WIDTH][WIDTH] = {{1, 0}, {0, 1}, {-1, 0}, {0, 1}};
    memcpy(ch->x, x, sizeof x);
    memcpy(ch->x_changed, x, sizeof x);
    ch->x_changed[1][0] = 0;
    ch->x_changed[1][1] = 2;
    memcpy(ch->wq, identity, sizeof identity);
    memcpy(ch->wk, c_identity, sizeof c_identity);
    memcpy(ch->wv, wv, sizeof wv);
    memcpy(ch->wq2, swap, sizeof swap);
    memcpy(ch->wk2, c_identity, sizeof c_identity);
    memcpy(ch->wv2, swap, sizeof swap);
    memcpy(ch->wo, wo, sizeof wo);
    ch->perm[0] = 2; /* keys and values in the order 3, 1, 2 */
    ch->perm[1] = 0;
    ch->perm[2] = 1;
    ch->ex3_v[0] = 2;
    ch->ex3_v[1] = 1;
    ch->ex3_target[0][0] = 0.2f;
    ch->ex3_target[0][1] = 0.8f;
    ch->ex3_target[1][0] = 0.7f;
    ch->ex3_target[1][1] = 0.3f;
    ch->n[0] = 100;
    ch->n[1] = 200;
    ch->paper_heads = 8;
    ch->paper_width = 64;
    ch->qwen_heads = 16;
    ch->qwen_kv_heads = 8;
    ch->sqrt_demo_d[0] = 1;
    ch->sqrt_demo_d[1] = 4;
    ch->sqrt_demo_d[2] = 16;
}

/* §6: two heads through attn_mha_forward, once without W_O (the
 * concatenation) and once with it. */
static attn_status multi_head(chapter *ch) {
    float wq[WIDTH][HEADS * WIDTH], wk[WIDTH][HEADS * WIDTH], wv[WIDTH][HEADS * WIDTH];
    const float *head_wq[HEADS] = {&ch->wq[0][0], &ch->wq2[0][0]};
    const float *head_wk[HEADS] = {&ch->wk[0][0], &ch->wk2[0][0]};
    const float *head_wv[HEADS] = {&ch->wv[0][0], &ch->wv2[0][0]};
    /* Head h owns columns h*WIDTH .. h*WIDTH + WIDTH-1 of the stacked projections. */
    for (int h = 0; h < HEADS; h++)
        for (int i = 0; i < WIDTH; i++)
            for (int j = 0; j < WIDTH; j++) {
                wq[i][h * WIDTH + j] = head_wq[h][i * WIDTH + j];
                wk[i][h * WIDTH + j] = head_wk[h][i * WIDTH + j];
                wv[i][h * WIDTH + j] = head_wv[h][i * WIDTH + j];
            }
    attn_mha m = {.struct_size = sizeof(attn_mha), .d_model = WIDTH, .heads = HEADS, .head_dim = WIDTH, .d_out = HEADS * WIDTH,
                  .wq = &wq[0][0], .wk = &wk[0][0], .wv = &wv[0][0]};
    attn_status st = attn_mha_forward(&m, &ch->x[0][0], 1, POS, NULL, 0, NULL, &ch->concat[0][0],
                                      NULL, NULL);
    if (st) return st;
    m.wo = &ch->wo[0][0];
    m.d_out = WIDTH;
    return attn_mha_forward(&m, &ch->x[0][0], 1, POS, NULL, 0, NULL, &ch->mh_out[0][0], NULL, NULL);
}

/* §7: two query heads (W_Q and W_Q2) sharing the chapter's one K and V. */
static attn_status grouped_query(chapter *ch) {
    float q1[POS][WIDTH], q2[POS][WIDTH], q[POS][HEADS][WIDTH], out[POS][HEADS][WIDTH];
    attn_status st;
    if ((st = attn_linear_forward(&ch->x[0][0], POS, WIDTH, &ch->wq[0][0], NULL, WIDTH, &q1[0][0])) ||
        (st = attn_linear_forward(&ch->x[0][0], POS, WIDTH, &ch->wq2[0][0], NULL, WIDTH, &q2[0][0])))
        return st;
    for (int i = 0; i < POS; i++)
        for (int d = 0; d < WIDTH; d++) {
            q[i][0][d] = q1[i][d];
            q[i][1][d] = q2[i][d];
        }
    attn_tensor qt = attn_tensor_3d(&q[0][0][0], POS, HEADS, WIDTH);
    attn_tensor kt = attn_tensor_3d(&ch->base.k[0][0], POS, 1, WIDTH);
    attn_tensor vt = attn_tensor_3d(&ch->base.v[0][0], POS, 1, WIDTH);
    attn_tensor ot = attn_tensor_3d(&out[0][0][0], POS, HEADS, WIDTH);
    return attn_sdpa_forward(&qt, &kt, &vt, NULL, &ot, &ch->gqa_weights[0][0][0], NULL);
}

/* Exercise 3: two keys with equal values; an additive bias log w makes the
 * softmax return exactly the target weights w, so the library does the mixing. */
static attn_status exercise3(chapter *ch) {
    float q[1][1] = {{0}}, k[EX3][1] = {{0}, {0}}, v[EX3][WIDTH];
    for (int j = 0; j < EX3; j++) memcpy(v[j], ch->ex3_v, sizeof v[j]);
    attn_tensor qt = attn_tensor_2d(&q[0][0], 1, 1);
    attn_tensor kt = attn_tensor_2d(&k[0][0], EX3, 1);
    attn_tensor vt = attn_tensor_2d(&v[0][0], EX3, WIDTH);
    for (int r = 0; r < 2; r++) {
        float bias[EX3];
        for (int j = 0; j < EX3; j++) bias[j] = (float)log((double)ch->ex3_target[r][j]);
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.bias = bias;
        opt.bias_shape[0] = opt.bias_shape[1] = opt.bias_shape[2] = 1;
        opt.bias_shape[3] = EX3;
        attn_tensor ot = attn_tensor_2d(ch->ex3_out[r], 1, WIDTH);
        attn_status st = attn_sdpa_forward(&qt, &kt, &vt, &opt, &ot, ch->ex3_weights[r], NULL);
        if (st) return st;
    }
    return ATTN_OK;
}

static attn_status chapter_compute(chapter *ch) {
    attn_status st;
    chapter_inputs(ch);
    if ((st = project_and_attend(&ch->base, &ch->x[0][0], &ch->wq[0][0], &ch->wk[0][0], &ch->wv[0][0])) ||
        (st = project_and_attend(&ch->changed, &ch->x_changed[0][0], &ch->wq[0][0], &ch->wk[0][0],
                                 &ch->wv[0][0])))
        return st;

    /* Figure 2: case bit 0 swaps in the changed keys, bit 1 the changed values. */
    for (int i = 0; i < 4; i++) {
        pass *p = &ch->cases[i];
        memcpy(p->q, ch->base.q, sizeof p->q);
        memcpy(p->k, (i & 1) ? ch->changed.k : ch->base.k, sizeof p->k);
        memcpy(p->v, (i & 2) ? ch->changed.v : ch->base.v, sizeof p->v);
        if ((st = attend(p, 0))) return st;
    }

    memcpy(ch->causal.q, ch->base.q, sizeof ch->causal.q);
    memcpy(ch->causal.k, ch->base.k, sizeof ch->causal.k);
    memcpy(ch->causal.v, ch->base.v, sizeof ch->causal.v);
    if ((st = attend(&ch->causal, 1))) return st;

    memcpy(ch->permuted.q, ch->base.q, sizeof ch->permuted.q);
    for (int j = 0; j < POS; j++) {
        memcpy(ch->permuted.k[j], ch->base.k[ch->perm[j]], sizeof ch->permuted.k[j]);
        memcpy(ch->permuted.v[j], ch->base.v[ch->perm[j]], sizeof ch->permuted.v[j]);
    }
    if ((st = attend(&ch->permuted, 0))) return st;

    if ((st = multi_head(ch)) || (st = grouped_query(ch)) || (st = exercise3(ch))) return st;

    for (int i = 0; i < 2; i++) ch->cells[i] = ch->n[i] * ch->n[i];
    return ATTN_OK;
}

/* ------------------------------------------------------------- formatting */

enum { CELL = 320, MAX_LINES = 8 };

/* A number is shown as a rational multiple of a named unit (c, ln2) or of 1. */
typedef struct {
    double size;
    const char *name; /* NULL for plain numbers */
} unit;

static const unit ONE = {1.0, NULL};

/* Formats into buf, truncating silently: every buffer here is sized for the
 * demo's short lines, and a truncated line would still be readable. */
static void set(char *buf, size_t size, const char *fmt, ...) CLI_PRINTF(3, 4);
static void set(char *buf, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

/* Appends printf-style text to the NUL-terminated buf of the given size. */
static void append(char *buf, size_t size, const char *fmt, ...) CLI_PRINTF(3, 4);
static void append(char *buf, size_t size, const char *fmt, ...) {
    size_t used = strlen(buf);
    if (used + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

/* p/q with 1 <= q <= 64 within 1e-6 (relative above 1) of x, smallest q first. */
static bool find_fraction(double x, long *num, long *den) {
    if (!isfinite(x) || fabs(x) > 1e6) return false;
    for (long q = 1; q <= 64; q++) {
        double p = floor(x * (double)q + 0.5);
        if (fabs(x - p / (double)q) <= 1e-6 * fmax(1.0, fabs(x))) {
            *num = (long)p;
            *den = q;
            return true;
        }
    }
    return false;
}

/* The exact form of x in unit u ("2/5", "2ln2", "c", "−∞"); false if x is not
 * a small-denominator multiple of u.  *den gets the denominator (0 for −∞). */
static bool fmt_exact(char *buf, size_t size, double x, unit u, long *den) {
    long p, q;
    *den = 0;
    if (isinf(x) && x < 0) {
        set(buf, size, "−∞");
        return true;
    }
    if (!find_fraction(x / u.size, &p, &q)) return false;
    *den = q;
    if (p == 0) set(buf, size, "0");
    else if (!u.name && q == 1) set(buf, size, "%ld", p);
    else if (!u.name) set(buf, size, "%ld/%ld", p, q);
    else if (q > 1) set(buf, size, "%ld/%ld·%s", p, q, u.name);
    else if (p == 1) set(buf, size, "%s", u.name);
    else if (p == -1) set(buf, size, "-%s", u.name);
    else set(buf, size, "%ld%s", p, u.name);
    return true;
}

/* Four decimals; −∞ for a hidden score; no "-0.0000". */
static void fmt_dec(char *buf, size_t size, double x) {
    if (isinf(x) && x < 0) set(buf, size, "−∞");
    else set(buf, size, "%.4f", fabs(x) < 0.5e-4 ? 0.0 : x);
}

/* Four decimals with trailing zeros removed ("0.2"), for typed-in inputs. */
static void fmt_short(char *buf, size_t size, double x) {
    fmt_dec(buf, size, x);
    if (!strchr(buf, '.')) return;
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '0') buf[--n] = 0;
    if (n > 0 && buf[n - 1] == '.') buf[--n] = 0;
}

/* 10000 -> "10,000". */
static void fmt_count(char *buf, size_t size, int64_t n) {
    char digits[32];
    set(digits, sizeof digits, "%lld", (long long)n);
    size_t len = strlen(digits), o = 0;
    for (size_t i = 0; i < len && o + 2 < size; i++) {
        if (i > 0 && (len - i) % 3 == 0 && digits[i - 1] != '-') buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = 0;
}

/* How a vector or number is shown:
 *   SHOW_EXACT  the exact form first ("[1/4, 1/4, 1/2]"), then "= decimals"
 *               unless every entry is a plain integer;
 *   SHOW_FRACTION  the exact form alone, decimals only where there is none
 *               (compact tables whose decimals were shown before);
 *   SHOW_DEC    decimals first ("[1.5000, 0.7500]"), then "= exact form"
 *               only if four decimals cannot show the value exactly (2/3). */
typedef enum { SHOW_EXACT, SHOW_FRACTION, SHOW_DEC } show;

typedef struct {
    char main[CELL];
    char alt[CELL]; /* "" when the main form says it all */
} shown;

static shown fmt_values(const float *x, int n, unit u, show how, bool brackets) {
    shown s;
    char exact[CELL] = "", dec[CELL] = "";
    bool all_exact = true, all_integer = true, all_terminating = true;
    for (int i = 0; i < n; i++) {
        char e[64], d[64];
        long den;
        const char *sep = i ? ", " : "";
        fmt_dec(d, sizeof d, x[i]);
        append(dec, sizeof dec, "%s%s", sep, d);
        if (fmt_exact(e, sizeof e, x[i], u, &den)) {
            append(exact, sizeof exact, "%s%s", sep, e);
            if (u.name || den > 1) all_integer = false;
            if (u.name || (den > 0 && 10000 % den != 0)) all_terminating = false;
        } else {
            all_exact = all_integer = false;
        }
    }
    const char *open = brackets ? "[" : "", *close = brackets ? "]" : "";
    s.main[0] = s.alt[0] = 0;
    if (how != SHOW_DEC && all_exact) {
        set(s.main, CELL, "%s%s%s", open, exact, close);
        if (how == SHOW_EXACT && !all_integer) set(s.alt, CELL, "%s%s%s", open, dec, close);
    } else {
        set(s.main, CELL, "%s%s%s", open, dec, close);
        if (all_exact && !all_terminating) set(s.alt, CELL, "%s%s%s", open, exact, close);
    }
    return s;
}

static shown fmt_vec(const float *x, int n, unit u, show how) {
    return fmt_values(x, n, u, how, true);
}

/* One number as "main" or "main = alt": "3/5 = 0.6000", "0.9803", "8". */
static const char *fmt_num(char *buf, size_t size, double x, unit u, show how) {
    float xf = (float)x;
    shown s = fmt_values(&xf, 1, u, how, false);
    set(buf, size, "%s%s%s", s.main, s.alt[0] ? " = " : "", s.alt);
    return buf;
}

/* A vector as "main" or "main = alt" in one string. */
static const char *fmt_vec_full(char *buf, size_t size, const float *x, int n, unit u, show how) {
    shown s = fmt_vec(x, n, u, how);
    set(buf, size, "%s%s%s", s.main, s.alt[0] ? " = " : "", s.alt);
    return buf;
}

/* "1/4·[2, 0] + 1/4·[0, 1] + 1/2·[2, 1]": the weighted sum, zero weights left
 * out, coefficients as fractions (or as short decimals when decimal is set). */
static void fmt_mix(char *buf, size_t size, const float *w, const float *values, int n, bool decimal) {
    buf[0] = 0;
    for (int j = 0; j < n; j++) {
        char coef[64];
        long den;
        if (w[j] == 0.0f) continue;
        if (decimal || !fmt_exact(coef, sizeof coef, w[j], ONE, &den)) fmt_short(coef, sizeof coef, w[j]);
        append(buf, size, "%s%s·%s", buf[0] ? " + " : "", coef,
               fmt_vec(values + j * WIDTH, WIDTH, ONE, SHOW_EXACT).main);
    }
}

/* Terminal columns of UTF-8 text: CJK and full-width forms take two. */
static int display_width(const char *s) {
    int width = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned cp = *p;
        int len = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : 4;
        if (len > 1) cp &= 0x3Fu >> (len - 1);
        int i = 1;
        for (; i < len && (p[i] & 0xC0) == 0x80; i++) cp = (cp << 6) | (p[i] & 0x3Fu);
        p += i;
        bool wide = (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) ||
                    (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
                    (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
                    (cp >= 0xFFE0 && cp <= 0xFFE6);
        width += wide ? 2 : 1;
    }
    return width;
}

static void pad_to(char *buf, size_t size, int width) {
    for (int w = display_width(buf); w < width; w++) append(buf, size, " ");
}

/* ---------------------------------------------------------------- columns */

/* A column of text lines; print_columns sets columns side by side. */
typedef struct {
    int n;
    char line[MAX_LINES][CELL];
} column;

static void col_add(column *c, const char *fmt, ...) CLI_PRINTF(2, 3);
static void col_add(column *c, const char *fmt, ...) {
    if (c->n >= MAX_LINES) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->line[c->n++], CELL, fmt, ap);
    va_end(ap);
}

static const char *const INDENT = "    ";

static void print_columns(const column *cols, int ncols) {
    int lines = 0, width[8] = {0};
    for (int c = 0; c < ncols; c++) {
        if (cols[c].n > lines) lines = cols[c].n;
        for (int i = 0; i < cols[c].n; i++) {
            int w = display_width(cols[c].line[i]);
            if (w > width[c]) width[c] = w;
        }
    }
    for (int i = 0; i < lines; i++) {
        char out[8 * CELL] = "";
        for (int c = 0; c < ncols; c++) {
            append(out, sizeof out, "%s", i < cols[c].n ? cols[c].line[i] : "");
            if (c + 1 < ncols) {
                int target = 0;
                for (int k = 0; k <= c; k++) target += width[k] + 3;
                pad_to(out, sizeof out, target);
            }
        }
        size_t n = strlen(out);
        while (n > 0 && out[n - 1] == ' ') out[--n] = 0;
        printf("%s%s\n", INDENT, out);
    }
}

/* A matrix as a titled column: "title  R×C", then "label1  [..] = [..]"
 * rows with the "=" signs aligned.  label may be NULL (rows unlabelled).
 * The demo's matrices have at most 4 rows (W_O), below MAX_LINES - 1. */
static void col_matrix(column *c, const char *title, const char *label, const float *m, int rows,
                       int cols, unit u, show how) {
    shown s[MAX_LINES];
    int main_width = 0;
    c->n = 0;
    col_add(c, "%s  %d×%d", title, rows, cols);
    for (int i = 0; i < rows; i++) {
        s[i] = fmt_vec(m + i * cols, cols, u, how);
        if (display_width(s[i].main) > main_width) main_width = display_width(s[i].main);
    }
    for (int i = 0; i < rows; i++) {
        char line[CELL] = "";
        if (label) append(line, sizeof line, "%s%d  ", label, i + 1);
        append(line, sizeof line, "%s", s[i].main);
        if (s[i].alt[0]) {
            pad_to(line, sizeof line, display_width(line) + main_width - display_width(s[i].main));
            append(line, sizeof line, " = %s", s[i].alt);
        }
        col_add(c, "%s", line);
    }
}

/* Walk lines "label   main   = alt" aligned in three columns. */
typedef struct {
    column label, main, alt;
} walk;

static void walk_add(walk *w, const char *label, shown s) {
    col_add(&w->label, "%s", label);
    col_add(&w->main, "%s", s.main);
    col_add(&w->alt, "%s%s", s.alt[0] ? "= " : "", s.alt);
}

/* The exp line of a walk: exp of one row of scores, and its sum. */
static void walk_add_exp(walk *w, const demo_text *t, const float *expv) {
    char num[64];
    double sum = 0;
    for (int j = 0; j < POS; j++) sum += expv[j];
    col_add(&w->label, "%s", t->lbl_exp);
    col_add(&w->main, "%s", fmt_vec(expv, POS, ONE, SHOW_EXACT).main);
    col_add(&w->alt, t->sum, fmt_num(num, sizeof num, sum, ONE, SHOW_EXACT));
}

static void walk_print(const walk *w) {
    column cols[3] = {w->label, w->main, w->alt};
    print_columns(cols, 3);
}

/* Prose: every line indented by two spaces. */
static void say(const char *text) {
    fputs("  ", stdout);
    for (const char *p = text; *p; p++) {
        putchar(*p);
        if (*p == '\n') fputs("  ", stdout);
    }
    putchar('\n');
}

/* An answer line: the answer mark on the first, later lines hang under it. */
static void say_answer(const demo_text *t, bool first, const char *text) {
    int hang = display_width(t->answer);
    printf("  %s%*s", first ? t->answer : "", first ? 0 : hang, "");
    for (const char *p = text; *p; p++) {
        putchar(*p);
        if (*p == '\n') printf("  %*s", hang, "");
    }
    putchar('\n');
}

static void sayf(const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    say(buf);
}

static void heading(const char *text) {
    printf("\n%s\n", text);
}

static const char *shape_str(char *buf, size_t size, int rows, int cols) {
    set(buf, size, "%d×%d", rows, cols);
    return buf;
}

/* ------------------------------------------------------------- sections */

static void print_inputs(const demo_text *t, const chapter *ch) {
    const unit u_c = {ch->c, "c"};
    char buf[CELL];
    column cols[4];
    heading(t->sec_qkv);
    say(t->input_note);
    sayf(t->c_line, fmt_num(buf, sizeof buf, ch->c, ONE, SHOW_DEC));
    putchar('\n');
    col_matrix(&cols[0], "X", "x", &ch->x[0][0], POS, WIDTH, ONE, SHOW_EXACT);
    col_matrix(&cols[1], "W_Q", NULL, &ch->wq[0][0], WIDTH, WIDTH, ONE, SHOW_EXACT);
    col_matrix(&cols[2], "W_K", NULL, &ch->wk[0][0], WIDTH, WIDTH, u_c, SHOW_EXACT);
    col_matrix(&cols[3], "W_V", NULL, &ch->wv[0][0], WIDTH, WIDTH, ONE, SHOW_EXACT);
    print_columns(cols, 4);
    putchar('\n');
    say(t->roles);
    putchar('\n');
    col_matrix(&cols[0], "Q = X·W_Q", "q", &ch->base.q[0][0], POS, WIDTH, ONE, SHOW_EXACT);
    col_matrix(&cols[1], "K = X·W_K", "k", &ch->base.k[0][0], POS, WIDTH, u_c, SHOW_EXACT);
    col_matrix(&cols[2], "V = X·W_V", "v", &ch->base.v[0][0], POS, WIDTH, ONE, SHOW_EXACT);
    print_columns(cols, 3);
}

/* The four steps of one query row: raw scores, scaled, exp, weights. */
static void walk_query(const demo_text *t, const chapter *ch, const pass *p, int i, walk *w) {
    const unit u_c = {ch->c, "c"}, u_ln2 = {log(2.0), "ln2"};
    char label[CELL];
    memset(w, 0, sizeof *w);
    walk_add(w, t->lbl_raw, fmt_vec(p->raw[i], POS, u_c, SHOW_EXACT));
    set(label, sizeof label, t->lbl_scaled, WIDTH);
    walk_add(w, label, fmt_vec(p->scaled[i], POS, u_ln2, SHOW_EXACT));
    walk_add_exp(w, t, p->expv[i]);
    walk_add(w, t->lbl_weights, fmt_vec(p->weights[i], POS, ONE, SHOW_EXACT));
}

static void print_match(const demo_text *t, const chapter *ch) {
    const int order[POS] = {2, 0, 1}; /* the chapter works row 3 first */
    char ds[CELL] = "", roots[CELL] = "", share[64];
    heading(t->sec_match);
    for (int r = 0; r < POS; r++) {
        int i = order[r];
        walk w;
        sayf(t->query_heading, i + 1, i + 1, fmt_vec(ch->base.q[i], WIDTH, ONE, SHOW_EXACT).main);
        walk_query(t, ch, &ch->base, i, &w);
        walk_print(&w);
    }
    putchar('\n');
    for (int k = 0; k < 3; k++) {
        char a[32], b[32];
        append(ds, sizeof ds, "%s%s", k ? ", " : "", fmt_num(a, sizeof a, ch->sqrt_demo_d[k], ONE, SHOW_EXACT));
        append(roots, sizeof roots, "%s%s", k ? ", " : "",
               fmt_num(b, sizeof b, sqrt(ch->sqrt_demo_d[k]), ONE, SHOW_EXACT));
    }
    sayf(t->why_sqrt, ds, roots);
    long den;
    if (!fmt_exact(share, sizeof share, ch->base.weights[2][2], ONE, &den))
        fmt_dec(share, sizeof share, ch->base.weights[2][2]);
    sayf(t->per_row, share, share);
}

static void print_mix(const demo_text *t, const chapter *ch) {
    const unit u_ln2 = {log(2.0), "ln2"};
    char mix[CELL], buf[CELL], s1[32], s2[32], s3[32], range[2][64];
    column cols[3];
    walk w;
    heading(t->sec_mix);
    say(t->values_not_keys);
    fmt_mix(mix, sizeof mix, ch->base.weights[2], &ch->base.v[0][0], POS, false);
    printf("%so3 = %s = %s\n\n", INDENT, mix, fmt_vec_full(buf, sizeof buf, ch->base.out[2], WIDTH, ONE, SHOW_DEC));
    col_matrix(&cols[0], t->blk_weights, "q", &ch->base.weights[0][0], POS, POS, ONE, SHOW_FRACTION);
    col_matrix(&cols[1], "V", "v", &ch->base.v[0][0], POS, WIDTH, ONE, SHOW_EXACT);
    col_matrix(&cols[2], t->blk_out, "o", &ch->base.out[0][0], POS, WIDTH, ONE, SHOW_DEC);
    print_columns(cols, 3);
    putchar('\n');
    for (int d = 0; d < WIDTH; d++) {
        float lo = ch->base.v[0][d], hi = lo;
        for (int j = 1; j < POS; j++) {
            lo = fminf(lo, ch->base.v[j][d]);
            hi = fmaxf(hi, ch->base.v[j][d]);
        }
        float bounds[2] = {lo, hi};
        set(range[d], sizeof range[d], "%s", fmt_vec(bounds, 2, ONE, SHOW_EXACT).main);
    }
    sayf(t->shape_note, shape_str(s1, sizeof s1, POS, WIDTH), shape_str(s2, sizeof s2, POS, POS),
         shape_str(s3, sizeof s3, POS, WIDTH), range[0], range[WIDTH - 1]);

    /* The context change: x2 -> [0, 2]. */
    putchar('\n');
    sayf(t->context_change, fmt_vec(ch->x_changed[1], WIDTH, ONE, SHOW_EXACT).main);
    const unit u_c = {ch->c, "c"};
    memset(&w, 0, sizeof w);
    set(buf, sizeof buf, "%s   %s", fmt_vec(ch->changed.k[1], WIDTH, u_c, SHOW_EXACT).main,
             fmt_vec(ch->changed.v[1], WIDTH, ONE, SHOW_EXACT).main);
    col_add(&w.label, "%s", t->lbl_k2v2);
    col_add(&w.main, "%s", buf);
    col_add(&w.alt, "%s", "");
    walk_add(&w, t->lbl_q3_scaled, fmt_vec(ch->changed.scaled[2], POS, u_ln2, SHOW_EXACT));
    walk_add(&w, t->lbl_q3_weights, fmt_vec(ch->changed.weights[2], POS, ONE, SHOW_EXACT));
    shown o = fmt_vec(ch->changed.out[2], WIDTH, ONE, SHOW_DEC);
    set(o.alt, CELL, t->was, fmt_vec(ch->base.out[2], WIDTH, ONE, SHOW_DEC).main);
    col_add(&w.label, "%s", t->lbl_o3);
    col_add(&w.main, "%s", o.main);
    col_add(&w.alt, "%s", o.alt);
    walk_print(&w);
    say(t->not_linear);

    /* Figure 2: the four controlled interventions. */
    putchar('\n');
    say(t->interventions);
    column tab[5];
    memset(tab, 0, sizeof tab);
    col_add(&tab[0], "%s", t->col_case);
    col_add(&tab[1], "k2");
    col_add(&tab[2], "v2");
    col_add(&tab[3], "%s", t->col_weights_q3);
    col_add(&tab[4], "o3");
    for (int i = 0; i < 4; i++) {
        const pass *p = &ch->cases[i];
        col_add(&tab[0], "%s", t->case_name[i]);
        col_add(&tab[1], "%s", fmt_vec(p->k[1], WIDTH, u_c, SHOW_EXACT).main);
        col_add(&tab[2], "%s", fmt_vec(p->v[1], WIDTH, ONE, SHOW_EXACT).main);
        col_add(&tab[3], "%s", fmt_vec(p->weights[2], POS, ONE, SHOW_EXACT).main);
        col_add(&tab[4], "%s", fmt_vec(p->out[2], WIDTH, ONE, SHOW_DEC).main);
    }
    print_columns(tab, 5);
    say(t->two_paths);
}

/* "1/5 + 2/5 = 3/5 = 0.6000": the weights of row 2 that the causal mask
 * keeps, taken from the UNMASKED softmax, and their sum. */
static void fmt_struck_sum(char *buf, size_t size, const chapter *ch) {
    char one[64];
    double sum = 0;
    buf[0] = 0;
    for (int j = 0; j < POS; j++) {
        if (isinf(ch->causal.scaled[1][j])) continue;
        sum += ch->base.weights[1][j];
        append(buf, size, "%s%s", buf[0] ? " + " : "",
               fmt_num(one, sizeof one, ch->base.weights[1][j], ONE, SHOW_FRACTION));
    }
    append(buf, size, " = %s", fmt_num(one, sizeof one, sum, ONE, SHOW_EXACT));
}

static void print_causal(const demo_text *t, const chapter *ch) {
    const unit u_ln2 = {log(2.0), "ln2"};
    const pass *p = &ch->causal;
    char buf[CELL], mix[CELL], sum_text[CELL];
    column cols[2];
    walk w;
    heading(t->sec_causal);
    say(t->causal_intro);
    putchar('\n');
    /* Visibility read off the library's causal scores: -inf means hidden. */
    memset(cols, 0, sizeof cols);
    col_add(&cols[0], "%s", t->blk_visible);
    for (int i = 0; i < POS; i++) {
        char line[CELL] = "";
        append(line, sizeof line, "q%d ", i + 1);
        for (int j = 0; j < POS; j++) append(line, sizeof line, " %s", isinf(p->scaled[i][j]) ? "·" : "■");
        col_add(&cols[0], "%s", line);
    }
    col_matrix(&cols[1], t->blk_causal_weights, "q", &p->weights[0][0], POS, POS, ONE, SHOW_FRACTION);
    print_columns(cols, 2);

    putchar('\n');
    say(t->pos2_heading);
    memset(&w, 0, sizeof w);
    set(buf, sizeof buf, t->lbl_scaled, WIDTH);
    walk_add(&w, buf, fmt_vec(ch->base.scaled[1], POS, u_ln2, SHOW_EXACT));
    walk_add(&w, t->lbl_masked, fmt_vec(p->scaled[1], POS, u_ln2, SHOW_EXACT));
    walk_add_exp(&w, t, p->expv[1]);
    walk_add(&w, t->lbl_renorm, fmt_vec(p->weights[1], POS, ONE, SHOW_EXACT));
    walk_print(&w);
    fmt_mix(mix, sizeof mix, p->weights[1], &p->v[0][0], POS, false);
    printf("%so2 = %s = %s\n\n", INDENT, mix, fmt_vec_full(buf, sizeof buf, p->out[1], WIDTH, ONE, SHOW_DEC));

    fmt_struck_sum(sum_text, sizeof sum_text, ch);
    sayf(t->wrong_way, fmt_vec(ch->base.weights[1], POS, ONE, SHOW_EXACT).main, sum_text);
    say(t->not_serial);
}

static void print_heads(const demo_text *t, const chapter *ch) {
    const unit u_c = {ch->c, "c"};
    char title[2][64], walk_text[CELL], s[5][32];
    float head_out[HEADS][POS][WIDTH];
    column cols[4];
    heading(t->sec_heads);
    say(t->heads_intro);
    putchar('\n');
    col_matrix(&cols[0], "W_Q2", NULL, &ch->wq2[0][0], WIDTH, WIDTH, ONE, SHOW_EXACT);
    col_matrix(&cols[1], "W_K2", NULL, &ch->wk2[0][0], WIDTH, WIDTH, u_c, SHOW_EXACT);
    col_matrix(&cols[2], "W_V2", NULL, &ch->wv2[0][0], WIDTH, WIDTH, ONE, SHOW_EXACT);
    col_matrix(&cols[3], "W_O", NULL, &ch->wo[0][0], HEADS * WIDTH, WIDTH, ONE, SHOW_EXACT);
    print_columns(cols, 4);
    putchar('\n');
    /* Each head's output is its slice of the concatenation. */
    for (int h = 0; h < HEADS; h++) {
        for (int i = 0; i < POS; i++) memcpy(head_out[h][i], &ch->concat[i][h * WIDTH], sizeof head_out[h][i]);
        set(title[h], sizeof title[h], t->blk_head, h + 1);
        col_matrix(&cols[h], title[h], "o", &head_out[h][0][0], POS, WIDTH, ONE, SHOW_DEC);
    }
    print_columns(cols, HEADS);
    putchar('\n');
    col_matrix(&cols[0], t->blk_concat, "z", &ch->concat[0][0], POS, HEADS * WIDTH, ONE, SHOW_DEC);
    col_matrix(&cols[1], t->blk_mh_out, "o", &ch->mh_out[0][0], POS, WIDTH, ONE, SHOW_DEC);
    print_columns(cols, 2);
    putchar('\n');
    set(walk_text, sizeof walk_text, "%s + %s → %s → ×W_O %s → %s", shape_str(s[0], 32, POS, WIDTH),
             shape_str(s[1], 32, POS, WIDTH), shape_str(s[2], 32, POS, HEADS * WIDTH),
             shape_str(s[3], 32, HEADS * WIDTH, WIDTH), shape_str(s[4], 32, POS, WIDTH));
    sayf(t->shape_walk, walk_text);
    say(t->concat_note);
}

static void print_gqa(const demo_text *t, const chapter *ch) {
    char title[HEADS][64];
    column cols[HEADS];
    heading(t->sec_gqa);
    sayf(t->gqa_facts, ch->paper_heads, ch->paper_width, ch->qwen_heads, ch->qwen_kv_heads,
         ch->qwen_heads / ch->qwen_kv_heads);
    sayf(t->gqa_toy, HEADS, 1);
    putchar('\n');
    for (int h = 0; h < HEADS; h++) {
        set(title[h], sizeof title[h], t->blk_gqa_head, h + 1);
        col_matrix(&cols[h], title[h], "q", &ch->gqa_weights[h][0][0], POS, POS, ONE, SHOW_FRACTION);
    }
    print_columns(cols, HEADS);
    say(t->gqa_note);
}

static void print_explain(const demo_text *t, const chapter *ch) {
    char order[64] = "", title[CELL], n_text[2][32], cells[2][32], ratio[32];
    column cols[2];
    heading(t->sec_explain);
    for (int j = 0; j < POS; j++) append(order, sizeof order, "%s%d", j ? ", " : "", ch->perm[j] + 1);
    sayf(t->permute_intro, order);
    putchar('\n');
    set(title, sizeof title, t->blk_perm_weights, order);
    col_matrix(&cols[0], title, "q", &ch->permuted.weights[0][0], POS, POS, ONE, SHOW_FRACTION);
    col_matrix(&cols[1], "O", "o", &ch->permuted.out[0][0], POS, WIDTH, ONE, SHOW_DEC);
    print_columns(cols, 2);
    say(t->no_order);
    putchar('\n');
    say(t->cost_intro);
    column cost[3];
    memset(cost, 0, sizeof cost);
    for (int i = 0; i < 2; i++) {
        fmt_count(n_text[i], sizeof n_text[i], ch->n[i]);
        fmt_count(cells[i], sizeof cells[i], ch->cells[i]);
        col_add(&cost[0], "n = %s", n_text[i]);
        col_add(&cost[1], t->cost_cells, cells[i]);
    }
    col_add(&cost[2], "%s", "");
    col_add(&cost[2], t->cost_ratio,
            fmt_num(ratio, sizeof ratio, (double)ch->cells[1] / (double)ch->cells[0], ONE, SHOW_EXACT));
    print_columns(cost, 3);
    say(t->cost_note);
}

static void print_exercises(const demo_text *t, const chapter *ch) {
    const pass *v_only = &ch->cases[2];
    const pass *causal = &ch->causal;
    char a[CELL], b[CELL], c[CELL], line[2 * CELL], mix[CELL], kept[CELL];
    heading(t->sec_exercises);

    /* 1: V only: the same weights, a new output. */
    sayf(t->ex1_q, fmt_vec(ch->base.v[1], WIDTH, ONE, SHOW_EXACT).main,
         fmt_vec(v_only->v[1], WIDTH, ONE, SHOW_EXACT).main);
    set(line, sizeof line, t->ex1_a1, fmt_vec(v_only->weights[2], POS, ONE, SHOW_EXACT).main);
    say_answer(t, true, line);
    fmt_mix(mix, sizeof mix, v_only->weights[2], &v_only->v[0][0], POS, false);
    set(line, sizeof line, "o3 = %s = %s", mix, fmt_vec_full(a, sizeof a, v_only->out[2], WIDTH, ONE, SHOW_DEC));
    say_answer(t, false, line);
    say_answer(t, false, t->ex1_a2);
    putchar('\n');

    /* 2: mask first, then normalise. */
    say(t->ex2_q);
    set(a, sizeof a, "%s", fmt_vec(causal->expv[1], POS, ONE, SHOW_EXACT).main);
    set(b, sizeof b, "%s", fmt_vec(causal->weights[1], POS, ONE, SHOW_EXACT).main);
    fmt_vec_full(c, sizeof c, causal->out[1], WIDTH, ONE, SHOW_DEC);
    set(line, sizeof line, t->ex2_a1, a, b, c);
    say_answer(t, true, line);
    fmt_struck_sum(kept, sizeof kept, ch);
    set(line, sizeof line, t->ex2_a2, kept);
    say_answer(t, false, line);
    putchar('\n');

    /* 3: identical values, different maps, the same output. */
    char targets[2][CELL];
    for (int r = 0; r < 2; r++) {
        targets[r][0] = 0;
        for (int j = 0; j < EX3; j++) {
            char one[32];
            fmt_short(one, sizeof one, ch->ex3_target[r][j]);
            append(targets[r], sizeof targets[r], "%s%s", j ? ", " : "[", one);
        }
        append(targets[r], sizeof targets[r], "]");
    }
    sayf(t->ex3_q, fmt_vec(ch->ex3_v, WIDTH, ONE, SHOW_EXACT).main, targets[0], targets[1]);
    for (int r = 0; r < 2; r++) {
        float values[EX3][WIDTH];
        for (int j = 0; j < EX3; j++) memcpy(values[j], ch->ex3_v, sizeof values[j]);
        fmt_mix(mix, sizeof mix, ch->ex3_weights[r], &values[0][0], EX3, true);
        set(line, sizeof line, "%s = %s", mix, fmt_vec(ch->ex3_out[r], WIDTH, ONE, SHOW_DEC).main);
        say_answer(t, r == 0, line);
    }
    say_answer(t, false, t->ex3_a);
}

/* ------------------------------------------------------------ the command */

/* "en" or "zh" -> its table; NULL for anything else. */
static const demo_text *text_for(const char *lang) {
    if (strcmp(lang, "en") == 0) return &text_en;
    if (strcmp(lang, "zh") == 0) return &text_zh;
    return NULL;
}

/* The default language: Chinese when $LANG starts with "zh", else English. */
static const demo_text *text_from_environment(void) {
    const char *lang = getenv("LANG");
    return lang && strncmp(lang, "zh", 2) == 0 ? &text_zh : &text_en;
}

int cmd_demo(int argc, char **argv) {
    const demo_text *t = NULL;
    const char *figures_dir = NULL;
    bool help = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = NULL;
        if (cli_is_help(arg)) {
            help = true;
            continue;
        }
        if (strcmp(arg, "--lang") == 0) {
            if (i + 1 >= argc) return cli_usage_error("demo", "--lang needs a value: en or zh");
            value = argv[++i];
        } else if (strncmp(arg, "--lang=", 7) == 0) {
            value = arg + 7;
        } else if (strcmp(arg, "--figures") == 0) {
            if (i + 1 >= argc) return cli_usage_error("demo", "--figures needs a directory");
            figures_dir = argv[++i];
            continue;
        } else if (arg[0] == '-') {
            return cli_usage_error("demo", "unknown option '%s'", arg);
        } else {
            return cli_usage_error("demo", "unexpected argument '%s'", arg);
        }
        if (!(t = text_for(value)))
            return cli_usage_error("demo", "--lang must be en or zh, got '%s'", value);
    }
    if (!t) t = text_from_environment();
    if (help) {
        fputs(t->usage, stdout);
        return CLI_OK;
    }

    chapter ch;
    attn_status st = chapter_compute(&ch);
    if (st)
        return cli_data_error("demo", "the library failed: %s (%s)", attn_last_error(),
                              attn_status_str(st));

    printf("%s\n", t->title);
    printf(t->intro, attn_version());
    putchar('\n');
    print_inputs(t, &ch);
    print_match(t, &ch);
    print_mix(t, &ch);
    print_causal(t, &ch);
    print_heads(t, &ch);
    print_gqa(t, &ch);
    print_explain(t, &ch);
    print_exercises(t, &ch);
    if (figures_dir) {
        putchar('\n');
        int rc = demo_write_figures(figures_dir, t == &text_zh ? "zh" : "en");
        if (rc != CLI_OK) return rc;
    }
    return fflush(stdout) == 0 ? CLI_OK : cli_data_error("demo", "cannot write the output");
}
