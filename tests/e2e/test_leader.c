/* test_leader.c — two relays on one table: one leads, one stands by; nothing is
 * published twice; when the leader is SIGKILLed the standby takes over and
 * relays what comes next; a standby behind a leader that relays nothing says so. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "testlib.h"

#define ROWS_EACH 2000

static struct e2e_ctx T;

static void fini(void)
{
    e2e_teardown(&T);
}

static void enqueue_range(int lo, int hi)
{
    e2e_enqueue_series(&T, "customer", "c", 50, "updated", lo, hi, 0);
}

Test(e2e, standby_takes_over, .fini = fini, .timeout = 280)
{
    e2e_setup(&T, "leader");
    e2e_migrate(&T);

    const char *extra[] = {"relay.poll_interval_ms=100", "relay.reconnect_interval_ms=200", NULL};
    struct e2e_relay *a = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(a, "msg=\"became leader\"", 30000),
              "first relay did not log became leader (log %s)", a->log_path);
    struct e2e_relay *b = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(b, "msg=\"standing by\"", 30000),
              "second relay did not log standing by (log %s)", b->log_path);
    cr_assert(!e2e_relay_log_contains(b, "msg=\"became leader\""),
              "both relays claim to lead (log %s)", b->log_path);

    /* Steady state with both running. */
    enqueue_range(1, ROWS_EACH);
    e2e_wait_all_sent(&T, 120000);
    e2e_sleep_ms(500);
    cr_assert(!e2e_relay_log_contains(b, "msg=\"became leader\""),
              "the standby became leader while the leader was alive (log %s)", b->log_path);

    /* The leader dies; the standby must take over. */
    e2e_relay_kill(a);
    enqueue_range(ROWS_EACH + 1, 2 * ROWS_EACH);
    cr_assert(e2e_relay_wait_log(b, "msg=\"became leader\"", 60000),
              "the standby did not become leader within 60 s of the leader's death (log %s)", b->log_path);
    e2e_wait_all_sent(&T, 120000);

    /* The leader was idle (everything marked) when it died, so even across the
     * takeover each row must be published exactly once. */
    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(&T, 120000, &rows, &msgs, &rep);
    cr_assert_eq(rows.n, (size_t)(2 * ROWS_EACH));
    for (size_t i = 0; i < rows.n; i++) {
        const struct e2e_row *r = &rows.v[i];
        e2e_check(&rep, r->deliveries == 1, "row %lld (%s) delivered %d times, expected once (%s)",
                  (long long)r->id, r->event_id, r->deliveries,
                  i < ROWS_EACH ? "before the takeover" : "after the takeover");
        e2e_check(&rep, r->sent, "row %lld has sent_at NULL", (long long)r->id);
    }
    e2e_report_assert(&rep, "two relays, leader killed");

    cr_assert_eq(e2e_relay_stop(b, 30000), 0, "the new leader did not exit 0 on SIGTERM");
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
}

/* A session that holds the leader lock, is named like a relay and keeps
 * running statements, but relays nothing: a hung leader. The standby's
 * other checks see nothing wrong; rows waiting with no mark or delete are
 * what shows it, within relay.standby_stall_timeout. */
static volatile bool hung_stop;

static void *hung_leader_busy(void *arg)
{
    PGconn *c = arg;
    while (!hung_stop && PQstatus(c) == CONNECTION_OK) {
        PQclear(PQexec(c, "SELECT 1"));
        e2e_sleep_ms(500);
    }
    return NULL;
}

Test(e2e, a_standby_reports_a_leader_that_makes_no_progress, .fini = fini, .timeout = 240)
{
    e2e_setup(&T, "stall");
    e2e_migrate(&T);
    char ci[600];
    snprintf(ci, sizeof ci, "%s application_name=outbox-relay", T.env->pg);
    PGconn *hung = PQconnectdb(ci);
    cr_assert_eq(PQstatus(hung), CONNECTION_OK, "%s", PQerrorMessage(hung));
    long long holder = e2e_query_int(
        hung, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock("
              "hashtextextended('outbox-relay:leader:' || 'public.%s', 0))) AS l", T.table);
    hung_stop = false;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, hung_leader_busy, hung), 0);

    enqueue_range(1, 100);
    const char *extra[] = {"relay.poll_interval_ms=200", "relay.standby_stall_timeout=3s", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(r, "msg=\"standing by\"", 30000), "no standby (log %s)", r->log_path);
    cr_assert(e2e_relay_wait_log(r, "msg=\"no leader makes progress: rows wait and none was marked or deleted\"",
                                 30000),
              "the standby never said that no leader makes progress (log %s)", r->log_path);
    char needle[64];
    snprintf(needle, sizeof needle, "holder_pid=%lld", holder);
    cr_assert(e2e_relay_log_contains(r, needle), "the stall line does not name the holder %lld", holder);

    char *body = NULL;
    cr_assert_eq(e2e_relay_http_get(r, "/metrics", &body), 200);
    cr_assert(strstr(body, "\noutbox_relay_standby_stalled 1\n"), "metric not 1:\n%.2000s", body);
    free(body);
    cr_assert_eq(e2e_relay_http_get(r, "/status", &body), 200);
    cJSON *doc = cJSON_Parse(body);
    free(body);
    cJSON *lock = cJSON_GetObjectItem(doc, "leader_lock");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(lock, "standby_stalled")), "/status: not stalled");
    cr_assert(cJSON_GetObjectItem(lock, "stalled_seconds")->valuedouble >= 3);
    cJSON_Delete(doc);
    snprintf(needle, sizeof needle, "pg_terminate_backend(%lld)", holder);
    e2e_assert_readyz(r, 503, needle);

    /* The hung leader goes: the standby leads, relays, and the report clears. */
    hung_stop = true;
    pthread_join(th, NULL);
    PQfinish(hung);
    cr_assert(e2e_relay_wait_log(r, "msg=\"became leader\"", 30000), "no takeover (log %s)", r->log_path);
    e2e_wait_all_sent(&T, 60000);
    cr_assert_eq(e2e_relay_http_get(r, "/metrics", &body), 200);
    cr_assert(strstr(body, "\noutbox_relay_standby_stalled 0\n"), "metric not 0 after takeover");
    free(body);
    e2e_assert_readyz(r, 200, "[+]role ok");
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
}
