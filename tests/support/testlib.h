/* testlib.h — what the end-to-end tests share, one section per file of
 * tests/support: the stack's environment and controls (stack.c), PostgreSQL
 * helpers (postgres.c), running the outbox-relay binary (process.c), a
 * relay's status endpoint (relay_http.c), a real Kafka broker (brokers.c),
 * PgBouncer in front of PostgreSQL (pgbouncer.c), a primary and its standby of
 * a test's own (pg_pair.c) and writers through their failover (failover.c), a
 * proxy whose connections a test resets (proxy.c), a TLS-only PostgreSQL
 * (pg_tls.c), reading every message of a set of topics back with a real Kafka
 * consumer (consume.c) and checking it against the rows (check.c).
 *
 * Every helper asserts (Criterion) on the errors it cannot recover from, so a
 * test reads as a script. Each wait is bounded by a timeout in milliseconds.
 *
 * Environment (written by tests/support/stack.sh into DIR/env, set by meson):
 *   OUTBOX_RELAY_TEST_PG            libpq conninfo of the test database (required:
 *                                   the test is skipped without it)
 *   OUTBOX_RELAY_TEST_KAFKA         bootstrap servers (required)
 *   OUTBOX_RELAY_TEST_MOCK_CONTROL  control FIFO of the mock broker (optional)
 *   OUTBOX_RELAY_TEST_BROKER        `kafka`: this run uses OUTBOX_RELAY_TEST_REAL_KAFKA, the
 *                                   real broker, instead of OUTBOX_RELAY_TEST_KAFKA (meson
 *                                   sets it for the suite `kafka`)
 *   OUTBOX_RELAY_TEST_REAL_KAFKA    bootstrap servers of a real Kafka broker (optional)
 *   OUTBOX_RELAY_TEST_KAFKA_DIR     the stack's own Kafka node, for kafka.sh faults (optional)
 *   OUTBOX_RELAY_TEST_KAFKA_SH      tests/support/kafka.sh
 *   OUTBOX_RELAY_TEST_STACK_DIR     stack directory (logs go to DIR/logs)
 *   OUTBOX_RELAY_TEST_STACK_SH      tests/support/stack.sh
 *   OUTBOX_RELAY_BIN                the outbox-relay binary under test
 *   OUTBOX_RELAY_TEST_REQUIRED      if set, a missing stack fails the test instead of skipping it */
#ifndef OUTBOX_TESTLIB_H
#define OUTBOX_TESTLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#define E2E_MAX_RELAYS 8
#define E2E_MAX_ARGS 64

struct e2e_env {
    const char *pg;
    const char *kafka;
    const char *mock_control;   /* NULL without the mock */
    bool real_kafka;            /* kafka is a real Apache Kafka (started by the stack or external) */
    const char *kafka_dir;      /* the stack's own Kafka node (kafka.sh DIR); NULL otherwise */
    const char *kafka_sh;       /* tests/support/kafka.sh; may be NULL */
    const char *stack_dir;      /* may be NULL */
    const char *stack_sh;       /* may be NULL */
    const char *relay_bin;
};

/** One `outbox-relay run` child; its stderr goes to log_path. */
struct e2e_relay {
    pid_t pid;                  /* 0 once reaped */
    int status;                 /* wait status once reaped */
    char log_path[600];
};

/** Per-test names and handles. table == topic prefix: unique per process and run. */
struct e2e_ctx {
    const struct e2e_env *env;
    const char *kafka;          /* the broker this test uses: env->kafka unless the test set up its own */
    char name[64];              /* e2e_<name>_<pid>_<time> */
    char table[64];             /* unquoted, in schema public */
    char qtable[80];            /* "public"."<table>" */
    char qenqueue[96];          /* "public"."<table>_enqueue" */
    char topic_template[128];   /* <table>.${aggregate_type} */
    char channel[64];           /* notify channel = table */
    char logdir[512];
    char empty_conf[600];       /* an empty config file, passed as -c */
    PGconn *conn;
    char pg_conninfo[512];      /* the relay's conninfo when set (a server of the test's own) */
    bool wal;                   /* relay.capture = wal: slot and publication named as the table */
    struct e2e_relay relays[E2E_MAX_RELAYS];
    int n_relays;
};

/* ---- the stack (stack.c) ------------------------------------------------- */

