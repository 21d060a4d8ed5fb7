/* kafka_stall.c — a transaction held by a broker that stopped answering
 * (kafka_stall.h says why the instance is given up). */
#include "core/kafka_stall.h"

void kafka_stall_count(struct kafka_stall *s, uint64_t count, uint64_t now_ms)
{
    /* A new instance starts from 0; a count that fell is a new instance's. */
    if (count > s->timeouts)
        s->timeout_ms = now_ms;
    s->timeouts = count;
}

bool kafka_stall_give_up(const struct kafka_stall *s, bool waiting, uint64_t progress_ms,
                         uint64_t now_ms)
{
    if (!waiting || s->timeout_ms == 0 || now_ms < s->timeout_ms + KAFKA_STALL_GRACE_MS)
        return false;
    if (now_ms - s->timeout_ms > KAFKA_STALL_WINDOW_MS)
        return false;
    return now_ms >= progress_ms + KAFKA_STALL_GRACE_MS;
}
