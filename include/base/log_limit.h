/* log_limit.h — per-row failure lines, rate-limited. Thousands of poison rows
 * must not write thousands of lines: of each kind of line (one message, one
 * error) the first few of an interval are written in full, the rest only
 * counted, and one summary line per interval says how many there were and
 * which rows they began and ended with. */
#ifndef OUTBOX_LOG_LIMIT_H
#define OUTBOX_LOG_LIMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/log.h"

#define LOG_LIMIT_BURST 5           /* lines of a kind written in full per interval */
#define LOG_LIMIT_INTERVAL_S 10.0
#define LOG_LIMIT_KINDS 16          /* kinds followed at once; more evict the oldest early */

struct log_limit_kind {
    const char *msg;                /* NULL: slot free; else the full line's (static) message */
    char error[160];
    enum log_level level;
    double since;                   /* when its interval began */
    unsigned written;               /* in full, this interval */
    uint64_t suppressed;            /* counted only */
    int64_t first_id, last_id;      /* of the suppressed rows */
    double last_at;                 /* when the last of them was counted */
};

struct log_limit {
    double interval;
    unsigned burst;
    struct log_limit_kind kinds[LOG_LIMIT_KINDS];
};

/** Empties @p l; @p interval seconds, @p burst full lines per kind and interval. */
void log_limit_init(struct log_limit *l, double interval, unsigned burst);

/** Counts one line of @p level and @p msg (a static string) about row @p id
 *  failing with @p error, at time @p now (any clock, seconds).
 *  @return true when the caller writes it in full, false when it was only
 *  counted for the summary. */
bool log_limit_allow(struct log_limit *l, double now, enum log_level level, const char *msg,
                     const char *error, int64_t id);

/** Writes the summary of every kind whose interval has ended by @p now
 *  (all of them with @p now = INFINITY, e.g. at exit) and forgets it:
 *  `msg="more rows failed like this" like=<msg> rows=N seconds=S error=…
 *  first_outbox_id=… last_outbox_id=…`, S from the interval's first line to
 *  its last counted row. */
void log_limit_flush(struct log_limit *l, double now);

#endif
