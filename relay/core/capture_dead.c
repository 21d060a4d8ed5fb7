/* capture_dead.c — relay.capture = wal: the queue of events to keep as dead
 * rows, and what such an event is called (core/capture_dead.h). */
#include "core/capture_dead.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/capture_slot.h"
#include "core/event.h"
#include "core/wal_event.h"

static void entry_free(struct capture_dead *d)
{
    sql_capture_dead_params_free(d->params);
    memset(d, 0, sizeof *d);
}

struct capture_dead *dead_queue_push(struct dead_queue *q, const struct event_row *row,
                                     const char *event_id, const char *why)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 8;
        struct capture_dead *v = realloc(q->v, cap * sizeof *v);
        if (!v)
            return NULL;
        q->v = v;
        q->cap = cap;
    }
    struct capture_dead *d = &q->v[q->n];
    memset(d, 0, sizeof *d);
    if (sql_capture_dead_params(d->params, row, event_id, why) < 0)
        return NULL;
    d->outbox_id = row ? row->id : 0;
    q->n++;
    return d;
}

bool dead_queue_due(const struct dead_queue *q, uint64_t now_ms)
{
    return q->n > 0 && !q->sending && now_ms >= q->retry_ms;
}

bool dead_queue_failed(struct dead_queue *q, const char *sqlstate, uint64_t now_ms, char *reason,
                       size_t len)
{
    q->retry_ms = now_ms + CAPTURE_DEAD_RETRY_MS;
    return q->n > 0 &&
           capture_dead_refused(sqlstate, q->v[0].params[0], q->v[0].params[8], reason, len);
}

void dead_queue_pop(struct dead_queue *q)
{
    if (q->n == 0)
        return;
    entry_free(&q->v[0]);
    memmove(&q->v[0], &q->v[1], (q->n - 1) * sizeof q->v[0]);
    q->n--;
}

void dead_queue_clear(struct dead_queue *q)
{
    size_t keep = q->sending && q->n > 0 ? 1 : 0;
    for (size_t i = keep; i < q->n; i++)
        entry_free(&q->v[i]);
    q->n = keep;
}

void dead_queue_free(struct dead_queue *q)
{
    for (size_t i = 0; i < q->n; i++)
        entry_free(&q->v[i]);
    free(q->v);
    memset(q, 0, sizeof *q);
}

void capture_poison_name(struct capture_poison *p, const char *event_id, uint64_t lsn,
                         const char *why)
{
    pgo_lsn_text(lsn, p->at);
    wal_event_lsn_id(lsn, p->lsn_id);
    p->event_id = event_id && *event_id ? event_id : p->lsn_id;
    snprintf(p->reason, sizeof p->reason, "%s (at LSN %s)", why, p->at);
}

void capture_poison_halt_reason(const struct capture_poison *p, int64_t id, const char *why,
                                char *out, size_t len)
{
    snprintf(out, len, "event at LSN %s (outbox_id %" PRId64 ", event_id %s) cannot be produced: %s",
             p->at, id, p->event_id, why);
}
