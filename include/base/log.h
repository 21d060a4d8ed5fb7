/* log.h — the one logging family of outbox-relay.
 *
 * Every line goes to stderr, as logfmt (`ts=… level=… msg="…" key=value …`)
 * or as one JSON object ({"ts":…,"level":…,"msg":…,"key":value,…}). The
 * message is a fixed text; variable data goes into the key/value part so
 * that log processors can index it. Callers always write the key/value part
 * as logfmt; the JSON format converts it. When stderr is the systemd journal
 * ($JOURNAL_STREAM names it), each line starts with its syslog priority
 * ("<3>" error … "<7>" debug, sd-daemon(3)). */
#ifndef OUTBOX_LOG_H
#define OUTBOX_LOG_H

#include <stdarg.h>

enum log_level { LOG_LVL_ERROR = 0, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

enum log_format { LOG_FORMAT_LOGFMT = 0, LOG_FORMAT_JSON };

/** Chooses the line format (logfmt until called). */
void log_set_format(enum log_format format);

/** Parses "logfmt|json"; @return the format, or -1 if unknown. */
int log_format_parse(const char *name);

/** Sets the lowest level that is written. */
void log_set_level(enum log_level level);

/** Parses "error|warn|info|debug"; @return the level, or -1 if unknown. */
int log_level_parse(const char *name);

/** @return non-zero if a line at @p level would be written (check before costly formatting). */
int log_enabled(enum log_level level);

/** Writes one line: @p msg is quoted as is; @p kvfmt (printf format, may be "")
 *  produces the `key=value` pairs that follow it. */
void log_write(enum log_level level, const char *msg, const char *kvfmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Quotes @p s as a logfmt value ("…" with \" \\ \n \t escaped) for a "%s" in kvfmt.
 *  Returns one of a few thread-local buffers: use it within the same statement,
 *  at most four times per call. Long values are cut. */
const char *log_quote(const char *s);

/** log_quote() for text libpq wrote after being handed @p conninfo (connection
 *  and conninfo parse errors): every secret of the conninfo is replaced first
 *  (redact_message()), since libpq quotes pieces of it that can be the password. */
const char *log_quote_pq(const char *conninfo, const char *message);

void log_vwrite(enum log_level level, const char *msg, const char *kvfmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#define log_error(msg, ...) log_write(LOG_LVL_ERROR, msg, __VA_ARGS__)
#define log_warn(msg, ...)  log_write(LOG_LVL_WARN, msg, __VA_ARGS__)
#define log_info(msg, ...)  log_write(LOG_LVL_INFO, msg, __VA_ARGS__)
#define log_debug(msg, ...) \
    do { if (log_enabled(LOG_LVL_DEBUG)) log_write(LOG_LVL_DEBUG, msg, __VA_ARGS__); } while (0)

#endif
