/* test_poison.c — rows Kafka will never take, under each on_poison policy,
 * and the operator's way out with `outbox-relay dead`.
 *
 * Five kinds of poison, each the second row of an aggregate of its own: a
 * payload larger than kafka.message.max.bytes, an invalid topic in the row's
 * topic column, a template (${event_type}) that renders an invalid topic,
 * headers that are not an object, headers whose values are not all strings.
 * Every test asserts the table (attempts, last_error, dead_at, sent_at) and
 * what a real consumer reads back from Kafka. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define MAX_MSG_BYTES "10000"
#define BIG_PAYLOAD_BYTES 20000

static struct e2e_ctx T;

static void fini(void)
{
    e2e_teardown(&T);
}

/* Inserts one row (SQL expressions for the optional columns) and returns its id. */
static long long insert_row(const char *aggregate_id, const char *event_type, const char *payload,
                            const char *headers, const char *topic)
{
    return e2e_query_int(T.conn,
                         "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload, headers, "
                         "topic) VALUES ('order', '%s', '%s', %s, %s, %s) RETURNING id",
                         T.qtable, aggregate_id, event_type, payload, headers ? headers : "NULL",
                         topic ? topic : "NULL");
}

static long long insert_ok(const char *aggregate_id, int n)
{
    char payload[64];
    snprintf(payload, sizeof(payload), "jsonb_build_object('n', %d)", n);
    return insert_row(aggregate_id, "created", payload, NULL, NULL);
}

enum { P_BIG, P_TOPIC, P_TEMPLATE, P_HEADERS_ARRAY, P_HEADERS_NUMBER, N_POISON };

static const char *const poison_agg[N_POISON] = {"big", "top", "tpl", "hdr", "hds"};
/* What last_error must say for each kind. */
static const char *const poison_error[N_POISON] = {"too large", "invalid topic name",
                                                   "bad type", "not a JSON object",
                                                   "not a string"};

struct layout {
    long long first[N_POISON];  /* the row before the poison, same aggregate */
    long long poison[N_POISON];
    long long later[N_POISON];  /* a row after it, same aggregate */
    long long big_last;         /* a second later row of "big" */
    int rows;
};

/* The data set: poison rows early (within the first two batches of 5), later
 * rows of their aggregates behind 20 healthy rows of five other aggregates. */
static void insert_layout(struct layout *l)
{
    char big[96];
    snprintf(big, sizeof(big), "jsonb_build_object('blob', repeat('x', %d))", BIG_PAYLOAD_BYTES);
    int n = 0;
    for (int p = 0; p < N_POISON; p++) {
        l->first[p] = insert_ok(poison_agg[p], n++);
        switch (p) {
        case P_BIG:
            l->poison[p] = insert_row("big", "created", big, NULL, NULL);
            break;
        case P_TOPIC:
            l->poison[p] = insert_row("top", "created", "'{}'", NULL, "'not a topic!'");
            break;
        case P_TEMPLATE:
            l->poison[p] = insert_row("tpl", "bad type", "'{}'", NULL, NULL);
            break;
        case P_HEADERS_ARRAY:
            l->poison[p] = insert_row("hdr", "created", "'{}'", "'[1, 2]'", NULL);
            break;
        case P_HEADERS_NUMBER:
            l->poison[p] = insert_row("hds", "created", "'{}'", "'{\"trace\": \"t\", \"n\": 1}'", NULL);
            break;
        }
        n++;
    }
    for (int i = 0; i < 20; i++) {
        char agg[16];
        snprintf(agg, sizeof(agg), "ok-%d", i % 5);
        insert_ok(agg, n++);
    }
    for (int p = 0; p < N_POISON; p++)
        l->later[p] = insert_ok(poison_agg[p], n++);
    l->big_last = insert_ok("big", n++);
    for (int i = 0; i < 20; i++) {
        char agg[16];
        snprintf(agg, sizeof(agg), "ok-%d", i % 5);
        insert_ok(agg, n++);
    }
    l->rows = n;
}

/* The relay's options for these tests: small batches, fast polls, a small
 * message.max.bytes, and a template that uses ${event_type}. */
static struct e2e_relay *start_relay(const char *policy)
{
    static char poison_opt[64];
    snprintf(poison_opt, sizeof(poison_opt), "relay.on_poison=%s", policy);
    const char *extra[] = {"relay.poll_interval_ms=50", "relay.batch_size=5",
                           "kafka.message.max.bytes=" MAX_MSG_BYTES, poison_opt, NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(r, "msg=\"became leader\"", 30000), "relay did not become leader (log %s)",
              r->log_path);
    return r;
}

static void setup_poison(const char *name, struct layout *l)
{
    e2e_setup(&T, name);
    snprintf(T.topic_template, sizeof(T.topic_template), "%s.${aggregate_type}.${event_type}", T.table);
    e2e_migrate(&T);
    insert_layout(l);
}

