#include "quant/quant.h"
QUANT_KERNELS_ABSENT(attn__quant_kernels_avx512, "avx512");
