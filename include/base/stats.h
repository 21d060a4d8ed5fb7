/* stats.h — what the relay knows about itself, for the status endpoint,
 * /metrics, sd_notify STATUS= and `outbox-relay status`.
 *
 * Each field has one writer, named above its group in struct relay_stats
 * (stats_init() sets the first values of all). Every writer runs on the loop
 * thread and so do the readers, so no locking. Units are base units
 * (seconds, rows). */
#ifndef OUTBOX_STATS_H
#define OUTBOX_STATS_H

#include <stdbool.h>
#include <stdint.h>

#define STATS_HIST_BUCKETS 14

/** A Prometheus-style cumulative histogram with fixed upper bounds. */
struct stats_histogram {
    const double *bounds;                  /* STATS_HIST_BUCKETS upper bounds, ascending */
    uint64_t counts[STATS_HIST_BUCKETS];   /* non-cumulative counts per bucket */
    uint64_t inf;                          /* observations above the last bound */
    uint64_t count;
    double sum;
};

enum stats_role { STATS_ROLE_UNKNOWN = 0, STATS_ROLE_STANDBY, STATS_ROLE_LEADER };

/* Brokers listed one by one in /status; a larger cluster is counted in
 * brokers_up/brokers_total but only the first ones are named. */
#define STATS_MAX_BROKERS 16

/** One broker as librdkafka's statistics last described it. */
struct stats_broker {
    int32_t id;                    /* Kafka node id */
    char name[128];                /* "host:port" */
    char state[16];                /* librdkafka's state: UP, DOWN, CONNECT, AUTH, … */
};

/* Topics counted one by one in outbox_relay_events_published_by_topic_total;
 * rows to further topics are counted under STATS_TOPIC_OTHER, so a template
 * with ${event_type} cannot grow the metric without bound. */
#define STATS_MAX_TOPICS 64
#define STATS_MAX_TOPICS_TEXT "64"
/** The label of the rest; topics starting with "__" are never published. */
#define STATS_TOPIC_OTHER "__other__"

struct stats_topic {
    char name[250];                /* Kafka's limit is 249 bytes */
    uint64_t published;
    uint64_t unsettled;            /* acknowledged in the open Kafka transaction */
};

/** Who holds the leader lock, as pg_locks and pg_stat_activity showed it to
 *  a standby (pg_stat_activity hides most columns of other roles' sessions). */
struct stats_lock_holder {
    bool known;                    /* a holder was seen by the last query */
    int pid;
    char application_name[64];     /* "" when hidden */
    char client_addr[64];          /* "" when hidden or over a Unix socket */
    double backend_start;          /* unix seconds, 0 = hidden */
    char state[32];                /* active, idle, …; "" when hidden */
    double idle_seconds;           /* since its last state change; < 0 = hidden */
    bool looks_like_relay;         /* application_name starts with "outbox-relay" */
};

/* The recent publish rate: one sample of published_total a second, the last
 * minute of them. A rate from counters, not from the backlog, which is only
 * measured every few seconds. */
#define STATS_RATE_WINDOW_S 60
#define STATS_RATE_SLOTS (STATS_RATE_WINDOW_S + 1)

struct stats_rate {
    double mono[STATS_RATE_SLOTS];     /* stats_mono() of each sample */
    uint64_t count[STATS_RATE_SLOTS];
    int next;                          /* the slot the next sample goes to */
    int n;                             /* samples held */
};

/** Reasons a row failed, the label of outbox_relay_events_failed_total. */
enum stats_fail_reason {
    STATS_FAIL_INVALID = 0,  /* detected before producing: topic, headers, size */
    STATS_FAIL_PERMANENT,    /* Kafka refused it for good */
    STATS_FAIL_RETRIABLE,    /* Kafka failed it, a retry may succeed */
    STATS_FAIL_NREASONS
};

