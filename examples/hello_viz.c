/* The chapter's example as a self-contained HTML report (libattn_viz):
 * hello_viz OUT.html */
#include <attn_chapter.h>
#include <attn_viz.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT.html\n", argv[0]);
        return 2;
    }
    attn_chapter ch;
    if (attn_chapter_compute(&ch) != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", attn_last_error());
        return 1;
    }
    attn_report r = ATTN_REPORT_INIT;
    r.title = "the chapter's example, causal";
    r.heads = 1;
    r.len_q = r.len_kv = ATTN_CHAPTER_POSITIONS;
    r.weights = &ch.causal.weights[0][0];
    if (attn_report_write_html(argv[1], &r) != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", attn_last_error());
        return 1;
    }
    printf("wrote %s\n", argv[1]);
    return 0;
}
