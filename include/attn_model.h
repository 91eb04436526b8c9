/*
 * attn_model.h — DEPRECATED: the GGUF reader's old name.  Include
 * attn_gguf.h instead; this header only includes it, so that callers
 * written before 0.4 still build, and goes away at 1.0.
 */
#ifndef ATTN_MODEL_H
#define ATTN_MODEL_H

#include "attn_gguf.h"

#endif /* ATTN_MODEL_H */
