/* test_kafka_denied.c — a principal Kafka refuses a right (the mock broker
 * answers InitProducerId with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as a
 * broker does without the TransactionalId ACLs): the relay names the right
 * once, says so on /readyz, retries with a back-off instead of replacing its
 * producer dozens of times a second, and relays once the right is granted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testlib.h"

static struct e2e_ctx T;

static void fini(void)
{
    if (T.env)
        e2e_mock_command(&T, "clear InitProducerId");
    e2e_teardown(&T);
}

static int lines_of(const char *text)
{
    int n = 0;
    for (const char *p = text; *p; p++)
        n += *p == '\n';
    return n;
}

Test(e2e, a_refused_transactional_id_is_named_once_and_retried_with_a_back_off, .fini = fini,
     .timeout = 180)
{
    e2e_setup(&T, "denied");
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker's error injection");
    e2e_migrate(&T);
    cr_assert(e2e_mock_command(&T, "errors InitProducerId 100000 "
                                   "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"));
    struct e2e_relay *relay = e2e_relay_start(&T, NULL);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"kafka refuses the relay's principal a right", 30000),
              "log %s", relay->log_path);
    sleep(10);
    char *log = e2e_relay_log(relay);
    cr_expect_eq(e2e_relay_log_count(relay, "msg=\"kafka refuses the relay's principal a right"), 1,
                 "named once: %s", relay->log_path);
    cr_expect_not_null(strstr(log, "denied=transactional_id_write"), "log %s", relay->log_path);
    cr_expect_eq(e2e_relay_log_count(relay, "replacing the kafka producer"), 0, "log %s",
                 relay->log_path);
    /* each retry's own fatal error is repeated at debug level only */
    cr_expect_leq(e2e_relay_log_count(relay, "level=error msg=\"kafka producer fatal error\""), 2,
                  "log %s", relay->log_path);
    /* start-up lines, the refusal, one line of librdkafka's a try at most */
    cr_expect_lt(lines_of(log), 40, "%d lines in 10 s: %s", lines_of(log), relay->log_path);
    free(log);

    char *body = NULL;
    int code = e2e_relay_http_get(relay, "/readyz?verbose", &body);
    cr_expect_eq(code, 503, "/readyz: %d %s", code, body ? body : "");
    cr_expect_not_null(body && strstr(body, "Write and Describe on the TransactionalId"),
                       "/readyz: %s", body ? body : "");
    free(body);
    code = e2e_relay_http_get(relay, "/metrics", &body);
    cr_expect_not_null(body && strstr(body, "outbox_relay_kafka_denied{right=\"transactional_id_write\"} 1"),
                       "/metrics");
    free(body);

    /* The ACL granted: the next attempt (at most a minute away) succeeds. */
    cr_assert(e2e_mock_command(&T, "clear InitProducerId"));
    cr_assert(e2e_relay_wait_log(relay, "msg=\"kafka grants the relay's principal its rights again\"",
                                 75000),
              "log %s", relay->log_path);
    e2e_exec(T.conn, "SELECT %s('a', '1', 'Created', '{}', NULL, NULL)", T.qenqueue);
    e2e_wait_all_sent(&T, 30000);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0);
}

/* The value of the last "retry_in_ms=" in @p log, -1 if none. */
static long last_retry_in_ms(const char *log)
{
    const char *last = NULL;
    for (const char *p = strstr(log, "retry_in_ms="); p; p = strstr(p + 1, "retry_in_ms="))
        last = p;
    return last ? strtol(last + strlen("retry_in_ms="), NULL, 10) : -1;
}

/* relay.fencing=none: the idempotent producer's id refused
 * (CLUSTER_AUTHORIZATION_FAILED, a principal without IdempotentWrite or
 * Write on a topic). Nothing but a delivery shows the right granted, so the
 * rows must go with the first producer after the grant: the relay's next
 * attempt, when the back-off it announced ends, not one more back-off later. */
Test(e2e, a_refused_producer_id_is_retried_and_the_rows_go_at_the_first_attempt_after_the_grant,
     .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "deniedpid");
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker's error injection");
    e2e_migrate(&T);
    for (int i = 0; i < 20; i++)
        e2e_exec(T.conn, "SELECT %s('order', '%d', 'Created', '{}', NULL, NULL)", T.qenqueue,
                 i % 4);
    cr_assert(e2e_mock_command(&T, "errors InitProducerId 100000 CLUSTER_AUTHORIZATION_FAILED"));
    const char *extra[] = {"relay.fencing=none", "log.level=debug", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"kafka refuses the relay's principal a right", 30000),
              "log %s", relay->log_path);
    cr_expect(e2e_relay_log_contains(relay, "denied=idempotent_write"), "log %s", relay->log_path);
    /* Three retries refused: the back-off is seconds long by now. */
    int64_t until = e2e_now_ms() + 40000;
    int refused;
    while ((refused = e2e_relay_log_count(relay, "kafka still refuses")) < 3 && e2e_now_ms() < until)
        e2e_sleep_ms(20);
    cr_assert_geq(refused, 3, "log %s", relay->log_path);
    cr_expect_eq(e2e_count_where(&T, "sent_at IS NOT NULL"), 0, "rows marked while refused");

    int64_t refused_at = e2e_now_ms();
    char *log = e2e_relay_log(relay);
    long retry_in = last_retry_in_ms(log);
    free(log);
    cr_assert_gt(retry_in, 0, "log %s", relay->log_path);

    /* The right granted halfway through the back-off, the last producer
     * refused: the next attempt, when the back-off ends, succeeds. */
    e2e_sleep_ms((int)(retry_in / 2));
    cr_assert(e2e_mock_command(&T, "clear InitProducerId"));
    cr_assert(e2e_relay_wait_log(relay, "msg=\"kafka grants the relay's principal its rights again\"",
                                 75000),
              "log %s", relay->log_path);
    int64_t took = e2e_now_ms() - refused_at;
    cr_expect_leq(took, retry_in + 2000,
                  "rows went %lld ms after the last refusal; the back-off it announced was %ld ms: "
                  "log %s", (long long)took, retry_in, relay->log_path);
    cr_expect_eq(e2e_relay_log_count(relay, "kafka still refuses"), refused,
                 "refused again after the grant: log %s", relay->log_path);
    e2e_wait_all_sent(&T, 15000);
    e2e_verify_sent_once(&T, "after the grant");
    cr_expect_eq(e2e_count_where(&T, "attempts > 0"), 0, "rows charged for a missing right");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0);
}
