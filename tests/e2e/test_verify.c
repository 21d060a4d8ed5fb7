/* test_verify.c — `verify`, `replay`, the consumer's ledger and the daemon's
 * periodic verify, against real PostgreSQL, the broker and a real consumer:
 * a clean run verifies clean; rows marked sent by hand are exactly the
 * missing ones; a replay shows up as duplicates with the original event_ids
 * and a consumer built on the ledger applies everything exactly once, also
 * after a replay interrupted by SIGINT and run again; a pair produced in the
 * wrong order is out of order; the periodic verify's metric turns non-zero. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "testlib.h"

#define ROWS 2000
#define AGGREGATES 40

static struct e2e_ctx T;

static void fini(void)
{
    e2e_teardown(&T);
}

/* ROWS rows: aggregate acct-<i % 40>, payload {"amount": i}, every 7th with
 * headers, every 53rd a tombstone (amount 0 for the consumer). */
static void enqueue_rows(int lo, int hi)
{
    e2e_exec(T.conn,
             "SELECT count(%s('account', 'acct-' || (i %% %d), 'credited',"
             "  CASE WHEN i %% 53 = 0 THEN NULL ELSE jsonb_build_object('amount', i) END,"
             "  CASE WHEN i %% 7 = 0 THEN jsonb_build_object('trace', 't' || i) END, NULL))"
             "  FROM generate_series(%d, %d) AS i",
             T.qenqueue, AGGREGATES, lo, hi);
}

/* Runs `outbox-relay CMD WORDS... <base args>`; @return its exit status. */
static int run_cmd(const char *cmd, const char *const *words, char **out, char **err)
{
    const char *args[E2E_MAX_ARGS];
    int n = 0;
    args[n++] = cmd;
    for (int i = 0; words && words[i]; i++)
        args[n++] = words[i];
    e2e_base_args(&T, args, &n);
    args[n++] = "-X";
    args[n++] = "http.listen=";
    args[n] = NULL;
    return e2e_run_relay(args, 120000, out, err);
}

/* `verify --json WORDS...`: the exit status and the parsed report. */
static int verify_json(const char *const *words, cJSON **report)
{
    const char *w[16];
    int n = 0;
    w[n++] = "--json";
    for (int i = 0; words && words[i]; i++)
        w[n++] = words[i];
    w[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = run_cmd("verify", w, &out, &err);
    *report = out ? cJSON_Parse(out) : NULL;
    cr_assert_not_null(*report, "verify printed no JSON (exit %d)\nstdout: %s\nstderr: %s", rc,
                       out ? out : "", err ? err : "");
    free(out);
    free(err);
    return rc;
}

static long long total(const cJSON *report, const char *name)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(report, "total");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, name);
    cr_assert(cJSON_IsNumber(v), "report has no total.%s", name);
    return (long long)v->valuedouble;
}

