/* plan.h — the relay's next step, decided apart from any I/O.
 *
 * the daemon's relay_step() (relay/daemon/relay_step.c) describes the relay as it is (struct plan_state: the
 * connection and its checks, the role, the batches in flight, the Kafka
 * transaction, shutdown, what is due) and asks plan_next() what to do; it
 * carries the answer out (a statement to PostgreSQL, a producer call) and,
 * when the answer says so, asks again. The connection runs one statement at a
 * time, so each answer names at most one statement, in the priorities of the
 * relay: the connection's checks, marks, the producer, leadership, the
 * backlog count, the quiet lock, the claim, retention.
 *
 * Also here: what the Kafka transaction needs next (plan_fence), the
 * reconnect back-off, and what a shutdown does with the batches in flight.
 * Part of the engine (docs/ARCHITECTURE.md): no PostgreSQL, Kafka or event
 * loop header, so tests/unit/test_plan.c drives it event by event. */
#ifndef OUTBOX_PLAN_H
#define OUTBOX_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/batch.h"
#include "core/engine.h"
#include "core/kafka_rules.h"
#include "base/stats.h"

/** The quiet lock (schema/004). Writers send no NOTIFY while the leader holds
 *  it; the leader then claims one batch after another without being woken.
 *  It stops by releasing the lock (LEAVING) and, before its last claim,
 *  waiting until no writer that left its NOTIFY out is still open. */
enum plan_quiet {
    PLAN_QUIET_OFF = 0,     /* writers notify */
    PLAN_QUIET_ON,          /* the lock is held: writers send none */
    PLAN_QUIET_LEAVING,     /* released; writers that sent none may still be open */
};

/** NOTIFYs during one claim that make the quiet lock worth taking: several
 *  writers committed while one claim ran. Fewer, and the lock would be taken
 *  and given back around nearly every claim (1,000 single-row transactions a
 *  second from one writer: p50 about 1 ms later with the lock taken on one).
 *  It was 3 until claims were read in binary: they got shorter, fewer NOTIFYs
 *  fell within one, and 3,000 single-row transactions from three writers sent
 *  215-1,913 NOTIFYs to a busy relay instead of 73-347 (the e2e test quiet). */
#define PLAN_QUIET_NOTIFIES 2

/** The relay as step() sees it. The batches are the daemon's own slots, read only. */
struct plan_state {
    uint64_t now_ms;

    /* PostgreSQL: the connection and what has been checked on it */
    bool pg_ready;              /* connected, and no statement running */
    bool backoff;               /* a statement failed: nothing new until the next tick */
    bool session_checked;       /* the connection is a session of its own */
    bool schema_checked;        /* the table is at the schema version this binary knows */
    int prepared, n_hot;        /* hot-path statements prepared, of how many */
    /* relay.capture = wal: rows are streamed, never claimed nor marked; the
     * connection keeps the lock and runs the capture's statements. */
    bool capture_wal;
    bool heartbeat_due;         /* the slot has not moved for relay.heartbeat_interval */
    bool slot_query_due;        /* time to read pg_replication_slots again */
    bool capture_streaming;     /* the stream runs: retention of delete mode may follow it */
    bool slot_busy;             /* the leader's stream was refused: another session reads the slot */
    bool dead_due;              /* an event that cannot be produced waits to be kept as a dead row */
    bool capture_unsettled;     /* the stream's last Kafka transaction, reports or dead rows are
                                   not done: a shutdown waits for them */
    bool listening;             /* LISTEN on the notification channel is in place */

    /* the role */
    enum stats_role role;
    bool lock_due;              /* the tick: take (standby) or check (leader) the lock */
    bool holder_due;            /* standby: ask who holds the lock */
    bool ready_sent;            /* systemd has READY=1 */
    bool refused;               /* relaying stopped for good */
    uint64_t refuse_deadline_ms; /* refused: close even if batches are not marked */
    bool stopping;              /* SIGTERM/SIGINT: drain, claim nothing */

