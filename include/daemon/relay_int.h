/* relay_int.h — the daemon's relay, shared by its files (not for other modules).
 *
 * One struct relay and the functions its files call across each other:
 *   relay.c           the boot, the loop, the PostgreSQL connection, timers, signals, shutdown
 *   relay_step.c      relay_step(): describe the relay to the engine (plan.c) and carry out its answer
 *   relay_poll_pipeline.c  polling, a row's way: claim -> produce -> reports -> failures -> mark; retention
 *   relay_leader.c    the session checks, the schema check, the leader lock and refusals
 *   relay_fence.c     the Kafka transaction that fences a deposed leader; replacing the producer
 *   relay_quiet.c     the quiet lock: writers send no NOTIFY while the leader drains
 *   relay_poll.c      relay.capture = poll behind the capture interface, its state in
 *                     relay_poll_int.h (with relay_poll_pipeline.c and relay_poll_fence.c)
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
#include "core/server_watch.h"
#include "base/stats.h"
#include "base/strbuf.h"
#include "daemon/verify_task.h"


struct relay {
    uv_loop_t *loop;
    const struct relay_config *cfg;
    struct relay_config *live;  /* the same configuration, which SIGHUP updates in place */
    relay_reload_fn reload;
    void *reload_arg;
    struct sql_statements sql;
    char claim_table[CONFIG_RELATION_MAX]; /* debezium, polled: the view the statements read */
    const struct capture_ops *ops; /* relay.capture's mode, chosen once at start */
    struct poll_capture *poll;  /* relay.capture = poll: its own state (relay_poll_int.h);
                                   NULL with wal */
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

    bool lock_due;              /* standby: time to try the leader lock again */
    bool backoff;               /* a statement failed: wait for the next tick */
    bool stopping;
    bool purged;
    bool finished;
    bool ready_sent;            /* READY=1 went to systemd */
    bool retention_due;
    unsigned reconnect_attempt; /* consecutive failed connects: drives the back-off */
    const struct poison_rules *poison; /* relay.on_poison */
    long retention_s;
    uint64_t last_retention_ms;
    uint64_t txn_start_ms;      /* the running transaction call began */
    bool lead_unverified;       /* fencing: a replaced producer waits for the lock check */
    unsigned denied_attempt;    /* producers Kafka refused a right in a row: drives the back-off */
    bool renew_producer;        /* a topic right refused: a new producer after the back-off */
    uint64_t producer_retry_at_ms; /* a denied producer is replaced no earlier (relay_fence.c) */
    bool producer_down;         /* refused (connections, a right): none runs until then */
    unsigned txn_slot;          /* which of the two transactional ids the producer uses */
    enum producer_spare spare;  /* the other one, as this leadership's first init found it */

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
    struct server_watch server; /* which server, and a failover or a stale primary */

    /* The quiet lock (schema/004): see enum plan_quiet. */
    enum plan_quiet quiet;
    bool quiet_wanted, quiet_idle;
    int notifies;               /* NOTIFYs since the last claim was sent */
    uint64_t quiet_check_at_ms;
    uint64_t quiet_backoff_ms;  /* leaving: the last wait before a check (0: none yet) */
    uv_timer_t quiet_timer;     /* leaving: claim and check again */
};

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

/* relay_fence.c */
bool relay_replace_producer(struct relay *r);
/** Stops the producer whose connections the brokers refuse; the next one
 *  starts after the back-off (relay_replace_producer). @return true. */
bool relay_stop_producer(struct relay *r);
/** A delivery failed for a right Kafka refuses on the topic (code: the
 *  report's error): named once, nothing claimed until a back-off passes. */
void relay_topic_denied(struct relay *r, int code);
/** A delivery succeeded: a refused topic right is granted again. */
void relay_topic_granted(struct relay *r);
void relay_fence_step(struct relay *r, const struct plan_state *s);

/* The two capture modes behind one interface, as libuv's loop calls
 * uv__io_poll() and never asks which platform it is on: polling
 * (relay_poll.c) and log-based capture (relay_capture.c). One is chosen at
 * start from relay.capture; each keeps its own state, and the shared daemon
 * calls only these. */
struct capture_ops {
    const char *name;           /* as relay.capture spells it */
    /* The statements' flags this mode adds for the relation @p claim is read from. */
    unsigned (*sql_flags)(const struct relay_config *cfg, const char *claim);
    /* Its state, before the loop runs. @return EXIT_OK or the exit status to end with (logged). */
    int (*start)(struct relay *r);
    void (*connected)(struct relay *r);  /* a new main connection, before the first step */
    void (*leading)(struct relay *r);    /* the relay just became the leader */
    void (*tick)(struct relay *r);       /* the poll interval passed: what is due now */
    /* What plan_next needs of this mode, added to the shared snapshot. */
    void (*status)(const struct relay *r, struct plan_state *s);
    /* Carries out @p p when it is this mode's step. @return -1 when it is not,
     * 1 when the relay is to be planned again, 0 otherwise. */
    int (*act)(struct relay *r, const struct plan_step *p);
    void (*step)(struct relay *r);       /* after every event, once plan_next is done */
    void (*on_report)(struct relay *r, void *opaque, rd_kafka_resp_err_t err);
    int (*in_flight)(const struct relay *r);  /* messages handed to Kafka, not reported yet */
    bool (*producing)(const struct relay *r); /* a shutdown's drain waits for Kafka's reports */
    void (*stop)(struct relay *r);       /* its handles closed, with the loop's */
    void (*free)(struct relay *r);       /* its memory, once the loop ended */
    void (*wake)(struct relay *r);       /* rows may be waiting: claim when possible */
    /* relay.fencing = transactional: what plan_fence's answer does to this
     * mode's batches (all but initialising and committing, relay_fence.c's),
     * and to them a transaction's end. */
    void (*txn_settle)(struct relay *r, const struct fence_plan *f);
    void (*txn_ended)(struct relay *r, unsigned gen, enum producer_txn_result res);
};

extern const struct capture_ops relay_poll_ops; /* relay_poll.c */
extern const struct capture_ops relay_wal_ops;  /* relay_wal.c */

/* relay_capture*.c: relay.capture = wal's side of the interface (relay_wal.c's table) */
int relay_capture_start(struct relay *r);
void relay_capture_connected(struct relay *r);
void relay_capture_step(struct relay *r);
void relay_capture_status(const struct relay *r, struct plan_state *s);
int relay_capture_act(struct relay *r, const struct plan_step *p);
void relay_capture_on_report(struct relay *r, void *opaque, rd_kafka_resp_err_t err);
void relay_capture_stop(struct relay *r);
void relay_capture_free(struct relay *r);

/* relay.c */
uint64_t relay_now_ms(struct relay *r);
/* Deletes one batch of rows with statement @p sql ($1 @p bound, $2 the batch
 * size); retention stays due while batches come back full. */
void relay_retention_delete(struct relay *r, const char *sql, const char *bound);
/* The topic of @p row: its own, else relay.topic rendered, checked. @return
 * 0, or -EINVAL with the reason in @p err. */
int relay_row_topic(const struct relay *r, const struct event_row *row, char *topic, size_t len,
                    char *err, size_t errlen);
void relay_finish(struct relay *r);
/* The producer's delivery report callback: the mode whose message it was takes it. */
void relay_on_report(void *opaque, rd_kafka_resp_err_t err, void *arg);
/** Starts r->prod serving this relay: its reports go to relay_on_report, and
 *  refused connections make the relay step (relay_stop_producer) at once
 *  rather than at its next tick. @return producer_start's. */
int relay_producer_start(struct relay *r, char *err, size_t errlen);

#endif
