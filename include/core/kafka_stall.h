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
 * leader, the commit on the new coordinator. The rule is read at each
 * statistics tick (every second), which also tells of the cut: the give-up
 * comes 2-3 s after it. A give-up that was not needed costs a new instance
 * (tens of ms to a second and a half on a three-broker cluster), not rows. */
#define KAFKA_STALL_GRACE_MS 1500
/* A time-out this old is not about the transaction waiting now: two
 * socket.timeout.ms (the cut request and the next one) and the grace. */
#define KAFKA_STALL_WINDOW_MS 25000

/* The second case: the last commit is not complete at the coordinator. It
 * answers AddPartitionsToTxn (and InitProducerId) with
 * CONCURRENT_TRANSACTIONS until it has written that commit's marker on every
 * partition of it; its marker request to a broker that stopped answering
 * right after it was sent waits out the brokers' request.timeout.ms (30 s by
 * default) before it goes to the partition's new leader. librdkafka retries
 * every few tens of milliseconds, and a new instance of the same
 * transactional.id would wait as long: the relay goes on under its spare
 * transactional.id instead (the other of the two it fences when it becomes
 * leader). A commit's markers that wait for a broker being fenced out of the
 * in-sync replicas are done within Kafka's fencing time (9 s by default):
 * KAFKA_STALL_BEHIND_MS is above it. */
#define KAFKA_STALL_BEHIND_MS 12000
/* AddPartitionsToTxn requests since the last progress that show a retry loop,
 * not the one request a transaction begins with... */
#define KAFKA_STALL_BEHIND_RETRIES 20
/* ...and that still goes on: one sent within this long. */
#define KAFKA_STALL_BEHIND_RECENT_MS 2500
/* A broker the instance was connected to and lost since this long before the
 * last progress: brokers down, or too few for min.insync.replicas, keep a
 * commit's markers from being written too, and another id would not help.
 * A connection lost long before (a broker closing an idle one) says nothing. */
#define KAFKA_STALL_LOST_MS 10000
#define KAFKA_STALL_MAX_BROKERS 32
/* A time of progress that moved less than this did not move. */
#define KAFKA_STALL_JITTER_MS 200

struct kafka_stall {
    uint64_t timeouts;   /* requests timed out on the instance so far */
    uint64_t timeout_ms; /* when that count last rose (0: never) */
    uint64_t adds;       /* AddPartitionsToTxn requests sent by the instance so far */
    uint64_t adds_ms;    /* when that count last rose (0: never) */
    uint64_t adds_base;  /* the count at the last progress seen */
    uint64_t progress_ms; /* that progress */
    struct {
        int32_t id;
        uint64_t lost_ms;  /* when its connection was lost (0: up) */
    } brokers[KAFKA_STALL_MAX_BROKERS]; /* the ones the instance was connected to */
    int n_brokers;
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

/** Records the instance's count of AddPartitionsToTxn requests @p adds
 *  (librdkafka's statistics, summed over its brokers) and the time of the
 *  transaction's last progress @p progress_ms, read at @p now_ms. */
void kafka_stall_count_adds(struct kafka_stall *s, uint64_t adds, uint64_t progress_ms, uint64_t now_ms);

/** Records whether the instance's connection to broker @p id is @p up at @p now_ms. */
void kafka_stall_broker(struct kafka_stall *s, int32_t id, bool up, uint64_t now_ms);

/** Whether the transaction waits behind a commit that the coordinator cannot
 *  complete: a transaction is @p waiting, nothing moved for
 *  KAFKA_STALL_BEHIND_MS, AddPartitionsToTxn was sent at least
 *  KAFKA_STALL_BEHIND_RETRIES times since and lately, and no broker the
 *  instance was connected to was lost within KAFKA_STALL_LOST_MS of the last
 *  progress or since. */
bool kafka_stall_behind_commit(const struct kafka_stall *s, bool waiting, uint64_t now_ms);

#endif
