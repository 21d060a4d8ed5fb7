/* test_engine.c — the relay's decisions about rows, without PostgreSQL or a
 * broker: what a failed delivery costs the row, what each on_poison policy
 * does, the id range a claim skips, how each row of a batch ends, and the
 * Kafka rules they rest on. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>

#include "core/batch.h"
#include "config/config.h"
#include "core/engine.h"
#include "core/kafka_rules.h"
#include "core/kafka_security.h"

/* ---- a failed delivery ---------------------------------------------------- */

/* Errors of one produce request reach every row in it: none is charged
 * until it fails produced alone; then it is, once. */
Test(engine, a_shared_failure_charges_nobody_until_the_row_fails_alone)
{
    enum kafka_fault faults[] = {KAFKA_FAULT_PERMANENT, KAFKA_FAULT_RETRIABLE};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
        struct failure_verdict shared = engine_judge_failure(faults[i], false);
        cr_assert(shared.suspect && !shared.charged && shared.counted, "fault %d shared", faults[i]);
        struct failure_verdict alone = engine_judge_failure(faults[i], true);
        cr_assert(!alone.suspect && alone.charged && alone.counted, "fault %d alone", faults[i]);
    }
    cr_assert_eq(engine_judge_failure(KAFKA_FAULT_PERMANENT, true).limit, LIMIT_ONE,
                 "a permanent error exhausts the row at once");
    cr_assert_eq(engine_judge_failure(KAFKA_FAULT_RETRIABLE, true).limit, LIMIT_MAX);
    cr_assert(engine_judge_failure(KAFKA_FAULT_PERMANENT, true).permanent);
    cr_assert(!engine_judge_failure(KAFKA_FAULT_RETRIABLE, true).permanent);
}

/* A right refused on the topic costs no row anything, alone or not, and no
 * attempt either (a missing ACL would otherwise dead-letter every row of the
 * topic); it is counted, and asks for the back-off before the next claim. */
Test(engine, a_refused_topic_right_charges_nobody_and_backs_off)
{
    for (int alone = 0; alone <= 1; alone++) {
        struct failure_verdict v = engine_judge_failure(
            kafka_fault_of(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, false), alone);
        cr_assert(!v.charged && !v.suspect && v.counted && v.denied && !v.permanent,
                  "alone=%d: charged %d suspect %d counted %d denied %d", alone, v.charged,
                  v.suspect, v.counted, v.denied);
        cr_assert_eq(v.limit, LIMIT_NONE);
    }
    cr_assert_not(engine_judge_failure(KAFKA_FAULT_OUTAGE, true).denied);
    cr_assert_not(engine_judge_failure(KAFKA_FAULT_RETRIABLE, true).denied);
}

/* An outage and the relay's own failures cost no row anything, alone or not;
 * an outage is still a failed delivery to count, the relay's own is not. */
Test(engine, outages_and_our_own_failures_charge_nobody)
{
    for (int alone = 0; alone <= 1; alone++) {
        struct failure_verdict o = engine_judge_failure(KAFKA_FAULT_OUTAGE, alone);
        cr_assert(!o.charged && !o.suspect && o.counted, "outage, alone=%d", alone);
        struct failure_verdict ours = engine_judge_failure(KAFKA_FAULT_OURS, alone);
        cr_assert(!ours.charged && !ours.suspect && !ours.counted, "ours, alone=%d", alone);
    }
}

/* ---- Kafka's errors ------------------------------------------------------- */

