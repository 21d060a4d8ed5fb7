/* capture_plan.h — relay.capture = wal decided apart from any I/O.
 *
 * The daemon (relay/daemon/relay_capture.c) owns the replication connection,
 * the decoder and the producer; it hands each of the stream's events to the
 * plan — a Begin, a Commit, a keepalive, a message sent or refused, Kafka's
 * acknowledgements and failures, a Kafka transaction committed or aborted,
 * the stream started or lost, a step of the relay — with a snapshot of the
 * world around it (struct capture_env), and carries out the actions the plan
 * answers (struct capture_acts): send a status update, commit the Kafka
 * transaction, close, end or start the stream, read on, plan the relay again.
 *
 * The plan's rule: a position is confirmed only once every event before it
 * is acknowledged by Kafka (committed, with a Kafka transaction) or kept as a
 * dead row; pgo_acks does that arithmetic, the plan decides when to ask it.
 * Part of the engine: no PostgreSQL, Kafka or event loop header, so
 * tests/unit/test_capture_plan.c and test_capture_sim.c drive it event by event. */
#ifndef OUTBOX_CAPTURE_PLAN_H
#define OUTBOX_CAPTURE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kafka_rules.h"
#include "core/pgoutput.h"

struct plan_state;

/* A Kafka transaction is committed once the stream has nothing more to read
 * right now, or once it carries this many messages (under a backlog). */
#define CAPTURE_TXN_MAX_MSGS 10000
/* A commit of fewer messages is a trickle's: what arrives meanwhile waits in
 * the socket (a trickle's few frames fit the kernel's buffer) and is read in
 * one go when the commit ended, instead of waking the relay for each of the
 * three frames (Begin, Insert, Commit) of every source transaction. A larger
 * one is a backlog's: read ahead, so that the walsender is not held back. */
#define CAPTURE_TRICKLE_MSGS 1000
/* A trickle's Kafka transactions begin at most this often (50 a second):
 * the stream is not read until then. A commit costs some 60 wake-ups of the
 * relay's and librdkafka's threads (AddPartitionsToTxn, Produce and EndTxn
 * round trips), shared by the events of those milliseconds: at 1,000 events
 * a second 10 ms still left commits back to back on a 2-core machine, 20 ms
 * cut the relay's CPU to a third for some 10 ms more latency at the median
 * (docs/performance.md, "capture = wal at 1,000/s"). */
#define CAPTURE_COMMIT_EVERY_MS 20
/* A status update at least this often while streaming. */
#define CAPTURE_STATUS_EVERY_MS 10000
/* The back-off of a failed stream: doubled per failure in a row, up to 32 times. */
#define CAPTURE_RETRY_MS 1000
#define CAPTURE_RETRY_MAX_MS (CAPTURE_RETRY_MS << 5)
/* The slot's row is read this often, whatever the role. */
#define CAPTURE_SLOT_QUERY_EVERY_MS 5000
/* The walsender of a session ended to take the slot over needs this long to exit. */
#define CAPTURE_TAKE_OVER_WAIT_MS 100

enum capture_state { CAPTURE_OFF = 0, CAPTURE_STARTING, CAPTURE_STREAMING, CAPTURE_ENDING };

/** Messages of one source transaction in one Kafka transaction. */
struct capture_count {
    uint64_t seq;
    long n;
};

/** The world around the stream when an event comes, as the daemon sees it. */
struct capture_env {
    uint64_t now_ms;
    bool leader;                /* this relay holds the leader lock */
    bool stopping;              /* SIGTERM/SIGINT */
    bool halted;                /* an event cannot be produced: relaying stopped */
    bool refused;               /* relaying stopped for good */
    bool finished;              /* the daemon is done */
    bool producer_fatal;
    enum producer_txn_state txn;
    bool txn_doomed;            /* the open Kafka transaction must abort */
    bool txn_empty;             /* the producer put nothing into its open Kafka transaction */
    size_t n_dead;              /* events waiting to be kept as dead rows */
    bool ahead_left;            /* frames read ahead are still waiting to be taken */
    bool server_gap;            /* the server changed (a failover) and its slot starts past
                                 * what was confirmed: no stream may start there */
    uint64_t random;            /* any uniformly drawn number: the back-off's jitter */
};

