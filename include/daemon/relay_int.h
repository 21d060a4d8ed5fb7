/* relay_int.h — the daemon's relay, shared by its files (not for other modules).
 *
 * One struct relay and the functions its files call across each other:
 *   relay.c           the boot, the loop, the PostgreSQL connection, timers, signals, shutdown
 *   relay_step.c      relay_step(): describe the relay to the engine (plan.c) and carry out its answer
 *   relay_pipeline.c  a row's way: claim -> produce -> delivery reports -> failures -> mark; retention
 *   relay_leader.c    the session checks, the schema check, the leader lock and refusals
 *   relay_fence.c     the Kafka transaction that fences a deposed leader; replacing the producer
 *   relay_quiet.c     the quiet lock: writers send no NOTIFY while the leader drains
 *   relay_capture.c   relay.capture = wal: the stream from the replication slot
 *   relay_capture_slot.c  ... the slot query, heartbeat, slot take-over and retention
 *   relay_capture_dead.c  ... and its events that can never be produced, kept as dead rows */
#ifndef OUTBOX_RELAY_INT_H
#define OUTBOX_RELAY_INT_H

#include "daemon/relay.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "base/errors.h"
#include "core/event.h"
#include "daemon/http.h"
#include "core/batch.h"
#include "core/engine.h"
#include "daemon/health.h"
#include "core/kafka_rules.h"
#include "base/log.h"
#include "base/log_limit.h"
#include "cmd/migrate.h"
#include "io/notify.h"
#include "io/pg.h"
#include "core/plan.h"
#include "io/producer.h"
#include "daemon/progress.h"
#include "core/pgoutput.h"
#include "core/sql.h"
#include "core/sql_floor.h"
#include "core/sql_capture.h"
#include "core/wal_event.h"
#include "io/repl.h"
#include "core/standby_watch.h"
#include "core/failover_watch.h"
#include "base/stats.h"
#include "base/strbuf.h"
#include "daemon/verify_task.h"

/* Several batches may be in flight: while Kafka acknowledges some,
 * PostgreSQL claims or marks another, so neither side waits for the other. */
#define N_BATCHES RELAY_BATCH_SLOTS
_Static_assert(N_BATCHES <= PLAN_MAX_BATCHES, "the engine names each batch slot by a bit");
_Static_assert(RELAY_BATCHES_IN_FLIGHT == PLAN_TXN_BATCHES_MAX, "the producer's queue holds a transaction's batches");

/* A delivery report's opaque: the batch slot in the top bits, the row below. */
#define OPAQUE_ROW_BITS 20
_Static_assert(100000 < (1 << OPAQUE_ROW_BITS), "batch_size must fit the opaque's row bits");

/* Messages of one source transaction in one Kafka transaction. */
struct capture_count {
    uint64_t seq;
    long n;
};

struct capture_dead;
struct capture_frame;

enum capture_state { CAPTURE_OFF = 0, CAPTURE_STARTING, CAPTURE_STREAMING, CAPTURE_ENDING };

/* relay.capture = wal (relay_capture.c). */
struct capture {
    bool on;                    /* relay.capture = wal */
    enum capture_state state;
    struct repl_conn repl;
    struct pgo_relations rels;
    struct pgo_acks acks;       /* what may be confirmed: one entry per source transaction */
    struct wal_event ev;
    struct wal_columns cols;    /* relay.column_*: what an Insert is read from */
    struct event_placement placement;
    unsigned gen;               /* streams started: reports of an older one are ignored */
    uint64_t seq;               /* the source transaction being read */
    bool in_txn;                /* between its Begin and its Commit */
    int64_t commit_time_us;     /* its commit time (PostgreSQL epoch) */
    int64_t oldest_commit_us;   /* of the oldest transaction not confirmed: the lag */
    uint64_t confirmed;         /* reported flushed; where a new stream starts */
    uint64_t received;          /* how far the stream was read: reported written */
    uint64_t status_sent_ms;
    uint64_t last_progress_ms;  /* confirmed moved or a heartbeat was sent */
    uint64_t slot_query_ms;     /* next slot query */
    uint64_t restart_at_ms;     /* a stopped stream starts again after this */
    unsigned failures;          /* consecutive stream failures: the back-off */
    bool slot_busy;             /* START_REPLICATION refused: another session reads the slot */
    long unacked;               /* fencing = none: produced by this stream, no report yet */
    bool queue_full;            /* the producer refused a message: resume on a report */
    /* events that can never be produced, to be kept as dead rows (relay_capture_dead.c) */
    struct capture_dead *dead;
    size_t n_dead, dead_cap;
    bool dead_sending;
    uint64_t dead_retry_ms;
    /* fencing = transactional: the open Kafka transaction and the committing one */
    long txn_msgs;
    bool txn_whole;             /* the open Kafka transaction ends a source transaction */
    struct capture_count *open, *done;
    size_t n_open, open_cap, n_done, done_cap;
    long done_msgs;
    bool committing;
    /* read ahead while a commit runs (relay_capture.c) */
    struct capture_frame **ahead;
    size_t ahead_head, n_ahead, ahead_cap, ahead_bytes;
};

