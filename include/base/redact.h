/* redact.h — where a libpq conninfo keeps its secrets, and keeping them out
 * of everything the relay prints.
 *
 * libpq quotes parts of the connection string in its errors ("invalid
 * percent-encoded token: "…"", "missing "=" after "…""), and those parts can
 * be the password. One lexer finds the secret parts of a conninfo; the
 * configuration dump masks them, the command line scrub overwrites them and
 * redact_message() removes them from libpq's messages before they are logged. */
#ifndef OUTBOX_REDACT_H
#define OUTBOX_REDACT_H

#include <stddef.h>

/** What replaces a secret wherever it would have been printed. */
#define REDACT_PLACEHOLDER "********"

enum redact_kind {
    REDACT_KV,      /* a key=value value as written: bare or '…', with backslash escapes */
    REDACT_URI,     /* a URI password or query value: percent-encoded */
    REDACT_NESTED,  /* dbname=… holding a connection string of its own */
    REDACT_REST,    /* everything after a syntax error (or after the password before it) */
};

/** Receives one secret part of a conninfo: @p off and @p len count bytes of
 *  the conninfo as written (@p len may be 0: an empty password). */
typedef void (*redact_span_fn)(size_t off, size_t len, enum redact_kind kind, void *arg);

/** Walks @p conninfo (NULL = "") the way libpq's parser does — key=value
 *  pairs, or a postgres[ql]:// URI whose scheme is matched in any case — and
 *  calls @p fn for each secret part, in order, never overlapping: values of
 *  keys containing "password", a dbname that is itself a conninfo, the
 *  password of a URI's userinfo. Where the text stops parsing, everything
 *  from the failing token (or from the first password value before it) to
 *  the end is one REDACT_REST part. */
void redact_conninfo_spans(const char *conninfo, redact_span_fn fn, void *arg);

/** @return a newly allocated copy of @p conninfo with each secret part
 *  replaced by REDACT_PLACEHOLDER, or NULL without memory. */
char *redact_conninfo(const char *conninfo);

/** @return a newly allocated copy of @p message (text libpq wrote after being
 *  handed @p conninfo) in which every secret of @p conninfo is replaced by
 *  REDACT_PLACEHOLDER: each secret as written, decoded, and its fragments
 *  split at spaces, '%' and URI delimiters (fragments of one character are
 *  ignored; needles under four characters only match as whole words).
 *  NULL without memory. */
char *redact_message(const char *conninfo, const char *message);

#endif
