/*
 * quote.c — names from files as printable text for messages (quote.h).
 */
#include "formats/quote.h"

const char *attn__quote(const void *name, uint64_t len, char *buf, size_t cap) {
    const uint8_t *p = name;
    size_t n = 0;
    for (uint64_t i = 0; i < len && n + 8 < cap; i++) {
        if (i == 48) {
            n += (size_t)snprintf(buf + n, cap - n, "...");
            break;
        }
        if (p[i] >= 0x20 && p[i] < 0x7F && p[i] != '\\')
            buf[n++] = (char)p[i];
        else
            n += (size_t)snprintf(buf + n, cap - n, "\\x%02x", p[i]);
    }
    buf[n] = 0;
    return buf;
}
