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

void kafka_stall_count_adds(struct kafka_stall *s, uint64_t adds, uint64_t progress_ms, uint64_t now_ms)
{
    if (adds < s->adds) /* a new instance */
        s->adds_base = 0;
    if (adds > s->adds)
        s->adds_ms = now_ms;
    s->adds = adds;
    /* The caller derives the time from a clock of its own: a few ms of
     * jitter are no progress. */
    if (s->progress_ms == 0 || progress_ms > s->progress_ms + KAFKA_STALL_JITTER_MS) {
        s->progress_ms = progress_ms;
        s->adds_base = adds;
    }
}

void kafka_stall_broker(struct kafka_stall *s, int32_t id, bool up, uint64_t now_ms)
{
    for (int i = 0; i < s->n_brokers; i++) {
        if (s->brokers[i].id != id)
            continue;
        if (up)
            s->brokers[i].lost_ms = 0;
        else if (s->brokers[i].lost_ms == 0)
            s->brokers[i].lost_ms = now_ms;
        return;
    }
    /* Never connected to: nothing lost (librdkafka connects only to the
     * brokers it needs). */
    if (up && s->n_brokers < KAFKA_STALL_MAX_BROKERS) {
        s->brokers[s->n_brokers].id = id;
        s->brokers[s->n_brokers].lost_ms = 0;
        s->n_brokers++;
    }
}

static bool broker_lost(const struct kafka_stall *s)
{
    for (int i = 0; i < s->n_brokers; i++)
        if (s->brokers[i].lost_ms && s->brokers[i].lost_ms + KAFKA_STALL_LOST_MS >= s->progress_ms)
            return true;
    return false;
}

bool kafka_stall_behind_commit(const struct kafka_stall *s, bool waiting, uint64_t now_ms)
{
    if (!waiting || s->adds_ms == 0 || broker_lost(s))
        return false;
    return now_ms >= s->progress_ms + KAFKA_STALL_BEHIND_MS &&
           s->adds >= s->adds_base + KAFKA_STALL_BEHIND_RETRIES &&
           now_ms <= s->adds_ms + KAFKA_STALL_BEHIND_RECENT_MS;
}
