/* log.c — logfmt or JSON lines on stderr, one write(2) per line so that
 * lines from librdkafka's threads never interleave with the loop's. */
#include "base/log.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/redact.h"

static enum log_level min_level = LOG_LVL_INFO;
static enum log_format line_format = LOG_FORMAT_LOGFMT;

/* syslog priorities (LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG) by level. */
static const int journal_priority[] = { 3, 4, 6, 7 };
static pthread_once_t journal_once = PTHREAD_ONCE_INIT;
static bool journal;

/* systemd sets $JOURNAL_STREAM to the device:inode of the stream it connected
 * to stderr (systemd.exec(5)); it is ours only if stderr still is that stream,
 * not a file a wrapper redirected it to. */
static void journal_detect(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    journal = js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
              (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_set_format(enum log_format format)
{
    line_format = format;
}

int log_format_parse(const char *name)
{
    if (strcmp(name, "logfmt") == 0)
        return LOG_FORMAT_LOGFMT;
    if (strcmp(name, "json") == 0)
        return LOG_FORMAT_JSON;
    return -1;
}

static const char *const level_names[] = { "error", "warn", "info", "debug" };

void log_set_level(enum log_level level)
{
    min_level = level;
}

int log_level_parse(const char *name)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
        if (strcasecmp(name, level_names[i]) == 0)
            return (int)i;
    if (strcasecmp(name, "warning") == 0)
        return LOG_LVL_WARN;
    return -1;
}

int log_enabled(enum log_level level)
{
    return level <= min_level;
}

/* Appends @p s as a logfmt quoted value, escaping what would break the line. */
static size_t put_quoted(char *buf, size_t pos, size_t cap, const char *s)
{
    if (pos < cap)
        buf[pos++] = '"';
    for (; s && *s && pos + 3 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        char esc = c == '"' ? '"' : c == '\\' ? '\\' : c == '\n' ? 'n' : c == '\t' ? 't'
                 : c == '\r' ? 'r' : 0;
        if (esc) {
            buf[pos++] = '\\';
            buf[pos++] = esc;
        } else {
            buf[pos++] = c < 0x20 ? ' ' : (char)c;
        }
    }
    if (pos < cap)
        buf[pos++] = '"';
    return pos;
}

const char *log_quote(const char *s)
{
    static _Thread_local char ring[4][1024];
    static _Thread_local unsigned next;
    char *buf = ring[next++ % 4];
    /* libpq's messages end in a newline that says nothing. */
    char tmp[1024];
    snprintf(tmp, sizeof(tmp), "%s", s ? s : "");
    size_t n = strlen(tmp);
    while (n > 0 && (tmp[n - 1] == '\n' || tmp[n - 1] == ' '))
        tmp[--n] = '\0';
    size_t pos = put_quoted(buf, 0, sizeof(ring[0]) - 1, tmp);
    buf[pos] = '\0';
    return buf;
}

const char *log_quote_pq(const char *conninfo, const char *message)
{
    /* Redact before log_quote() cuts the text: a cut password no longer matches. */
    char *clean = redact_message(conninfo, message);
    const char *quoted = log_quote(clean ? clean : "(message withheld: no memory to redact it)");
    free(clean);
    return quoted;
}

/* ---- JSON ------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at @p s (at most @p n bytes), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len;
    unsigned min;
    unsigned cp;
    if (s[0] < 0x80)
        return 1;
    if ((s[0] & 0xE0) == 0xC0) {
        len = 2, min = 0x80, cp = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        len = 3, min = 0x800, cp = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        len = 4, min = 0x10000, cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* Appends "…" with @p n bytes of @p s escaped for JSON; bytes that are not
 * UTF-8 become U+FFFD, so every line is valid JSON whatever a value held.
 * Needs pos + 2 <= cap; a string that does not fit is cut (and *cut set). */
static size_t json_string(char *buf, size_t pos, size_t cap, const char *s, size_t n, bool *cut)
{
    buf[pos++] = '"';
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (pos + 7 >= cap) {
            *cut = true; /* room for the closing quote is kept */
            break;
        }
        unsigned char c = u[i];
        if (c == '"' || c == '\\') {
            buf[pos++] = '\\';
            buf[pos++] = (char)c;
            i++;
        } else if (c == '\n' || c == '\t' || c == '\r') {
            buf[pos++] = '\\';
            buf[pos++] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            pos += (size_t)snprintf(buf + pos, cap - pos, "\\u%04x", c);
            i++;
        } else {
            size_t len = utf8_len(u + i, n - i);
            if (len == 0) {
                memcpy(buf + pos, "\\ufffd", 6);
                pos += 6;
                i++;
            } else {
                memcpy(buf + pos, u + i, len);
                pos += len;
                i += len;
            }
        }
    }
    buf[pos++] = '"';
    return pos;
}