/** The daemon's periodic verify ([verify] interval), the last run's figures. */
struct stats_verify {
    bool enabled;
    uint64_t runs_total;           /* runs finished, with a result or not */
    uint64_t errors_total;         /* runs that could not finish (PostgreSQL, Kafka) */
    double last_time;              /* unix seconds of the last finished run, 0 = none */
    double last_duration;          /* seconds */
    bool have_result;              /* the figures below come from a run that finished */
    bool ok;                       /* nothing missing, mismatched or out of order */
    uint64_t rows, pending, missing, duplicates, out_of_order, mismatched, unknown;
    double window_start, window_end; /* unix seconds */
    char last_error[256];          /* of the last run, "" when it finished */
};

/** relay.capture = wal: the logical replication slot and the stream from it. */
struct stats_slot {
    bool enabled;                  /* relay.capture = wal: set once at start by the capture code;
                                      /metrics, /readyz and /status show the slot only then (the
                                      slot's name comes from relay.slot) */
    /* daemon/relay_capture.c: the stream this relay reads (leader only) */
    bool streaming;                /* START_REPLICATION answered: reading the slot */
    uint64_t received_lsn;         /* the end of the last message read */
    uint64_t flushed_lsn;          /* what this relay last reported flushed (confirmed) */
    uint64_t transactions_total;   /* source transactions relayed and confirmed */
    uint64_t heartbeats_total;     /* heartbeat messages written */
    /* daemon/relay_capture_recover.c: failovers reconciled (relay.slot_recovery = reconcile) */
    uint64_t recoveries_total;     /* gaps closed: the slot made, the rows Kafka lacked published */
    uint64_t recovered_events_total; /* rows those published */
    double last_recovery_time;     /* unix seconds the last recovery ended, 0 = none */
    uint64_t last_recovery_events; /* rows it published */
    double lag_seconds;            /* now - commit time of the oldest transaction read and not
                                      yet confirmed; 0 when none waits */
    double last_commit_time;       /* unix seconds: commit time of the last confirmed transaction */
    /* daemon/relay_capture_slot.c: the slot as pg_replication_slots showed it (every few
       seconds) */
    bool known;                    /* the last query found the slot */
    double query_time;             /* unix seconds of that query, 0 = none yet */
    bool active;                   /* a walsender uses it */
    int active_pid;                /* 0 = none */
    char wal_status[16];           /* reserved, extended, unreserved or lost; "" = not known */
    uint64_t confirmed_lsn;        /* confirmed_flush_lsn */
    uint64_t restart_lsn;
    int64_t retained_bytes;        /* WAL kept for the slot: current WAL LSN - restart_lsn */
    int64_t lag_bytes;             /* current WAL LSN - confirmed_flush_lsn */
    char problem[384];             /* why capture cannot go on (no slot, lost, wrong plugin,
                                      no publication, no REPLICATION); "" when fine */
};

/** The PostgreSQL server of the relay's session, and its connection's
 *  history. Written by core/server_watch.c only (the daemon feeds it). */
struct stats_server {
    char host[256];                /* where the session connected (libpq's PQhost); "" = none */
    char port[16];
    char system_id[24];            /* pg_control_system().system_identifier; "" = not known */
    uint32_t timeline;             /* the server's current timeline; 0 = not known */
    double connected_since;        /* unix seconds; 0 while down */
    double disconnected_since;     /* unix seconds; 0 while connected */
    uint64_t failovers_total;      /* a later timeline of the same system seen */
    uint64_t reconnect_attempts_total; /* connects tried after a loss (rounds of the host list) */
    double last_failover_time;     /* unix seconds, 0 = none */
    char problem[512];             /* why this server is refused (a stale primary); "" = none */
};

struct relay_stats {
    double start_time;             /* unix seconds; stats_init() */

    /* the daemon (relay/daemon/relay_*.c): the state machine, its batches and its session. */
    enum stats_role role;
    bool pg_up;
    char pg_error[512];            /* why the connection failed or was lost, on one line and
                                      without secrets; "" while connected */
    bool quiet;                    /* the quiet lock is held: writers send no NOTIFY (schema/004) */
    bool halted;                   /* on_poison=halt tripped */
    bool stopping;                 /* SIGTERM/SIGINT received: draining */
    char halt_reason[256];

