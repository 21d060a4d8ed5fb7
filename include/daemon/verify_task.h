/* verify_task.h — the daemon's periodic verify ([verify] interval, lag,
 * window): every interval the leader checks the rows created between
 * (now - lag - window) and (now - lag), on a libuv worker thread so the
 * relay loop never waits for it, and publishes the counts in relay_stats
 * (/metrics, /status). */
#ifndef OUTBOX_VERIFY_TASK_H
#define OUTBOX_VERIFY_TASK_H

#include <uv.h>

#include "config/config.h"
#include "base/stats.h"

struct verify_task;

/** Starts the timer when verify.interval is not 0 (*@p out stays NULL
 *  otherwise). @p cfg and @p stats must outlive the task; only keys that
 *  need a restart are read from another thread. @return 0 or -ENOMEM. */
int verify_task_start(struct verify_task **out, uv_loop_t *loop, const struct relay_config *cfg,
                      struct relay_stats *stats);

/** Stops the timer and asks a run in progress to stop; the task frees itself
 *  once the run has returned (the loop keeps turning until then). NULL is fine. */
void verify_task_stop(struct verify_task *t);

#endif