static void relay_all(void)
{
    const char *extra[] = {"relay.poll_interval_ms=200", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    e2e_wait_all_sent(&T, 120000);
    cr_assert_eq(e2e_relay_stop(relay, 20000), 0);
}

/* ---- the consumer of docs/consumers.md, on the ledger ------------------------- */

/* The domain table: one balance per account, and how many credits it took. */
static void ledger_setup(void)
{
    const char *args[E2E_MAX_ARGS];
    int n = 0;
    args[n++] = "migrate";
    args[n++] = "--ledger";
    static char ledger[96];
    snprintf(ledger, sizeof ledger, "%s_ledger", T.table);
    args[n++] = ledger;
    e2e_base_args(&T, args, &n);
    args[n] = NULL;
    for (int i = 0; i < 2; i++) { /* idempotent: twice */
        char *out = NULL, *err = NULL;
        int rc = e2e_run_relay(args, 60000, &out, &err);
        cr_assert_eq(rc, 0, "migrate --ledger exited %d: %s", rc, err ? err : "");
        free(out);
        free(err);
    }
    /* Named after the test table, so that two tests never share one. */
    e2e_exec(T.conn, "DROP TABLE IF EXISTS %s_domain", T.table);
    e2e_exec(T.conn, "CREATE TABLE %s_domain (account text PRIMARY KEY, balance bigint NOT NULL, "
                     "credits int NOT NULL)", T.table);
}

/* Applies every message of @p msgs as a consumer would: per message, one
 * transaction that asks the ledger and applies the credit only the first
 * time. @return how many were applied. */
static size_t consume_with_ledger(const struct e2e_msgs *msgs)
{
    size_t applied = 0;
    for (size_t i = 0; i < msgs->n; i++) {
        const struct e2e_msg *m = &msgs->v[i];
        const char *event_id = e2e_msg_header(m, "event_id");
        cr_assert_not_null(event_id);
        long long amount = 0;
        if (m->value) {
            cJSON *v = cJSON_Parse(m->value);
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(v, "amount");
            amount = cJSON_IsNumber(a) ? (long long)a->valuedouble : 0;
            cJSON_Delete(v);
        }
        e2e_exec(T.conn, "BEGIN");
        long long first = e2e_query_int(T.conn, "SELECT public.%s_ledger_first_seen('test', '%s')::int",
                                        T.table, event_id);
        if (first) {
            e2e_exec(T.conn,
                     "INSERT INTO %s_domain VALUES ('%s', %lld, 1) ON CONFLICT (account) DO "
                     "UPDATE SET balance = %s_domain.balance + EXCLUDED.balance, "
                     "credits = %s_domain.credits + 1",
                     T.table, m->key, amount, T.table, T.table);
            applied++;
        }
        e2e_exec(T.conn, "COMMIT");
    }
    return applied;
}

/* The domain table equals the sent rows applied once: per account, the sum and count. */
static void assert_domain_applied_once(void)
{
    long long wrong = e2e_query_int(
        T.conn,
        "SELECT count(*) FROM (SELECT aggregate_id, sum(coalesce((payload->>'amount')::bigint, 0)) AS b,"
        " count(*) AS c FROM %s WHERE sent_at IS NOT NULL GROUP BY aggregate_id) o FULL JOIN %s_domain d"
        " ON d.account = o.aggregate_id WHERE d.balance IS DISTINCT FROM o.b OR d.credits IS DISTINCT FROM o.c",
        T.qtable, T.table);
    cr_assert_eq(wrong, 0, "%lld accounts differ from the outbox applied exactly once", wrong);
}

static void read_all(struct e2e_msgs *msgs)
{
    const char *topic[] = {NULL};
    char name[160];
    snprintf(name, sizeof name, "%s.account", T.table);
    topic[0] = name;
    e2e_consume_from(T.kafka, true, topic, 1, 60000, msgs);
    cr_assert_eq(msgs->n_missing_topics, 0);
}

/* ---- tests --------------------------------------------------------------- */

Test(e2e, verify_clean_then_missing, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "vclean");
    e2e_migrate(&T);
    enqueue_rows(1, ROWS);
    relay_all();

    cJSON *r;
    int rc = verify_json(NULL, &r);
    cr_assert_eq(rc, 0, "verify of a clean run exited %d", rc);
    cr_assert_eq(total(r, "rows"), ROWS);
    cr_assert_eq(total(r, "sent"), ROWS);
    cr_assert_eq(total(r, "messages"), ROWS);
    cr_assert_eq(total(r, "missing"), 0);
    cr_assert_eq(total(r, "duplicates"), 0);
    cr_assert_eq(total(r, "out_of_order"), 0);
    cr_assert_eq(total(r, "mismatched"), 0);
    cr_assert_eq(total(r, "unknown"), 0);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")));
    cJSON_Delete(r);

    /* Small slices: the same verdict, read slice by slice. */
    const char *sliced[] = {"--slice-rows", "300", NULL};
    rc = verify_json(sliced, &r);
    cr_assert_eq(rc, 0);
    cr_assert_eq(total(r, "rows"), ROWS);
    cr_assert_eq(total(r, "missing") + total(r, "unknown") + total(r, "duplicates"), 0);
    cr_assert_gt(cJSON_GetObjectItemCaseSensitive(r, "slices")->valuedouble, 6);
    cJSON_Delete(r);

    /* Three rows marked sent by hand, never published, plus two pending ones. */
    enqueue_rows(ROWS + 1, ROWS + 5);
    e2e_exec(T.conn, "UPDATE %s SET sent_at = now() WHERE id BETWEEN %d AND %d", T.qtable,
             ROWS + 1, ROWS + 3);
    rc = verify_json(NULL, &r);
    cr_assert_eq(rc, 1, "verify with missing rows exited %d, expected 1", rc);
    cr_assert_eq(total(r, "missing"), 3);
    cr_assert_eq(total(r, "pending"), 2);
    cr_assert_eq(total(r, "mismatched"), 0);
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(r, "examples"), "missing");
    cr_assert_eq(cJSON_GetArraySize(ex), 3);
    for (int i = 0; i < 3; i++)
        cr_assert_eq((long long)cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ex, i), "id")->valuedouble,
                     ROWS + 1 + i);
    cJSON_Delete(r);

    /* A window by id that leaves them out is clean again; the human report says why not otherwise. */
    const char *window[] = {"--from-id", "100", "--to-id", "1999", NULL};
    rc = verify_json(window, &r);
    cr_assert_eq(rc, 0);
    cr_assert_eq(total(r, "rows"), 1900);
    cJSON_Delete(r);
    char *out = NULL, *err = NULL;
    rc = run_cmd("verify", NULL, &out, &err);
    cr_assert_eq(rc, 1);
    cr_assert_not_null(strstr(out, "missing (marked sent, not in Kafka): 3"), "%s", out);
    free(out);
    free(err);

    /* verify never writes: the table is as it was. */
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NULL", T.qtable), 2);
}

