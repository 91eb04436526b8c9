/*
 * models.h — where the tests find the real models: scripts/fetch-models.sh
 * puts them in $ATTN_MODEL_DIR, by default ~/.cache/attn/models.  A test
 * that needs one and does not find it is skipped with a message, never
 * failed.
 */
#ifndef ATTN_TEST_MODELS_H
#define ATTN_TEST_MODELS_H

#define TEST_QWEN_GGUF "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
#define TEST_GEMMA_GGUF "gemma-3-270m-q4_k_m.gguf"
#define TEST_SMOLLM2_GGUF "smollm2-135m-instruct-q4_1.gguf"

/* $ATTN_MODEL_DIR when set and not empty, else $HOME/.cache/attn/models. */
const char *test_model_dir(void);
/* test_model_dir()/file in a static buffer that rotates among 8, or NULL
 * when no such file is there. */
const char *test_model_path(const char *file);
/* test_model_path(file), or the test skipped with "skipped: PATH is not
 * there (scripts/fetch-models.sh fetches it)". */
const char *test_model_or_skip(const char *file);

#endif
