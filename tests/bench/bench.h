/* bench.h — what the files of the benchmark share: the stack it runs on,
 * the processes it starts, and the figures each scenario returns. */
#ifndef OUTBOX_BENCH_H
#define OUTBOX_BENCH_H

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "core/kafka_rules.h"
#include "core/sql.h"

extern const char *pg_conninfo;
extern const char *kafka_servers;
extern const char *relay_bin;
extern const char *peer_dir;
extern char workdir[256];
extern const char *relay_opts[16];
extern int n_relay_opts;
extern const char *latency_modes; /* --latency-modes: warmup,poll,wal,floor */

struct relay_proc {
    pid_t pid;
    double started;
};
/* The whole machine's CPU time so far, every core, from /proc/stat: what the
 * stack, the relay and the benchmark itself took together. A figure measured
 * while it was all busy says more about the machine than about the relay. */
struct machine_cpu {
    unsigned long long busy, total;
};
/* A command run to its end: wall time, exit status and peak RSS from wait4
 * (ru_maxrss, the child's own high-water mark). */
struct cmd_cost {
    double seconds;
    double peak_rss_mb;
    int status; /* exit status, or -1 when killed by a signal */
};
/* Rows a transaction of the seeding writes (seed()): the same for every
 * scenario, as applications write their events in many transactions. */
#define SEED_TXN_ROWS 1000
struct drain_result {
    long rows;
    double seconds;         /* process start -> last message received (a floor: its CALL) */
    double rows_per_s;
    double first_to_last_s; /* first -> last message received; the floor: = seconds */
    double ftl_rows_per_s;
    double done_s;          /* process start -> last row marked or deleted, or last message */
    double peak_rss_mb;     /* -1: not measured (the peer exits by itself) */
    double cpu_s;
    double pg_cpu_s;        /* PostgreSQL backends doing the drain; -1: not measured */
    double broker_cpu_s;    /* the Kafka nodes meanwhile; -1: not measured (mock, or none) */
    double bench_cpu_s;     /* this benchmark meanwhile: its consumer, watching the drain */
    double machine_busy;    /* share of all cores busy during it; -1: not measured */
    double wal_bytes;       /* WAL PostgreSQL wrote from the start until done; -1: not measured */
    long duplicates;        /* messages received for a row received before */
};
enum runner { RUN_RELAY, RUN_PEER_MINIMAL, RUN_PEER_SAME };
/* The relay's own claim (relay/core/sql.c) under EXPLAIN (ANALYZE, BUFFERS):
 * its execution time and the shared buffers it touched. The plan goes to
 * WORKDIR/claim-plan-TABLE-LABEL.txt. */
struct claim_plan {
    double ms;
    long buffers;
};
struct drain_opts {
    enum runner runner;
    const char *const *extra; /* relay: more -X */
    bool deleting;            /* relay.on_sent=delete, or the minimal peer's --on-sent
                               * delete: done when the table is empty */
    bool hold;                /* a REPEATABLE READ snapshot open during the drain */
    struct claim_plan *plan;  /* if set: the claim's plan at the end, before the hold ends */
    bool wal;                 /* relay.capture = wal: a slot and a publication named after
                               * the table, made by migrate before the rows are written */
};
/* The -X of relay.capture = wal for a table: its slot and publication are
 * named after it. */
struct wal_opts {
    char slot[128], pub[128];
    const char *v[4];
};
struct latency_run {
    const char *table;
    int rate;
    double seconds;
    long n;                 /* room in commit and recv */
    double *commit;         /* by the event's sequence number (its payload's "seq") */
    double *recv;
    volatile bool stop;
    rd_kafka_t *consumer;
    double t0;              /* when event 0 is due */
    int writers;            /* connections writing: event n is written by writer n % writers */
};
struct latency_result {
    int rate;
    double achieved_rate;
    long events;
    long received;
    int writers; /* connections that wrote the events */
    double p50_ms, p99_ms, max_ms;
    double machine_busy; /* share of all cores busy while the events were written; -1: unknown */
    long notifies;       /* NOTIFYs the writers sent (the others left it out: the quiet lock) */
    double relay_cpu_s_per_100k; /* the relay's CPU while the events were written */
    double peak_rss_mb;          /* the relay's VmHWM at the end of the run */
    double switches_per_event;   /* the relay's threads' context switches while they were written */
    char switches_by_thread[256]; /* the same per thread name */
    bool wal;                    /* relay.capture = wal */
    /* Kafka's floor at the same rate (kafka_floor), with and without
     * transactions, and with the relay's fencing while the same writers
     * write the same events into a table nothing reads (floor_loaded);
     * events 0 when not measured. */
    struct latency_floor {
        long events, received;
        double achieved_rate, p50_ms, p99_ms, max_ms, machine_busy;
    } floor_txn, floor_none, floor_loaded;
};
/* One writer of the latency run: its own connection, every writers-th event,
 * each a single-row transaction committed at its due time. */