static const char *ids_sql(const long long *ids, int n, char *buf, size_t len)
{
    size_t o = 0;
    for (int i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? "," : "", ids[i]);
    return buf;
}

/* The poison rows: dead or failing as @p dead says, attempts 1, last_error naming the cause. */
static void check_poison_rows(const struct layout *l, bool dead, struct e2e_report *rep)
{
    for (int p = 0; p < N_POISON; p++) {
        PGresult *res = e2e_query(T.conn,
                                  "SELECT attempts, dead_at IS NOT NULL, sent_at IS NOT NULL, "
                                  "coalesce(last_error, '') FROM %s WHERE id = %lld",
                                  T.qtable, l->poison[p]);
        if (!e2e_check(rep, PQntuples(res) == 1, "poison row %lld (%s) is gone", l->poison[p],
                       poison_agg[p])) {
            PQclear(res);
            continue;
        }
        int attempts = atoi(PQgetvalue(res, 0, 0));
        bool is_dead = PQgetvalue(res, 0, 1)[0] == 't', sent = PQgetvalue(res, 0, 2)[0] == 't';
        const char *err = PQgetvalue(res, 0, 3);
        e2e_check(rep, attempts == 1, "poison row %lld (%s): attempts %d, expected 1 (a permanent error)",
                  l->poison[p], poison_agg[p], attempts);
        e2e_check(rep, is_dead == dead, "poison row %lld (%s): dead_at %s, expected %s", l->poison[p],
                  poison_agg[p], is_dead ? "set" : "NULL", dead ? "set" : "NULL");
        e2e_check(rep, !sent, "poison row %lld (%s) is marked sent", l->poison[p], poison_agg[p]);
        e2e_check(rep, strstr(err, poison_error[p]) != NULL,
                  "poison row %lld (%s): last_error \"%s\" does not say \"%s\"", l->poison[p],
                  poison_agg[p], err, poison_error[p]);
        PQclear(res);
    }
}

/* Runs a query over the JSON that `dead list --json` printed (as $1::jsonb)
 * and returns its first value as text (caller frees). */
static char *json_query(const char *json, const char *sql)
{
    const char *params[] = {json};
    PGresult *res = PQexecParams(T.conn, sql, 1, NULL, params, NULL, NULL, 0);
    cr_assert(PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1,
              "query over the dead list output failed (is it JSON?): %s\noutput: %.500s",
              PQresultErrorMessage(res), json);
    char *v = strdup(PQgetisnull(res, 0, 0) ? "" : PQgetvalue(res, 0, 0));
    PQclear(res);
    return v;
}

