/* test_faults.c — the relay under faults of what it talks to: Kafka
 * unreachable, PostgreSQL restarted, rows that can never be produced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

static struct e2e_ctx T;

static void fini(void)
{
    if (T.env) {
        e2e_mock_command(&T, "up -1");
        e2e_mock_command(&T, "rtt -1 0");
        e2e_mock_command(&T, "clear");
    }
    e2e_teardown(&T);
}

static void enqueue_range(int lo, int hi)
{
    e2e_enqueue_series(&T, "order", "k", 20, "created", lo, hi, 0);
}

/* No row lost, every row marked, first deliveries in per-key order; with
 * @p exactly_once no redelivery either, else redeliveries are allowed (a
 * fault can hide an acknowledgement). */
static void verify_rows(const char *what, bool exactly_once)
{
    e2e_check_delivered(&T, what, true, exactly_once, 0);
}

static void verify_at_least_once(const char *what)
{
    verify_rows(what, false);
}

Test(e2e, kafka_outage, .fini = fini, .timeout = 280)
{
    e2e_setup(&T, "kafkadown");
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker to take brokers down");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=100", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000), "relay did not become leader");
    enqueue_range(1, 1000);
    e2e_wait_all_sent(&T, 60000);

    /* All brokers down: new rows must not be marked, the relay must keep running. */
    cr_assert(e2e_mock_command(&T, "down -1"));
    e2e_sleep_ms(1000);
    enqueue_range(1001, 2000);
    e2e_sleep_ms(3000);
    long long marked = e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NOT NULL AND id > "
                                     "(SELECT min(id) + 999 FROM %s)", T.qtable, T.qtable);
    cr_assert_eq(marked, 0, "%lld rows were marked sent while every broker was down", marked);
    cr_assert(e2e_relay_alive(relay), "relay exited during the Kafka outage (log %s)", relay->log_path);

    cr_assert(e2e_mock_command(&T, "up -1"));
    e2e_wait_all_sent(&T, 90000);
    verify_at_least_once("Kafka outage");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

