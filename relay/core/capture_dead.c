/* capture_dead.c — relay.capture = wal: the queue of events to keep as dead
 * rows (core/capture_dead.h). */
#include "core/capture_dead.h"

#include <stdlib.h>
#include <string.h>

#include "core/event.h"

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