/* `dead list --json`, summarised as "id:status:attempts:waiting,…" in id order. */
static char *dead_list_summary(void)
{
    const char *words[] = {"list", "--json", NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_dead(&T, words, NULL, &out, &err);
    cr_assert_eq(rc, 0, "dead list --json exited %d: %s", rc, err ? err : "");
    char *s = json_query(out, "SELECT coalesce(string_agg((e->>'id') || ':' || (e->>'status') || ':' || "
                              "(e->>'attempts') || ':' || (e->>'waiting'), ',' ORDER BY (e->>'id')::bigint), "
                              "'') FROM jsonb_array_elements($1::jsonb) AS e");
    free(out);
    free(err);
    return s;
}

/* Runs `dead WORDS…`, asserts the exit status and that stdout contains @p want. */
static void dead_expect(const char *const *words, int want_rc, const char *want_out)
{
    char *out = NULL, *err = NULL;
    int rc = e2e_dead(&T, words, NULL, &out, &err);
    char shown[200] = "";
    for (int i = 0; words[i]; i++)
        snprintf(shown + strlen(shown), sizeof(shown) - strlen(shown), " %s", words[i]);
    cr_assert_eq(rc, want_rc, "dead%s exited %d, expected %d\nstdout: %s\nstderr: %s", shown, rc, want_rc,
                 out ? out : "", err ? err : "");
    if (want_out)
        cr_assert(out && strstr(out, want_out), "dead%s: stdout does not contain \"%s\": %s", shown, want_out,
                  out ? out : "");
    free(out);
    free(err);
}

/* dead_letter: the poison rows are dead after one attempt, everything else
 * (later rows of the same aggregates included) flows. */
Test(e2e, poison_dead_letter, .fini = fini, .timeout = 120)
{
    struct layout l;
    setup_poison("pdead", &l);
    struct e2e_relay *relay = start_relay("dead_letter");

    char ids[256];
    ids_sql(l.poison, N_POISON, ids, sizeof(ids));
    cr_assert(e2e_wait_sql(&T, 30000,
                           "SELECT NOT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL AND id NOT IN (%s)) "
                           "AND (SELECT count(*) FROM %s WHERE dead_at IS NOT NULL) = %d",
                           T.qtable, ids, T.qtable, N_POISON),
              "under dead_letter, not every healthy row was sent or not every poison row is dead: "
              "%lld unsent, %lld dead",
              e2e_count_where(&T, "sent_at IS NULL"), e2e_count_where(&T, "dead_at IS NOT NULL"));

    struct e2e_report rep = {0};
    check_poison_rows(&l, true, &rep);
    e2e_check(&rep, e2e_count_where(&T, "sent_at IS NULL") == N_POISON, "%lld rows unsent, expected only the %d poison rows",
              e2e_count_where(&T, "sent_at IS NULL"), N_POISON);
    e2e_report_assert(&rep, "poison rows under dead_letter");
    cr_assert(e2e_relay_log_contains(relay, "row dead-lettered; later rows of its aggregate continue"),
              "no dead-letter log line (log %s)", relay->log_path);
    e2e_verify_sent_once(&T, "dead_letter");

    char *summary = dead_list_summary();
    char want[512] = "";
    for (int p = 0; p < N_POISON; p++)
        snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%lld:dead:1:0", p ? "," : "",
                 l.poison[p]);
    cr_assert_str_eq(summary, want, "dead list --json does not show exactly the five dead rows");
    free(summary);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* Creates @p topic, one partition, on @p bootstrap with the topic setting @p key = @p value. */
static void create_topic(const char *bootstrap, const char *topic, const char *key, const char *value)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    cr_assert_eq(rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof err),
                 RD_KAFKA_CONF_OK, "%s", err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    cr_assert(rk, "%s", err);
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, 1, 1, err, sizeof err);
    cr_assert(nt, "%s", err);
    cr_assert_eq(rd_kafka_NewTopic_set_config(nt, key, value), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, &nt, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    cr_assert(ev, "CreateTopics %s: no answer within 30 s", topic);
    size_t n = 0;
    const rd_kafka_topic_result_t **tr =
        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
    cr_assert(!rd_kafka_event_error(ev) && n == 1 && !rd_kafka_topic_result_error(tr[0]),
              "CreateTopics %s: %s", topic,
              n == 1 ? rd_kafka_topic_result_error_string(tr[0]) : rd_kafka_event_error_string(ev));
    rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy(nt);
    rd_kafka_destroy(rk);
}

/* A real broker refuses a message whose timestamp lies outside its topic's
 * message.timestamp.after.max.ms (one hour by default since Kafka 4.0) or
 * before.max.ms, and refuses it again however often it comes: INVALID_TIMESTAMP
 * charges that row once. The rows that went in the same produce request go,
 * and the later rows of its aggregate wait (hold_aggregate). The mock checks
 * no timestamps. */
Test(e2e, poison_timestamp_the_topic_refuses, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "pstamp");
    if (!T.env->real_kafka)
        cr_skip_test("needs a real Kafka broker: the mock checks no message timestamps");
    e2e_migrate(&T);
    char topic[256];
    snprintf(topic, sizeof topic, "%s.order", T.table);
    create_topic(T.kafka, topic, "message.timestamp.after.max.ms", "3600000");

    insert_ok("a", 1);
    long long ahead = e2e_query_int(T.conn,
                                    "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload, "
                                    "created_at) VALUES ('order', 'a', 'created', "
                                    "jsonb_build_object('n', 2), now() + interval '2 hours') RETURNING id",
                                    T.qtable);
    long long after = insert_ok("a", 3);
    insert_ok("b", 4);
    struct e2e_relay *relay = start_relay("hold_aggregate");
    cr_assert(e2e_wait_sql(&T, 60000,
                           "SELECT (SELECT dead_at IS NOT NULL FROM %s WHERE id = %lld) "
                           "AND (SELECT count(*) FROM %s WHERE sent_at IS NOT NULL) = 2",
                           T.qtable, ahead, T.qtable),
              "the row dated two hours ahead is not dead, or the other aggregate's rows are not sent: "
              "%lld dead, %lld sent (log %s)",
              e2e_count_where(&T, "dead_at IS NOT NULL"), e2e_count_where(&T, "sent_at IS NOT NULL"),
              relay->log_path);

    struct e2e_report rep = {0};
    PGresult *res = e2e_query(T.conn,
                              "SELECT id, attempts, dead_at IS NOT NULL, sent_at IS NOT NULL, "
                              "coalesce(last_error, '') FROM %s ORDER BY id",
                              T.qtable);
    for (int i = 0; i < PQntuples(res); i++) {
        long long id = atoll(PQgetvalue(res, i, 0));
        int attempts = atoi(PQgetvalue(res, i, 1));
        bool dead = PQgetvalue(res, i, 2)[0] == 't', sent = PQgetvalue(res, i, 3)[0] == 't';
        const char *err = PQgetvalue(res, i, 4);
        if (id == ahead) {
            e2e_check(&rep, attempts == 1 && dead && !sent,
                      "row %lld: attempts %d, dead %d, sent %d; expected one attempt, dead, unsent", id,
                      attempts, dead, sent);
            e2e_check(&rep, strstr(err, "INVALID_TIMESTAMP") != NULL,
                      "row %lld: last_error \"%s\" does not name INVALID_TIMESTAMP", id, err);
        } else {
            /* Innocent: never charged; the one behind it in its aggregate waits. */
            e2e_check(&rep, attempts == 0 && !dead, "row %lld charged: attempts %d, dead %d", id,
                      attempts, dead);
            e2e_check(&rep, sent == (id != after), "row %lld: sent %d, expected %d", id, sent,
                      id != after);
        }
    }
    PQclear(res);
    e2e_report_assert(&rep, "a timestamp the topic refuses");
    cr_assert(e2e_relay_log_contains(relay, "row dead-lettered; later rows of its aggregate are held"),
              "no dead-letter log line (log %s)", relay->log_path);
    e2e_verify_sent_once(&T, "a timestamp the topic refuses");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* hold_aggregate (the default): the poison rows are dead, the later rows of
 * their aggregates wait while every other aggregate flows; after the operator
 * fixes and requeues (or drops) the dead rows, the held rows follow in order. */