Test(e2e, postgres_restart, .fini = fini, .timeout = 280)
{
    e2e_setup(&T, "pgrestart");
    if (!T.env->stack_sh || !T.env->stack_dir)
        cr_skip_test("needs OUTBOX_RELAY_TEST_STACK_SH and _DIR to restart PostgreSQL");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.reconnect_interval_ms=200",
                           "relay.batch_size=200", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000), "relay did not become leader");
    enqueue_range(1, 5000);

    /* Restart while the relay works through the rows. */
    const char *args[] = {"/bin/bash", T.env->stack_sh, "pg_ctl", T.env->stack_dir, "restart", "-m", "fast", "-w",
                          "-t", "60", NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_cmd(args, 90000, &out, &err);
    cr_assert_eq(rc, 0, "pg_ctl restart failed (%d): %s %s", rc, out ? out : "", err ? err : "");
    free(out);
    free(err);
    PQreset(T.conn);
    cr_assert_eq(PQstatus(T.conn), CONNECTION_OK, "cannot reconnect: %s", PQerrorMessage(T.conn));

    enqueue_range(5001, 6000);
    e2e_wait_all_sent(&T, 120000);
    /* The session lock went with the old session: leadership is taken again. */
    cr_assert_geq(e2e_relay_log_count(relay, "msg=\"became leader\""), 2,
                  "the leader lock was not re-taken after the restart (log %s)", relay->log_path);
    verify_at_least_once("PostgreSQL restart");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* Rows Kafka will never take (a header value that is not a string, an illegal
 * topic name) must not hold back the valid rows behind them, even when there
 * are more of them than one batch. */
Test(e2e, poison_rows_do_not_block_the_rest, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "poison");
    e2e_migrate(&T);
    e2e_exec(T.conn,
        "SELECT count(%s('order', 'poison', 'created', '{}', jsonb_build_object('n', i)))"
        "  FROM generate_series(1, 6) AS i", T.qenqueue);
    e2e_exec(T.conn,
        "SELECT count(%s('order', 'poison', 'created', '{}', NULL, 'not a topic!'))"
        "  FROM generate_series(1, 6) AS i", T.qenqueue);
    e2e_exec(T.conn,
        "SELECT count(%s('order', 'fine-' || (i %% 4), 'created', jsonb_build_object('i', i)))"
        "  FROM generate_series(1, 50) AS i", T.qenqueue);

    const char *extra[] = {"relay.poll_interval_ms=50", "relay.batch_size=5", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    bool ok = e2e_wait_sql(&T, 30000,
        "SELECT NOT EXISTS (SELECT 1 FROM %s WHERE aggregate_id <> 'poison' AND sent_at IS NULL)", T.qtable);
    long long stuck = e2e_query_int(T.conn,
        "SELECT count(*) FROM %s WHERE aggregate_id <> 'poison' AND sent_at IS NULL", T.qtable);
    cr_assert(ok, "%lld of 50 valid rows are still unsent after 30 s behind 12 rows that cannot be "
              "produced (batch_size=5): the poison rows block the table", stuck);
    cr_assert(e2e_relay_alive(relay), "relay exited (log %s)", relay->log_path);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* ---- failure semantics ----------------------------------------------------- */

/* No attempt is charged and nothing is dead: what every fault below that is
 * not the rows' fault must leave behind. */
static void assert_no_attempts(const char *what)
{
    long long attempts = e2e_query_int(T.conn, "SELECT coalesce(sum(attempts), 0) FROM %s", T.qtable);
    long long dead = e2e_count_where(&T, "dead_at IS NOT NULL");
    PGresult *res = e2e_query(T.conn, "SELECT coalesce(string_agg(DISTINCT last_error, ', '), '-'), "
                              "count(*) FILTER (WHERE attempts > 0) FROM %s", T.qtable);
    char errors[512];
    snprintf(errors, sizeof(errors), "%s on %s rows", PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1));
    PQclear(res);
    cr_assert(attempts == 0 && dead == 0,
              "%s: %lld attempts counted and %lld rows dead-lettered, although no row is at fault "
              "(last_error: %s)", what, attempts, dead, errors);
}

/* Creates <table>.order with four partitions led by brokers 1, 2, 3, 1. */
static void create_topic_with_leaders(char *topic, size_t len)
{
    snprintf(topic, len, "%s.order", T.table);
    cr_assert(e2e_mock_command(&T, "topic %s 4 3", topic));
    for (int p = 0; p < 4; p++)
        cr_assert(e2e_mock_command(&T, "leader %s %d %d", topic, p, p % 3 + 1));
}

/* PostgreSQL goes away while a batch is in flight (acknowledgements slowed
 * down): with @p restart the server restarts (fast shutdown), else only the
 * relay's session is terminated with pg_terminate_backend(). Nothing is
 * lost, everything is marked, and the relay takes the leader lock again on
 * its new session. */
static void postgres_fault_mid_batch(const char *name, bool restart)
{
    e2e_setup(&T, name);
    e2e_migrate(&T);
    char conninfo[1200];
    snprintf(conninfo, sizeof(conninfo), "postgres.conninfo=%s application_name=%s", T.env->pg, T.name);
    const char *extra[] = {conninfo, "relay.poll_interval_ms=100", "relay.reconnect_interval_ms=200",
                           "relay.batch_size=200", NULL};
    bool slowed = e2e_mock_command(&T, "rtt -1 300");
    enqueue_range(1, 4000);
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000), "relay did not become leader");
    cr_assert(e2e_wait_sql(&T, 60000, "SELECT count(*) >= 400 FROM %s WHERE sent_at IS NOT NULL", T.qtable),
              "rows were not being marked");

    long long marked;
    if (restart) {
        marked = e2e_count_where(&T, "sent_at IS NOT NULL");
        e2e_pg_restart(&T);
    } else {
        long long killed = e2e_query_int(T.conn, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                         "WHERE application_name = '%s'", T.name);
        marked = e2e_count_where(&T, "sent_at IS NOT NULL");
        cr_assert_eq(killed, 1, "expected to terminate one relay session, terminated %lld", killed);
    }
    fprintf(stderr, "e2e: %s with %lld of 4000 rows marked\n", restart ? "restarted PostgreSQL"
                                                                      : "terminated the relay's session", marked);
    cr_assert_lt(marked, 4000, "everything was marked before the fault: the test proves nothing");
    cr_assert(e2e_relay_wait_log(relay, "postgres connection lost", 10000),
              "the relay did not notice it lost its session (log %s)", relay->log_path);
    int64_t deadline = e2e_now_ms() + 30000;
    while (e2e_relay_log_count(relay, "msg=\"became leader\"") < 2 && e2e_now_ms() < deadline)
        e2e_sleep_ms(50);
    cr_assert_geq(e2e_relay_log_count(relay, "msg=\"became leader\""), 2,
                  "the leader lock was not taken again after reconnecting (log %s)", relay->log_path);
    if (slowed)
        e2e_mock_command(&T, "rtt -1 0");
    e2e_wait_all_sent(&T, 120000);
    verify_at_least_once(restart ? "PostgreSQL restarted mid-batch" : "session terminated mid-batch");
    assert_no_attempts(restart ? "PostgreSQL restarted mid-batch" : "session terminated mid-batch");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

