/* The chapter's example through the library: three positions, one head. */
#include <attn.h>
#include <math.h>
#include <stdio.h>

int main(void) {
    const float c = sqrtf(2.0f) * logf(2.0f);            /* c = √2·ln2 */
    float q[3 * 2] = {1, 0, 0, 1, 1, 1};                  /* Q = X·W_Q     [L=3, D=2]  */
    float k[3 * 2] = {c, 0, 0, c, c, c};                  /* K = X·W_K     [S=3, D=2]  */
    float v[3 * 2] = {2, 0, 0, 1, 2, 1};                  /* V = X·W_V     [S=3, Dv=2] */
    float o[3 * 2], w[3 * 3];                             /* out [3, 2], weights [3, 3] */
    attn_tensor Q = attn_tensor_2d(q, 3, 2), K = attn_tensor_2d(k, 3, 2),
                V = attn_tensor_2d(v, 3, 2), O = attn_tensor_2d(o, 3, 2);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;      /* the defaults, then: */
    opt.causal = 1;                                       /* hide the future */
    if (attn_sdpa_forward(&Q, &K, &V, &opt, &O, w, NULL) != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", attn_last_error());
        return 1;
    }
    for (int i = 0; i < 3; i++)
        printf("o%d = [%.4f, %.4f]   weights [%.4f, %.4f, %.4f]\n", i + 1, o[2 * i],
               o[2 * i + 1], w[3 * i], w[3 * i + 1], w[3 * i + 2]);
    return 0;
}