/** The stream's state: what was read, sent, acknowledged and confirmed. */
struct capture_plan {
    enum capture_state state;
    struct pgo_acks acks;       /* what may be confirmed: one entry per source transaction */
    unsigned gen;               /* streams started: reports of an older one are ignored */
    uint64_t seq;               /* the source transaction being read */
    bool in_txn;                /* between its Begin and its Commit */
    int64_t commit_time_us;     /* its commit time (PostgreSQL epoch) */
    int64_t oldest_commit_us;   /* of the oldest transaction not confirmed: the lag */
    uint64_t confirmed;         /* reported flushed; where a new stream starts */
    uint64_t received;          /* how far the stream was read: reported written */
    uint64_t status_sent_ms;
    uint64_t last_progress_ms;  /* confirmed moved or a heartbeat was sent */
    uint64_t restart_at_ms;     /* a stopped stream starts again after this */
    uint64_t slot_query_at_ms;  /* the slot's row is read again from this on */
    unsigned failures;          /* consecutive stream failures: the back-off */
    bool slot_busy;             /* START_REPLICATION refused: another session reads the slot */
    long unacked;               /* without transactions: produced by this stream, no report yet */
    bool queue_full;            /* the producer refused a message: read on after a report */
    /* with transactions: the open Kafka transaction and the committing one */
    long txn_msgs;
    bool txn_whole;             /* the open Kafka transaction ends a source transaction */
    struct capture_count *open, *done;
    size_t n_open, open_cap, n_done, done_cap;
    long done_msgs;
    bool committing;
    uint64_t rest_until_ms;     /* a trickle's next commit: not read before (CAPTURE_REST) */
    uint64_t commit_at_ms;      /* when the committing transaction began committing */
};

/** What the daemon does after an event, in this order. */
enum capture_do {
    CAP_DO_CLOSE = 1u << 0,     /* close the stream (why: the reason, or NULL) */
    CAP_DO_COMMIT = 1u << 1,    /* commit the Kafka transaction: capture_plan_committed follows */
    CAP_DO_STATUS = 1u << 2,    /* send a status update: received written, confirmed flushed */
    CAP_DO_CONFIRMED = 1u << 3, /* confirmed moved: count the progress */
    CAP_DO_RESUME = 1u << 4,    /* read on (the producer took room again) */
    CAP_DO_DRAIN_KICK = 1u << 5, /* take what was read ahead, then read on and look idle again */
    CAP_DO_END = 1u << 6,       /* end the stream (CopyDone): capture_plan_ended follows */
    CAP_DO_START = 1u << 7,     /* START_REPLICATION from confirmed: capture_plan_started follows */
    CAP_DO_STEP = 1u << 8,      /* plan the relay again */
};

struct capture_acts {
    unsigned what;              /* enum capture_do bits */
    const char *why;            /* CAP_DO_CLOSE: what the log says, NULL for nothing */
    long published;             /* messages now published (acknowledged, or committed) */
};

/** What becomes of a message handed to the producer. */
enum capture_send {
    CAPTURE_SENT = 0,           /* in Kafka's hands */
    CAPTURE_SEND_LATER,         /* offered again once Kafka acknowledges what it holds */
    CAPTURE_SEND_POISON,        /* it can never be produced */
    CAPTURE_SEND_DENIED,        /* the principal lacks a right on its topic: the stream
                                   stopped and reads it again once the producer's
                                   back-off is over (nobody's fault, not poison) */
};

/** Where a frame just read from the socket goes. */
enum capture_route {
    CAPTURE_TAKE = 0,           /* decoded now */
    CAPTURE_READ_AHEAD,         /* kept until the commit running ends */
    CAPTURE_OFFER_LATER,        /* offered again: frames read ahead before it go first, or
                                 * a trickle's commit ends first (the socket is not read) */
    CAPTURE_REST,               /* offered again after capture_plan_rest_ms: the next
                                 * commit of a trickle is not due yet */
};