    /* the claim */
    bool wake;                  /* rows may be waiting */
    bool claim_full;            /* the last claim returned a whole batch: a backlog waits */
    bool halted, halt_pending;  /* on_poison=halt stopped us, or a row in flight will */
    bool queue_full;            /* the producer's queue refused a row of a batch */
    bool isolating;             /* suspects are produced one at a time... */
    int64_t isolate_until_id;   /* ...up to this id */
    unsigned truncations;       /* batches cut so far (a claim older than a cut is stale) */
    int batch_size;
    bool retention_due;
    uint64_t backlog_due_ms;    /* when the backlog is counted next */
    uint64_t backlog_took_ms;   /* how long the last count took */
    bool row_security;          /* the backlog would count only what the role sees */
    bool claim_first;           /* a new leader's first batch goes before the count... */
    uint64_t claim_first_until; /* ...until then */

    /* the quiet lock: while held, the table's trigger sends no NOTIFY (schema/004) */
    enum plan_quiet quiet;
    bool quiet_wanted;          /* a claim found rows and NOTIFYs came in while it ran */
    int notifies;               /* NOTIFYs since the last claim was sent */
    bool quiet_idle;            /* the last claim found nothing */
    uint64_t quiet_check_at_ms; /* leaving: when to look again for writers that sent none */

    /* Kafka */
    bool producer_fatal;        /* the producer instance is unusable */
    bool producer_refused;      /* the brokers refuse its connections (authentication, TLS,
                                   kafka_denial_at_connect), which librdkafka would try again
                                   every second: stopped at once, a new one after the back-off */
    bool producer_down;         /* stopped so: none runs until producer_retry_at_ms */
    bool connect_refused;       /* connections were refused and no broker has been up since:
                                   no transaction is initialised (a call that holds the
                                   instance, retrying, for seconds) before one is */
    uint64_t producer_retry_at_ms; /* Kafka refused a right: a fatal producer is replaced,
                                      or rows claimed again, no earlier than this
                                      (plan_denied_delay) */
    enum producer_txn_state txn;
    bool txn_doomed;            /* a report of the open transaction failed: it can only abort */
    bool txn_empty;             /* nothing was produced into the open transaction */
    unsigned txn_gen;           /* the open transaction's generation */
    bool lead_unverified;       /* a replaced transactional producer waits for the lock check */

    const struct batch *b;      /* the batch slots, b[k].slot == k */
    int n_batches;              /* at most PLAN_MAX_BATCHES */
};

/** Slots are named by a bit each in the answers. */
#define PLAN_MAX_BATCHES 32

/** Batches one Kafka transaction carries at most, and so the most the
 *  producer's queue holds at once: a further claim waits for the next one. */
#define PLAN_TXN_BATCHES_MAX 2

/** What to do next. */
enum plan_act {
    PLAN_WAIT = 0,          /* nothing now: the next event calls step() again */
    PLAN_FINISH,            /* stop the relay: nothing in flight is waited for any more */
    PLAN_CHECK_SESSION,     /* is the connection a session of its own, may the role see every row */
    PLAN_WIND_DOWN,         /* refused: give the lock back, then close */
    PLAN_CHECK_SCHEMA,      /* is the table the one this binary's statements were written for */
    PLAN_PREPARE,           /* prepare hot statement number .index */
    PLAN_MARK,              /* write what batch .slot ended with: marks, then failures */
    PLAN_REPLACE_PRODUCER,  /* a new producer instance; then plan again */
    PLAN_STOP_PRODUCER,     /* stop the refused instance, the back-off begins; then plan again */
    PLAN_TAKE_LOCK,         /* ask for the leader lock */
    PLAN_VERIFY_LOCK,       /* leader: is the lock still this session's */
    PLAN_ASK_HOLDER,        /* standby: who holds the lock */
    PLAN_READY,             /* tell systemd we are ready; then plan again */
    PLAN_COUNT_BACKLOG,     /* count the backlog; the next count is due at .at_ms */
    PLAN_LISTEN,            /* LISTEN, so that new rows wake us */
    PLAN_CLAIM,             /* claim up to .limit rows into batch .slot, skipping .skip */
    PLAN_RETENTION,         /* delete a round of old sent rows */
    PLAN_TAKE_QUIET,        /* take the quiet lock */
    PLAN_RELEASE_QUIET,     /* release it */
    PLAN_CHECK_QUIET,       /* leaving: is a writer that sent no NOTIFY still open */
    PLAN_HEARTBEAT,         /* capture = wal: a logical message, so the slot moves */
    PLAN_SLOT_QUERY,        /* capture = wal: the slot as pg_replication_slots shows it */
    PLAN_SLOT_TAKE_OVER,    /* capture = wal, leader: end the walsender of a deposed leader */
    PLAN_RECORD_DEAD,       /* capture = wal, leader: keep an event that cannot be produced */
};

