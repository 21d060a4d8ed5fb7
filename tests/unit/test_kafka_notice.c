/* test_kafka_notice.c — librdkafka's broker news: how loud each line is, and
 * a broker's failure written once per cause until the broker is back. */
#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>

#include "core/kafka_notice.h"

#define REFUSED "127.0.0.1:9092/2: Connect to ipv4#127.0.0.1:9092 failed: Connection refused " \
                "(after 0ms in state CONNECT)"

Test(kafka_notice, a_broker_failure_line_is_the_error_events_echo)
{
    /* librdkafka logs a connection refused at LOG_ERR (3) and raises the same
     * text as an error event: the log line goes to debug. */
    cr_assert_eq(kafka_log_level(3, "FAIL", REFUSED), LOG_LVL_DEBUG);
    cr_assert_eq(kafka_log_level(4, "FAIL", REFUSED), LOG_LVL_DEBUG);
    cr_assert_eq(kafka_log_level(3, "TXNERR", "Current transaction failed in state InTransaction: 70 "
                                 "message(s) timed out on t [1] (_TIMED_OUT, requires epoch bump)"),
                 LOG_LVL_DEBUG);
    /* and a fatal error, written again as "kafka producer fatal error" */
    cr_assert_eq(kafka_log_level(3, "FATAL", "Fatal error: Broker: Transactional Id authorization "
                                 "failed"), LOG_LVL_DEBUG);
    cr_assert_eq(kafka_log_level(4, "SSL", "[thrd:ssl://127.0.0.1:9093/bootstrap]: No matching "
                                 "issuer found in server trusted certificate authorities, not "
                                 "sending any client certificates"), LOG_LVL_DEBUG);
    cr_assert_eq(kafka_log_level(3, "ERROR", "something else"), LOG_LVL_ERROR);
    cr_assert_eq(kafka_log_level(4, "REQTMOUT", "127.0.0.1:9092/2: Timed out 1 in-flight"), LOG_LVL_WARN);
    cr_assert_eq(kafka_log_level(6, "INFO", "x"), LOG_LVL_INFO);
    cr_assert_eq(kafka_log_level(7, "BROKER", "x"), LOG_LVL_DEBUG);
    cr_assert_eq(kafka_log_level(4, "CONFWARN", "Configuration property enable.gapless.guarantee is experimental"),
                 LOG_LVL_DEBUG);
}

Test(kafka_notice, each_broker_and_cause_once_until_it_is_up)
{
    struct kafka_notice k = {0};
    cr_assert(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__TRANSPORT,
                                 "127.0.0.1:9092/2: Disconnected (after 5000ms in state UP)"));
    cr_assert_not(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__TRANSPORT, REFUSED), "a reconnect refused");
    cr_assert_not(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__TRANSPORT, REFUSED));
    /* Another cause of the same broker, and the same cause of another. */
    cr_assert(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__TIMED_OUT, "127.0.0.1:9092/2: 1 request(s) timed out"));
    cr_assert(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__TRANSPORT,
                                 "127.0.0.1:9093/3: Connect to ipv4#127.0.0.1:9093 failed"));
    cr_assert(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, "3/3 brokers are down"));
    cr_assert_not(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, "3/3 brokers are down"));

    /* Broker 2 back: its next failure is news, broker 3's repeat is not; the
     * cluster is not all down any more. */
    kafka_notice_broker_up(&k, "127.0.0.1:9092/2");
    cr_assert(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__TRANSPORT, REFUSED));
    cr_assert_not(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__TRANSPORT,
                                     "127.0.0.1:9093/3: Connect to ipv4#127.0.0.1:9093 failed"));
    cr_assert(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, "3/3 brokers are down"));
}

Test(kafka_notice, a_full_table_forgets_the_oldest_not_the_newest)
{
    struct kafka_notice k = {0};
    char reason[64];
    for (int i = 0; i < KAFKA_NOTICE_MAX + 4; i++) {
        snprintf(reason, sizeof reason, "127.0.0.1:%d/%d: Disconnected", 9000 + i, i);
        cr_assert(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__TRANSPORT, reason));
    }
    cr_assert_not(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__TRANSPORT, reason), "the newest is remembered");
}

Test(kafka_notice, the_coordinator_is_its_broker_address)
{
    /* librdkafka's logical coordinator broker names its role and address. */
    struct kafka_notice k = {0};
    const char *gone = "TxnCoordinator: 127.0.0.1:9092: Disconnected (after 2985ms in state UP)";
    const char *refused = "TxnCoordinator: 127.0.0.1:9092: Connect to ipv4#127.0.0.1:9092 failed: "
                          "Connection refused (after 0ms in state CONNECT)";
    cr_assert(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__TRANSPORT, gone));
    cr_assert_not(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__TRANSPORT, refused));
    /* Another broker up says nothing of this one; its own broker up does. */
    kafka_notice_broker_up(&k, "127.0.0.1:9093/3");
    cr_assert_not(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__TRANSPORT, refused));
    kafka_notice_broker_up(&k, "127.0.0.1:9092/1");
    cr_assert(kafka_notice_error(&k, RD_KAFKA_RESP_ERR__TRANSPORT, refused));
}
