/* redact.c — the one conninfo lexer behind every redaction (see redact.h). */
#include "base/redact.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/hex.h"
#include "base/strbuf.h"

/* Case-insensitive search of @p needle in the @p n bytes at @p s. */
static bool span_has(const char *s, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++) {
        if (!strncasecmp(s + i, needle, m))
            return true;
    }
    return false;
}

static bool conn_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* --- the lexer ----------------------------------------------------------- */

/* libpq itself only takes the lower-case schemes as a URI and reports the
 * rest as a malformed key=value string, quoting it whole; reading them as a
 * URI here finds the password inside that quote. */
static size_t uri_scheme_len(const char *s)
{
    if (!strncasecmp(s, "postgresql://", 13))
        return 13;
    if (!strncasecmp(s, "postgres://", 11))
        return 11;
    return 0;
}

/* A URI query key is percent-encoded: "pass%77ord" is still a password. */
static bool uri_key_is_secret(const char *k, size_t n)
{
    char key[64];
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (len + 1 >= sizeof key)
            return true; /* no libpq keyword is this long; mask rather than guess */
        char c = k[i];
        if (c == '%' && i + 2 < n && hex_value(k[i + 1]) >= 0 && hex_value(k[i + 2]) >= 0) {
            c = (char)(hex_value(k[i + 1]) * 16 + hex_value(k[i + 2]));
            i += 2;
        }
        key[len++] = c;
    }
    return span_has(key, len, "password");
}

/* libpq's URI: postgres[ql]://[user[:password]@][host][/dbname][?param=value&…].
 * The userinfo ends at the LAST '@' before the query: a stray '@' or '/' in a
 * password then over-redacts instead of leaking. */
static void walk_uri(const char *s, size_t scheme_len, redact_span_fn fn, void *arg)
{
    const char *auth = s + scheme_len;
    const char *query = strchr(auth, '?');
    const char *end = query ? query : auth + strlen(auth);
    const char *at = memrchr(auth, '@', (size_t)(end - auth));
    const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;

    if (colon)
        fn((size_t)(colon + 1 - s), (size_t)(at - colon - 1), REDACT_URI, arg);
    if (!query)
        return;
    for (const char *p = query + 1;;) {
        const char *amp = strchrnul(p, '&');
        const char *eq = memchr(p, '=', (size_t)(amp - p));
        if (eq && uri_key_is_secret(p, (size_t)(eq - p)))
            fn((size_t)(eq + 1 - s), (size_t)(amp - eq - 1), REDACT_URI, arg);
        if (!*amp)
            break;
        p = amp + 1;
    }
}

struct kv_scan {
    bool failed;
    size_t fail_at;     /* start of the token that did not parse */
    size_t first_pw;    /* start of the first password value; SIZE_MAX if none */
};

/* Follows libpq's conninfo_parse(): keyword [ws] = [ws] value, the value
 * either bare or in single quotes, with backslash escapes in both. Reports
 * (to @p fn, unless NULL) the secret values that start before @p stop. */
static void walk_kv(const char *s, size_t stop, redact_span_fn fn, void *arg, struct kv_scan *scan)
{
    scan->failed = false;
    scan->first_pw = SIZE_MAX;
    for (const char *p = s;;) {
        while (conn_space(*p))
            p++;
        if (!*p)
            return;

        const char *kw = p;
        while (*p && !conn_space(*p) && *p != '=')
            p++;
        size_t kwlen = (size_t)(p - kw);
        while (conn_space(*p))
            p++;
        if (*p != '=' || kwlen == 0)
            goto fail;
        p++;
        while (conn_space(*p))
            p++;

        const char *val = p;
        if (*p == '\'') {
            for (p++; *p && *p != '\''; p++) {
                if (*p == '\\' && p[1])
                    p++;
            }
            if (*p != '\'')
                goto fail;
            p++;
        } else {
            for (; *p && !conn_space(*p); p++) {
                if (*p == '\\' && p[1])
                    p++;
            }
        }

        /* A dbname may itself be a connection string (expand_dbname). */
        bool password = span_has(kw, kwlen, "password");
        bool nested = !password && kwlen == 6 && !strncmp(kw, "dbname", 6) &&
                      (memchr(val, '=', (size_t)(p - val)) ||
                       span_has(val, (size_t)(p - val), "://"));
        size_t off = (size_t)(val - s);
        if (password && scan->first_pw == SIZE_MAX)
            scan->first_pw = off;
        if ((password || nested) && fn && off < stop)
            fn(off, (size_t)(p - val), nested ? REDACT_NESTED : REDACT_KV, arg);
        continue;

    fail:
        scan->failed = true;
        scan->fail_at = (size_t)(kw - s);
        return;
    }
}