Test(e2e, poison_hold_aggregate_then_requeue_and_drop, .fini = fini, .timeout = 150)
{
    struct layout l;
    setup_poison("phold", &l);
    struct e2e_relay *relay = start_relay("hold_aggregate");

    cr_assert(e2e_wait_sql(&T, 30000,
                           "SELECT NOT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL AND aggregate_id "
                           "NOT IN ('big', 'top', 'tpl', 'hdr', 'hds')) "
                           "AND (SELECT count(*) FROM %s WHERE dead_at IS NOT NULL) = %d",
                           T.qtable, T.qtable, N_POISON),
              "other aggregates did not flow past the poison rows (%lld unsent, %lld dead)",
              e2e_count_where(&T, "sent_at IS NULL"), e2e_count_where(&T, "dead_at IS NOT NULL"));
    e2e_sleep_ms(1000); /* twenty more polls: the held rows must still wait */

    struct e2e_report rep = {0};
    check_poison_rows(&l, true, &rep);
    for (int p = 0; p < N_POISON; p++) {
        char cond[160];
        snprintf(cond, sizeof(cond), "id = %lld AND sent_at IS NOT NULL", l.first[p]);
        e2e_check(&rep, e2e_count_where(&T, cond) == 1, "row %lld (%s), before the poison row, is not sent",
                  l.first[p], poison_agg[p]);
        snprintf(cond, sizeof(cond), "id = %lld AND sent_at IS NULL AND dead_at IS NULL AND attempts = 0",
                 l.later[p]);
        e2e_check(&rep, e2e_count_where(&T, cond) == 1,
                  "row %lld (%s), behind a dead row, is not waiting untouched (sent, dead or attempted)",
                  l.later[p], poison_agg[p]);
    }
    char cond[160];
    snprintf(cond, sizeof(cond), "id = %lld AND sent_at IS NULL AND dead_at IS NULL", l.big_last);
    e2e_check(&rep, e2e_count_where(&T, cond) == 1, "the second row behind the dead big row is not waiting");
    e2e_report_assert(&rep, "hold_aggregate while the poison rows are dead");
    cr_assert(e2e_relay_log_contains(relay, "row dead-lettered; later rows of its aggregate are held"),
              "no hold log line (log %s)", relay->log_path);

    /* What the operator sees: five dead rows; "waiting" counts what each holds. */
    char *summary = dead_list_summary();
    char want[512] = "";
    for (int p = 0; p < N_POISON; p++)
        snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%lld:dead:1:%d", p ? "," : "",
                 l.poison[p], p == P_BIG ? 2 : 1);
    cr_assert_str_eq(summary, want, "dead list --json (id:status:attempts:waiting)");
    free(summary);
    const char *list[] = {"list", NULL};
    dead_expect(list, 0, "5 rows in public.");
    dead_expect(list, 0, "5 dead, 0 failing");

    /* drop without --yes refuses and deletes nothing. */
    char top[24], tpl[24], hdr[24], hds[24], big[24];
    snprintf(big, sizeof(big), "%lld", l.poison[P_BIG]);
    snprintf(top, sizeof(top), "%lld", l.poison[P_TOPIC]);
    snprintf(tpl, sizeof(tpl), "%lld", l.poison[P_TEMPLATE]);
    snprintf(hdr, sizeof(hdr), "%lld", l.poison[P_HEADERS_ARRAY]);
    snprintf(hds, sizeof(hds), "%lld", l.poison[P_HEADERS_NUMBER]);
    const char *drop_unconfirmed[] = {"drop", top, NULL};
    dead_expect(drop_unconfirmed, 64, NULL);
    cr_assert_eq(e2e_count_where(&T, "dead_at IS NOT NULL"), N_POISON, "drop without --yes deleted rows");

    /* Fix three rows and requeue them; drop the other two. Twice each: the
     * second run changes nothing and says so. */
    e2e_exec(T.conn, "UPDATE %s SET payload = '{\"fixed\": \"big\"}' WHERE id = %s", T.qtable, big);
    e2e_exec(T.conn, "UPDATE %s SET event_type = 'created' WHERE id = %s", T.qtable, tpl);
    e2e_exec(T.conn, "UPDATE %s SET headers = '{\"fixed\": \"yes\"}' WHERE id = %s", T.qtable, hdr);
    const char *requeue[] = {"requeue", big, tpl, hdr, NULL};
    const char *drop[] = {"drop", top, hds, "--yes", NULL};
    dead_expect(requeue, 0, "requeued 3 rows");
    dead_expect(drop, 0, "dropped 2 rows");
    dead_expect(requeue, 0, "requeued 0 rows");
    dead_expect(drop, 0, "dropped 0 rows");

    e2e_wait_all_sent(&T, 30000);
    cr_assert_eq(e2e_count_where(&T, "true"), l.rows - 2, "expected every row but the two dropped ones");
    snprintf(cond, sizeof(cond), "id IN (%s, %s, %s) AND (attempts <> 0 OR dead_at IS NOT NULL "
             "OR last_error IS NULL)", big, tpl, hdr);
    cr_assert_eq(e2e_count_where(&T, cond), 0,
                 "requeued rows: attempts must be reset, dead_at cleared, last_error kept as history");
    /* Every remaining row once, in per-aggregate order (big: first, fixed, later,
     * last), and nothing of the dropped rows in Kafka. */
    e2e_verify_sent_once(&T, "hold_aggregate after requeue and drop");
    summary = dead_list_summary();
    cr_assert_str_eq(summary, "", "dead list is not empty after requeue and drop");
    free(summary);
    dead_expect(requeue, 0, "requeued 0 rows"); /* sent rows are not requeued */
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* halt: relaying stops at the poison row with one log line naming it; after
 * the fix, `dead requeue` and a restart, everything flows in order. */
