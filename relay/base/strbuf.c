/* strbuf.c — see strbuf.h. */
#include "base/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reserve(struct strbuf *sb, size_t extra)
{
    if (sb->len + extra + 1 <= sb->cap)
        return 0;
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < sb->len + extra + 1)
        cap *= 2;
    char *b = realloc(sb->buf, cap);
    if (!b) {
        sb->oom = 1;
        return -1;
    }
    sb->buf = b;
    sb->cap = cap;
    return 0;
}

void strbuf_reset(struct strbuf *sb)
{
    sb->len = 0;
    sb->oom = 0;
    if (sb->buf)
        sb->buf[0] = '\0';
}

void strbuf_printf(struct strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[64];
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0 || reserve(sb, (size_t)n) < 0)
        return;
    if ((size_t)n < sizeof(small)) {
        memcpy(sb->buf + sb->len, small, (size_t)n + 1);
    } else {
        va_start(ap, fmt);
        vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    sb->len += (size_t)n;
}

void strbuf_add(struct strbuf *sb, const char *data, size_t len)
{
    if (reserve(sb, len) < 0)
        return;
    memcpy(sb->buf + sb->len, data, len);
    sb->len += len;
    sb->buf[sb->len] = '\0';
}

void strbuf_array_elem(struct strbuf *sb, const char *s)
{
    size_t n = strlen(s);
    if (reserve(sb, 2 * n + 2) < 0)
        return;
    char *o = sb->buf + sb->len;
    *o++ = '"';
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            *o++ = '\\';
        *o++ = *s;
    }
    *o++ = '"';
    *o = '\0';
    sb->len = (size_t)(o - sb->buf);
}

const char *strbuf_str(const struct strbuf *sb)
{
    return sb->buf ? sb->buf : "";
}

void strbuf_free(struct strbuf *sb)
{
    free(sb->buf);
    memset(sb, 0, sizeof(*sb));
}
