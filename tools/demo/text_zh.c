/*
 * text_zh.c — the Chinese prose of `attn demo` (demo.h).
 */
#include "demo.h"

const demo_text demo_text_zh = {
    .usage =
        "用法：attn demo [--lang en|zh] [--figures DIR]\n"
        "      attn demo --model MODEL [--lang en|zh] [--plot FILE] [--heads] [--no-cost]\n"
        "\n"
        "按本章顺序演示注意力的算例：X与三张W，查询Q、键K、值V，原始分数与缩放分数，\n"
        "指数值、权重和三个位置的输出；上下文改动与图2的四种受控检查；因果掩码；多头的\n"
        "尺寸；分组查询注意力；权重为何不等于解释，以及n²的代价；本章练习与参考答案。\n"
        "所有推导出的数都由 libattn 计算。\n"
        "\n"
        "选项：\n"
        "  --lang en|zh   演示的语言（默认：$LANG 以 \"zh\" 开头时为 zh，否则为 en）\n"
        "  --figures DIR  另用算出的数画出本章的三幅图，写入 DIR（figure1..3 的 .png 与 .svg；需要 cairo）\n"
        "\n"
        "加上 --model（也可写 attn model chapter MODEL），把本章开头的例子放到真实模型上\n"
        "（GGUF 格式的 Qwen2.5 或 Gemma 3，或 Hugging Face 检查点；scripts/fetch-models.sh 会把两个模型下载到 ~/.cache/attn/models）：\n"
        "对“我吃了一个苹果”和“这台电脑来自苹果”分词，苹果是同一个词元、同一个嵌入；两个“苹果”\n"
        "向量在每一层之后的余弦，旁边是同一义项的对照（我买了一个苹果）和一对相应的英文句子，并说明差距意味着什么；\n"
        "每个“苹果”读了哪些键，以及下一个词元的预测；模型的 GQA 布局；\n"
        "在每张注意力图上检查因果掩码；真实文本前 100 与 200 个词元的时间和分数格数。加载只映射\n"
        "文件里按原格式存储的权重（不到一秒）。\n"
        "  --model MODEL  GGUF 模型文件，或 Hugging Face 检查点（含 config.json、model.safetensors\n"
        "                 与 tokenizer.json 的目录）\n"
        "  --plot FILE    另把两个义项与对照的余弦序列画成折线图（.png、.svg 或 .pdf；需要 cairo）\n"
        "  --heads        每一层每一个头里“苹果”读了什么（默认：对所有头取平均）\n"
        "  --no-cost      跳过 100 与 200 个词元的计时（§6）\n"
        "\n"
        "  -h, --help     显示本帮助\n"
        "\n"
        "示例：\n"
        "  attn demo --lang zh --figures figs\n"
        "  attn demo --model ~/.cache/attn/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --plot cos.png\n",
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

const demo_model_text demo_model_text_zh = {
    .title = "attn demo --model —— 本章开头的例子，换成真实模型：%s（%s）",
    .intro = "本章的两个句子（苹果在模型词表里两处都是同一个词元），由 libattn 的解码器以 float32\n"
             "跑过整个模型；下面每个数都是算出来的，没有手填。",
    .loading = "attn demo：正在加载 %s（权重按原格式映射）……\n",
    .loaded = "attn demo：加载用时 %.1f 秒（权重 %.0f MiB）\n",
    .no_file = "%s：模型文件不存在（scripts/fetch-models.sh 会把两个模型下载到 ~/.cache/attn/models）",

    .sec_tokens = "§1  两个句子里的同一个词元",
    .sentence = "句子 %c：%s（%lld 个词元）",
    .col_pos = "位置", .col_id = "id", .col_piece = "词元", .col_text = "文本",
    .same_token = "%s 在两个句子里都是词元 %ld（位置 %lld 与位置 %lld）：查的是嵌入表的同一行。",
    .embed_equal = "两个嵌入向量逐位相同（残差流的第 0 行）。",
    .embed_differ = "两个嵌入向量不同：这不应发生（同一个 id，同一行）。",

    .sec_cosine = "§2  两个“苹果”向量逐层分开",
    .cosine_intro = "句子 A 与句子 B 中“苹果”位置的向量，在每一层之后残差流里的余弦相似度。1 表示方向相同；\n"
                    "让不同上下文进来的是注意力（前馈层只作用于各自的位置）。旁边是对照：同一义项的“苹果”，\n"
                    "只换动词（我吃了一个苹果 / 我买了一个苹果）；再是一对相应的英文句子，“bank”取两个义项\n"
                    "（河岸 / 银行：We sat on the grass by the river bank / She paid the cash into the bank）\n"
                    "和同一义项（… into the bank / She took the cash to the bank）。差 = 对照 - 两个义项。",
    .col_layer = "层", .col_senses = "两个义项", .col_control = "对照", .col_gap = "差",
    .row_embed = "嵌入", .row_layer = "第 %lld 层之后", .row_final = "最终归一化",
    .cosine_read = "从嵌入处的恰好 1，到最后一层之后的 %s、最终归一化之后的 %s（输出头读的向量）；\n"
                   "最低的余弦是 %s，在 %s。",
    .plot_title = "两个“苹果”向量的余弦，逐层",
    .plot_x = "0 = 嵌入，l + 1 = 第 l 层之后，最后一点 = 最终归一化之后",
    .plot_y = "余弦",
    .wrote = "已写出 %s",
    .plot_senses = "两个义项（A / B）", .plot_control = "同一义项（我吃了 / 我买了一个苹果）",
    .gap_meaningful = "%s：是上下文，不是噪声。最终归一化之后两个义项的余弦是 %s，同义对照\n"
                      "（%s）是 %s：两个义项离 1 的距离是对照的 %s 倍。",
    .gap_noise = "%s：差距太小，说明不了什么。最终归一化之后两个义项的余弦是 %s，同义对照\n"
                 "（%s）是 %s：离 1 的距离只有对照的 %s 倍，只换一个动词也会让向量移动这么多；\n"
                 "这个模型在这里的漂移看不出义项。",
    .gap_rule = "（两个义项离 1 的距离至少是对照的 2 倍时，才读作上下文。）",

    .sec_reads = "§3  每个“苹果”读了什么",
    .reads_intro = "每层中“苹果”读得最多的三个键，对所有查询头取平均（注意力图的最后一行）。\n"
                   "每个头的细节：--heads。",
    .reads_heads_intro = "每一层、每一个头：“苹果”读得最多的三个键。",
    .head_label = "头 %lld（kv %lld）",
    .sec_next = "每个句子之后的下一个词元预测",
    .next_heading = "句子 %c 之后：",
    .col_rank = "名次", .col_prob = "概率",
    .next_read = "最后一个词元相同，接下来的预测却不同：模型怎样处理“苹果”取决于它前面的内容。上面的\n"
                 "注意力权重是读取的份额，不是解释：读到的内容（值）、前馈层和后面的层同样带着这个变化。",

    .sec_gqa = "§4  分组查询注意力：文件里写的布局",
    .gqa_line = "%lld 个查询头，%lld 个键/值头，宽 %lld：每 %lld 个查询头共享一组 K 和 V。",
    .gqa_group = "  kv 头 %lld <- 查询头 %lld..%lld",
    .gqa_chapter = "本章的 Qwen3-0.6B：%d 个查询头，%d 个键/值头，每组 K/V 由 %d 个查询头共享。",

    .sec_mask = "§5  真实注意力图里的因果掩码",
    .mask_line = "共 %lld 张图（两个句子的每一层每一个头，%lld 个格）：一行可见权重之和与 1 的最大偏差是 %s；\n"
                 "对角线以上不为 0 的格：%lld。",
    .mask_note = "掩码遮住后面的位置，并在可见位置上重新归一化：每一行仍然和为 1，未来的信息不会漏进来。",

    .sec_cost = "§6  真实文本上的 n² 代价",
    .cost_intro = "文本：本演示自己的说明段落（在这个词表里 %lld 个词元），取前 100 和前 200 个词元跑过整个模型。",
    .col_tokens = "词元", .col_seconds = "前向 秒", .col_cells = "分数格",
    .col_visible = "可见", .col_table = "每层分数表", .col_flash = "flash 工作区",
    .cost_read = "词元数翻倍：分数格 ×%s，前向时间 ×%s。在这样的长度下，时间主要花在投影上（与 n 成正比）；\n"
                 "按 n² 增长的是分数表。flash 内核从不存下整张表：它的工作区按分块和线程算，两种长度下一样大\n"
                 "（短文本时可能比分数表还大，文本一长就远小于分数表）。",
    .cost_skipped = "（已跳过：--no-cost）",
};
