/* verify_task.c — verify_run() every [verify] interval, off the loop.
 *
 * A run is a blocking libpq session and consumer: it goes to libuv's thread
 * pool (uv_queue_work), and only its result comes back to the loop thread,
 * which alone writes relay_stats. One run at a time; a tick that finds one
 * still going is skipped. Only the leader runs it: the standbys would read
 * the same rows and messages for nothing. With relay.capture = wal a run
 * whose fence the slot did not pass within verify.settle proved nothing: it
 * counts as an error, its counts are not published. */
#include "daemon/verify_task.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "cmd/verify.h"

#define VERIFY_TASK_SLICE_ROWS 100000

struct verify_task {
    uv_timer_t timer;           /* first member: the close callback gets the task back */
    uv_work_t work;
    uv_loop_t *loop;
    const struct relay_config *cfg;
    struct relay_stats *st;
    long lag_s, window_s;
    int refs;                   /* the timer, and a run in progress */
    bool running;
    atomic_int stop;

    /* one run: written by the worker, read back on the loop thread */
    char since[40], until[40];
    double window_start, window_end;
    struct vcheck v;
    struct verify_meta meta;
    int rc;
    char err[512];
};

static void unref(struct verify_task *t)
{
    if (--t->refs == 0)
        free(t);
}

static void stamp(double t, char *out, size_t len)
{
    time_t secs = (time_t)t;
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void work(uv_work_t *w)
{
    struct verify_task *t = w->data;
    /* Smaller slices than the command's: this memory is the daemon's. */
    struct verify_opts o = {.w = {.since = t->since, .until = t->until},
                            .slice_rows = VERIFY_TASK_SLICE_ROWS, .stop = &t->stop,
                            .settle_ms = t->cfg->verify_settle_ms};
    vcheck_init(&t->v, 3);
    t->rc = verify_run(t->cfg, &o, &t->v, &t->meta, t->err, sizeof t->err);
    if (t->rc == 0 && t->meta.wal && !t->meta.fence.passed) {
        snprintf(t->err, sizeof t->err, "the relay has not confirmed the slot %s past %s within "
                 "%.1f s (it is at %s): rows cannot be told apart from pending", t->cfg->slot,
                 t->meta.fence.lsn_text, (double)o.settle_ms / 1000.0,
                 t->meta.fence.confirmed_text);
        t->rc = -EAGAIN;
    }
}

static void after(uv_work_t *w, int status)
{
    struct verify_task *t = w->data;
    t->running = false;
    struct stats_verify *sv = &t->st->verify;
    if (status == 0 && t->rc != -EINTR) {
        sv->runs_total++;
        sv->last_time = stats_now();
        sv->last_duration = t->meta.duration;
        if (t->rc == 0) {
            const struct vcheck_counts *c = &t->v.total;
            sv->have_result = true;
            sv->ok = vcheck_ok(&t->v);
            sv->rows = c->rows;
            sv->pending = c->pending;
            sv->missing = c->missing;
            sv->duplicates = c->duplicates;
            sv->out_of_order = c->out_of_order;
            sv->mismatched = c->mismatched;
            sv->unknown = c->unknown;
            sv->window_start = t->window_start;
            sv->window_end = t->window_end;
            sv->last_error[0] = '\0';
            if (sv->ok)
                log_info("verify passed", "since=%s until=%s rows=%" PRIu64 " pending=%" PRIu64
                         " duplicates=%" PRIu64 " unknown=%" PRIu64 " duration_s=%.3f",
                         t->since, t->until, c->rows, c->pending, c->duplicates, c->unknown,
                         t->meta.duration);
            else
                log_warn("verify found rows Kafka does not hold as sent (outbox-relay verify "
                         "--since … --until … shows them)",
                         "since=%s until=%s rows=%" PRIu64 " missing=%" PRIu64
                         " out_of_order=%" PRIu64 " mismatched=%" PRIu64 " duplicates=%" PRIu64,
                         t->since, t->until, c->rows, c->missing, c->out_of_order, c->mismatched,
                         c->duplicates);
        } else {
            sv->errors_total++;
            snprintf(sv->last_error, sizeof sv->last_error, "%.*s", (int)sizeof sv->last_error - 1, t->err);
            log_warn("verify could not run", "error=%s", log_quote(t->err));
        }
    }
    vcheck_free(&t->v);
    unref(t);
}

static void on_tick(uv_timer_t *timer)
{
    struct verify_task *t = (struct verify_task *)timer;
    if (t->running || t->st->role != STATS_ROLE_LEADER)
        return;
    double now = stats_now();
    t->window_end = now - (double)t->lag_s;
    t->window_start = t->window_end - (double)t->window_s;
    stamp(t->window_start, t->since, sizeof t->since);
    stamp(t->window_end, t->until, sizeof t->until);
    t->work.data = t;
    if (uv_queue_work(t->loop, &t->work, work, after) == 0) {
        t->running = true;
        t->refs++;
    }
}

static void on_close(uv_handle_t *h)
{
    unref((struct verify_task *)h);
}

int verify_task_start(struct verify_task **out, uv_loop_t *loop, const struct relay_config *cfg,
                      struct relay_stats *stats)
{
    *out = NULL;
    long interval = (long)(cfg->verify_interval_ms / 1000);
    if (interval <= 0)
        return 0;
    struct verify_task *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->loop = loop;
    t->cfg = cfg;
    t->st = stats;
    t->lag_s = (long)(cfg->verify_lag_ms / 1000);
    t->window_s = (long)(cfg->verify_window_ms / 1000);
    t->refs = 1;
    uv_timer_init(loop, &t->timer);
    uv_timer_start(&t->timer, on_tick, (uint64_t)interval * 1000, (uint64_t)interval * 1000);
    stats->verify.enabled = true;
    log_info("periodic verify enabled", "interval_s=%ld lag_s=%ld window_s=%ld", interval,
             t->lag_s, t->window_s);
    *out = t;
    return 0;
}

void verify_task_stop(struct verify_task *t)
{
    if (!t)
        return;
    atomic_store(&t->stop, 1);
    uv_timer_stop(&t->timer);
    uv_close((uv_handle_t *)&t->timer, on_close);
}
