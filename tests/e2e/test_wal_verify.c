/* test_wal_verify.c — `verify` and `replay` with relay.capture = wal, where
 * the relay marks no row and the slot says what is on Kafka.
 *
 * What a user checks: rows a running relay streamed count as sent and verify
 * passes; with the relay stopped the slot cannot pass verify's fence, so
 * verify says so, counts every row pending and exits 75; a missing slot is
 * an error naming it; replay refuses only dead rows; rows the slot confirmed
 * that Kafka does not hold (their topic deleted, on a real broker: the mock
 * has no DeleteTopics) are missing, `replay` resends them and verify passes
 * again; the daemon's periodic verify passes in wal mode. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "testlib.h"

static struct e2e_ctx T;

static void fini(void)
{
    e2e_teardown(&T);
}

static void setup(const char *name)
{
    e2e_setup(&T, name);
    e2e_wal_enable(&T);
    e2e_migrate(&T);
}

/* Rows @p lo..@p hi of aggregate type "order" over 7 aggregates, one transaction. */
static void write_rows(int lo, int hi)
{
    e2e_exec(T.conn,
             "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload, headers) "
             "SELECT 'order', 'o' || (i %% 7), 'placed', jsonb_build_object('i', i), "
             "  CASE WHEN i %% 5 = 0 THEN jsonb_build_object('trace', 't' || i) END "
             "FROM generate_series(%d, %d) AS i",
             T.qtable, lo, hi);
}

/* Runs `outbox-relay CMD WORDS... <base args> -X EXTRA`; @return its exit status. */
static int run_cmd(const char *cmd, const char *const *words, const char *extra, char **out,
                   char **err)
{
    const char *args[E2E_MAX_ARGS];
    int n = 0;
    args[n++] = cmd;
    for (int i = 0; words && words[i]; i++)
        args[n++] = words[i];
    e2e_base_args(&T, args, &n);
    args[n++] = "-X";
    args[n++] = "http.listen=";
    if (extra) {
        args[n++] = "-X";
        args[n++] = extra;
    }
    args[n] = NULL;
    return e2e_run_relay(args, 120000, out, err);
}

/* `verify --json --settle SETTLE`: the exit status and the parsed report. */
static int verify_json(const char *settle, cJSON **report)
{
    const char *w[] = {"--json", "--settle", settle, NULL};
    char *out = NULL, *err = NULL;
    int rc = run_cmd("verify", w, NULL, &out, &err);
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

static bool wal_confirmed(const cJSON *report)
{
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(report, "wal");
    cr_assert(cJSON_IsObject(w), "a wal-mode report has no \"wal\" object");
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(w, "confirmed"));
}

static struct e2e_relay *relay_streaming(void)
{
    struct e2e_relay *r = e2e_relay_start(&T, NULL);
    cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 30000),
              "the relay did not stream (log %s)", r->log_path);
    return r;
}

/* verify passes with every row sent, and says the slot passed the fence. */
static void assert_verify_clean(long long rows)
{
    cJSON *rep;
    int rc = verify_json("30s", &rep);
    cr_assert_eq(rc, 0, "verify exited %d, expected 0", rc);
    cr_assert(wal_confirmed(rep), "the slot did not pass the fence");
    cr_assert_eq(total(rep, "rows"), rows);
    cr_assert_eq(total(rep, "sent"), rows);
    cr_assert_eq(total(rep, "pending"), 0);
    cr_assert_eq(total(rep, "missing"), 0);
    cr_assert_eq(total(rep, "mismatched"), 0);
    cr_assert_eq(total(rep, "out_of_order"), 0);
    cJSON_Delete(rep);
}

