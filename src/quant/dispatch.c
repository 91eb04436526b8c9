/*
 * dispatch.c — which micro-kernel table (src/isa/quant_table.h) the
 * quantized products run on: the ISA registry's (src/isa/isa.h), the
 * quantized products being one of its kinds of micro-kernel.  The list of
 * ISAs, their CPU checks, the completion of each table (complete_quant)
 * and the environment's choice (ATTN_ARCH, ATTN_KERNEL=ref,
 * ATTN_ARCH_DEBUG=1) are the registry's, one per process for every kind;
 * this file only names what the public header promises.
 */
#include "quant/quant.h"

#include "isa/isa.h"

const quant_table *attn__quant_active(void) { return attn__isa_quant(attn__isa_chosen()); }

const char *attn_quant_isa(attn_precision precision) {
    const int isa = attn__isa_chosen();
    if (attn__isa_forces_ref()) return "ref";
    return precision == ATTN_PRECISION_FAST ? attn__isa_quant(isa)->fast_isa : attn__isa_name(isa);
}

int attn_quant_decode_rows(attn_precision precision) {
    const quant_table *k = attn__quant_active();
    return precision == ATTN_PRECISION_FAST ? k->q8_mr : k->f32_mr;
}
