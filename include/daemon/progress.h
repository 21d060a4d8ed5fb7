/* progress.h — how the relay is getting on, looked at once a second: samples
 * the publish count for the recent rate (/status, `outbox-relay status`),
 * logs a progress line every log.stats_interval while there is work, and one
 * line when a backlog has drained. Quiet while idle. */
#ifndef OUTBOX_PROGRESS_H
#define OUTBOX_PROGRESS_H

#include <uv.h>

#include "config/config.h"
#include "base/stats.h"

struct progress;

/** Starts the one-second timer. @p cfg (read again on every tick, so a
 *  reload applies) and @p stats must outlive it. @return 0 or -ENOMEM. */
int progress_start(struct progress **out, uv_loop_t *loop, const struct relay_config *cfg,
                   struct relay_stats *stats);

/** Stops the timer; it frees itself once closed. NULL is fine. */
void progress_stop(struct progress *p);

#endif