struct plan_step {
    enum plan_act act;
    int slot;               /* PLAN_MARK, PLAN_CLAIM */
    unsigned with;          /* PLAN_MARK: other slots (bit k) whose marks go in the same statement */
    int index;              /* PLAN_PREPARE */
    int limit;              /* PLAN_CLAIM: 1 while isolating, else batch_size */
    bool alone;             /* PLAN_CLAIM: the row is produced alone (isolating) */
    struct id_span skip;    /* PLAN_CLAIM: the ids of the other batches in flight */
    unsigned rescan;        /* PLAN_CLAIM: slots (bit k) whose range the claim skips: claim
                               again once they are marked */
    uint64_t at_ms;         /* PLAN_COUNT_BACKLOG */
    bool queue_drained;     /* nothing of ours is queued: the producer has room again */
};

/** How often the backlog is counted, at most... */
#define PLAN_BACKLOG_EVERY_MS 5000
/** ...and at least (a standby reads a leader silent for 30 s as stuck). */
#define PLAN_BACKLOG_AT_MOST_EVERY_MS 20000
/** The count walks every pending row, on the connection the claims and marks
 * need: it may take at most one part in this of the connection's time. */
#define PLAN_BACKLOG_SHARE 20

/** When the backlog is counted next, at @p now_ms, if the last count took
 * @p took_ms. */
uint64_t plan_backlog_next_ms(uint64_t now_ms, uint64_t took_ms);

/** The next step of the relay described by @p s (plan_fence done first). */
struct plan_step plan_next(const struct plan_state *s);

/** The name of @p act, for logs and tests. */
const char *plan_act_name(enum plan_act act);

/** What to do with a claim's result. */
enum claim_use {
    CLAIM_PRODUCE = 0,      /* produce its rows (or hold them for the next transaction) */
    CLAIM_STALE,            /* a batch was cut after this claim skipped its range: its rows
                               could overtake the ones given back; drop it, claim again */
    CLAIM_DROP,             /* nothing claimed, or stopping, halting, refused: rows stay unsent */
};

struct claim_verdict {
    enum claim_use use;
    bool isolation_over;    /* every suspect has been produced alone */
    bool alone;             /* the batch's rows are produced alone */
    bool more;              /* the claim was full: more rows are probably waiting */
    bool quiet_wanted;      /* rows, and PLAN_QUIET_NOTIFIES NOTIFYs came in while the
                               claim ran: writers are quicker than claims, take the
                               quiet lock */
    bool quiet_idle;        /* nothing found: the quiet lock is of no use now */
};

/** Batch @p b's claim returned @p n rows, the first with id @p first_id. */
struct claim_verdict plan_claimed(const struct plan_state *s, const struct batch *b, int n,
                                  int64_t first_id);

/* ---- the Kafka transaction (relay.fencing=transactional) ----------------- */

/** What the transaction needs before any statement, carried out in this
 *  order. Needs no PostgreSQL. */
struct fence_plan {
    unsigned unpublish;     /* slots (bit k) settled as aborted: nothing of them is visible */
    bool init;              /* initialise transactions (a leader, before its first produce) */
    bool drop_held;         /* release the held claims unproduced: they are claimed again */
    unsigned settle_empty;  /* slots committed as is: nothing of them reached the producer */
    bool commit;            /* commit (or abort, when doomed) the open transaction */
    int release;            /* the held batch to produce into the open, empty transaction; -1 */
    bool release_stale;     /* ...but a cut happened since its claim: drop it, claim again */
};

struct fence_plan plan_fence(const struct plan_state *s);

/** A batch whose rows Kafka acknowledged may be marked: its transaction
 *  committed, or there are none. */
