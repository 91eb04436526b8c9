/*
 * tokenizer_merge.c — one piece of text into ids by pairwise merges: the
 * symbols start as single letters (BPE: one per byte, spelled in the byte
 * alphabet; SPM: one per UTF-8 character), and the best adjacent pair is
 * merged until no pair merges.  "Best", as the reference (Hugging Face
 * tokenizers' BPE model, word.rs) ranks it:
 *   BPE  the pair's rank in tokenizer.ggml.merges (or tokenizer.json's
 *        model.merges: SPM too then), lowest first
 *   SPM  from a GGUF (no merges): the merged token's place in the
 *        vocabulary, earliest first, and for one merged token the longer
 *        left part first (transformers builds Gemma's merges from the
 *        vocabulary in that order)
 * and among equals the leftmost.  A min-heap of candidate pairs keeps it
 * O(n log n) in the piece's length (an SPM piece is a whole span between
 * special tokens, so it may be long); a candidate whose symbols changed
 * since it was pushed is dropped when it comes out.
 */
#include "tokenizer/tokenizer_merge.h"

#include <stdlib.h>

typedef struct tok_symbol {
    uint32_t start, len; /* bytes of the piece (SPM: of the normalized text) */
    int32_t id;
    int32_t prev, next;  /* neighbours, -1 at the ends                        */
    bool mergeable;      /* SPM: not a byte-fallback or unknown symbol        */
} tok_symbol;

typedef struct tok_candidate {
    uint64_t priority;   /* lower is better                                   */
    int32_t left, right; /* symbol indexes (left < right: the leftmost first)  */
    uint32_t left_len, right_len;
    int32_t merged;
} tok_candidate;

typedef struct tok_heap {
    tok_candidate *items;
    size_t n, cap;
} tok_heap;

static bool candidate_before(const tok_candidate *a, const tok_candidate *b) {
    return a->priority != b->priority ? a->priority < b->priority : a->left < b->left;
}

static attn_status heap_push(tok_heap *h, const tok_candidate *c) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        tok_candidate *items = realloc(h->items, cap * sizeof *items);
        if (!items) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory for %zu merge candidates", cap);
        h->items = items;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && candidate_before(c, &h->items[(i - 1) / 2])) {
        h->items[i] = h->items[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->items[i] = *c;
    return ATTN_OK;
}

static tok_candidate heap_pop(tok_heap *h) {
    tok_candidate top = h->items[0], last = h->items[--h->n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->n) break;
        if (child + 1 < h->n && candidate_before(&h->items[child + 1], &h->items[child])) child++;
        if (!candidate_before(&h->items[child], &last)) break;
        h->items[i] = h->items[child];
        i = child;
    }
    if (h->n) h->items[i] = last;
    return top;
}

typedef struct tok_word {
    const attn_tokenizer *t;
    const uint8_t *text; /* SPM: what symbols' start and len index */
    tok_symbol *sym;
    size_t n;
    tok_heap heap;
} tok_word;

static const tok_merge *find_merge(const attn_tokenizer *t, int32_t left, int32_t right) {
    uint64_t pair = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint64_t h = pair * 0x9E3779B97F4A7C15ull;
    for (uint64_t i = h >> 20;; i++) {
        const tok_merge *m = &t->merges[i & t->merge_mask];
        if (m->rank < 0) return NULL;
        if (m->pair == pair) return m;
    }
}

/* Pushes the pair (left, left's next) when it merges. */
static attn_status consider(tok_word *w, int32_t left) {
    if (left < 0) return ATTN_OK;
    int32_t right = w->sym[left].next;
    if (right < 0) return ATTN_OK;
    const tok_symbol *a = &w->sym[left], *b = &w->sym[right];
    tok_candidate c = {0, left, right, a->len, b->len, -1};
    if (w->t->merges) { /* BPE, and SPM from a tokenizer.json with its merges */
        const tok_merge *m = find_merge(w->t, a->id, b->id);
        if (!m) return ATTN_OK;
        c.priority = (uint64_t)(uint32_t)m->rank;
        c.merged = m->merged;
    } else {
        if (!a->mergeable || !b->mergeable) return ATTN_OK;
        int32_t id = attn__tok_lookup(w->t, (const char *)w->text + a->start, (size_t)a->len + b->len);
        if (id < 0) return ATTN_OK;
        c.priority = (uint64_t)(uint32_t)id << 32 | (uint32_t)(UINT32_MAX - a->len);
        c.merged = id;
    }
    return heap_push(&w->heap, &c);
}