Test(e2e, postgres_session_terminated_mid_batch, .fini = fini, .timeout = 200)
{
    postgres_fault_mid_batch("pgterm", false);
}

Test(e2e, postgres_restart_mid_batch, .fini = fini, .timeout = 200)
{
    postgres_fault_mid_batch("pgrestart2", true);
}

/* Every broker down for more than three kafka.message.timeout.ms. With the
 * gapless guarantee the relay asks for, librdkafka keeps messages it could
 * not send waiting instead of timing them out (a timed-out message would
 * leave a gap); with it turned off they time out. Either way it is an
 * outage, not poison: nothing is marked while it lasts, no attempt is
 * counted, and after it everything arrives in per-key order. */
Test(e2e, kafka_outage_longer_than_message_timeout, .fini = fini, .timeout = 200)
{
    e2e_setup(&T, "kafkatimeout");
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker to take brokers down");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=100", "kafka.message.timeout.ms=3000", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000), "relay did not become leader");
    enqueue_range(1, 1000);
    e2e_wait_all_sent(&T, 60000);

    cr_assert(e2e_mock_command(&T, "down -1"));
    e2e_sleep_ms(500);
    enqueue_range(1001, 2000);
    e2e_sleep_ms(10000);
    cr_assert_eq(e2e_count_where(&T, "sent_at IS NULL"), 1000, "rows were marked sent while every broker was down");
    cr_assert(e2e_relay_log_contains(relay, "error=_ALL_BROKERS_DOWN"),
              "the relay never saw every broker down: the test proves nothing (log %s)", relay->log_path);
    assert_no_attempts("during a Kafka outage");
    cr_assert(e2e_relay_alive(relay), "relay exited during the outage");

    cr_assert(e2e_mock_command(&T, "up -1"));
    e2e_wait_all_sent(&T, 90000);
    verify_at_least_once("Kafka outage longer than message.timeout.ms");
    assert_no_attempts("after a Kafka outage");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* Lines of the relay's log at warn or error level that name broker @p id
 * (librdkafka's "host:port/ID: " prefix), and all lines at error level. */
static void broker_lines(const struct e2e_relay *r, int id, int *named, int *errors)
{
    char *log = e2e_relay_log(r), prefix[16];
    snprintf(prefix, sizeof prefix, "/%d: ", id);
    *named = *errors = 0;
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
        bool loud = strstr(line, " level=warn ") || strstr(line, " level=error ");
        if (loud && strstr(line, prefix))
            (*named)++;
        if (strstr(line, " level=error "))
            (*errors)++;
    }
    free(log);
}

/* A broker that is down refuses every reconnect until it is back: an
 * expected event of a replicated cluster, logged as one warning, not as an
 * error and not again at each reconnect (nor twice, by librdkafka's log
 * callback and the error event of the same text). */
static void assert_broker_down_logged_once(const struct e2e_relay *r, int id)
{
    int named, errors;
    broker_lines(r, id, &named, &errors);
    fprintf(stderr, "e2e: broker %d down: %d warning(s) naming it, %d error line(s)\n", id, named, errors);
    cr_assert_eq(errors, 0, "%d line(s) at level=error while one broker was down (log %s)", errors,
                 r->log_path);
    cr_assert_eq(named, 1, "broker %d down: %d warnings naming it, expected one (log %s)", id, named,
                 r->log_path);
}

/* One broker of three down for longer than message.timeout.ms: the messages
 * for the partitions it leads time out. Still an outage, not the rows' fault:
 * no attempt may be counted, no row dead-lettered (max_attempts=3 makes that
 * quick), and after the broker is back every row arrives. Without fencing the
 * rest of each batch is acknowledged and marked meanwhile; with transactional
 * fencing a batch is one transaction, all or nothing, so every batch holding
 * a row of the missing partition is aborted and nothing flows until it is back. */