struct latency_writer {
    struct latency_run *L;
    int k;
    long written;
    double last;
};
/* At most this many events a second from one connection: past it a single
 * writer (a round trip and a commit per event, each commit flushed to disk
 * as PostgreSQL's defaults do) falls behind its schedule on a busy 2-core
 * machine (one writer reached 271-832 of 1,000/s). */
#define LATENCY_RATE_PER_WRITER 250
#define LATENCY_WRITERS_MAX 16
/* The writer threads of one latency run. */
struct latency_writers {
    struct latency_writer w[LATENCY_WRITERS_MAX];
    pthread_t t[LATENCY_WRITERS_MAX];
};
struct listener {
    PGconn *conn;
    volatile bool *stop;
    long count;
};
/* What Kafka alone costs an event at a rate, measured like the relay: the
 * same due times, the same producer settings (kafka_rules.c) and the same
 * consumer, but no database: this process produces each event when it is due.
 * With transactions it holds every event due by the time one begins and
 * commits it at once, one transaction after the other (what the relay's
 * joined transactions do at best); without, each event is produced when due.
 * The relay's latency above this floor is what the database, the wake-up and
 * the relay itself add. */
struct kafka_floor {
    struct latency_run *L;
    const char *topic;
    rd_kafka_t *rk;
    bool txn;
    long produced;
    long unacked;   /* produced, no delivery report yet */
    double last;
};
/* The writers of a latency run, committing the same events at the same
 * times into an outbox table that no relay reads: what the relay's run puts
 * on the machine besides the relay, its backend and what it asks of Kafka. */
struct writer_load {
    struct latency_run W;
    struct latency_writers ws;
};
struct first_message {
    rd_kafka_t *consumer;
    volatile double at; /* when the first message arrived; 0 before */
    volatile bool stop;
};
struct startup_result {
    long backlog;
    int runs;
    double start_to_leader_ms[8];
    double leader_to_received_ms[8]; /* first message received by a consumer */
    double leader_to_marked_ms[8];   /* first row marked (its sent_at) */
};
struct fresh_result {
    long backlog;
    int rate;
    double drain_seconds;
    struct latency_result lat;
};
/* The minimal floor, the three peers (two mark, one deletes) and the
 * relay's drains, each on a fresh table, once per round, in an order rotated from round to round. One
 * sample of each can be off by a third on a shared machine (a neighbour, a
 * checkpoint): a ratio of two single samples carries both errors, so each
 * round's ratios are taken within the round, and the targets are checked
 * against their median. */
#define ROUNDS_MAX 8
enum { R_FLOOR, R_PEER_MIN, R_PEER_SAME, R_PEER_DEL, R_MARK, R_DELETE, R_WAL, R_WAL_FLOOR, R_N };
struct rounds {
    int n;
    bool ran[R_N];                 /* the scenarios run (--drain-only runs some) */
    double v[R_N][ROUNDS_MAX];     /* rows/s, process start -> last message */
    double ftl[R_N][ROUNDS_MAX];   /* rows/s, first -> last message */
    double pg_cpu[R_N][ROUNDS_MAX]; /* PostgreSQL backends' CPU s per 100k rows; -1: unknown */
    double wal[R_N][ROUNDS_MAX];   /* WAL bytes per 100k rows written during the drain */
    double others_cpu[R_N][ROUNDS_MAX]; /* CPU s per 100k rows of what every drain needs besides
                                          * its runner (PostgreSQL, the broker, the consumer); -1 */
};
#define N_ROUND_RATIOS (int)(sizeof(round_ratios) / sizeof(round_ratios[0]))
#define REPLAY_BOUND_MB 32.0
struct tool_result {
    long rows;
    long slice_rows; /* verify only */
    double rows_per_s;
    double peak_rss_mb;
    double bound_mb;
    long messages;             /* verify: rows found in Kafka */
    long truncated_partitions; /* verify: partitions whose log starts after the window */
};
struct verify_totals {
    long messages, mismatched, out_of_order, duplicates, truncated_partitions;
};
/* How long a broker that is not the mock carries transactions before the
 * latency runs: a JVM broker answers its first minute of them several times
 * slower (Apache Kafka 3.9, one node, four runs in a row at 1,000 events/s:
 * Kafka's own p50 47, 37, 26, 19 ms, the relay's 105, 35, 26, 16 ms). */
#define WARMUP_SECONDS 60

/* The scenarios of a round, in the order of struct rounds. */
extern const char *const round_names[R_N];
void startup_json(FILE *o, const struct startup_result *su);
void startup_line(const struct startup_result *su);

/* bench_util.c */
bool broker_is_mock(void);
const char *broker_name(void);
/* /proc/loadavg's 1, 5 and 15 minute averages as text; a static buffer. */
const char *load_average(void);
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
double now_s(void);
void sleep_s(double s);
PGconn *pg_open(void);
void pg_exec(PGconn *c, const char *fmt, ...);
long long pg_int(PGconn *c, const char *fmt, ...);
void base_args(const char **argv, int *n, const char *table);
void migrate(const char *table, const char *const *extra);
void wal_opts_init(struct wal_opts *w, const char *table);
long long wal_lsn(PGconn *c);
/* A peer on @p table; @p deleting: it deletes what it sent (--on-sent delete). */
struct relay_proc peer_start(const char *script, const char *table, bool deleting);
struct relay_proc relay_start(const char *table, const char *const *extra);
double proc_cpu_s(pid_t pid);
long proc_switches(pid_t pid);
#define THREAD_SWITCHES_MAX 16
struct thread_switches {
    int n;
    char name[THREAD_SWITCHES_MAX][32];
    long count[THREAD_SWITCHES_MAX];
};
long proc_switches_by_thread(pid_t pid, struct thread_switches *by);
void thread_switches_line(const struct thread_switches *a, const struct thread_switches *b,
                          double per, char *out, size_t len);