bool plan_txn_settled(const struct plan_state *s, const struct batch *b);

/** Whether batch @p b's freshly claimed rows wait (their claim result kept)
 *  instead of being produced now. Rows claimed while the open transaction
 *  still takes messages join it (a transaction then holds the batch in flight
 *  and this one: a commit and an AddPartitionsToTxn less, and no wait behind
 *  the commit); rows claimed while it is ending or doomed, carries
 *  PLAN_TXN_BATCHES_MAX batches already, or while an older claim waits, are
 *  produced the moment the next one opens. */
bool plan_txn_holds(const struct plan_state *s, const struct batch *b);

/** Whether a claim may run: not before transactions are initialised, nor into
 *  one that must abort, nor before an unpublished batch's rows are claimed again. */
bool plan_txn_may_claim(const struct plan_state *s);

/* ---- the connection ------------------------------------------------------ */

/** The wait before reconnect attempt @p attempt (0 first): @p base_ms doubled
 *  per failed attempt up to @p max_ms, then a random point in its upper half
 *  (@p random: any uniformly drawn number), so that relays which lost the
 *  same database do not reconnect in lock step. */
uint64_t plan_reconnect_delay(unsigned attempt, uint64_t base_ms, uint64_t max_ms, uint64_t random);

/** Kafka refusing a right (enum kafka_denial) is replaced after this. */
#define PLAN_DENIED_FIRST_MS 1000
/** ... doubling up to this: a few attempts, and log lines, a minute. */
#define PLAN_DENIED_MAX_MS 60000

/** The wait before the producer that Kafka refused a right is replaced for
 *  the (@p attempt + 1)th time (0 first): PLAN_DENIED_FIRST_MS doubled per
 *  attempt up to PLAN_DENIED_MAX_MS, jittered as plan_reconnect_delay. A
 *  missing ACL stays missing until someone changes it: replacing the
 *  producer at once only repeats the refusal, dozens of times a second. */
uint64_t plan_denied_delay(unsigned attempt, uint64_t random);

/** Leaving the quiet lock: the wait before the next check for writers that
 *  sent no NOTIFY, after a wait of @p prev_ms (0: the first). A writer that
 *  stays open costs a claim and a check that often, and its row, once
 *  committed, waits no longer than that. */
#define PLAN_QUIET_FIRST_CHECK_MS 5
#define PLAN_QUIET_LAST_CHECK_MS 100
uint64_t plan_quiet_check_wait(uint64_t prev_ms, uint64_t poll_interval_ms);

/** Retention runs every PLAN_RETENTION_EVERY_MS when enabled (@p retention_s > 0). */
#define PLAN_RETENTION_EVERY_MS 60000
bool plan_retention_due(long retention_s, uint64_t now_ms, uint64_t last_ms);

/** relay.capture = wal: no claim competes with retention, and on_sent =
 *  delete keeps the table small only if it runs often. */
#define PLAN_CAPTURE_RETENTION_EVERY_MS 5000

/* ---- shutdown ------------------------------------------------------------- */

/** What a shutdown does with the batches in flight. Marks that can be
 *  written are written first (plan_next); these answer the events that end
 *  the wait for them. */
enum drain_act {
    DRAIN_WAIT = 0,   /* reports (or marks) are still to come: wait for them */
    DRAIN_FINISH,     /* stop now */
    DRAIN_PURGE,      /* fail what Kafka still holds, so the delivered part can be marked;
                         finish PLAN_PURGE_GRACE_MS later at the latest */
};

#define PLAN_PURGE_GRACE_MS 2000

/** SIGTERM/SIGINT. @p pg_connected: a connection is up (idle or running a
 *  statement); @p producing: reports are still awaited. A second signal stops at once. */
enum drain_act plan_drain_on_signal(bool stopping, bool pg_connected, bool producing);

/** The shutdown deadline passed. @p purged: the first deadline purged already. */
enum drain_act plan_drain_on_deadline(bool purged, bool producing);

/** The connection was lost while stopping: nothing more can be marked (what
 *  was delivered is produced again next run); only reports are awaited. */
enum drain_act plan_drain_on_lost(bool producing);

#endif
