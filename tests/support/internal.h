/* internal.h — what the files of the test support share among themselves
 * (not for tests: they include testlib.h). */
#ifndef OUTBOX_TESTLIB_INTERNAL_H
#define OUTBOX_TESTLIB_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>

/** malloc that aborts instead of returning NULL. */
void *tl_xmalloc(size_t n);

/** The first @p n bytes of @p s as a new string. */
char *tl_xstrndup(const char *s, size_t n);

/** vsnprintf into a new string. */
char *tl_vfmt(const char *fmt, va_list ap);

/** Reads a whole file into a new NUL-terminated string; NULL if it cannot be opened. */
char *tl_read_file(const char *path, size_t *len_out);

#endif