Test(e2e, poison_halt_stops_until_requeue_and_restart, .fini = fini, .timeout = 150)
{
    e2e_setup(&T, "phalt");
    e2e_migrate(&T);
    /* Batches of 5: 1-5, then 6-10 holds the poison row (9) and a row of
     * another aggregate (10) that is produced in the same batch. */
    long long ids[40];
    char big[96];
    snprintf(big, sizeof(big), "jsonb_build_object('blob', repeat('x', %d))", BIG_PAYLOAD_BYTES);
    for (int i = 0; i < 40; i++) {
        char agg[16];
        snprintf(agg, sizeof(agg), "a%d", i % 4);
        if (i == 8)
            ids[i] = insert_row("big", "created", big, NULL, NULL);
        else if (i == 9)
            ids[i] = insert_ok("a9", i);
        else
            ids[i] = insert_ok(i == 12 || i == 20 ? "big" : agg, i);
    }
    const char *extra[] = {"relay.poll_interval_ms=50", "relay.batch_size=5",
                           "kafka.message.max.bytes=" MAX_MSG_BYTES, "relay.on_poison=halt", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"relaying halted", 30000), "the relay did not halt (log %s)",
              relay->log_path);
    e2e_sleep_ms(1500); /* thirty polls: nothing more may move */

    struct e2e_report rep = {0};
    char cond[200];
    snprintf(cond, sizeof(cond), "sent_at IS NOT NULL AND id <= %lld AND id <> %lld", ids[9], ids[8]);
    long long sent_before = e2e_count_where(&T, cond), sent_all = e2e_count_where(&T, "sent_at IS NOT NULL");
    e2e_check(&rep, sent_before == 9 && sent_all == 9,
              "after the halt %lld rows are sent (%lld of the 9 before and beside the poison row); "
              "expected exactly those 9", sent_all, sent_before);
    snprintf(cond, sizeof(cond), "id = %lld AND attempts = 1 AND dead_at IS NULL AND sent_at IS NULL "
             "AND last_error LIKE '%%too large%%'", ids[8]);
    e2e_check(&rep, e2e_count_where(&T, cond) == 1,
              "the poison row must have attempts 1, last_error saying why, and no dead_at under halt");
    e2e_check(&rep, e2e_count_where(&T, "attempts > 0") == 1, "rows other than the poison row have attempts");
    e2e_check(&rep, e2e_relay_log_count(relay, "msg=\"relaying halted") == 1,
              "expected one halt log line, found %d", e2e_relay_log_count(relay, "msg=\"relaying halted"));
    char needle[64];
    snprintf(needle, sizeof(needle), "outbox_id=%lld attempts=1", ids[8]);
    char *log = e2e_relay_log(relay);
    const char *line = strstr(log, "msg=\"relaying halted");
    const char *eol = line ? strchr(line, '\n') : NULL;
    const char *named = line ? strstr(line, needle) : NULL;
    e2e_check(&rep, named && (!eol || named < eol), "the halt line does not name the row (%s): %.300s", needle,
              line ? line : "");
    free(log);
    e2e_check(&rep, e2e_relay_alive(relay), "the relay exited on halt");
    e2e_report_assert(&rep, "on_poison=halt");

    /* The operator sees the row as failing, fixes it, requeues it, restarts. */
    char *summary = dead_list_summary();
    char want[64];
    snprintf(want, sizeof(want), "%lld:failing:1:", ids[8]);
    cr_assert(strncmp(summary, want, strlen(want)) == 0 && !strchr(summary, ','),
              "dead list shows \"%s\", expected only the halted row as %s…", summary, want);
    free(summary);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "halted relay did not exit 0 on SIGTERM");
    e2e_exec(T.conn, "UPDATE %s SET payload = '{\"fixed\": true}' WHERE id = %lld", T.qtable, ids[8]);
    char id[24];
    snprintf(id, sizeof(id), "%lld", ids[8]);
    const char *requeue[] = {"requeue", id, NULL};
    dead_expect(requeue, 0, "requeued 1 row");
    dead_expect(requeue, 0, "requeued 0 rows");

    struct e2e_relay *again = e2e_relay_start(&T, extra);
    e2e_wait_all_sent(&T, 30000);
    cr_assert_eq(e2e_count_where(&T, "attempts > 0 OR dead_at IS NOT NULL"), 0, "rows failed after the fix");
    cr_assert(!e2e_relay_log_contains(again, "msg=\"relaying halted"), "the restarted relay halted again");
    e2e_verify_sent_once(&T, "halt, fix, requeue, restart");
    cr_assert_eq(e2e_relay_stop(again, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* The command line of `dead`: usage errors, refusals, unreachable PostgreSQL,
 * a table that does not exist. None may change a row. */
Test(e2e, dead_cli_errors, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "deadcli");
    e2e_migrate(&T);
    long long id = e2e_query_int(T.conn,
                                 "INSERT INTO %s (aggregate_type, aggregate_id, event_type, attempts, "
                                 "last_error, dead_at) VALUES ('order', 'x', 'created', 1, 'boom', now()) "
                                 "RETURNING id", T.qtable);
    char ids[24];
    snprintf(ids, sizeof(ids), "%lld", id);
    static const struct {
        const char *words[5];
        int rc;
    } cases[] = {
        {{NULL}, 64},
        {{"frobnicate", NULL}, 64},
        {{"list", "--bogus", NULL}, 64},
        {{"list", "7", NULL}, 64},
        {{"requeue", NULL}, 64},
        {{"requeue", "--all", "7", NULL}, 64},
        {{"requeue", "seven", NULL}, 64},
        {{"requeue", "0", NULL}, 64},
        {{"requeue", "-3", NULL}, 64},
        {{"drop", NULL}, 64},
        {{"drop", "--all", "--yes", NULL}, 64},
        {{"list", "--ids", NULL}, 64},
        {{"--help", NULL}, 0},
    };
    struct e2e_report rep = {0};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *const *words = cases[i].words;
        char *err = NULL;
        int rc = e2e_dead(&T, words, NULL, NULL, &err);
        char shown[100] = "";
        for (int j = 0; words[j]; j++)
            snprintf(shown + strlen(shown), sizeof(shown) - strlen(shown), " %s", words[j]);
        e2e_check(&rep, rc == cases[i].rc, "dead%s: exit %d, expected %d (stderr %.200s)", shown, rc, cases[i].rc,
                  err ? err : "");
        e2e_check(&rep, rc == 0 || (err && *err), "dead%s: nothing on stderr", shown);
        free(err);
    }
    /* drop without --yes says why. */
    const char *drop[] = {"drop", ids, NULL};
    char *err = NULL;
    e2e_check(&rep, e2e_dead(&T, drop, NULL, NULL, &err) == 64 && err && strstr(err, "--yes"),
              "drop without --yes must exit 64 and mention --yes: %s", err ? err : "");
    free(err);

    const char *list[] = {"list", NULL};
    const char *unreachable[] = {"postgres.conninfo=host=127.0.0.1 port=1 connect_timeout=5", NULL};
    e2e_check(&rep, e2e_dead(&T, list, unreachable, NULL, NULL) == 69, "dead list with PostgreSQL down: not 69");
    const char *requeue[] = {"requeue", "--all", NULL};
    e2e_check(&rep, e2e_dead(&T, requeue, unreachable, NULL, NULL) == 69,
              "dead requeue with PostgreSQL down: not 69");
    const char *no_table[] = {"relay.table=no_such_outbox_table", NULL};
    err = NULL;
    e2e_check(&rep, e2e_dead(&T, list, no_table, NULL, &err) == 78 && err && strstr(err, "no_such_outbox_table"),
              "dead list of a missing table: expected 78 naming it: %s", err ? err : "");
    free(err);
    const char *inject[] = {"relay.table=x\"; DROP TABLE y; --", NULL};
    err = NULL;
    e2e_check(&rep, e2e_dead(&T, list, inject, NULL, &err) == 78 && err && strstr(err, "relay.table"),
              "dead list with an injection in relay.table: expected 78 naming the key: %s", err ? err : "");
    free(err);
    e2e_check(&rep, e2e_count_where(&T, "dead_at IS NOT NULL AND attempts = 1") == 1, "a failed command changed the row");
    e2e_report_assert(&rep, "dead command line");

    /* And the happy path on that row: requeue --all twice. */
    dead_expect(requeue, 0, "requeued 1 row");
    dead_expect(requeue, 0, "requeued 0 rows");
}