static void one_broker_down(const char *fencing, bool others_flow)
{
    e2e_migrate(&T);
    char topic[128];
    create_topic_with_leaders(topic, sizeof(topic));
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=100", "kafka.message.timeout.ms=2000",
                           "relay.max_attempts=3", fencing, NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    enqueue_range(1, 400);
    e2e_wait_all_sent(&T, 60000);

    cr_assert(e2e_mock_command(&T, "down 2")); /* leads partition 1 */
    e2e_sleep_ms(500);
    enqueue_range(401, 800);
    e2e_sleep_ms(12000);
    long long new_sent = e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NOT NULL AND id > "
                                       "(SELECT min(id) + 399 FROM %s)", T.qtable, T.qtable);
    fprintf(stderr, "e2e: broker 2 down (%s): %lld of 400 new rows sent\n", fencing, new_sent);
    if (others_flow)
        cr_assert(new_sent > 0 && new_sent < 400,
                  "%lld of 400 rows sent with one broker down: expected the other partitions to flow and "
                  "partition 1 to wait", new_sent);
    else
        cr_assert(new_sent == 0, "%lld of 400 rows marked while every batch's transaction had to abort",
                  new_sent);
    assert_no_attempts("one broker down longer than message.timeout.ms");

    cr_assert(e2e_mock_command(&T, "up 2"));
    e2e_wait_all_sent(&T, 60000);
    verify_at_least_once("one broker down");
    assert_broker_down_logged_once(relay, 2);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

Test(e2e, one_broker_down_longer_than_message_timeout, .fini = fini, .timeout = 200)
{
    e2e_setup(&T, "brokerdown");
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker to take a broker down");
    one_broker_down("relay.fencing=transactional", false);
}

Test(e2e, one_broker_down_longer_than_message_timeout_unfenced, .fini = fini, .timeout = 200)
{
    e2e_setup(&T, "brokerdownnone");
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker to take a broker down");
    one_broker_down("relay.fencing=none", true);
}

/* Produce requests failing with retriable errors, and partition leaders
 * moving while rows flow: librdkafka retries, the idempotent producer keeps
 * the order, every row is published and marked exactly once, no attempt is
 * charged. */
Test(e2e, retriable_produce_errors_and_leader_changes, .fini = fini, .timeout = 200)
{
    e2e_setup(&T, "retriable");
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker to inject errors");
    e2e_migrate(&T);
    char topic[128];
    create_topic_with_leaders(topic, sizeof(topic));
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=200", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    enqueue_range(1, 500);
    e2e_wait_all_sent(&T, 60000);

    char cmd[1024] = "errors Produce 24";
    static const char *const errs[] = {"NOT_ENOUGH_REPLICAS", "REQUEST_TIMED_OUT", "NOT_LEADER_FOR_PARTITION"};
    for (int i = 0; i < 24; i++)
        snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd), " %s", errs[i % 3]);
    cr_assert(e2e_mock_command(&T, "%s", cmd));
    enqueue_range(501, 1000);
    cr_assert(e2e_mock_command(&T, "leader %s 0 2", topic));
    cr_assert(e2e_mock_command(&T, "leader %s 1 3", topic));
    enqueue_range(1001, 1500);
    e2e_sleep_ms(300);
    cr_assert(e2e_mock_command(&T, "leader %s 2 1", topic));
    cr_assert(e2e_mock_command(&T, "leader %s 3 2", topic));
    enqueue_range(1501, 2000);
    e2e_wait_all_sent(&T, 90000);
    verify_rows("retriable produce errors and leader changes", true);
    assert_no_attempts("retriable produce errors");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* A fatal error of the idempotent producer: the broker answers the
 * head-of-line ProduceRequest with OUT_OF_ORDER_SEQUENCE_NUMBER, which
 * librdkafka 2.0 raises as fatal (sequence desynchronisation). The relay must
 * replace the producer and republish the unmarked rows; the rows are not at
 * fault, so no attempt is charged. */
