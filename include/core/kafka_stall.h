/* kafka_stall.h — when the relay gives up on a Kafka transaction that waits
 * on a broker that stopped answering.
 *
 * A broker that is hung (SIGSTOP, a frozen VM, a network cut without reset)
 * keeps its connections open. librdkafka cuts a request to it after
 * socket.timeout.ms, but its next request of the same transaction may be
 * sent to the same broker and wait as long again: the commit to the
 * coordinator it had, or the lookup of the new coordinator, sent to any
 * broker it still counts as up, the hung one included. That second wait is
 * inside librdkafka. A new instance counts a broker as up only once it
 * answered: it looks the coordinator up on a broker that answers, and its
 * init_transactions aborts what the old instance had open. So once a
 * request timed out and the transaction has moved on no further for
 * KAFKA_STALL_GRACE_MS, the relay drops the instance and produces the rows
 * again on a new one. */
#ifndef OUTBOX_KAFKA_STALL_H
#define OUTBOX_KAFKA_STALL_H

#include <stdbool.h>
#include <stdint.h>

/* After a request timed out, what librdkafka does next answers within this
 * long when it goes to a broker that answers: a produce retried on the new
 * leader, the commit on the new coordinator. */
#define KAFKA_STALL_GRACE_MS 3000
/* A time-out this old is not about the transaction waiting now: two
 * socket.timeout.ms (the cut request and the next one) and the grace. */
#define KAFKA_STALL_WINDOW_MS 25000

struct kafka_stall {
    uint64_t timeouts;   /* requests timed out on the instance so far */
    uint64_t timeout_ms; /* when that count last rose (0: never) */
};

/** Records the instance's count of timed-out requests, @p count (librdkafka's
 *  statistics, summed over its brokers), read at @p now_ms. */
void kafka_stall_count(struct kafka_stall *s, uint64_t count, uint64_t now_ms);

/** Whether to give up on the instance: a transaction is @p waiting (messages
 *  in flight, or its commit running), nothing moved since @p progress_ms (the
 *  last acknowledgement or answer of the coordinator), and a request timed
 *  out within KAFKA_STALL_WINDOW_MS, both at least KAFKA_STALL_GRACE_MS ago. */
bool kafka_stall_give_up(const struct kafka_stall *s, bool waiting, uint64_t progress_ms,
                         uint64_t now_ms);

#endif