/* Runs `dead WORDS…` and returns its stdout (exit 0 asserted). */
static char *dead_out(const char *const *words)
{
    char *out = NULL, *err = NULL;
    int rc = e2e_dead(&T, words, NULL, &out, &err);
    cr_assert_eq(rc, 0, "dead %s %s exited %d: %s", words[0], words[1] ? words[1] : "", rc, err ? err : "");
    free(err);
    return out ? out : strdup("");
}

static size_t count_char(const char *s, char c)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == c;
    return n;
}

/* A bulk action on thousands of rows prints a count, not thousands of ids;
 * --ids lists them, and the requested ids left alone are counted the same way. */
#define N_BULK 3000
Test(e2e, dead_bulk_prints_counts, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "deadbulk");
    e2e_migrate(&T);
    e2e_exec(T.conn,
             "INSERT INTO %s (aggregate_type, aggregate_id, event_type, attempts, last_error, dead_at) "
             "SELECT 'order', 'b' || g, 'created', 1, 'boom', now() FROM generate_series(1, %d) g",
             T.qtable, N_BULK);

    const char *requeue[] = {"requeue", "--all", NULL};
    char *out = dead_out(requeue);
    cr_assert_str_eq(out, "requeued 3000 rows\n", "dead requeue --all printed more than the count");
    free(out);
    cr_assert_eq(e2e_count_where(&T, "dead_at IS NULL AND attempts = 0"), N_BULK, "requeue --all did not requeue every row");

    /* Again, with --ids: every id, once, on the count's line. */
    e2e_exec(T.conn, "UPDATE %s SET dead_at = now(), attempts = 1", T.qtable);
    const char *requeue_ids[] = {"requeue", "--all", "--ids", NULL};
    out = dead_out(requeue_ids);
    cr_assert(strncmp(out, "requeued 3000 rows: ", 20) == 0 && count_char(out, ',') == N_BULK - 1 &&
                  count_char(out, '\n') == 1,
              "dead requeue --all --ids: expected the count and 3000 ids on one line: %.200s", out);
    long long first = e2e_query_int(T.conn, "SELECT min(id) FROM %s", T.qtable);
    char want[64];
    snprintf(want, sizeof(want), ": %lld, %lld,", first, first + 1);
    cr_assert(strstr(out, want), "dead requeue --all --ids does not list the ids in order: %.200s", out);
    free(out);

    /* drop: two dead rows and one id that is not (already requeued). */
    e2e_exec(T.conn, "UPDATE %s SET dead_at = now(), attempts = 1 WHERE id < %lld", T.qtable, first + 2);
    char a[24], b[24], c[24];
    snprintf(a, sizeof(a), "%lld", first);
    snprintf(b, sizeof(b), "%lld", first + 1);
    snprintf(c, sizeof(c), "%lld", first + 2);
    const char *drop[] = {"drop", a, b, c, "--yes", NULL};
    out = dead_out(drop);
    cr_assert_str_eq(out,
                     "dropped 2 rows\n1 of the ids given was not dead or failing (already done, sent, never "
                     "failed, or no such row)\n",
                     "dead drop: unexpected output");
    free(out);
    e2e_exec(T.conn, "UPDATE %s SET dead_at = now(), attempts = 1 WHERE id = %s", T.qtable, c);
    const char *drop_ids[] = {"drop", a, b, c, "--yes", "--ids", NULL};
    out = dead_out(drop_ids);
    char expect[256];
    snprintf(expect, sizeof(expect),
             "dropped 1 row: %s\n2 of the ids given were not dead or failing (already done, sent, never "
             "failed, or no such row): %s, %s\n", c, a, b);
    cr_assert_str_eq(out, expect, "dead drop --ids: unexpected output");
    free(out);
    cr_assert_eq(e2e_count_where(&T, "true"), N_BULK - 3, "drop deleted other rows than the three dead ones");
}