struct relay {
    uv_loop_t *loop;
    const struct relay_config *cfg;
    struct relay_config *live;  /* the same configuration, which SIGHUP updates in place */
    relay_reload_fn reload;
    void *reload_arg;
    struct sql_statements sql;
    char claim_table[CONFIG_RELATION_MAX]; /* debezium, polled: the view the statements read */
    struct sql_capture csql;    /* relay.capture = wal */
    struct capture cap;
    struct pg_conn pg;
    struct producer prod;

    uv_timer_t tick;            /* poll_interval_ms: poll, retry the lock, leave back-off */
    uv_timer_t reconnect;
    uv_timer_t shutdown;
    uv_timer_t watchdog;
    uv_signal_t sigterm;
    uv_signal_t sigint;
    uv_signal_t sighup;

    bool listening;
    bool wake;                  /* rows may be waiting: claim when possible */
    bool claim_full;            /* the last claim returned a whole batch */
    bool lock_due;              /* standby: time to try the leader lock again */
    bool backoff;               /* a statement failed: wait for the next tick */
    bool stopping;
    bool purged;
    bool finished;
    bool ready_sent;            /* READY=1 went to systemd */
    int prepared;               /* hot-path statements prepared on this connection */
    bool halt_pending;          /* on_poison=halt: a row of a batch in flight will halt us;
                                   claim and produce nothing more meanwhile */
    bool retention_due;
    /* A failure reported for several rows of a batch may be one produce
     * request's (librdkafka gives every message of a rejected request its
     * error): those rows are charged nothing and produced again one at a
     * time, oldest first, up to isolate_until_id; only a row that fails
     * alone is charged. */
    bool isolating;
    int64_t isolate_until_id;
    /* The producer's queue was full: the batch stopped early and its claim
     * range was cut back to what it produced. No claim until reports free
     * room; a claim sent before the cut is discarded, since it skipped the
     * rows the cut batch gave back and could reorder their aggregates. */
    bool queue_full;
    unsigned truncations;
    uint64_t claims_sent;       /* claims sent since start: batch.claim_seq */
    /* SQL_FLOOR: where the next claim starts (sql_floor.h). has_floor is
     * false until a claim returned rows: claims start from the saved floor. */
    bool floor_mode;
    bool has_floor;
    int64_t floor_id;
    struct sql_floor_snap floor_snap;
    unsigned reconnect_attempt; /* consecutive failed connects: drives the back-off */
    const struct poison_rules *poison; /* relay.on_poison */
    long retention_s;
    uint64_t last_retention_ms;
    uint64_t backlog_due_ms;    /* next backlog query */
    uint64_t backlog_sent_ms;   /* when the running one was sent */
    uint64_t backlog_took_ms;   /* how long the last one took */
    uint64_t txn_start_ms;      /* the running transaction call began */
    bool lead_unverified;       /* fencing: a replaced producer waits for the lock check */
    bool claim_first;           /* new leader: its first batch is claimed and marked before
                                   the backlog count, which takes a while on a large backlog
                                   and would hold up the claim its transaction waits for */
    uint64_t claim_first_until; /* ... but no longer than this: Kafka may be away */

    struct batch b[N_BATCHES];
    struct strbuf params[3];    /* array literals for the mark and failure statements */

    struct relay_stats st;
    struct http_server *http;   /* the status endpoint; NULL when disabled */

    /* Is the connection a session of its own, and fit to relay? (see "leadership") */
    struct sql_session ssql;
    char token[48];             /* the marker this relay sets in its session at connect */
    bool session_checked;       /* the session check ran on this connection */
    bool table_exists, ledger_exists, ledger_readable; /* what the session check saw */
    bool warned_ledger;         /* said once that the schema version cannot be read */
    bool schema_checked;        /* the table's schema version is the one this binary knows */
    uint64_t schema_logged_ms;  /* when the schema problem was last logged */
    bool holder_due;            /* standby: ask who holds the leader lock */
    bool may_hold_lock;         /* the lock was taken on this connection */
    int release_tries;          /* refused: attempts to give the lock back before closing */
    uint64_t refuse_deadline_ms; /* refused: close even if batches in flight are not marked */
    struct verify_task *verify; /* [verify] interval; NULL when off */
    struct progress *progress;  /* the publish rate; NULL when out of memory */
    struct log_limit failures;  /* per-row failure lines: a few in full, then summaries */
    struct standby_watch watch; /* standby: does a leader make progress? */
    struct relay_failover {     /* relay.capture = wal: relay_failover.c */
        struct failover_watch w;
        bool blocked;           /* a failover left a gap: no stream until a restart */
        bool checked;           /* a slot query ran on this session */
        uint64_t connected_ms;  /* when this session connected */
        enum failover_verdict said; /* logged already */
    } failover;