Test(e2e, replay_is_deduplicated_by_the_ledger, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "vreplay");
    e2e_migrate(&T);
    ledger_setup();
    enqueue_rows(1, ROWS);
    relay_all();
    enqueue_rows(ROWS + 1, ROWS + 3); /* pending: replay must refuse them */

    /* dry run: nothing published */
    const char *dry[] = {"--from-id", "501", "--to-id", "800", "--dry-run", NULL};
    char *out = NULL, *err = NULL;
    int rc = run_cmd("replay", dry, &out, &err);
    cr_assert_eq(rc, 0, "replay --dry-run exited %d: %s", rc, err);
    cr_assert_not_null(strstr(out, "would replay 300 rows"), "%s", out);
    free(out);
    free(err);

    const char *words[] = {"--from-id", "501", "--to-id", "800", NULL};
    rc = run_cmd("replay", words, &out, &err);
    cr_assert_eq(rc, 0, "replay exited %d: %s", rc, err);
    cr_assert_not_null(strstr(out, "replayed 300 rows"), "%s", out);
    free(out);
    free(err);
    const char *pending[] = {"--from-id", "1990", NULL};
    rc = run_cmd("replay", pending, &out, &err);
    cr_assert_eq(rc, 0);
    cr_assert_not_null(strstr(out, "refused 3 rows not sent yet"), "%s", out);
    free(out);
    free(err);

    /* Exactly the range again, with the original event_ids and a replay header. */
    struct e2e_rows rows;
    e2e_rows_load(&T, &rows);
    struct e2e_msgs msgs;
    read_all(&msgs);
    size_t replayed = 0;
    for (size_t i = 0; i < msgs.n; i++) {
        const struct e2e_msg *m = &msgs.v[i];
        if (!e2e_msg_header(m, "replay"))
            continue;
        replayed++;
        long long id = atoll(e2e_msg_header(m, "outbox_id"));
        const struct e2e_row *row = e2e_rows_find(&rows, id);
        cr_assert((id >= 501 && id <= 800) || (id >= 1990 && id <= ROWS),
                  "replayed row %lld outside the ranges", id);
        cr_assert_str_eq(e2e_msg_header(m, "event_id"), row->event_id);
        cr_assert_eq(m->timestamp * 1000, row->created_us - row->created_us % 1000);
    }
    cr_assert_eq(replayed, 300 + 11, "expected the 300 rows of the first range and 11 of the second");
    cr_assert_eq(msgs.n, ROWS + replayed);

    cJSON *r;
    rc = verify_json(NULL, &r);
    cr_assert_eq(rc, 0, "duplicates are not a failure");
    cr_assert_eq(total(r, "duplicates"), 311);
    cr_assert_eq(total(r, "replayed"), 311);
    cr_assert_eq(total(r, "mismatched"), 0);
    cr_assert_eq(total(r, "out_of_order"), 0);
    cJSON_Delete(r);

    size_t applied = consume_with_ledger(&msgs);
    cr_assert_eq(applied, ROWS);
    assert_domain_applied_once();
    /* and feeding it all again changes nothing */
    cr_assert_eq(consume_with_ledger(&msgs), 0);
    assert_domain_applied_once();
    cr_assert_eq(e2e_query_int(T.conn, "SELECT public.%s_ledger_purge('0 seconds')", T.table), ROWS);
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
}