/* How many rows the log reports for the line @p msg: those written in full
 * plus those counted in its summaries (like="msg" rows=N). *@p lines gets
 * how many lines that took. */
static long long rows_logged(const char *log, const char *msg, int *lines)
{
    char full[200], like[200];
    snprintf(full, sizeof(full), "msg=\"%s\"", msg);
    snprintf(like, sizeof(like), "like=\"%s\" rows=", msg);
    long long rows = 0;
    *lines = 0;
    for (const char *p = log; (p = strstr(p, full)); p++, (*lines)++)
        rows++;
    for (const char *p = log; (p = strstr(p, like)); p++, (*lines)++)
        rows += strtoll(p + strlen(like), NULL, 10);
    return rows;
}

/* 3,000 poison rows: the per-row lines are rate-limited into summaries, far
 * fewer lines than rows, that still account for every row; the metrics and
 * the table are exact. */
#define N_MANY_POISON 3000
Test(e2e, many_poison_rows_logged_as_summaries, .fini = fini, .timeout = 180)
{
    e2e_setup(&T, "pmany");
    e2e_migrate(&T);
    for (int i = 0; i < 10; i++)
        insert_ok("ok", i);
    e2e_exec(T.conn,
             "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload, headers) "
             "SELECT 'order', 'p' || g, 'created', '{}', '[1]' FROM generate_series(1, %d) g",
             T.qtable, N_MANY_POISON);
    for (int i = 10; i < 20; i++)
        insert_ok("ok", i);
    const char *extra[] = {"relay.poll_interval_ms=50", "relay.batch_size=100", "relay.on_poison=dead_letter",
                           NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    int port = e2e_relay_http_port(relay, 30000);
    cr_assert(port > 0, "no status endpoint (log %s)", relay->log_path);
    cr_assert(e2e_wait_sql(&T, 90000,
                           "SELECT (SELECT count(*) FROM %s WHERE dead_at IS NOT NULL) = %d AND NOT EXISTS "
                           "(SELECT 1 FROM %s WHERE sent_at IS NULL AND dead_at IS NULL)",
                           T.qtable, N_MANY_POISON, T.qtable),
              "not every poison row is dead and every other row sent: %lld dead, %lld unsent",
              e2e_count_where(&T, "dead_at IS NOT NULL"), e2e_count_where(&T, "sent_at IS NULL AND dead_at IS NULL"));

    /* The relay's own counts, exact. */
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    const char *status[] = {"status", "--json", "--url", url, NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_relay(status, 20000, &out, &err); /* 1: not ready yet, the JSON is there */
    cr_assert(rc == 0 || rc == 1, "status --json exited %d: %s", rc, err ? err : "");
    char *counts = json_query(out, "SELECT concat_ws(',', $1::jsonb #>> '{events,dead_lettered_total}', "
                                   "$1::jsonb #>> '{events,failed_total,invalid}', "
                                   "$1::jsonb #>> '{events,published_total}')");
    cr_assert_str_eq(counts, "3000,3000,20", "/status dead_lettered_total,failed_total.invalid,published_total");
    free(counts);
    free(out);
    free(err);
    cr_assert_eq(e2e_count_where(&T, "dead_at IS NOT NULL AND attempts = 1 AND last_error LIKE '%not a JSON object%'"),
                 N_MANY_POISON, "every poison row must be dead after one attempt, saying why");
    cr_assert_eq(e2e_count_where(&T, "sent_at IS NOT NULL"), 20);

    /* The exit writes the summaries still open. */
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
    char *log = e2e_relay_log(relay);
    int produce_lines, dead_lines;
    long long produce_rows = rows_logged(log, "row cannot be produced", &produce_lines);
    long long dead_rows = rows_logged(log, "row dead-lettered; later rows of its aggregate continue", &dead_lines);
    free(log);
    cr_assert_eq(produce_rows, N_MANY_POISON, "\"row cannot be produced\" lines and summaries account for %lld rows",
                 produce_rows);
    cr_assert_eq(dead_rows, N_MANY_POISON, "\"row dead-lettered\" lines and summaries account for %lld rows",
                 dead_rows);
    /* Five in full and one summary per kind and 10 s: a few dozen lines at most. */
    cr_assert(produce_lines + dead_lines <= 60, "%d + %d lines for %d poison rows (log %s)", produce_lines,
              dead_lines, N_MANY_POISON, relay->log_path);
    cr_assert(e2e_relay_log_contains(relay, "msg=\"more rows failed like this\""), "no summary line");
}
