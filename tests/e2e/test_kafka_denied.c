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