void redact_conninfo_spans(const char *conninfo, redact_span_fn fn, void *arg)
{
    const char *s = conninfo ? conninfo : "";
    size_t scheme_len = uri_scheme_len(s);
    if (scheme_len) {
        walk_uri(s, scheme_len, fn, arg);
        return;
    }

    struct kv_scan scan;
    walk_kv(s, SIZE_MAX, NULL, NULL, &scan);
    if (!scan.failed) {
        walk_kv(s, SIZE_MAX, fn, arg, &scan);
        return;
    }
    /* libpq quotes the token it choked on, and with an unquoted space in a
     * password that token is the password's second half: what follows the
     * first password is as secret as the password itself. */
    size_t rest = scan.first_pw < scan.fail_at ? scan.first_pw : scan.fail_at;
    walk_kv(s, rest, fn, arg, &scan);
    fn(rest, strlen(s) - rest, REDACT_REST, arg);
}

/* --- the conninfo, masked ------------------------------------------------ */

struct mask_state {
    const char *s;
    size_t pos;
    struct strbuf out;
};

static void mask_span(size_t off, size_t len, enum redact_kind kind, void *arg)
{
    (void)kind;
    struct mask_state *m = arg;
    strbuf_printf(&m->out, "%.*s%s", (int)(off - m->pos), m->s + m->pos, REDACT_PLACEHOLDER);
    m->pos = off + len;
}

char *redact_conninfo(const char *conninfo)
{
    struct mask_state m = { .s = conninfo ? conninfo : "" };
    redact_conninfo_spans(m.s, mask_span, &m);
    strbuf_printf(&m.out, "%s", m.s + m.pos);
    char *res = m.out.oom ? NULL : strdup(strbuf_str(&m.out));
    strbuf_free(&m.out);
    return res;
}

/* --- messages ------------------------------------------------------------ */

struct needles {
    char **v;
    size_t n, cap;
    bool oom;
};

static void needle_add(struct needles *nd, const char *s, size_t len)
{
    if (len == 0 || nd->oom)
        return;
    for (size_t i = 0; i < nd->n; i++) {
        if (strlen(nd->v[i]) == len && !memcmp(nd->v[i], s, len))
            return;
    }
    if (nd->n == nd->cap) {
        size_t cap = nd->cap ? nd->cap * 2 : 16;
        char **v = realloc(nd->v, cap * sizeof *v);
        if (!v) {
            nd->oom = true;
            return;
        }
        nd->v = v;
        nd->cap = cap;
    }
    if (!(nd->v[nd->n] = strndup(s, len))) {
        nd->oom = true;
        return;
    }
    nd->n++;
}

/* Where libpq may cut a secret before quoting a piece of it: at spaces (the
 * key=value lexer), at '%' (URI decoding) and at the URI's delimiters (a '/'
 * in a URI password makes libpq read "user:pa" as host and port). */
static bool is_delim(char c)
{
    return conn_space(c) || (c && strchr("%'\\\"/:@?&=,[]", c));
}

/* Adds @p s and each of its fragments of two characters or more: a single
 * character says nothing of the password and would blank out half a message. */
static void add_with_fragments(struct needles *nd, const char *s, size_t len)
{
    needle_add(nd, s, len);
    for (size_t i = 0; i < len;) {
        while (i < len && is_delim(s[i]))
            i++;
        size_t start = i;
        while (i < len && !is_delim(s[i]))
            i++;
        if (i - start >= 2)
            needle_add(nd, s + start, i - start);
    }
}

