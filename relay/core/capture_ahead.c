/* capture_ahead.c — relay.capture = wal: frames read ahead while a Kafka
 * transaction commits, kept in order within CAPTURE_AHEAD_BYTES. */
#include "core/capture_ahead.h"

#include <stdlib.h>
#include <string.h>

struct capture_frame {
    size_t len;
    uint8_t data[];
};

bool capture_ahead_push(struct capture_ahead *q, const uint8_t *buf, size_t len)
{
    if (q->bytes + len > CAPTURE_AHEAD_BYTES)
        return false;
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 256;
        struct capture_frame **v = realloc(q->v, cap * sizeof *v);
        if (!v)
            return false;
        q->v = v;
        q->cap = cap;
    }
    struct capture_frame *f = malloc(sizeof *f + len);
    if (!f)
        return false;
    f->len = len;
    memcpy(f->data, buf, len);
    q->v[q->n++] = f;
    q->bytes += len;
    return true;
}

bool capture_ahead_left(const struct capture_ahead *q)
{
    return q->head < q->n;
}

bool capture_ahead_peek(const struct capture_ahead *q, const uint8_t **buf, size_t *len)
{
    if (q->head >= q->n)
        return false;
    *buf = q->v[q->head]->data;
    *len = q->v[q->head]->len;
    return true;
}

void capture_ahead_pop(struct capture_ahead *q)
{
    if (q->head >= q->n)
        return;
    q->bytes -= q->v[q->head]->len;
    free(q->v[q->head++]);
    if (q->head == q->n) /* empty: the array is reused from its start */
        q->head = q->n = 0;
}

void capture_ahead_clear(struct capture_ahead *q)
{
    for (size_t i = q->head; i < q->n; i++)
        free(q->v[i]);
    q->head = q->n = 0;
    q->bytes = 0;
}

void capture_ahead_free(struct capture_ahead *q)
{
    capture_ahead_clear(q);
    free(q->v);
    memset(q, 0, sizeof *q);
}