    uint64_t published_total;      /* acknowledged by Kafka */
    uint64_t failed_total[STATS_FAIL_NREASONS];
    uint64_t dead_total;           /* rows this process dead-lettered */
    uint64_t txn_aborted_total;    /* relay.fencing=transactional: transactions aborted */
    uint64_t producer_stalled_total; /* producers given up: a broker stopped answering, or a commit
                                        held at its coordinator (kafka_stall.h) */
    uint64_t batches_total;
    struct stats_histogram batch_duration;    /* claim → marks written, seconds */
    struct stats_histogram delivery_latency;  /* created_at → Kafka ack, seconds */

    int last_batch_rows;
    double last_batch_duration;    /* seconds */
    double last_batch_time;        /* unix seconds, 0 = none yet */

    bool backlog_known;            /* the figures below come from a recent query */
    int64_t backlog_rows;          /* unsent, not dead */
    double oldest_unsent_age;      /* seconds, 0 when the backlog is empty */
    int64_t dead_rows;             /* dead and not sent, in the table */
    double backlog_time;           /* unix seconds of that query */
    uint64_t backlog_published;    /* published_total when it was measured */

    /* progress.c */
    struct stats_rate publish_rate;   /* published_total, sampled every second */

    /* producer.c: librdkafka's statistics and delivery reports. */
    int brokers_up;                /* from librdkafka statistics; -1 = not known yet */
    int brokers_total;
    int64_t producer_queue_msgs;   /* messages in librdkafka's queues */
    int n_brokers;                 /* entries of brokers[] in use */
    struct stats_broker brokers[STATS_MAX_BROKERS];
    bool producer_fatal;
    bool kafka_answered;           /* a delivery acknowledged or the transaction coordinator
                                      answered since this producer started: the broker is
                                      reachable before its first statistics */

    /* A hung broker keeps its connections, so it stays UP in librdkafka's
     * statistics until socket.timeout.ms; what shows it sooner is messages
     * waiting while no acknowledgement arrives. */
    int64_t kafka_in_flight;       /* produced, no delivery report yet (this producer) */
    bool kafka_committing;         /* a commit (or abort) waits for the transaction
                                      coordinator: a hung one stalls the relay too */
    bool kafka_owed;               /* the leader waits on Kafka with nothing in flight:
                                      transactions being initialised, or the work of a
                                      producer replaced before Kafka answered it */
    double kafka_ack_clock;        /* stats_mono(): the last acknowledgement or answer of
                                      the coordinator, or when the relay began to wait
                                      after waiting for nothing, whichever is later */

    /* relay_leader.c: the outbox table's schema, what this binary needs before relaying. */
    int schema_version;            /* recorded by migrate; -1 = not read yet */
    char schema_problem[384];      /* why relaying waits for the schema; empty when it is fit */

    /* relay_leader.c: the database session, fit for relaying, and the leader lock. */
    bool refused;                  /* relaying refused for good (pooled session, row security) */
    char refused_reason[512];
    double refused_time;           /* unix seconds */
    int backend_pid;               /* pg_backend_pid() of our session, 0 = not known */
    bool via_proxy;                /* the pid libpq was given differs: a pooler or proxy */
    bool row_security;             /* policies hide rows (allowed): the backlog is unknown */
    double role_since;             /* unix seconds the current role began, 0 = unknown */
    struct stats_lock_holder holder;  /* standby: who holds the leader lock */
    bool standby_stuck;            /* standby long, the holder does not look like a relay */
    bool standby_stalled;          /* standby: rows wait and no leader marked or deleted any for
                                      relay.standby_stall_timeout */
    double standby_stalled_s;      /* how long rows have waited with no progress (0: not watching) */
    char standby_reason[512];

    /* relay_fence.c (producer.c for refused credentials, which librdkafka
     * retries itself): a right Kafka refuses the relay's principal (a missing
     * ACL, bad credentials), named once and retried with a back-off. It is
     * over once the broker answers (kafka_answered): stats_kafka_denial(). */
    int kafka_denial;              /* enum kafka_denial of the last replaced producer; 0 = none */
    char kafka_denial_error[64];   /* the broker's error name, e.g. TRANSACTIONAL_ID_AUTHORIZATION_FAILED */
    unsigned kafka_denials_named;  /* bit 1 << enum kafka_denial: named since the last grant;
                                      a principal without any right is refused two of them
                                      in turns (the topic, the producer id) */