Test(e2e, replay_interrupted_and_run_again, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "vintr");
    e2e_migrate(&T);
    ledger_setup();
    enqueue_rows(1, ROWS);
    relay_all();

    const char *args[E2E_MAX_ARGS];
    int n = 0;
    args[n++] = "replay";
    args[n++] = "--from-id";
    args[n++] = "1";
    args[n++] = "--rate";
    args[n++] = "400";
    e2e_base_args(&T, args, &n);
    args[n] = NULL;
    struct e2e_relay *p = e2e_spawn(&T, args);
    e2e_sleep_ms(2000);
    kill(p->pid, SIGINT);
    int rc = e2e_wait_exit(p, 30000);
    char *log = e2e_relay_log(p);
    cr_assert_eq(rc, 130, "interrupted replay exited %d: %s", rc, log);
    const char *cont = strstr(log, "continue with --from-id ");
    cr_assert_not_null(cont, "%s", log);
    long long resume = atoll(cont + strlen("continue with --from-id "));
    cr_assert(resume > 1 && resume < ROWS, "resume at %lld: %s", resume, log);
    free(log);

    /* Run again, the whole range: the same end state as one replay. */
    const char *words[] = {"--from-id", "1", NULL};
    char *out = NULL, *err = NULL;
    rc = run_cmd("replay", words, &out, &err);
    cr_assert_eq(rc, 0, "replay exited %d: %s", rc, err);
    free(out);
    free(err);

    struct e2e_msgs msgs;
    read_all(&msgs);
    cr_assert_geq(msgs.n, 2 * ROWS + (size_t)(resume - 1));
    cr_assert_eq(consume_with_ledger(&msgs), ROWS);
    assert_domain_applied_once();
    cJSON *r;
    rc = verify_json(NULL, &r);
    cr_assert_eq(rc, 0);
    cr_assert_eq(total(r, "duplicates"), ROWS);
    cr_assert_eq(total(r, "out_of_order"), 0, "replays are not first deliveries");
    cJSON_Delete(r);
    e2e_msgs_free(&msgs);
}

/* Publishes row @p id as the relay would, with a test producer. */
static void produce_as_relay(rd_kafka_t *rk, long long id)
{
    PGresult *res = e2e_query(
        T.conn,
        "SELECT event_id::text, aggregate_type, aggregate_id, event_type, payload::text,"
        " floor(extract(epoch FROM created_at) * 1000)::bigint,"
        " to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
        " FROM %s WHERE id = %lld", T.qtable, id);
    char topic[160], ids[24];
    snprintf(topic, sizeof topic, "%s.%s", T.table, PQgetvalue(res, 0, 1));
    snprintf(ids, sizeof ids, "%lld", id);
    rd_kafka_headers_t *h = rd_kafka_headers_new(6);
    rd_kafka_header_add(h, "event_id", -1, PQgetvalue(res, 0, 0), -1);
    rd_kafka_header_add(h, "event_type", -1, PQgetvalue(res, 0, 3), -1);
    rd_kafka_header_add(h, "aggregate_type", -1, PQgetvalue(res, 0, 1), -1);
    rd_kafka_header_add(h, "aggregate_id", -1, PQgetvalue(res, 0, 2), -1);
    rd_kafka_header_add(h, "outbox_id", -1, ids, -1);
    rd_kafka_header_add(h, "created_at", -1, PQgetvalue(res, 0, 6), -1);
    const char *key = PQgetvalue(res, 0, 2), *value = PQgetvalue(res, 0, 4);
    rd_kafka_resp_err_t e = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
        RD_KAFKA_V_VALUE((void *)value, strlen(value)), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_TIMESTAMP(atoll(PQgetvalue(res, 0, 5))), RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
    cr_assert_eq(e, 0, "produce: %s", rd_kafka_err2str(e));
    cr_assert_eq(rd_kafka_flush(rk, 30000), 0, "test producer flush timed out");
    PQclear(res);
}