    /* The quiet lock (schema/004): see enum plan_quiet. */
    enum plan_quiet quiet;
    bool quiet_wanted, quiet_idle;
    int notifies;               /* NOTIFYs since the last claim was sent */
    uint64_t quiet_check_at_ms;
    uint64_t quiet_backoff_ms;  /* leaving: the last wait before a check (0: none yet) */
    uv_timer_t quiet_timer;     /* leaving: claim and check again */
};

/* relay_pipeline.c */
uint64_t relay_now_ms(struct relay *r);
int relay_in_flight(const struct relay *r);
bool relay_any_phase(const struct relay *r, enum phase ph);
void relay_batch_reset(struct batch *b);
void relay_row_failed(struct relay *r, struct batch *b, int i, enum stats_fail_reason kind,
                       enum attempt_limit limit, const char *why);
void relay_on_report(void *opaque, rd_kafka_resp_err_t err, void *arg);
void relay_produce_rows(struct relay *r, struct batch *b, PGresult *res);
int relay_row_topic(const struct relay *r, const struct event_row *row, char *topic, size_t len,
                    char *err, size_t errlen);
void relay_claim(struct relay *r, const struct plan_step *p);
/* SQL_FLOOR: the floor as the claim ($5..$7) and the backlog count ($1..$4)
 * take it: id (formatted into @p id), xmax, open transactions, xmin; all
 * NULL until a claim gave the relay a floor (they then use the saved one). */
void relay_floor_params(const struct relay *r, char id[24], const char *out[4]);
void relay_mark(struct relay *r, struct batch *b, unsigned with);
void relay_retention(struct relay *r);

/* relay_step.c */
void relay_notify_status(struct relay *r);
void relay_snapshot(const struct relay *r, struct plan_state *s);
void relay_step(struct relay *r);

/* relay_leader.c */
void relay_set_role(struct relay *r, enum stats_role role);
void relay_session_reset(struct relay *r);
bool relay_session_evidence(struct relay *r, const PGresult *res, const char *statement);
void relay_schema_check(struct relay *r);
void relay_session_check(struct relay *r);
void relay_on_lock(struct pg_conn *pg, PGresult *res, void *arg);
void relay_on_verified(struct pg_conn *pg, PGresult *res, void *arg);
void relay_on_holder(struct pg_conn *pg, PGresult *res, void *arg);
void relay_lock_query(struct relay *r, const char *sql, pg_result_cb cb);
void relay_wind_down(struct relay *r);

/* relay_quiet.c */
void relay_quiet_reset(struct relay *r);
void relay_on_quiet_on(struct pg_conn *pg, PGresult *res, void *arg);
void relay_on_quiet_off(struct pg_conn *pg, PGresult *res, void *arg);
void relay_on_quiet_check(struct pg_conn *pg, PGresult *res, void *arg);
void relay_on_listen(struct pg_conn *pg, PGresult *res, void *arg);

/* relay_fence.c */
bool relay_replace_producer(struct relay *r);
void relay_fence_step(struct relay *r, const struct plan_state *s);

/* relay_capture.c */
int relay_capture_init(struct relay *r);
void relay_capture_step(struct relay *r);
bool relay_capture_settled(const struct relay *r);
void relay_capture_on_report(struct relay *r, void *opaque, rd_kafka_resp_err_t err);
void relay_capture_confirm(struct relay *r, uint64_t lsn);
void relay_capture_explain(struct relay *r, const char *why, const char *sqlstate);
void relay_capture_close(struct relay *r);
void relay_capture_free(struct relay *r);

/* relay_capture_slot.c */
bool relay_capture_heartbeat_due(const struct relay *r);
void relay_capture_heartbeat(struct relay *r);
bool relay_capture_slot_query_due(const struct relay *r);
void relay_capture_slot_query(struct relay *r);
void relay_capture_retention(struct relay *r);
void relay_capture_take_over(struct relay *r);

/* relay_failover.c */
void relay_failover_connected(struct relay *r);
void relay_failover_slot_seen(struct relay *r, const char *walfile, bool slot_exists,
                              uint64_t slot_confirmed);
bool relay_failover_blocks(const struct relay *r);

/* relay_capture_dead.c */
bool relay_capture_dead_queue(struct relay *r, const struct event_row *row, const char *event_id,
                              const char *why);
bool relay_capture_dead_due(const struct relay *r);
void relay_capture_dead_record(struct relay *r);
void relay_capture_dead_clear(struct relay *r);
void relay_capture_dead_free(struct relay *r);

/* relay.c */
void relay_finish(struct relay *r);

#endif
