/* strbuf.h — a growable text buffer for statement parameters built per batch,
 * reused across batches so the hot path does not allocate. */
#ifndef OUTBOX_STRBUF_H
#define OUTBOX_STRBUF_H

#include <stddef.h>

struct strbuf {
    char *buf;
    size_t len;
    size_t cap;
    int oom;        /* an append failed: the content is incomplete */
};

/** Empties the buffer (keeps its memory). */
void strbuf_reset(struct strbuf *sb);

/** Appends printf-formatted text; on allocation failure sets sb->oom. */
void strbuf_printf(struct strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Appends @p len bytes at @p data (which may hold NUL bytes); on allocation
 *  failure sets sb->oom. */
void strbuf_add(struct strbuf *sb, const char *data, size_t len);

/** Appends string literal @p lit. */
#define strbuf_lit(sb, lit) strbuf_add((sb), "" lit, sizeof(lit) - 1)

/** Appends @p s as an element of a PostgreSQL array literal: "…" with " and \ escaped. */
void strbuf_array_elem(struct strbuf *sb, const char *s);

/** @return the NUL-terminated text ("" when empty). */
const char *strbuf_str(const struct strbuf *sb);

void strbuf_free(struct strbuf *sb);

#endif