Test(e2e, fatal_producer_error_recreates_producer, .fini = fini, .timeout = 200)
{
    e2e_setup(&T, "fatal");
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker to inject errors");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=100", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    enqueue_range(1, 300);
    e2e_wait_all_sent(&T, 60000);

    /* librdkafka does not raise the injected error as fatal every time: once
     * in CI it sent the request again by itself and the rows went about 5 s
     * later, without an error. So it is injected again, with more rows,
     * until one is fatal. */
    bool fatal = false;
    for (int k = 0, lo = 301; k < 3 && !fatal; k++, lo += 500) {
        cr_assert(e2e_mock_command(&T, "errors Produce 1 OUT_OF_ORDER_SEQUENCE_NUMBER"));
        enqueue_range(lo, lo + 499);
        fatal = e2e_relay_wait_log(relay, "msg=\"kafka producer fatal error\"", 15000);
        if (!fatal)
            e2e_wait_all_sent(&T, 60000);
    }
    cr_assert(fatal, "no fatal producer error was raised in three tries (log %s)", relay->log_path);
    cr_assert(e2e_relay_wait_log(relay, "replacing the kafka producer", 10000),
              "the producer was not replaced after the fatal error (log %s)", relay->log_path);
    e2e_sleep_ms(500);
    cr_assert(e2e_relay_alive(relay), "the relay died replacing its producer (wait status %d; log %s)",
              relay->status, relay->log_path);
    e2e_wait_all_sent(&T, 60000);
    /* Order is not asserted here, only here: the mock broker does not check
     * idempotent sequence numbers, so after it answers one request with the
     * injected OUT_OF_ORDER_SEQUENCE_NUMBER it still appends the next request
     * of the same partition, which a real broker rejects. The rows of the
     * failed request are then republished after that one (seen in CI). What
     * the relay owes here — nothing lost, all marked, no attempt charged — is
     * asserted in full. */
    e2e_check_order = false;
    verify_at_least_once("fatal producer error");
    e2e_check_order = true;
    assert_no_attempts("fatal producer error");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* A broker stops answering the relay's requests twice in a row: the
 * transaction coordinator its commit (EndTxn held 60 s: the commit's first
 * request and the one librdkafka sends again after socket.timeout.ms cut
 * it), or with @p in_flight a leader its produce requests (held 30 s: the
 * first and its retry), so that the instance given up still has messages in
 * flight. Kept, the instance would wait out both, about 20 s; the relay
 * gives it up 3 s after the first was cut (core/kafka_stall.h) and produces
 * the transaction's rows again on a new one, whose init aborts the old
 * transaction. Nothing lost, nothing charged, no line at level=error, every
 * row published well before the two waits. */
static void broker_stops_answering(const char *name, bool in_flight)
{
    e2e_setup(&T, name);
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker to hold a broker's answers");
    e2e_migrate(&T);
    char topic[128], txn_id[64], opt[96];
    create_topic_with_leaders(topic, sizeof(topic));
    snprintf(txn_id, sizeof txn_id, "%s-txn", name);
    snprintf(opt, sizeof opt, "relay.transactional_id=%s", txn_id);
    cr_assert(e2e_mock_command(&T, "coordinator transaction %s 1", txn_id));
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=100",
                           "relay.fencing=transactional", opt, NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    enqueue_range(1, 300);
    e2e_wait_all_sent(&T, 60000);

    if (in_flight)
        cr_assert(e2e_mock_command(&T, "broker-errors 2 Produce 2 NO_ERROR 30000"));
    else
        cr_assert(e2e_mock_command(&T, "broker-errors 1 EndTxn 2 NO_ERROR 60000"));
    int64_t t0 = e2e_now_ms();
    enqueue_range(301, 600);
    e2e_wait_all_sent(&T, 60000);
    double took = (double)(e2e_now_ms() - t0) / 1000.0;
    fprintf(stderr, "e2e: %s: every row sent after %.1f s\n", name, took);
    cr_assert(took < 17.0,
              "rows waited %.1f s with a broker not answering: the producer was not given up "
              "after the first cut request (socket.timeout.ms 10 s + 3 s; log %s)", took, relay->log_path);
    cr_assert(e2e_relay_log_contains(relay, "held by a broker that stopped answering"),
              "the relay never gave its producer up: the test proves nothing (log %s)", relay->log_path);
    cr_assert_eq(e2e_relay_log_count(relay, " level=error "), 0,
                 "a broker not answering was logged at level=error (log %s)", relay->log_path);
    verify_at_least_once(name);
    assert_no_attempts(name);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

Test(e2e, a_coordinator_that_stops_answering_costs_one_request_timeout, .fini = fini, .timeout = 200)
{
    broker_stops_answering("coordhung", false);
}

Test(e2e, a_producer_given_up_with_messages_in_flight_is_replaced_at_once, .fini = fini, .timeout = 200)
{
    broker_stops_answering("leaderhung", true);
}

/* Kafka's coordinator answers AddPartitionsToTxn with CONCURRENT_TRANSACTIONS
 * until the last commit's markers are written; a marker request to a broker
 * that stopped answering right after it was sent waits out the brokers'
 * request.timeout.ms (30 s), and any producer of the same transactional id
 * waits with it. Here the mock answers so for about 40 s. The relay fenced
 * its other transactional id when it became leader, gives the instance up 12 s
 * into the retries (core/kafka_stall.h) and goes on under that id. The mock's
 * answers are not per id: once the relay took the other id they are cleared,
 * as Kafka's coordinator would not hold that id. */
/* The relay led, 300 rows sent, its other id fenced. */
static struct e2e_relay *behind_start(const char *name)
{
    e2e_setup(&T, name);
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker to answer CONCURRENT_TRANSACTIONS");
    e2e_migrate(&T);
    char topic[128], opt[96];
    create_topic_with_leaders(topic, sizeof(topic));
    snprintf(opt, sizeof opt, "relay.transactional_id=%s-txn", T.table);
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=100",
                           "relay.fencing=transactional", opt, NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    enqueue_range(1, 300);
    e2e_wait_all_sent(&T, 60000);
    cr_assert(e2e_relay_log_contains(relay, "other_id=fenced"),
              "the relay did not fence its other transactional id as it became leader (log %s)",
              relay->log_path);
    return relay;
}

Test(e2e, a_commit_its_coordinator_cannot_complete_is_gone_around_under_the_other_id, .fini = fini,
     .timeout = 200)
{
    struct e2e_relay *relay = behind_start("behind");
    cr_assert(e2e_mock_command(&T, "errors AddPartitionsToTxn 2000 CONCURRENT_TRANSACTIONS"));
    int64_t t0 = e2e_now_ms();
    enqueue_range(301, 600);
    cr_assert(e2e_relay_wait_log(relay, "under the other transactional id", 25000),
              "the relay kept waiting behind the commit (log %s)", relay->log_path);
    double switched = (double)(e2e_now_ms() - t0) / 1000.0;
    cr_assert(e2e_mock_command(&T, "clear AddPartitionsToTxn"));
    e2e_wait_all_sent(&T, 30000);
    double took = (double)(e2e_now_ms() - t0) / 1000.0;
    fprintf(stderr, "e2e: behind: other id taken after %.1f s, every row sent after %.1f s\n", switched, took);
    cr_assert(switched >= 11.0, "gave up after %.1f s, within Kafka's own fencing time (log %s)", switched,
              relay->log_path);
    cr_assert_eq(e2e_relay_log_count(relay, " level=error "), 0,
                 "a commit held at its coordinator was logged at level=error (log %s)", relay->log_path);
    verify_at_least_once("behind");
    assert_no_attempts("behind");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* A producer replaced while Kafka answers nothing useful (here: its new
 * instance's init refused, as a coordinator that cannot write its log does)
 * leaves nothing in flight; /readyz must not pass for that. */
Test(e2e, a_producer_replaced_during_an_outage_does_not_make_the_relay_ready, .fini = fini, .timeout = 200)
{
    struct e2e_relay *relay = behind_start("behindready");
    cr_assert(e2e_mock_command(&T, "errors AddPartitionsToTxn 2000 CONCURRENT_TRANSACTIONS"));
    cr_assert(e2e_mock_command(&T, "errors InitProducerId 2000 CONCURRENT_TRANSACTIONS"));
    enqueue_range(301, 600);
    cr_assert(e2e_relay_wait_log(relay, "under the other transactional id", 25000),
              "the relay kept waiting behind the commit (log %s)", relay->log_path);
    for (int i = 0; i < 16; i++) {
        char *body = NULL;
        int status = e2e_relay_http_get(relay, "/readyz?verbose", &body);
        cr_assert(status == 503 && body && strstr(body, "[-]acks nothing in flight"),
                  "%.1f s after the producer was replaced, its init unanswered: /readyz %d\n%s", i * 0.25,
                  status, body ? body : "");
        free(body);
        e2e_sleep_ms(250);
    }
    cr_assert(e2e_mock_command(&T, "clear"));
    e2e_wait_all_sent(&T, 60000);
    e2e_assert_readyz(relay, 200, "[+]acks ok");
    verify_at_least_once("behindready");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}
