#include "quant/quant.h"
QUANT_KERNELS_ABSENT(attn__quant_kernels_avx2, "avx2");
