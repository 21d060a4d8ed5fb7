/* log_limit.c — see log_limit.h. */
#include "base/log_limit.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void log_limit_init(struct log_limit *l, double interval, unsigned burst)
{
    memset(l, 0, sizeof(*l));
    l->interval = interval;
    l->burst = burst;
}

static void summarize(struct log_limit_kind *k)
{
    if (k->suppressed > 0) {
        /* From the first line of the interval to the last row counted. */
        double secs = k->last_at - k->since;
        log_write(k->level, "more rows failed like this",
                  "like=%s rows=%" PRIu64 " seconds=%.1f error=%s first_outbox_id=%" PRId64
                  " last_outbox_id=%" PRId64,
                  log_quote(k->msg), k->suppressed, secs, log_quote(k->error), k->first_id,
                  k->last_id);
    }
    k->msg = NULL;
}

bool log_limit_allow(struct log_limit *l, double now, enum log_level level, const char *msg,
                     const char *error, int64_t id)
{
    if (!log_enabled(level))
        return false;
    char err[sizeof(l->kinds[0].error)];
    snprintf(err, sizeof(err), "%s", error ? error : "");
    struct log_limit_kind *k = NULL, *free_slot = NULL, *oldest = NULL;
    for (int i = 0; i < LOG_LIMIT_KINDS && !k; i++) {
        struct log_limit_kind *c = &l->kinds[i];
        if (c->msg && now - c->since >= l->interval)
            summarize(c); /* its interval is over: a new one begins */
        if (!c->msg) {
            free_slot = free_slot ? free_slot : c;
            continue;
        }
        if (c->msg == msg && c->level == level && strcmp(c->error, err) == 0)
            k = c;
        else if (!oldest || c->since < oldest->since)
            oldest = c;
    }
    if (!k) {
        /* More kinds than slots: the oldest one's summary comes early. */
        if (!free_slot) {
            summarize(oldest);
            free_slot = oldest;
        }
        k = free_slot;
        memset(k, 0, sizeof(*k));
        k->msg = msg;
        k->level = level;
        k->since = now;
        memcpy(k->error, err, sizeof(err));
    }
    if (k->written < l->burst) {
        k->written++;
        return true;
    }
    if (k->suppressed++ == 0)
        k->first_id = id;
    k->last_id = id;
    k->last_at = now;
    return false;
}

void log_limit_flush(struct log_limit *l, double now)
{
    for (int i = 0; i < LOG_LIMIT_KINDS; i++) {
        struct log_limit_kind *k = &l->kinds[i];
        if (k->msg && now - k->since >= l->interval)
            summarize(k);
    }
}