Test(kafka_rules, errors_fall_in_the_right_class)
{
    static const struct {
        rd_kafka_resp_err_t err;
        bool fatal;
        enum kafka_fault want;
    } cases[] = {
        {RD_KAFKA_RESP_ERR__PURGE_QUEUE, false, KAFKA_FAULT_OURS},
        {RD_KAFKA_RESP_ERR__PURGE_INFLIGHT, false, KAFKA_FAULT_OURS},
        {RD_KAFKA_RESP_ERR__FATAL, false, KAFKA_FAULT_OURS},
        {RD_KAFKA_RESP_ERR_PRODUCER_FENCED, false, KAFKA_FAULT_OURS},
        /* The producer's transaction, not the record: never charged to a row. */
        {RD_KAFKA_RESP_ERR_INVALID_TXN_STATE, false, KAFKA_FAULT_OURS},
        {RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS, false, KAFKA_FAULT_OURS},
        {RD_KAFKA_RESP_ERR_INVALID_PRODUCER_ID_MAPPING, false, KAFKA_FAULT_OURS},
        {RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, false, KAFKA_FAULT_OUTAGE},
        {RD_KAFKA_RESP_ERR__TRANSPORT, false, KAFKA_FAULT_OUTAGE},
        {RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, false, KAFKA_FAULT_OUTAGE},
        {RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, false, KAFKA_FAULT_OUTAGE},
        /* After a fatal error, time-outs are its echo: the relay's to recover. */
        {RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, true, KAFKA_FAULT_OURS},
        {RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, false, KAFKA_FAULT_PERMANENT},
        {RD_KAFKA_RESP_ERR_INVALID_RECORD, false, KAFKA_FAULT_PERMANENT},
        {RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP, false, KAFKA_FAULT_PERMANENT},
        /* A missing topic ACL is no row's fault: every row of the topic fails alike. */
        {RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, false, KAFKA_FAULT_DENIED},
        /* The cause of a fatal error stays a suspect: it may be the row's. */
        {RD_KAFKA_RESP_ERR_INVALID_RECORD, true, KAFKA_FAULT_PERMANENT},
        {RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, false, KAFKA_FAULT_RETRIABLE},
        {RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, true, KAFKA_FAULT_RETRIABLE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_eq(kafka_fault_of(cases[i].err, cases[i].fatal), cases[i].want, "%s (fatal=%d)",
                     rd_kafka_err2name(cases[i].err), cases[i].fatal);
}

/* What the guarantees need is refused when set otherwise; what they allow passes. */
/* A refused right is named by what the principal needs, once; other errors
 * are no refusal. */
Test(kafka_rules, authorization_errors_name_the_missing_right)
{
    static const struct {
        int err;
        enum kafka_denial d;
        const char *name, *need;
    } cases[] = {
        {RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KAFKA_DENIAL_TRANSACTIONAL_ID,
         "transactional_id_write", "Write and Describe on the TransactionalId"},
        {RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, KAFKA_DENIAL_TOPIC, "topic_write",
         "Write and Describe on the topic"},
        {RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED, KAFKA_DENIAL_CLUSTER, "idempotent_write",
         "Write and Describe on the topic (brokers without KIP-679: IdempotentWrite on the "
         "cluster)"},
        {RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED, KAFKA_DENIAL_AUTHENTICATION,
         "authentication", "credentials"},
        {RD_KAFKA_RESP_ERR__AUTHENTICATION, KAFKA_DENIAL_AUTHENTICATION, "authentication",
         "credentials"},
        {RD_KAFKA_RESP_ERR__SSL, KAFKA_DENIAL_TLS, "tls", "kafka.ssl.certificate.location"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(kafka_denial_of(cases[i].err), cases[i].d, "%s",
                     rd_kafka_err2name(cases[i].err));
        cr_assert_str_eq(kafka_denial_name(cases[i].d), cases[i].name);
        cr_assert_not_null(strstr(kafka_denial_need(cases[i].d), cases[i].need));
    }
    const int others[] = {0, RD_KAFKA_RESP_ERR__FATAL, RD_KAFKA_RESP_ERR_PRODUCER_FENCED,
                          RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        cr_assert_eq(kafka_denial_of(others[i]), KAFKA_DENIAL_NONE, "%d", others[i]);
    cr_assert_str_eq(kafka_denial_name(KAFKA_DENIAL_NONE), "");
}

Test(kafka_rules, properties_that_break_the_guarantees_are_refused)
{
    static const char *const refused[][2] = {
        {"enable.idempotence", "false"}, {"acks", "1"}, {"request.required.acks", "0"},
        {"max.in.flight.requests.per.connection", "6"}, {"retries", "0"},
        {"transactional.id", "mine"}, {"queuing.strategy", "lifo"},
    };
    static const char *const allowed[][2] = {
        {"enable.idempotence", "true"}, {"acks", "all"}, {"acks", "-1"},
        {"max.in.flight.requests.per.connection", "5"}, {"linger.ms", "20"},
        {"compression.type", "zstd"},
    };
    char err[256];
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        cr_assert_eq(kafka_check_property(refused[i][0], refused[i][1], err, sizeof err), -EINVAL,
                     "%s=%s accepted", refused[i][0], refused[i][1]);
        cr_assert(strstr(err, refused[i][0]), "the error does not name %s: %s", refused[i][0], err);
    }
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        cr_assert_eq(kafka_check_property(allowed[i][0], allowed[i][1], err, sizeof err), 0,
                     "%s=%s refused: %s", allowed[i][0], allowed[i][1], err);
}

/* The relay's own settings pass its own rules, and what it enforces is
 * exactly what the rules would refuse to change. */
Test(kafka_rules, the_relays_settings_obey_its_rules)
{
    size_t n;
    const struct kafka_setting *s = kafka_producer_settings(&n);
    cr_assert_gt(n, 0);
    char err[256];
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(kafka_check_property(s[i].key, s[i].value, err, sizeof err), 0, "%s=%s: %s",
                     s[i].key, s[i].value, err);
    bool idem = false, acks = false;
    for (size_t i = 0; i < n; i++) {
        idem |= !strcmp(s[i].key, "enable.idempotence") && s[i].enforced;
        acks |= !strcmp(s[i].key, "acks") && s[i].enforced;
    }
    cr_assert(idem && acks, "enable.idempotence and acks must be enforced");
    const struct kafka_setting *t = kafka_transaction_settings(&n);
    bool id = false;
    for (size_t i = 0; i < n; i++)
        id |= !strcmp(t[i].key, "transactional.id") && t[i].value == NULL;
    cr_assert(id, "transactional.id comes from the relay");
}

/* ---- poison policies ------------------------------------------------------ */

Test(engine, every_policy_is_one_row_the_config_accepts)
{
    int n = 0;
    for (const char *const *name = poison_policy_names; *name; name++, n++) {
        enum poison_policy p = poison_policy_parse(*name);
        cr_assert_eq((int)p, n, "%s parses to %d", *name, p);
        cr_assert(poison_rules_of(p)->dead_msg, "%s has a row of rules", *name);
        struct relay_config cfg;
        config_init(&cfg);
        char err[256];
        cr_assert_eq(config_set(&cfg, "relay", "on_poison", *name, err, sizeof err), 0, "%s: %s", *name,
                     err);
        config_free(&cfg);
    }
    cr_assert_eq(n, POISON_N);
    cr_assert_eq(poison_policy_parse("skip"), POISON_N);
}

Test(engine, what_each_policy_does)
{
    const struct poison_rules *hold = poison_rules_of(POISON_HOLD_AGGREGATE);
    const struct poison_rules *dl = poison_rules_of(POISON_DEAD_LETTER);
    const struct poison_rules *halt = poison_rules_of(POISON_HALT);
    /* hold_aggregate: dead-letters, and the aggregate waits (claim and in flight). */
    cr_assert(hold->dead_letters && hold->hold_claim && hold->hold_in_flight && !hold->halts);
    /* dead_letter: dead-letters, the aggregate goes on. */
    cr_assert(dl->dead_letters && !dl->hold_claim && !dl->hold_in_flight && !dl->halts);
    /* halt: nothing dead-lettered; nothing after the row overtakes it. */
    cr_assert(!halt->dead_letters && halt->hold_in_flight && halt->halts);
}

/* ---- the id range a claim skips ------------------------------------------- */

Test(engine, spans_of_batches_in_flight)
{
    int64_t a[] = {40, 12, 33}, b[] = {100, 90};
    struct id_span sa = id_span_of(a, 3), sb = id_span_of(b, 2);
    cr_assert(sa.lo == 12 && sa.hi == 40);
    struct id_span both = id_span_union(sa, sb);
    cr_assert(both.lo == 12 && both.hi == 100, "two batches: the claim skips 12..100");
    cr_assert(id_span_is_empty(id_span_of(a, 0)), "a batch cut before its first row spans nothing");
    struct id_span u = id_span_union(id_span_empty(), sb);
    cr_assert(u.lo == 90 && u.hi == 100, "an empty span adds nothing");
    u = id_span_union(sa, id_span_of(a, 0));
    cr_assert(u.lo == 12 && u.hi == 40);
    /* A cut keeps the rows before it: the span shrinks to them. */
    struct id_span cut = id_span_of(a, 2);
    cr_assert(cut.lo == 12 && cut.hi == 40);
    cut = id_span_of(a, 1);
    cr_assert(cut.lo == 40 && cut.hi == 40);
}

/* ---- a batch in flight ---------------------------------------------------- */

static struct batch claimed(int64_t first, int n)
{
    struct batch b = {0};
    cr_assert_eq(batch_reserve(&b, n), 0);
    for (int i = 0; i < n; i++) {
        b.ids[i] = first + i;
        b.created_ms[i] = 1000 + i;
    }
    batch_loaded(&b, n);
    return b;
}

/* Every row ends in exactly one way: delivered ones are marked, failures of
 * their own are charged, and everything else is simply claimed again. */
Test(batch, every_row_ends_in_exactly_one_state)
{
    struct batch b = claimed(100, 6);
    cr_assert(b.span.lo == 100 && b.span.hi == 105);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(batch_row_end(&b, i), ROW_END_CLAIMABLE, "row %d before producing", i);
    b.state[0] = ROW_DELIVERED;
    b.state[1] = ROW_DELIVERED;
    struct failure_verdict own = engine_judge_failure(KAFKA_FAULT_PERMANENT, true);
    struct failure_verdict shared = engine_judge_failure(KAFKA_FAULT_PERMANENT, false);
    struct failure_verdict outage = engine_judge_failure(KAFKA_FAULT_OUTAGE, false);
    cr_assert(batch_row_failed(&b, 2, own.limit, own.charged ? "MSG_SIZE_TOO_LARGE" : NULL));
    cr_assert(!batch_row_failed(&b, 3, shared.limit, shared.charged ? "INVALID_RECORD" : NULL));
    cr_assert(!batch_row_failed(&b, 4, outage.limit, NULL));
    /* row 5: held behind row 2, never produced */
    enum row_end want[] = {ROW_END_SENT, ROW_END_SENT, ROW_END_CHARGED, ROW_END_CLAIMABLE,
                           ROW_END_CLAIMABLE, ROW_END_CLAIMABLE};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(batch_row_end(&b, i), want[i], "row %d", i);
    cr_assert_eq(batch_failures_to_record(&b), 1, "only the row's own failure is recorded");
    cr_assert_eq(batch_first_failure(&b), 2);
    cr_assert_eq(b.limit[2], LIMIT_ONE);
    batch_clear(&b);
    cr_assert(b.phase == PHASE_EMPTY && b.n_rows == 0 && b.reason[2] == NULL);
    batch_free(&b);
}

/* A full producer queue ends a batch early: what it gave back leaves its
 * span, so a concurrent claim may not skip past those rows. */
Test(batch, a_cut_gives_its_rows_back_to_the_next_claim)
{
    struct batch a = claimed(1, 10), b = claimed(11, 10);
    struct id_span skip = id_span_union(a.span, b.span);
    cr_assert(skip.lo == 1 && skip.hi == 20);
    batch_cut_at(&a, 4); /* rows 5..10 stay unsent */
    cr_assert(a.span.lo == 1 && a.span.hi == 4);
    batch_cut_at(&b, 0); /* nothing of b was produced */
    cr_assert(id_span_is_empty(b.span));
    skip = id_span_union(a.span, b.span);
    cr_assert(skip.lo == 1 && skip.hi == 4, "the next claim sees rows 5..20 again");
    batch_free(&a);
    batch_free(&b);
}

/* hold_aggregate: a failed row of an aggregate holds its later rows, in its
 * own batch and in the other one in flight. */
Test(batch, a_failed_row_holds_its_aggregate_across_batches)
{
    struct batch bs[2] = {claimed(1, 3), claimed(4, 3)};
    cr_assert(!batch_holds(bs, 2, "order\x1f" "7"));
    batch_row_failed(&bs[0], 1, LIMIT_MAX, "UNKNOWN_TOPIC_OR_PART");
    bs[0].agg[1] = strdup("order\x1f" "7");
    cr_assert(batch_holds(bs, 2, "order\x1f" "7"), "held from the batch of the failure");
    cr_assert(!batch_holds(bs, 2, "order\x1f" "8"), "another aggregate goes on");
    /* held in the second batch too: its own later rows wait as well */
    bs[1].agg[0] = strdup("order\x1f" "9");
    cr_assert(batch_holds(bs, 2, "order\x1f" "9"));
    batch_clear(&bs[0]);
    cr_assert(!batch_holds(bs, 2, "order\x1f" "7"), "released once its batch is done");
    batch_free(&bs[0]);
    batch_free(&bs[1]);
}

/* A reason cut short inside a UTF-8 character would make the failure record
 * itself fail (last_error is text): it ends at a character boundary. */
Test(batch, a_reason_cut_inside_a_character_is_trimmed)
{
    struct batch b = claimed(1, 1);
    char why[8] = "abc\xc3\xa9";  /* "abcé" */
    why[4] = '\0';                /* cut after the lead byte */
    batch_row_failed(&b, 0, LIMIT_MAX, why);
    cr_assert_str_eq(b.reason[0], "abc");
    batch_row_failed(&b, 0, LIMIT_MAX, "abc\xc3\xa9");
    cr_assert_str_eq(b.reason[0], "abc\xc3\xa9", "a whole character stays");
    batch_free(&b);
}

/* librdkafka's TLS failures, as it words them with OpenSSL 3 against Kafka
 * 3.9 (read in the relay's logs of test_kafka_tls): each gets the settings
 * to check; other errors get none. */
Test(kafka_rules, tls_failures_name_the_settings_to_check)
{
    static const struct {
        const char *reason, *names;
    } cases[] = {
        {"ssl://localhost:38837/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
         "certificate verify failed: broker certificate could not be verified",
         "does not name the host"},
        {"ssl://127.0.0.1:38837/bootstrap: Receive failed: error:0A000416:SSL routines::sslv3 "
         "alert certificate unknown: SSL alert number 46", "expired, or not from a CA"},
        {"ssl://127.0.0.1:38837/bootstrap: Receive failed: error:0A000412:SSL routines::sslv3 "
         "alert bad certificate: SSL alert number 42", "requires a client certificate"},
        {"tlsv13 alert certificate required", "requires a client certificate"},
        {"tlsv13 alert certificate required", "not from a CA the broker trusts"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *hint = kafka_tls_hint(cases[i].reason);
        cr_assert(hint && strstr(hint, cases[i].names), "%s: %s", cases[i].reason,
                  hint ? hint : "(none)");
        cr_assert(strstr(hint, "kafka.ssl."), "%s", hint);
    }
    cr_assert_null(kafka_tls_hint("1/1 brokers are down"));
    cr_assert_null(kafka_tls_hint(NULL));
    /* the broker's alert after a TLS 1.3 handshake: a failed receive */
    cr_assert_eq(kafka_denial_of_event(RD_KAFKA_RESP_ERR__TRANSPORT,
                                       "ssl://127.0.0.1:9093/bootstrap: Receive failed: "
                                       "error:0A000416:SSL routines::sslv3 alert certificate "
                                       "unknown: SSL alert number 46"),
                 KAFKA_DENIAL_TLS);
    cr_assert_eq(kafka_denial_of_event(RD_KAFKA_RESP_ERR__SSL, "SSL handshake failed"),
                 KAFKA_DENIAL_TLS);
    cr_assert_eq(kafka_denial_of_event(RD_KAFKA_RESP_ERR__TRANSPORT,
                                       "127.0.0.1:9092/1: Disconnected"),
                 KAFKA_DENIAL_NONE);
    cr_assert_eq(kafka_denial_of_event(RD_KAFKA_RESP_ERR__AUTHENTICATION, "x"),
                 KAFKA_DENIAL_AUTHENTICATION);
}

static const char *one_mechanism(const char *key, void *arg)
{
    return !strcmp(key, "sasl.mechanism") ? arg : NULL;
}

/* Kafka 4 refuses the SCRAM proof of librdkafka before 2.6.1 as invalid
 * credentials: a refused SCRAM login on such a library says so. */
Test(kafka_rules, a_refused_scram_login_on_an_old_librdkafka_names_kafka_4)
{
    const char *hint = kafka_scram_hint(one_mechanism, "SCRAM-SHA-512", 0x020002ff); /* 2.0.2 */
    cr_assert(hint && strstr(hint, "Kafka 4") && strstr(hint, "2.6.1"), "%s", hint ? hint : "(none)");
    cr_assert_not_null(kafka_scram_hint(one_mechanism, "scram-sha-256", 0x020600ff)); /* 2.6.0 */
    cr_assert_null(kafka_scram_hint(one_mechanism, "SCRAM-SHA-512", 0x020601ff));     /* 2.6.1 */
    cr_assert_null(kafka_scram_hint(one_mechanism, "SCRAM-SHA-512", 0x020800ff));     /* 2.8.0 */
    cr_assert_null(kafka_scram_hint(one_mechanism, "PLAIN", 0x020002ff));
    cr_assert_null(kafka_scram_hint(one_mechanism, NULL, 0x020002ff));
}