Test(e2e, wal_verify_counts_streamed_rows_sent_and_needs_the_relay, .fini = fini, .timeout = 300)
{
    setup("wvsent");
    write_rows(1, 300);
    struct e2e_relay *r = relay_streaming();
    write_rows(301, 500);
    cr_assert(e2e_wal_wait_confirmed(&T, 60000), "the slot was not confirmed (log %s)", r->log_path);
    assert_verify_clean(500);
    /* No wait needed: verify's fence is what makes it exact, even right after a write. */
    write_rows(501, 520);
    assert_verify_clean(520);

    /* replay takes unmarked rows in wal mode; dead ones stay refused. */
    e2e_exec(T.conn, "UPDATE %s SET dead_at = now() WHERE id = (SELECT min(id) FROM %s)", T.qtable,
             T.qtable);
    long long dead_id = e2e_query_int(T.conn, "SELECT id FROM %s WHERE dead_at IS NOT NULL", T.qtable);
    char id[24];
    snprintf(id, sizeof id, "%lld", dead_id);
    const char *dead[] = {"--from-id", id, "--to-id", id, NULL};
    char *out = NULL, *err = NULL;
    int rc = run_cmd("replay", dead, NULL, &out, &err);
    cr_assert_eq(rc, 0, "replay exited %d: %s", rc, err);
    cr_assert_not_null(strstr(out, "refused 1 dead row"), "%s", out);
    free(out);
    free(err);
    e2e_exec(T.conn, "UPDATE %s SET dead_at = NULL", T.qtable);

    /* Stopped, nothing confirms the fence: nothing is proven, and it says so. */
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
    write_rows(521, 530);
    cJSON *rep;
    rc = verify_json("2s", &rep);
    cr_assert_eq(rc, 75, "verify without a relay exited %d, expected 75", rc);
    cr_assert(!wal_confirmed(rep));
    cr_assert_eq(total(rep, "rows"), 530);
    cr_assert_eq(total(rep, "sent"), 0);
    cr_assert_eq(total(rep, "pending"), 530);
    cr_assert_eq(total(rep, "missing"), 0);
    cJSON_Delete(rep);
    const char *human[] = {"--settle", "1s", NULL};
    rc = run_cmd("verify", human, NULL, &out, &err);
    cr_assert_eq(rc, 75);
    cr_assert_not_null(strstr(out, "rows cannot be told apart from pending; is the relay running?"),
                       "%s", out);
    cr_assert_not_null(strstr(out, "NOT PROVEN"), "%s", out);
    free(out);
    free(err);

    /* A missing slot is an error that names it. */
    rc = run_cmd("verify", NULL, "relay.slot=e2e_no_such_slot", &out, &err);
    cr_assert_eq(rc, 78, "verify with a missing slot exited %d: %s", rc, err);
    cr_assert_not_null(strstr(err, "e2e_no_such_slot"), "%s", err);
    free(out);
    free(err);

    /* Running again, the relay streams the rest and verify passes. */
    r = relay_streaming();
    assert_verify_clean(530);
    cr_assert_eq(e2e_count_where(&T, "sent_at IS NOT NULL"), 0, "the table was written");
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
}

/* The first and last id of the rows written by the last write_rows call. */
static void last_ids(long long n, long long *lo, long long *hi)
{
    *hi = e2e_query_int(T.conn, "SELECT max(id) FROM %s", T.qtable);
    *lo = *hi - n + 1;
}

/* Replays ids @p lo..@p hi and asserts it replayed @p n rows. */
static void replay_ids(long long lo, long long hi, long long n)
{
    char from[24], to[24], want[64];
    snprintf(from, sizeof from, "%lld", lo);
    snprintf(to, sizeof to, "%lld", hi);
    snprintf(want, sizeof want, "replayed %lld rows", n);
    const char *w[] = {"--from-id", from, "--to-id", to, NULL};
    char *out = NULL, *err = NULL;
    int rc = run_cmd("replay", w, NULL, &out, &err);
    cr_assert_eq(rc, 0, "replay exited %d: %s", rc, err);
    cr_assert_not_null(strstr(out, want), "%s", out);
    free(out);
    free(err);
}

/* A real broker: the topic the relay wrote to is deleted after the slot was
 * confirmed; every row is then missing, replay puts them back. */
Test(e2e, wal_verify_finds_a_deleted_topic_and_replay_resends_it, .fini = fini, .timeout = 300)
{
    setup("wvtopic");
    if (!T.env->real_kafka)
        cr_skip_test("deleting a topic needs a real broker (the mock has no DeleteTopics)");
    write_rows(1, 50);
    struct e2e_relay *r = relay_streaming();
    cr_assert(e2e_wal_wait_confirmed(&T, 60000), "the slot was not confirmed (log %s)", r->log_path);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
    char topic[160];
    snprintf(topic, sizeof topic, "%s.order", T.table);
    e2e_kafka_delete_topic(&T, topic, 60000);

    r = relay_streaming();
    cJSON *rep;
    int rc = verify_json("30s", &rep);
    cr_assert_eq(rc, 1, "verify after the topic was deleted exited %d, expected 1", rc);
    cr_assert(wal_confirmed(rep));
    cr_assert_eq(total(rep, "missing"), 50);
    cJSON_Delete(rep);
    long long lo, hi;
    last_ids(50, &lo, &hi);
    replay_ids(lo, hi, 50);
    assert_verify_clean(50);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
}

Test(e2e, wal_periodic_verify_passes, .fini = fini, .timeout = 120)
{
    setup("wvtask");
    write_rows(1, 100);
    const char *extra[] = {"verify.interval=2", "verify.lag=1", "verify.window=60", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 30000),
              "the relay did not stream (log %s)", r->log_path);
    cr_assert(e2e_wal_wait_confirmed(&T, 60000), "the slot was not confirmed (log %s)", r->log_path);
    /* A run whose window holds the rows, all counted sent. */
    cr_assert(e2e_relay_wait_log(r, "rows=100 pending=0", 30000),
              "no periodic verify passed with the 100 rows sent (log %s)", r->log_path);
    cr_assert(!e2e_relay_log_contains(r, "verify could not run"), "log %s", r->log_path);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
}
