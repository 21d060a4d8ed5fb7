/* log.c — logfmt lines on stderr, one write(2) per line so that lines from
 * librdkafka's threads never interleave with the loop's. */
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static enum log_level min_level = LOG_LVL_INFO;

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

void log_vwrite(enum log_level level, const char *msg, const char *kvfmt, va_list ap)
{
    if (!log_enabled(level))
        return;

    char line[4096];
    size_t cap = sizeof(line) - 1; /* room for the newline */
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);

    int n = snprintf(line, cap, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s msg=",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (long)(tv.tv_usec / 1000), level_names[level]);
    size_t pos = n > 0 ? (size_t)n : 0;
    pos = put_quoted(line, pos, cap, msg);

    if (kvfmt && *kvfmt && pos + 1 < cap) {
        line[pos++] = ' ';
        n = vsnprintf(line + pos, cap - pos, kvfmt, ap);
        if (n > 0)
            pos += (size_t)n < cap - pos ? (size_t)n : cap - pos - 1;
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