/** A new plan: nothing read, nothing confirmed. */
void capture_plan_init(struct capture_plan *p);
void capture_plan_free(struct capture_plan *p);

/** Where a frame read from the socket goes, behind @p ahead_left frames read
 *  ahead (once those were offered): the stream's order is kept. */
enum capture_route capture_plan_route(const struct capture_plan *p, bool ahead_left,
                                      uint64_t now_ms);

/** How long CAPTURE_REST waits from @p now_ms. */
uint64_t capture_plan_rest_ms(const struct capture_plan *p, uint64_t now_ms);

/** Whether new messages may go to Kafka now: the leader, a producer with an
 *  open transaction (or none), no commit running; stopping, only the rest
 *  of the source transaction being read. */
bool capture_plan_may_produce(const struct capture_plan *p, const struct capture_env *e);

/** Whether the next XLogData may be decoded now. When not, it is offered
 *  again later (acts: commit what the Kafka transaction holds). */
bool capture_plan_admit(struct capture_plan *p, const struct capture_env *e,
                        struct capture_acts *a);

/** A Begin. @return false without memory (offered again later). */
bool capture_plan_begin(struct capture_plan *p, int64_t commit_time_us);

/** A Commit ending at @p end_lsn. */
struct capture_acts capture_plan_commit_seen(struct capture_plan *p, const struct capture_env *e,
                                             uint64_t end_lsn);

/** A frame was read up to @p end_lsn. */
void capture_plan_read(struct capture_plan *p, uint64_t end_lsn);

/** A keepalive: the server has sent up to @p end_lsn. */
struct capture_acts capture_plan_keepalive(struct capture_plan *p, uint64_t end_lsn,
                                           bool reply_requested);

/** The delivery report opaque of a message of the transaction being read. */
uint64_t capture_plan_opaque(const struct capture_plan *p);

/** The producer answered @p rc (0, -ENOBUFS queue full, -EIO unusable, other:
 *  refused) to a message of the transaction being read; @p too_large is set
 *  when a full queue is empty, the message alone being larger than it. */
enum capture_send capture_plan_sent(struct capture_plan *p, const struct capture_env *e, int rc,
                                    bool *too_large, struct capture_acts *a);

/** Whether an event that can never be produced halts the stream (@p halts:
 *  on_poison = halt; @p dead_rows: the table keeps dead rows) or is kept as
 *  a dead row while the stream goes on. */
bool capture_plan_poison_halts(bool halts, bool dead_rows);

/** The event at fault halted relaying: what came before it is committed. */
struct capture_acts capture_plan_halt(struct capture_plan *p, const struct capture_env *e);

/** The event at fault of the transaction being read is to be kept as a dead
 *  row: its transaction waits for the record. @p gen, @p seq name it for
 *  capture_plan_dead_recorded. */
void capture_plan_dead_queued(struct capture_plan *p, unsigned *gen, uint64_t *seq);

/** The dead row of (@p gen, @p seq) is committed. */
struct capture_acts capture_plan_dead_recorded(struct capture_plan *p, const struct capture_env *e,
                                               unsigned gen, uint64_t seq);

/** Kafka's delivery report for @p opaque (@p ok: delivered). */
struct capture_acts capture_plan_report(struct capture_plan *p, const struct capture_env *e,
                                        uint64_t opaque, bool ok);

/** The Kafka transaction CAP_DO_COMMIT asked for ended (@p ok: committed;
 *  otherwise aborted, or it could not be begun). */
struct capture_acts capture_plan_committed(struct capture_plan *p, const struct capture_env *e,
                                           bool ok);

/** What the socket held is read: a whole source transaction is committed. */
struct capture_acts capture_plan_idle(struct capture_plan *p, const struct capture_env *e);

/** The server answered START_REPLICATION. */
struct capture_acts capture_plan_streaming(struct capture_plan *p);

/** The stream ended (@p busy: another session reads the slot). */
struct capture_acts capture_plan_lost(struct capture_plan *p, const struct capture_env *e,
                                      bool busy);

/** An unreadable frame, or a producer failure: the stream restarts. */
struct capture_acts capture_plan_fail(struct capture_plan *p, const struct capture_env *e,
                                      const char *why);

