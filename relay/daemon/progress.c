/* progress.c — see progress.h.
 *
 * The progress line's schedule does not depend on the work: every interval
 * the tick asks whether anything was published in it or rows are pending,
 * and logs only then; a steady trickle gets a line per interval, an idle
 * relay none. The drained line follows the backlog measurements (every few
 * seconds, relay_step.c): a backlog seen above zero, then a measurement of zero. */
#include "daemon/progress.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "daemon/health.h"
#include "base/log.h"

#define PROGRESS_TICK_MS 1000

struct progress {
    uv_timer_t timer;           /* first member: the close callback gets the struct back */
    const struct relay_config *cfg;
    struct relay_stats *st;

    double line_at;             /* stats_mono() of the last line, or of the start */
    uint64_t line_published;    /* published_total then */
    uint64_t tick_published;    /* published_total at the last tick */
    double progress_time;       /* unix seconds of the last tick that saw rows published */

    double backlog_seen;        /* backlog_time of the last measurement looked at */
    bool draining;              /* a measurement saw a backlog; none has seen it empty since */
    double drain_since;         /* unix seconds of that first measurement */
    uint64_t drain_published;   /* published_total then */
    int64_t drain_peak;         /* the largest backlog measured meanwhile */
};

/* A new backlog measurement: does a backlog begin, or has it drained? */
static void watch_backlog(struct progress *p)
{
    const struct relay_stats *s = p->st;
    if (!s->backlog_known || s->backlog_time == p->backlog_seen)
        return;
    p->backlog_seen = s->backlog_time;
    if (s->backlog_rows > 0) {
        if (!p->draining) {
            p->draining = true;
            p->drain_since = s->backlog_time;
            p->drain_published = s->backlog_published;
            p->drain_peak = 0;
        }
        if (s->backlog_rows > p->drain_peak)
            p->drain_peak = s->backlog_rows;
        return;
    }
    if (!p->draining)
        return;
    p->draining = false;
    /* Up to the last rows published, not to the measurement that came later. */
    double secs = fmax(0, fmin(p->progress_time, s->backlog_time) - p->drain_since);
    log_info("backlog drained", "rows=%" PRIu64 " seconds=%.1f backlog_peak=%" PRId64,
             s->backlog_published - p->drain_published, secs, p->drain_peak);
}

static void maybe_log_line(struct progress *p, double mono)
{
    const struct relay_stats *s = p->st;
    double interval = (double)p->cfg->log_stats_interval_ms / 1000;
    /* Half a tick of slack: the timer's jitter must not skip a line. */
    if (interval <= 0 || mono - p->line_at < (double)interval - 0.5)
        return;
    /* An aborted transaction takes back what it had counted: no fewer than none. */
    uint64_t n = s->published_total > p->line_published ? s->published_total - p->line_published : 0;
    double secs = mono - p->line_at;
    p->line_at = mono;
    p->line_published = s->published_total;
    /* Rows pending by a measurement taken after the last rows were
     * published: an older one must not keep a drained relay talking (the
     * next measurement, seconds away, shows rows that are really stuck). */
    bool pending = s->backlog_known && s->backlog_rows > 0 && s->backlog_time >= p->progress_time;
    if (n == 0 && !pending && s->kafka_in_flight == 0)
        return;
    if (s->backlog_known) {
        /* As of the measurement: the oldest pending row has aged since, if it is still there. */
        double now = stats_now();
        log_info("progress", "published=%" PRIu64 " rows_per_second=%.1f backlog=%" PRId64
                 " backlog_age_seconds=%.1f oldest_pending_seconds=%.1f",
                 n, (double)n / secs, s->backlog_rows, fmax(0, now - s->backlog_time),
                 health_oldest_unsent_age(s, now));
    } else {
        log_info("progress", "published=%" PRIu64 " rows_per_second=%.1f backlog=unknown", n,
                 (double)n / secs);
    }
}

static void on_tick(uv_timer_t *t)
{
    struct progress *p = (struct progress *)t;
    double mono = stats_mono();
    stats_rate_sample(&p->st->publish_rate, mono, p->st->published_total);
    if (p->st->published_total != p->tick_published) {
        p->tick_published = p->st->published_total;
        p->progress_time = stats_now();
    }
    watch_backlog(p);
    maybe_log_line(p, mono);
}

static void on_close(uv_handle_t *h)
{
    free(h);
}

int progress_start(struct progress **out, uv_loop_t *loop, const struct relay_config *cfg,
                   struct relay_stats *stats)
{
    struct progress *p = calloc(1, sizeof(*p));
    *out = p;
    if (!p)
        return -ENOMEM;
    p->cfg = cfg;
    p->st = stats;
    p->line_at = stats_mono();
    p->line_published = p->tick_published = stats->published_total;
    uv_timer_init(loop, &p->timer);
    /* The first sample now: a rate is known one second after the start. */
    stats_rate_sample(&stats->publish_rate, p->line_at, stats->published_total);
    uv_timer_start(&p->timer, on_tick, PROGRESS_TICK_MS, PROGRESS_TICK_MS);
    return 0;
}

void progress_stop(struct progress *p)
{
    if (!p)
        return;
    uv_timer_stop(&p->timer);
    uv_close((uv_handle_t *)&p->timer, on_close);
}
