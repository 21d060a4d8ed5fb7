/* progress.c — see progress.h. */
#include "progress.h"

#include <errno.h>
#include <stdlib.h>

#define PROGRESS_TICK_MS 1000

struct progress {
    uv_timer_t timer;           /* first member: the close callback gets the struct back */
    const struct relay_config *cfg;
    struct relay_stats *st;
};

static void on_tick(uv_timer_t *t)
{
    struct progress *p = (struct progress *)t;
    stats_rate_sample(&p->st->publish_rate, stats_mono(), p->st->published_total);
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
    uv_timer_init(loop, &p->timer);
    /* The first sample now: a rate is known one second after the start. */
    stats_rate_sample(&stats->publish_rate, stats_mono(), stats->published_total);
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