    struct stats_verify verify;    /* verify_task.c */
    struct stats_slot slot;        /* relay.capture = wal */
    struct stats_server server;    /* core/server_watch.c */

    /* producer.c, through stats_count_published() at each acknowledgement
     * and stats_settle_published() when a Kafka transaction ends: a row of a
     * transaction counts once it committed, as published_total (relay_poll_pipeline.c),
     * which takes back the rows of an aborted one. */
    int n_topics;                  /* entries of topics[] in use */
    struct stats_topic topics[STATS_MAX_TOPICS];
    uint64_t published_other;      /* to topics beyond the first STATS_MAX_TOPICS */
    uint64_t unsettled_other;

    /* stats_reloaded(), which relay.c calls on SIGHUP */
    bool reload_ok;                /* the last reload (or the start) succeeded */
    double reload_time;            /* unix seconds of the last successful load */
};

/** Sets the bounds and zeroes everything; role unknown, brokers not known. */
void stats_init(struct relay_stats *s);

/** @return the right Kafka refuses now (an enum kafka_denial), or 0: none,
 *  or the broker answered since it was refused. */
int stats_kafka_denial(const struct relay_stats *s);
/** @return whether the right @p d (enum kafka_denial) was named refused since the last grant. */
bool stats_denial_named(const struct relay_stats *s, int d);

/** Counts one row acknowledged on @p topic (see STATS_MAX_TOPICS); inside a
 * Kafka transaction (@p in_txn) only once stats_settle_published() says it
 * committed. */
void stats_count_published(struct relay_stats *s, const char *topic, bool in_txn);

/** The open Kafka transaction ended: its rows count if it @p committed, and
 * are forgotten otherwise (they are produced again). */
void stats_settle_published(struct relay_stats *s, bool committed);

/** Records the outcome of a configuration reload (SIGHUP). */
void stats_reloaded(struct relay_stats *s, bool ok);

/** Adds one observation. */
void stats_observe(struct stats_histogram *h, double value);

/** @return the current time as unix seconds with sub-second precision. */
double stats_now(void);

/** @return seconds on a monotonic clock (for durations: immune to clock steps). */
double stats_mono(void);

/** Keeps @p count as the sample of monotonic time @p mono, unless the last
 *  sample is less than a second old (then nothing changes). */
void stats_rate_sample(struct stats_rate *r, double mono, uint64_t count);

/** @return the rate, per second, from the oldest sample of the last
 *  STATS_RATE_WINDOW_S seconds to @p count now (at @p mono); -1 when the
 *  samples cover less than a second. */
double stats_rate_per_second(const struct stats_rate *r, double mono, uint64_t count);

/** @return rows of the last backlog measurement not published since (an
 *  estimate: rows written since are not counted); -1 when not measured. */
int64_t stats_backlog_left(const struct relay_stats *s);

/** @return seconds until the backlog is published at @p rate rows/s: 0 when
 *  stats_backlog_left() is 0, -1 when unknown or @p rate is not positive. */
double stats_backlog_eta(const struct relay_stats *s, double rate);

/** @return whether the relay waits on Kafka: messages in flight, a commit
 *  running, or kafka_owed. */
bool stats_kafka_waiting(const struct relay_stats *s);

/** Starts kafka_ack_clock at monotonic time @p mono_now unless the relay
 *  already waits on Kafka: a new instance does not restart the wait for the
 *  work of the one it replaced. */
void stats_kafka_wait_begins(struct relay_stats *s, double mono_now);

/** @return how long the relay has been waiting on Kafka for an
 *  acknowledgement or an answer at monotonic time @p mono_now: 0 when it
 *  waits for nothing. */
double stats_ack_wait(const struct relay_stats *s, double mono_now);

#endif