/* Merges until no pair merges, then appends the symbols' ids to out. */
static attn_status merge_all(tok_word *w, tok_ids *out) {
    attn_status st = ATTN_OK;
    for (size_t i = 0; i + 1 < w->n && st == ATTN_OK; i++) st = consider(w, (int32_t)i);
    while (st == ATTN_OK && w->heap.n) {
        tok_candidate c = heap_pop(&w->heap);
        tok_symbol *a = &w->sym[c.left], *b = &w->sym[c.right];
        if (a->len != c.left_len || b->len != c.right_len || a->next != c.right) continue; /* stale */
        a->len += b->len;
        a->id = c.merged;
        a->next = b->next;
        if (b->next >= 0) w->sym[b->next].prev = c.left;
        b->len = 0; /* dead: no candidate of it matches its length again */
        st = consider(w, a->prev);
        if (st == ATTN_OK) st = consider(w, c.left);
    }
    for (int32_t i = w->n ? 0 : -1; i >= 0 && st == ATTN_OK; i = w->sym[i].next) st = attn__tok_push(out, w->sym[i].id);
    return st;
}

static attn_status word_begin(tok_word *w, const attn_tokenizer *t, const uint8_t *text, size_t len) {
    memset(w, 0, sizeof *w);
    w->t = t;
    w->text = text;
    if (len > INT32_MAX / 2) return attn__fail(ATTN_ERR_OVERFLOW, "tokenizer: a text of %zu bytes is too long", len);
    w->sym = malloc((len ? len : 1) * sizeof *w->sym);
    if (!w->sym) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory for %zu symbols", len);
    return ATTN_OK;
}

static void word_end(tok_word *w) {
    free(w->sym);
    free(w->heap.items);
}

static void add_symbol(tok_word *w, uint32_t start, uint32_t len, int32_t id, bool mergeable) {
    tok_symbol *s = &w->sym[w->n];
    *s = (tok_symbol){start, len, id, (int32_t)w->n - 1, -1, mergeable};
    if (w->n) w->sym[w->n - 1].next = (int32_t)w->n;
    w->n++;
}

/* The unknown token for the text at start..start+len that has no token:
 * fused into the symbol before it when that is one (fuse_unk). */
static void add_unknown(tok_word *w, uint32_t start, uint32_t len, bool *fusing) {
    if (*fusing && w->t->fuse_unk) w->sym[w->n - 1].len += len;
    else add_symbol(w, start, len, w->t->model_unk_id, false);
    *fusing = true;
}

attn_status attn__tok_merge_bpe(const attn_tokenizer *t, const uint8_t *text, size_t len, tok_ids *out) {
    tok_word w;
    attn_status st = word_begin(&w, t, text, len);
    if (st != ATTN_OK) return st;
    bool fusing = false;
    for (size_t i = 0; i < len; i++) {
        const int32_t id = t->byte_token[text[i]];
        if (id >= 0) {
            add_symbol(&w, (uint32_t)i, 1, id, true);
            fusing = false;
        } else if (t->model_unk_id >= 0) {
            add_unknown(&w, (uint32_t)i, 1, &fusing);
        } /* else the byte is dropped: no symbol, and its neighbours meet */
    }
    st = merge_all(&w, out);
    word_end(&w);
    return st;
}

attn_status attn__tok_merge_spm(const attn_tokenizer *t, const uint8_t *text, size_t len, tok_ids *out) {
    tok_word w;
    attn_status st = word_begin(&w, t, text, len);
    if (st != ATTN_OK) return st;
    bool fusing = false;
    for (size_t i = 0; i < len && st == ATTN_OK;) {
        uint32_t cp;
        size_t n = attn__utf8_next(text + i, len - i, &cp);
        int32_t id = n ? attn__tok_lookup(t, (const char *)text + i, n) : -1;
        if (n == 0) n = 1; /* an invalid byte: a character of its own, spelled by its byte token */
        if (id >= 0) {
            add_symbol(&w, (uint32_t)i, (uint32_t)n, id, true);
            fusing = false;
        } else {
            /* Byte fallback: the character's bytes as <0xNN> tokens when
             * every one exists, else the unknown token (consecutive ones
             * fused when fuse_unk, as Gemma's), or nothing without one. */
            bool all = true;
            for (size_t k = 0; k < n; k++) all = all && t->byte_token[text[i + k]] >= 0;
            if (all) {
                for (size_t k = 0; k < n; k++) add_symbol(&w, (uint32_t)(i + k), 1, t->byte_token[text[i + k]], false);
                fusing = false;
            } else if (t->model_unk_id >= 0) {
                add_unknown(&w, (uint32_t)i, (uint32_t)n, &fusing);
            } /* else dropped, as by BPE above */
        }
        i += n;
    }
    if (st == ATTN_OK) st = merge_all(&w, out);
    word_end(&w);
    return st;
}