/** Reads the environment; skips the test (cr_skip_test) if OUTBOX_RELAY_TEST_PG is unset. */
const struct e2e_env *e2e_env(void);

/** Fills @p t for test @p name (a short [a-z0-9] word): unique names, a log
 *  directory, a PostgreSQL connection; drops leftovers of a table of the same name. */
void e2e_setup(struct e2e_ctx *t, const char *name);

/** Kills the relays still running (printing the tail of their logs) and closes the connection. */
void e2e_teardown(struct e2e_ctx *t);

/** Restarts the stack's PostgreSQL (`stack.sh pg_ctl DIR restart -m fast`), waits
 *  until it accepts connections and resets @p t's connection. Skips the test
 *  without OUTBOX_RELAY_TEST_STACK_SH/_DIR. */
void e2e_pg_restart(struct e2e_ctx *t);

/** Sends one control command to the mock broker and waits (10 s at most) until
 *  the broker has applied it. @return false without a mock or on time-out. */
bool e2e_mock_command(const struct e2e_ctx *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- PostgreSQL (postgres.c) --------------------------------------------- */

/** @return a new connection to OUTBOX_RELAY_TEST_PG (asserts it works). */
PGconn *e2e_pg_connect(void);

/** Log-based capture for this test: every later command runs with
 *  relay.capture=wal, the slot and the publication named as the table;
 *  teardown drops the slot (a slot left behind would keep WAL for ever). */
void e2e_wal_enable(struct e2e_ctx *t);

/** Waits until the relay confirmed, through its slot, everything committed
 *  so far: writes a transactional logical message (another prefix: never
 *  relayed) and waits for the slot's confirmed_flush_lsn to pass it.
 *  @return true when it did within @p timeout_ms. */
bool e2e_wal_wait_confirmed(struct e2e_ctx *t, int timeout_ms);

/** Ends the sessions named @p application_name that hold an advisory lock
 *  (a relay's leader lock, say): @return how many sessions were ended. */
long long e2e_terminate_lock_holders(struct e2e_ctx *t, const char *application_name);

/** Runs one statement (printf format); asserts it succeeded; @return its result (PQclear it). */
PGresult *e2e_query(PGconn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Runs statements (printf format) and asserts success, discarding results. */
void e2e_exec(PGconn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Enqueues rows @p lo..@p hi (the series number i is in each payload as "i") of
 *  aggregate type @p type, spread over @p n_keys aggregates named @p key_prefix ||
 *  (i % n_keys), with event type @p event_type; a payload member "pad" of @p pad
 *  bytes when @p pad > 0. One statement, on @p t's connection. */
void e2e_enqueue_series(struct e2e_ctx *t, const char *type, const char *key_prefix, int n_keys,
                        const char *event_type, int lo, int hi, int pad);

/** @return the first column of the first row as an integer (asserts one non-NULL value). */
long long e2e_query_int(PGconn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** @return how many rows of the test table satisfy the SQL condition @p cond. */
long long e2e_count_where(struct e2e_ctx *t, const char *cond);

/** Repeats a query returning one boolean until it is true or @p timeout_ms pass.
 *  Also fails the test early if one of @p t's relays exited. @return true if it became true. */
bool e2e_wait_sql(struct e2e_ctx *t, int timeout_ms, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Waits until every row of the test table has sent_at set; asserts it within @p timeout_ms,
 *  reporting the remaining count otherwise. */
void e2e_wait_all_sent(struct e2e_ctx *t, int timeout_ms);

/* ---- processes: the relay binary and others (process.c) ------------------ */

/** Runs @p argv (argv[0] a path) to completion, killed after @p timeout_ms.
 *  @p out and @p err (each may be NULL) receive its stdout and stderr (caller frees).
 *  @return the exit status, 128+signal if killed by a signal, or -1 on timeout. */
int e2e_run_cmd(const char *const argv[], int timeout_ms, char **out, char **err);

/** Runs `outbox-relay ARGS...` (NULL-terminated) the same way. */
int e2e_run_relay(const char *const args[], int timeout_ms, char **out, char **err);

/** Appends the -c/-X options pointing a relay at the stack and the test table
 *  (conninfo, bootstrap servers, table, topic template, channel) to @p argv at *@p argc. */
void e2e_base_args(struct e2e_ctx *t, const char **argv, int *argc);

/** Runs `outbox-relay migrate` for the test table and asserts exit status 0. */
void e2e_migrate(struct e2e_ctx *t);

/** Starts `outbox-relay run` with the base args plus @p extra ("section.key=value"
 *  strings, each passed after -X; NULL-terminated, may be NULL). @return the relay. */
struct e2e_relay *e2e_relay_start(struct e2e_ctx *t, const char *const *extra);

/** e2e_relay_start, then waits up to @p timeout_ms (asserting) until the relay
 *  captures: connected to PostgreSQL when it polls, streaming from its slot
 *  with t->wal. @return the relay. */
struct e2e_relay *e2e_relay_start_capturing(struct e2e_ctx *t, const char *const *extra,
                                            int timeout_ms);

/** @return true once @p needle appears in the relay's log, false after @p timeout_ms
 *  (or if the relay exited without logging it). */
bool e2e_relay_wait_log(struct e2e_relay *r, const char *needle, int timeout_ms);

/** @return true if the relay's log contains @p needle. */
bool e2e_relay_log_contains(const struct e2e_relay *r, const char *needle);

/** @return true if the relay process is still running (reaps it otherwise). */
bool e2e_relay_alive(struct e2e_relay *r);

/** SIGTERM, then waits up to @p timeout_ms (SIGKILL after that).
 *  @return the exit code, 128+signal if it died of a signal, or -1 if it had to be killed. */
int e2e_relay_stop(struct e2e_relay *r, int timeout_ms);

/** SIGKILL and reap. */
void e2e_relay_kill(struct e2e_relay *r);

/** Prints the last @p lines lines of the relay's log to stderr. */
void e2e_relay_dump_log(const struct e2e_relay *r, int lines);

/** Starts `outbox-relay ARGS...` (exactly these arguments, NULL-terminated) in the
 *  background, output to a log file in the test's log directory. */
struct e2e_relay *e2e_spawn(struct e2e_ctx *t, const char *const *args);

/** Waits up to @p timeout_ms for a spawned process to exit (SIGKILL after that).
 *  @return its exit code, 128+signal, or -1 on timeout. */
int e2e_wait_exit(struct e2e_relay *r, int timeout_ms);

/** @return the relay's whole log (caller frees; "" if missing). */
char *e2e_relay_log(const struct e2e_relay *r);

/** @return how many times @p needle occurs in the relay's log. */
int e2e_relay_log_count(const struct e2e_relay *r, const char *needle);

/** Runs `outbox-relay dead WORDS... <base args>` for the test table (WORDS
 *  NULL-terminated, e.g. {"requeue", "7", NULL}; @p extra are more -X values,
 *  NULL-terminated, may be NULL). @p out/@p err as e2e_run_cmd.
 *  @return the exit status. */
int e2e_dead(struct e2e_ctx *t, const char *const *words, const char *const *extra, char **out,
             char **err);

/* ---- a relay's status endpoint (relay_http.c) ----------------------------- */

/** @return the port of the relay's status endpoint, read from its "status endpoint
 *  listening" log line (e2e_relay_start passes http.listen=127.0.0.1:0), or -1 if
 *  it does not appear within @p timeout_ms. */
int e2e_relay_http_port(struct e2e_relay *r, int timeout_ms);

/** GET http://127.0.0.1:PORT/PATH of the relay's status endpoint with curl.
 *  @return the HTTP status (-1: no answer); the body into *@p body (caller frees). */
int e2e_relay_http_get(struct e2e_relay *r, const char *path, char **body);

/** Polls /readyz?verbose for up to 20 s until it answers @p code with a line
 *  containing @p needle (NULL: any); asserts that it did. */
void e2e_assert_readyz(struct e2e_relay *r, int code, const char *needle);

/* ---- a real Kafka broker, tests/support/kafka.sh (brokers.c) ------------- */

/** Runs `kafka.sh CMD DIR NODE` on the stack's own Kafka node (1): CMD is kill
 *  (SIGKILL), restart, pause (SIGSTOP) or resume. Asserts it succeeded.
 *  @return false (doing nothing) when this run has no Kafka node of its own. */
bool e2e_kafka_node(const struct e2e_ctx *t, const char *cmd, int node);
/** @return the number of nodes of the stack's own Kafka cluster (0: none of its own). */
int e2e_kafka_node_count(const struct e2e_ctx *t);
/** @return the process id of node @p node of the stack's own Kafka cluster
 *  (0: unknown), for a test that signals it itself, faster than kafka.sh. */
int e2e_kafka_node_pid(const struct e2e_ctx *t, int node);

/** Starts the stack's stopped Kafka node @p node again on its data and config
 *  with Kafka @p version's jars (`kafka.sh restart DIR NODE VERSION`: one step
 *  of a rolling upgrade); asserts it started. */
void e2e_kafka_node_upgrade(const struct e2e_ctx *t, int node, const char *version);

/** Runs Kafka @p version's kafka-features.sh against the stack's cluster with
 *  @p args (NULL-terminated, e.g. {"describe", NULL}); asserts exit 0.
 *  @return its output (caller frees). */
char *e2e_kafka_features(const struct e2e_ctx *t, const char *version, const char *const args[]);

/** `kafka-features.sh describe` (Kafka @p version's tool), its output logged to
 *  stderr; the finalized level of @p feature (e.g. "3.9-IV0" for
 *  metadata.version) into @p level, "" when the cluster lists none. */
void e2e_kafka_feature_level(const struct e2e_ctx *t, const char *version, const char *feature, char *level,
                             size_t len);

/** Whether the stack's own Kafka node refuses SCRAM logins of this process's
 *  librdkafka: Kafka 4 and librdkafka before 2.6.1 (its nonce bug; the relay
 *  names it, core/kafka_security.c). False without a node of its own. */
bool e2e_kafka_scram_refused(const struct e2e_ctx *t);

/** Deletes @p topic on @p t's broker with the admin API (a real broker: the
 *  mock has no DeleteTopics) and waits until the metadata no longer lists it;
 *  asserts both within @p timeout_ms. */
void e2e_kafka_delete_topic(const struct e2e_ctx *t, const char *topic, int timeout_ms);

/** @return the node id leading @p partition of @p topic per @p bootstrap's metadata, or -1. */
int e2e_partition_leader(const char *bootstrap, const char *topic, int partition);
/** @return the node id of @p txn_id's transaction coordinator: Kafka's own
 *  hash of the id over the stack's 4 __transaction_state partitions, or -1. */
int e2e_txn_coordinator(const char *bootstrap, const char *txn_id);

/* ---- reading topics back (consume.c) ------------------------------------- */

struct e2e_header {
    char *name;
    char *value;                /* NUL-terminated copy; NULL for a NULL header value */
    size_t value_len;
};

struct e2e_msg {
    char *topic;
    int32_t partition;
    int64_t offset;
    char *key;                  /* NUL-terminated copy; NULL for a NULL key */
    size_t key_len;
    char *value;                /* NUL-terminated copy; NULL for a tombstone */
    size_t value_len;
    int64_t timestamp;
    rd_kafka_timestamp_type_t tstype;
    struct e2e_header *headers;
    size_t n_headers;
};

struct e2e_msgs {
    struct e2e_msg *v;
    size_t n, cap;
    size_t n_missing_topics;    /* topics that did not exist when the timeout ran out */
};

/** Reads every message of @p topics from the beginning (all partitions, from
 *  metadata, at OFFSET_BEGINNING) until end-of-partition on all of them.
 *  Topics that do not exist yet are waited for up to @p timeout_ms, then
 *  counted in n_missing_topics. Asserts no partition's log was truncated
 *  (low watermark 0) and that the end was reached within @p timeout_ms.
 *  Messages come in (topic order, partition, offset) order. */
void e2e_consume(const char *const *topics, size_t n_topics, int timeout_ms, struct e2e_msgs *out);

/** e2e_consume from @p bootstrap, as a read_committed consumer if @p read_committed
 *  (it then reads to the high watermark, so it waits for open transactions to end:
 *  committed or aborted, their markers written). */
void e2e_consume_from(const char *bootstrap, bool read_committed, const char *const *topics, size_t n_topics,
                      int timeout_ms, struct e2e_msgs *out);

void e2e_msgs_free(struct e2e_msgs *m);

/** @return the value of the first header named @p name, or NULL. */
const char *e2e_msg_header(const struct e2e_msg *m, const char *name);

/** @return how many headers are named @p name. */
size_t e2e_msg_header_count(const struct e2e_msg *m, const char *name);

/* ---- checking what arrived (check.c) -------------------------------------- */

/** Accumulates failed checks so that a test reports many problems at once. */
struct e2e_report {
    size_t n_fail;
    size_t len;
    char text[6000];
};

/** Records a failure (the first few are kept in the text) unless @p ok. @return ok. */
bool e2e_check(struct e2e_report *r, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/** Fails the test if any check failed, quoting the first failures. */
void e2e_report_assert(const struct e2e_report *r, const char *what);

/** One outbox row as PostgreSQL has it, with what the tests expect of its message. */
struct e2e_row {
    int64_t id;
    char *event_id;
    char *aggregate_type;
    char *aggregate_id;
    char *event_type;
    char *topic;                /* NULL: the template applies */
    char *payload;              /* jsonb text; NULL = tombstone */
    int64_t created_us;         /* created_at, microseconds since the epoch */
    char *created_at;           /* RFC 3339 UTC with microseconds */
    char *custom_headers;       /* "k=v\n…" sorted by key, from the headers object; NULL if none */
    bool sent;                  /* sent_at IS NOT NULL */
    int deliveries;             /* filled by e2e_verify: messages seen for this row */
};

struct e2e_rows {
    struct e2e_row *v;          /* ordered by id */
    size_t n;
};

/** Loads every row of the test table. */
void e2e_rows_load(struct e2e_ctx *t, struct e2e_rows *rows);

void e2e_rows_free(struct e2e_rows *rows);

/** @return the row with @p id, or NULL. */
struct e2e_row *e2e_rows_find(const struct e2e_rows *rows, int64_t id);

/** What most tests check at their end: loads the table's rows, reads every
 *  message of their topics back (waiting up to @p timeout_ms), checks that no
 *  topic is missing and runs e2e_verify into @p rep. Free rows and msgs with
 *  e2e_rows_free / e2e_msgs_free. */
void e2e_read_back(struct e2e_ctx *t, int timeout_ms, struct e2e_rows *rows, struct e2e_msgs *msgs,
                   struct e2e_report *rep);

/** The end of most fault tests: e2e_read_back, then every row delivered,
 *  marked with @p marked, once with @p exactly_once, and more than once only
 *  when created at @p dups_from_us or later (0: any); fails the test with
 *  the first problems. @return how many rows were delivered more than once. */
size_t e2e_check_delivered(struct e2e_ctx *t, const char *what, bool marked, bool exactly_once,
                           int64_t dups_from_us);

/** Which rows e2e_check_delivered_dups lets come more than once. */
struct e2e_dups {
    int64_t from_us;            /* created at this time or later (0: any time) */
    int64_t until_us;           /* ... and before this time (0: any time) */
    size_t max;                 /* at most this many rows (SIZE_MAX: any number) */
};

/** e2e_check_delivered with duplicates bounded by @p dups: a failover's
 *  rows in flight at the switch, say (created before it, a batch or two). */
size_t e2e_check_delivered_dups(struct e2e_ctx *t, const char *what, bool marked,
                                struct e2e_dups dups);

/** e2e_verify checks per-key order unless a test clears this (see the one
 *  test that does, and why). */
extern bool e2e_check_order;

/** When set, a key's messages may be in more than one partition (the topic's
 *  partition count was raised): e2e_verify checks the order per key within
 *  each partition. */
extern bool e2e_keys_may_move;

/** When set, e2e_verify accepts a message that matches no row if this says
 *  so (a failover test: a transaction the old primary committed but never
 *  acknowledged, lost with it, may have been relayed). */
extern bool (*e2e_unmatched_ok)(const struct e2e_msg *m);

/** Checks every message against its row — topic (row's own, else the template
 *  rendered), key, value, CreateTime timestamp, headers — and that the first
 *  delivery of each row keeps per-key order (one partition per topic+key,
 *  outbox_id increasing with the offset). Counts deliveries into the rows.
 *  Messages without a matching outbox_id are failures. */
void e2e_verify(const struct e2e_ctx *t, struct e2e_rows *rows, const struct e2e_msgs *msgs,
                struct e2e_report *rep);

/** Reads Kafka back for the table's sent rows: each exactly once, checked as
 *  e2e_verify checks (per-key order included), with the relay's six headers
 *  once each, and nothing of a row that is not sent. Fails the test, naming
 *  @p what. */
void e2e_verify_sent_once(struct e2e_ctx *t, const char *what);

/** The topics the test's rows go to (template rendered per aggregate type, plus
 *  every explicit topic), as a NULL-terminated array (caller frees with e2e_topics_free). */
char **e2e_topics_of(const struct e2e_ctx *t, const struct e2e_rows *rows, size_t *n);

void e2e_topics_free(char **topics);

/* ---- a primary and its standby, tests/support/pg_pair.sh (pg_pair.c) ------- */

struct e2e_pg_pair {
    const struct e2e_env *env;
    char script[600];
    char dir[600];
    int primary_port;
    int standby_port;
    bool up;
};

enum { E2E_PAIR_BOTH, E2E_PAIR_PRIMARY, E2E_PAIR_STANDBY };

/** Starts a primary and its synchronous streaming standby of the test's own
 *  (database postgres) in its log directory: a few seconds. */
void e2e_pg_pair_start(const struct e2e_ctx *t, struct e2e_pg_pair *p);

/** Stops the primary immediately, as a crash would. */
void e2e_pg_pair_stop_primary(struct e2e_pg_pair *p);

/** Stops the primary cleanly (fast), as a planned switchover does: the
 *  standby has every byte of its WAL. */
void e2e_pg_pair_stop_primary_fast(struct e2e_pg_pair *p);

/** After a promotion: the old primary started again as a standby of the
 *  promoted one; returns once it streams. */
void e2e_pg_pair_rejoin(struct e2e_pg_pair *p);

/** After a promotion: the old primary started again as it was, writable, on
 *  the old timeline (split brain). */
void e2e_pg_pair_start_old_primary(struct e2e_pg_pair *p);

/** Promotes the standby; returns once it accepts writes. */
void e2e_pg_pair_promote(struct e2e_pg_pair *p);

/** Stops both servers (safe twice). */
void e2e_pg_pair_stop(struct e2e_pg_pair *p);

/** A conninfo of E2E_PAIR_BOTH (two hosts, the primary first), _PRIMARY or
 *  _STANDBY, with @p extra ("key=value ...", may be "") after. */
void e2e_pg_pair_conninfo(const struct e2e_pg_pair *p, int which, const char *extra, char *out,
                          size_t len);

/** @p t's connection moved to the pair's E2E_PAIR_PRIMARY or _STANDBY
 *  (client_min_messages = warning). */
void e2e_pg_pair_use(struct e2e_ctx *t, const struct e2e_pg_pair *p, int which);

/** e2e_pg_pair_start, then the relay's conninfo in t->pg_conninfo (both hosts,
 *  target_session_attrs=read-write, connect_timeout=2) and t->conn on the
 *  primary. Migrating is the test's. */
void e2e_pg_pair_up(struct e2e_ctx *t, struct e2e_pg_pair *p);

/** A loopback port where a connect is refused (@p accepting false: bound, not
 *  listening) or accepted by the kernel and never answered (true).
 *  @return the socket, to close when done; the port into *@p port. */
int e2e_dead_port(bool accepting, int *port);

/* ---- writers through a failover of the pair (failover.c) ------------------ */

#define E2E_WRITERS 4

/** E2E_WRITERS threads on one test's two-host conninfo, each committing one
 *  event a transaction to aggregate "w<i>" (payload {"i": seq}); a lost
 *  connection is made again and writing goes on. */
struct e2e_writers;

/** Starts them on t->pg_conninfo and returns once @p first rows are
 *  committed (@p r as e2e_writers_wait has it). Until e2e_writers_free, e2e_unmatched_ok accepts a message of
 *  a commit that got no answer (lost with a primary stopped at once). */
struct e2e_writers *e2e_writers_start(struct e2e_ctx *t, long first, struct e2e_relay *r);

/** @return the rows committed so far. */
long e2e_writers_committed(struct e2e_writers *ws);

/** Waits (60 s at most) until @p target rows are committed, asserting that
 *  @p r (may be NULL) stays alive; asserts that they were. */
void e2e_writers_wait(struct e2e_writers *ws, long target, struct e2e_relay *r);

/** Stops and joins them. @return the rows committed in all. */
long e2e_writers_stop(struct e2e_writers *ws);

/** Stops them if still running and frees them (a test's fini; NULL is fine). */
void e2e_writers_free(struct e2e_writers *ws);

/** What e2e_pg_pair_failover saw. */
struct e2e_failover {
    int64_t stopping_us;        /* wall clock when the primary's stop began */
    int64_t stopped_us;         /* ... once it was down: later rows are the promoted server's */
    long committed_at_stop;     /* the writers' commits then (0 without writers) */
    int64_t promoted_ms;        /* monotonic, once the promoted server takes writes */
};

/** t->conn closed, the primary stopped (@p clean: fast, its WAL all on the
 *  standby; else immediate, as a crash), the standby promoted, t->conn on it.
 *  @p ws (may be NULL) are counted once the primary is down. */
struct e2e_failover e2e_pg_pair_failover(struct e2e_ctx *t, struct e2e_pg_pair *p, bool clean,
                                         struct e2e_writers *ws);

/* ---- a proxy whose connections a test resets (proxy.c) -------------------- */

/** A TCP proxy on 127.0.0.1 in front of one port, run by a thread of its own. */
struct e2e_proxy;

/** Starts one in front of 127.0.0.1:@p target_port (asserts it listens). */
struct e2e_proxy *e2e_proxy_start(int target_port);

/** @return the port clients connect to. */
int e2e_proxy_port(const struct e2e_proxy *p);

/** Resets every connection it carries: the clients get an RST, as from a
 *  firewall or a load balancer that drops the session; it accepts new ones. */
void e2e_proxy_reset(struct e2e_proxy *p);

/** Stops it and closes its connections (NULL is fine). */
void e2e_proxy_stop(struct e2e_proxy *p);

/* ---- a TLS-only PostgreSQL, tests/support/pg_tls.sh (pg_tls.c) ------------ */

struct e2e_pg_tls {
    const struct e2e_env *env;
    char script[600];
    char dir[600];
    char tls[640];              /* ca.pem, foreign-ca.pem, client.pem/.key, expired.pem/.key */
    int port;                   /* on 127.0.0.1; its certificate names localhost and 127.0.0.1 */
    bool up;
};

/** Starts a server in the stack's directory (or finds it running: the stack
 *  stops it) that takes TCP connections only over TLS: role relay_scram (password "scram-secret-7",
 *  SCRAM-SHA-256) in database postgres and role relay_cert (a client
 *  certificate) in database certs, both with REPLICATION; wal_level =
 *  logical. A few seconds. */
void e2e_pg_tls_start(const struct e2e_ctx *t, struct e2e_pg_tls *s);

/** @return a superuser connection to its database @p dbname over its unix
 *  socket (asserts it works). */
PGconn *e2e_pg_tls_admin(const struct e2e_pg_tls *s, const char *dbname);

/* ---- PgBouncer, tests/support/pgbouncer.sh (pgbouncer.c) ------------------- */

struct e2e_pgbouncer {
    const struct e2e_env *env;
    char dir[600];
    char dbname[128];
    int port;                   /* 0: not running */
};

/** Starts PgBouncer with pool_mode @p mode and default_pool_size @p pool_size
 *  in front of the stack's PostgreSQL, in the test's log directory. Skips the
 *  test if PgBouncer is not installed, unless OUTBOX_RELAY_TEST_REQUIRED. */
void e2e_pgbouncer_start(const struct e2e_ctx *t, struct e2e_pgbouncer *b, const char *mode,
                         int pool_size);

/** Stops it (safe twice). @return pgbouncer.sh's exit status. */
int e2e_pgbouncer_stop(struct e2e_pgbouncer *b);

/** A libpq conninfo through it, with @p extra ("key=value ...", may be "") after. */
void e2e_pgbouncer_conninfo(const struct e2e_pgbouncer *b, const char *extra, char *out,
                            size_t len);

/** The value of @p key in @p conninfo (caller frees). */
char *e2e_conninfo_value(const char *conninfo, const char *key);

/* ---- small things (util.c) ------------------------------------------------ */

/** Monotonic milliseconds. */
int64_t e2e_now_ms(void);

/** Wall-clock microseconds since the epoch, as a row's created_at counts them. */
int64_t e2e_wall_us(void);

void e2e_sleep_ms(int ms);

#endif