Test(e2e, verify_reports_a_reordered_pair, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "vorder");
    e2e_migrate(&T);
    enqueue_rows(1, 200);
    relay_all();
    /* Two more events of one aggregate, marked sent by hand and published by
     * a test producer in the wrong order: 202 first, then 201. */
    enqueue_rows(201, 202);
    e2e_exec(T.conn, "UPDATE %s SET aggregate_id = 'acct-x', sent_at = now() WHERE id > 200", T.qtable);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char why[256];
    rd_kafka_conf_set(conf, "bootstrap.servers", T.kafka, why, sizeof why);
    rd_kafka_conf_set(conf, "partitioner", "murmur2_random", why, sizeof why);
    rd_kafka_conf_set(conf, "enable.idempotence", "true", why, sizeof why);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
    cr_assert_not_null(rk, "%s", why);
    produce_as_relay(rk, 202);
    produce_as_relay(rk, 201);
    rd_kafka_destroy(rk);

    cJSON *r;
    int rc = verify_json(NULL, &r);
    cr_assert_eq(rc, 1, "an out-of-order pair must fail verify");
    cr_assert_eq(total(r, "out_of_order"), 1);
    cr_assert_eq(total(r, "missing"), 0);
    cr_assert_eq(total(r, "mismatched"), 0, "the test producer wrote what the relay would");
    const cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(r, "examples"), "out_of_order"), 0);
    cr_assert_eq((long long)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble, 201);
    cr_assert_eq((long long)cJSON_GetObjectItemCaseSensitive(e, "later_id")->valuedouble, 202);
    cJSON_Delete(r);
}

/* The value of the sample @p name in the relay's /metrics, or -1. */
static double metric(int port, const char *name)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
    const char *argv[] = {"/usr/bin/curl", "-s", "--max-time", "5", url, NULL};
    char *out = NULL;
    double v = -1;
    if (e2e_run_cmd(argv, 10000, &out, NULL) == 0 && out) {
        char needle[128];
        snprintf(needle, sizeof needle, "\n%s ", name);
        const char *p = strstr(out, needle);
        if (p)
            v = atof(p + strlen(needle));
    }
    free(out);
    return v;
}

Test(e2e, periodic_verify_reports_missing_rows, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "vtask");
    e2e_migrate(&T);
    enqueue_rows(1, 100);
    const char *extra[] = {"relay.poll_interval_ms=200", "verify.interval=2", "verify.lag=1",
                           "verify.window=60", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    int port = e2e_relay_http_port(relay, 30000);
    cr_assert_gt(port, 0);
    e2e_wait_all_sent(&T, 60000);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"verify passed\"", 20000),
              "no clean periodic verify (log %s)", relay->log_path);
    double clean = metric(port, "outbox_relay_verify_missing_rows");
    cr_assert_eq(clean, 0, "outbox_relay_verify_missing_rows is %g after a clean run", clean);

    /* Two rows "sent" that Kafka never got, old enough for the window. */
    /* Written already marked, so the running relay never claims them. */
    e2e_exec(T.conn, "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload, created_at, sent_at)"
                     " SELECT 'account', 'acct-' || i, 'credited', '{}', now() - interval '5 s', now()"
                     " FROM generate_series(1, 2) AS i", T.qtable);
    int64_t fault = e2e_now_ms();
    double missing = 0;
    while (e2e_now_ms() - fault < 2000 + 3000 && (missing = metric(port, "outbox_relay_verify_missing_rows")) < 2)
        e2e_sleep_ms(100);
    cr_assert_eq(missing, 2, "outbox_relay_verify_missing_rows is %g %lld ms after the fault",
                 missing, (long long)(e2e_now_ms() - fault));
    cr_assert_gt(metric(port, "outbox_relay_verify_runs_total"), 1);
    cr_assert(e2e_relay_log_contains(relay, "msg=\"verify found rows"));

    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/status", port);
    const char *argv[] = {"/usr/bin/curl", "-s", url, NULL};
    char *out = NULL;
    cr_assert_eq(e2e_run_cmd(argv, 10000, &out, NULL), 0);
    cJSON *st = cJSON_Parse(out);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(st, "verify");
    cr_assert(cJSON_IsObject(v), "/status has no verify object: %s", out);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(v, "missing")->valuedouble, 2);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v, "ok")));
    cJSON_Delete(st);
    free(out);
    cr_assert_eq(e2e_relay_stop(relay, 20000), 0);
}