/* A key=value value as libpq reads it: quotes dropped, backslash escapes resolved. */
static char *kv_unescape(const char *s, size_t len)
{
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    if (len >= 2 && s[0] == '\'' && s[len - 1] == '\'') {
        s++;
        len -= 2;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\\' && i + 1 < len)
            i++;
        out[n++] = s[i];
    }
    out[n] = '\0';
    return out;
}

/* A URI part as libpq decodes it; an invalid or %00 escape stays as written. */
static char *uri_decode(const char *s, size_t len)
{
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%' && i + 2 < len && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
            char c = (char)(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
            if (c) {
                out[n++] = c;
                i += 2;
                continue;
            }
        }
        out[n++] = s[i];
    }
    out[n] = '\0';
    return out;
}

struct collect {
    struct needles *nd;
    const char *s;
    int depth;
};

static void collect_span(size_t off, size_t len, enum redact_kind kind, void *arg)
{
    struct collect *c = arg;
    const char *v = c->s + off;
    add_with_fragments(c->nd, v, len);
    if (kind == REDACT_REST)
        return; /* its meaning is unknown: what was written is all there is */

    char *dec = kind == REDACT_URI ? uri_decode(v, len) : kv_unescape(v, len);
    if (!dec) {
        c->nd->oom = true;
        return;
    }
    add_with_fragments(c->nd, dec, strlen(dec));
    /* libpq expands a dbname connection string once; one level more costs nothing. */
    if (kind == REDACT_NESTED && c->depth < 2) {
        struct collect inner = { .nd = c->nd, .s = dec, .depth = c->depth + 1 };
        redact_conninfo_spans(dec, collect_span, &inner);
    }
    free(dec);
}

static int longest_first(const void *a, const void *b)
{
    size_t la = strlen(*(char *const *)a), lb = strlen(*(char *const *)b);
    return la < lb ? 1 : la > lb ? -1 : 0;
}

static bool word_char(char c)
{
    return isalnum((unsigned char)c);
}

/* A short needle counts only as a whole word: "pw" must not eat "pwd". */
static bool matches_at(const char *msg, size_t mlen, size_t i, const char *needle, size_t len)
{
    if (len > mlen - i || memcmp(msg + i, needle, len) != 0)
        return false;
    if (len >= 4)
        return true;
    if (word_char(needle[0]) && i > 0 && word_char(msg[i - 1]))
        return false;
    if (word_char(needle[len - 1]) && i + len < mlen && word_char(msg[i + len]))
        return false;
    return true;
}

char *redact_message(const char *conninfo, const char *message)
{
    if (!message)
        message = "";
    struct needles nd = { 0 };
    struct collect c = { .nd = &nd, .s = conninfo ? conninfo : "" };
    redact_conninfo_spans(c.s, collect_span, &c);

    char *res = NULL;
    size_t *lens = nd.n ? malloc(nd.n * sizeof *lens) : NULL;
    if (!nd.oom && (lens || !nd.n)) {
        if (nd.n) /* nd.v is NULL then, which qsort may not be given */
            qsort(nd.v, nd.n, sizeof *nd.v, longest_first);
        for (size_t k = 0; k < nd.n; k++)
            lens[k] = strlen(nd.v[k]);

        struct strbuf out = { 0 };
        size_t mlen = strlen(message), copied = 0;
        for (size_t i = 0; i < mlen;) {
            size_t hit = 0;
            for (size_t k = 0; k < nd.n && !hit; k++) {
                if (matches_at(message, mlen, i, nd.v[k], lens[k]))
                    hit = lens[k];
            }
            if (!hit) {
                i++;
                continue;
            }
            strbuf_printf(&out, "%.*s%s", (int)(i - copied), message + copied, REDACT_PLACEHOLDER);
            i += hit;
            copied = i;
        }
        strbuf_printf(&out, "%s", message + copied);
        if (!out.oom)
            res = strdup(strbuf_str(&out));
        strbuf_free(&out);
    }
    for (size_t k = 0; k < nd.n; k++)
        free(nd.v[k]);
    free(nd.v);
    free(lens);
    return res;
}
