/* relay_int.h — the daemon's relay, shared by its files (not for other modules).
 *
 * One struct relay and the functions its files call across each other:
 *   relay.c           the boot, the loop, the PostgreSQL connection, timers, signals, shutdown
 *   relay_step.c      relay_step(): describe the relay to the engine (plan.c) and carry out its answer
 *   relay_pipeline.c  a row's way: claim -> produce -> delivery reports -> failures -> mark; retention
 *   relay_leader.c    the session checks, the schema check, the leader lock and refusals
 *   relay_fence.c     the Kafka transaction that fences a deposed leader; replacing the producer
 *   relay_quiet.c     the quiet lock: writers send no NOTIFY while the leader drains
 *   relay_capture.c   relay.capture = wal: the stream from the replication slot, its state
 *                     in relay_capture_int.h (with relay_capture_slot.c and _dead.c) */
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

struct relay {
    uv_loop_t *loop;
    const struct relay_config *cfg;
    struct relay_config *live;  /* the same configuration, which SIGHUP updates in place */
    relay_reload_fn reload;
    void *reload_arg;
    struct sql_statements sql;
    char claim_table[CONFIG_RELATION_MAX]; /* debezium, polled: the view the statements read */
    struct capture *cap;        /* relay.capture = wal: its own state (relay_capture_int.h);
                                   NULL when polling */
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
    unsigned denied_attempt;    /* producers Kafka refused a right in a row: drives the back-off */
    uint64_t producer_retry_at_ms; /* a denied producer is replaced no earlier (relay_fence.c) */
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

/* relay_capture.c: relay.capture = wal behind one interface. Started with
 * the relay (nothing when polling), stepped after every event, stopped and
 * freed with it; the rest of the daemon sees only its status (what plan_next
 * needs to know of it), the plan's statements it runs, and Kafka's reports. */
int relay_capture_start(struct relay *r);
void relay_capture_step(struct relay *r);
void relay_capture_status(const struct relay *r, struct plan_state *s);
void relay_capture_act(struct relay *r, enum plan_act act);
void relay_capture_on_report(struct relay *r, void *opaque, rd_kafka_resp_err_t err);
void relay_capture_stop(struct relay *r);
void relay_capture_connected(struct relay *r);
void relay_capture_free(struct relay *r);


/* relay.c */
void relay_finish(struct relay *r);

#endif