pid_t run_cmd(const char *const argv[], const char *log);
struct machine_cpu machine_cpu_now(void);
double machine_busy(struct machine_cpu a, struct machine_cpu b);
void relay_cost(pid_t pid, double *rss_mb, double *cpu_s);
double client_backends_cpu_s(PGconn *c, int except);
/* CPU seconds the Kafka nodes of the stack used so far; -1: none known. */
double brokers_cpu_s(void);
/* CPU seconds this process used so far, all its threads. */
double self_cpu_s(void);
void relay_stop(struct relay_proc *p);
struct cmd_cost run_measured(const char *const argv[], const char *log);
void seed(PGconn *c, const char *table, long rows, int aggregates);
void drop(PGconn *c, const char *table);

/* bench_drain.c */
struct drain_result drain(PGconn *c, const char *table, long rows, int aggregates,
                                 const struct drain_opts *o);
struct drain_result minimal_floor(PGconn *c, const char *table, long rows, int aggregates,
                                         int batch);
struct drain_result wal_floor(PGconn *c, const char *table, long rows, int aggregates);
struct drain_result wide_floor(PGconn *c, const char *table, long rows, int aggregates,
                                      int batch);

/* bench_latency.c */
rd_kafka_t *consumer_at(const char *topic, const char *fetch_wait_ms);
rd_kafka_t *consumer_at_end(const char *topic);
int cmp_double(const void *a, const void *b);
pthread_t latency_listen(struct latency_run *L, const char *topic);
void latency_take(struct latency_result *res, struct latency_run *L, long n);
void latency_collect(struct latency_run *L, pthread_t th, long n, double wait_s);
double enqueue_seq(PGconn *c, const char *sql, long n);
struct latency_result latency(PGconn *c, const char *table, int rate, double seconds, bool wal);
struct latency_result kafka_floor(const char *table, int rate, double seconds, bool txn,
                                         PGconn *c, const char *load_table);

/* bench_scenarios.c */
void ensure_topic(const char *topic);
double median(const double *v, int n);
double maximum(const double *v, int n);
struct startup_result startup(PGconn *c, const char *table, long backlog, int aggregates,
                                     int runs);
struct fresh_result fresh_behind_backlog(PGconn *c, const char *table, long backlog,
                                                int aggregates, int rate);

/* bench_report.c */
double rounds_ratio(const struct rounds *R, int num, int den, double *each);
void rounds_json(FILE *o, const struct rounds *R);
void rounds_line(const struct rounds *R);
void rounds_put(struct rounds *R, int k, int i, const struct drain_result *d);
void pg_load_json(FILE *o, const struct rounds *R);
void pg_load_line(const struct rounds *R);
void wal_targets_json(FILE *o, const struct rounds *R, const struct latency_result *latw,
                      int n_lat, double drain_rss_mb);
bool pg_durable(PGconn *c);
void machine_json(FILE *o, bool durable);
/* What a relay drain is set beside in the JSON, each on its own table. */
struct drain_refs {
    const struct drain_result *min_floor, *wide, *peer, *same, *peer_del;
};
void drain_json(FILE *o, const char *name, const struct drain_result *d,
                const struct drain_refs *refs);

/* bench_verdict.c: the drain targets against the fastest honest peer of
 * each round (mark: the marking peers; delete: all three). */
void verdicts_json(FILE *o, const struct rounds *R);
void verdicts_line(const struct rounds *R);
/* Whether drain @p relay (R_MARK, R_DELETE) met its target; -1: not judged. */
int verdict_met(const struct rounds *R, int relay);

/* bench_tools.c */
struct tool_result verify_run(const char *table, long rows, long slice_rows);
struct tool_result replay_run(PGconn *pc, const char *table, long rows);
void tool_json(FILE *o, const char *name, const struct tool_result *t);
const char *jbool(int v);
const struct latency_result *at_rate(const struct latency_result *lat, int n, int rate);
struct latency_floor floor_figures(struct latency_result r);
const struct latency_floor *own_floor(const struct latency_result *l);
int latency_target(const struct latency_floor *r, const struct latency_floor *f, int rate);
int wal_latency_target(const struct latency_floor *r, const struct latency_floor *f, int rate);
bool latency_mode(const char *mode);
int latencies(PGconn *c, char *rates, double seconds, struct latency_result *lat,
              struct latency_result *lat_wal);
void latency_line(const struct latency_result *l);
void latency_json(FILE *o, const char *name, const struct latency_result *lat, int n);

#endif