/* A bare logfmt value that is also a JSON number or boolean keeps its type. */
static bool json_literal(const char *v, size_t n)
{
    if ((n == 4 && memcmp(v, "true", 4) == 0) || (n == 5 && memcmp(v, "false", 5) == 0))
        return true;
    size_t i = 0;
    if (i < n && v[i] == '-')
        i++;
    if (i == n || v[i] < '0' || v[i] > '9')
        return false;
    if (v[i] == '0')
        i++;
    else
        while (i < n && v[i] >= '0' && v[i] <= '9')
            i++;
    if (i < n && v[i] == '.') {
        i++;
        size_t d = i;
        while (i < n && v[i] >= '0' && v[i] <= '9')
            i++;
        if (i == d)
            return false;
    }
    if (i < n && (v[i] == 'e' || v[i] == 'E')) {
        i++;
        if (i < n && (v[i] == '+' || v[i] == '-'))
            i++;
        size_t d = i;
        while (i < n && v[i] >= '0' && v[i] <= '9')
            i++;
        if (i == d)
            return false;
    }
    return i == n;
}

/* Turns the logfmt pairs of @p kv (`a=1 b="x y"`) into JSON members appended
 * after a comma each. A key without '=' becomes a member with value "". */
static size_t json_members(char *buf, size_t pos, size_t cap, const char *kv)
{
    char val[4096];
    const char *p = kv;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *key = p;
        while (*p && *p != '=' && *p != ' ')
            p++;
        size_t klen = (size_t)(p - key);
        size_t vlen = 0;
        bool quoted = false;
        if (*p == '=') {
            p++;
            if (*p == '"') {
                quoted = true;
                for (p++; *p && *p != '"'; p++) {
                    char c = *p;
                    if (c == '\\' && p[1]) {
                        p++;
                        c = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p == 'r' ? '\r' : *p;
                    }
                    if (vlen < sizeof(val))
                        val[vlen++] = c;
                }
                if (*p == '"')
                    p++;
            } else {
                while (*p && *p != ' ') {
                    if (vlen < sizeof(val))
                        val[vlen++] = *p;
                    p++;
                }
            }
        }
        /* A member is written whole or not at all: the line stays valid JSON. */
        size_t mark = pos;
        bool cut = false;
        if (pos + klen + 8 >= cap)
            break;
        buf[pos++] = ',';
        /* The line's own members keep their meaning. */
        bool reserved = (klen == 2 && !memcmp(key, "ts", 2)) ||
                        (klen == 5 && !memcmp(key, "level", 5)) ||
                        (klen == 3 && !memcmp(key, "msg", 3));
        if (reserved) {
            char renamed[8];
            snprintf(renamed, sizeof(renamed), "%.*s_", (int)klen, key);
            pos = json_string(buf, pos, cap, renamed, klen + 1, &cut);
        } else {
            pos = json_string(buf, pos, cap, key, klen, &cut);
        }
        if (cut || pos + 3 >= cap) {
            pos = mark;
            break;
        }
        buf[pos++] = ':';
        if (!quoted && vlen > 0 && json_literal(val, vlen)) {
            if (pos + vlen >= cap) {
                pos = mark;
                break;
            }
            memcpy(buf + pos, val, vlen);
            pos += vlen;
        } else {
            pos = json_string(buf, pos, cap, val, vlen, &cut);
            if (cut) {
                pos = mark;
                break;
            }
        }
    }
    return pos;
}

void log_vwrite(enum log_level level, const char *msg, const char *kvfmt, va_list ap)
{
    if (!log_enabled(level))
        return;
    pthread_once(&journal_once, journal_detect);

    char kv[4096] = "";
    if (kvfmt && *kvfmt)
        vsnprintf(kv, sizeof(kv), kvfmt, ap);

    char line[8192];
    size_t cap = sizeof(line) - 2; /* room for '}' and the newline */
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    char ts[64];
    snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (long)(tv.tv_usec / 1000));

    size_t pos = 0;
    if (journal)
        pos += (size_t)snprintf(line, cap, "<%d>", journal_priority[level]);

    if (line_format == LOG_FORMAT_JSON) {
        int n = snprintf(line + pos, cap - pos, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":", ts,
                         level_names[level]);
        pos += n > 0 ? (size_t)n : 0;
        bool cut = false;
        pos = json_string(line, pos, cap, msg, strlen(msg), &cut);
        pos = json_members(line, pos, cap, kv);
        line[pos++] = '}';
    } else {
        int n = snprintf(line + pos, cap - pos, "ts=%s level=%s msg=", ts, level_names[level]);
        pos += n > 0 ? (size_t)n : 0;
        pos = put_quoted(line, pos, cap, msg);
        if (*kv && pos + 1 < cap) {
            line[pos++] = ' ';
            n = snprintf(line + pos, cap - pos, "%s", kv);
            if (n > 0)
                pos += (size_t)n < cap - pos ? (size_t)n : cap - pos - 1;
        }
    }
    line[pos++] = '\n';

    /* A single write keeps lines whole; a short write to stderr is not worth retrying. */
    ssize_t w = write(STDERR_FILENO, line, pos);
    (void)w;
}

void log_write(enum log_level level, const char *msg, const char *kvfmt, ...)
{
    va_list ap;
    va_start(ap, kvfmt);
    log_vwrite(level, msg, kvfmt, ap);
    va_end(ap);
}