/** The commit CAP_DO_COMMIT asked for could not be begun: the stream restarts. */
struct capture_acts capture_plan_commit_refused(struct capture_plan *p, const struct capture_env *e);

/** A status update reached the socket at @p now_ms. */
void capture_plan_status_sent(struct capture_plan *p, uint64_t now_ms);

/** A heartbeat was sent at @p now_ms: the next one is due a whole interval later. */
void capture_plan_heartbeat_sent(struct capture_plan *p, uint64_t now_ms);

/** The session that read the slot was ended (or could not be) at @p now_ms:
 *  the stream starts again CAPTURE_TAKE_OVER_WAIT_MS later at the earliest. */
void capture_plan_taken_over(struct capture_plan *p, uint64_t now_ms);

/** A slot query was sent at @p now_ms: the next is due CAPTURE_SLOT_QUERY_EVERY_MS later. */
void capture_plan_slot_queried(struct capture_plan *p, uint64_t now_ms);

/** A new session: the slot, and so the server's timeline, is read before anything streams. */
void capture_plan_connected(struct capture_plan *p);

/** A failover's gap was closed from the table (relay.slot_recovery =
 *  reconcile) while no stream ran: the next stream starts where the slot on
 *  the promoted server does. A position confirmed on the old timeline means
 *  nothing on the new one, and asked for, it would skip what the slot holds
 *  before it. */
void capture_plan_new_slot(struct capture_plan *p);

/** The session that reads the slot is being ended: the slot is no longer taken to be busy. */
void capture_plan_taking_over(struct capture_plan *p);

/** CAP_DO_START was carried out (@p ok) or could not be. */
void capture_plan_started(struct capture_plan *p, const struct capture_env *e, bool ok);

/** CAP_DO_END was carried out (@p ok) or could not be (the stream closes). */
struct capture_acts capture_plan_ended(struct capture_plan *p, const struct capture_env *e, bool ok);

/** Whether frames read ahead may be taken now. */
bool capture_plan_may_drain(const struct capture_plan *p, const struct capture_env *e);

/** The relay's state changed (role, stop, producer, time): what the stream does. */
struct capture_acts capture_plan_step(struct capture_plan *p, const struct capture_env *e);

/** Nothing of the stream waits for Kafka or PostgreSQL, and no source
 *  transaction is half read. */
bool capture_plan_drained(const struct capture_plan *p, const struct capture_env *e);

/** Whether a shutdown may finish: the stream drained and closed; halted,
 *  only the deliveries still awaited. */
bool capture_plan_settled(const struct capture_plan *p, const struct capture_env *e);

/** A heartbeat is due: streaming, and the slot has not moved for @p every_ms (0: never). */
bool capture_plan_heartbeat_due(const struct capture_plan *p, uint64_t now_ms, long every_ms);

/** The replication lag at @p now (unix seconds): the age of the oldest
 *  transaction read and not confirmed (PostgreSQL's epoch in commit times,
 *  @p epoch_unix_s its unix seconds); 0 when none waits. */
double capture_plan_lag(const struct capture_plan *p, double now, double epoch_unix_s);

/** The standby status update at @p now (unix seconds) into @p out: how far
 *  the stream was read as written, what Kafka holds as flushed (the slot
 *  forgets that much). @return its length. */
size_t capture_plan_status_update(const struct capture_plan *p, double now,
                                  uint8_t out[PGO_STATUS_UPDATE_LEN]);

/** Whether the stream's lag is shown: a leader relaying (not stopping,
 *  refused, halted or done) whose stream is not closed. */
bool capture_plan_lag_shown(const struct capture_plan *p, const struct capture_env *e);

/** A status update is due while streaming. */
bool capture_plan_status_due(const struct capture_plan *p, uint64_t now_ms);

/** What the relay's planner is told of the stream (@p s's capture fields):
 *  with heartbeats every @p heartbeat_ms (0: none), and @p dead_due when a
 *  dead row waits to be written. */
void capture_plan_status(const struct capture_plan *p, const struct capture_env *e,
                         long heartbeat_ms, bool dead_due, struct plan_state *s);

#endif
