/* test_engine.c — the relay's decisions about rows, without PostgreSQL or a
 * broker: what a failed delivery costs the row, what each on_poison policy
 * does, the id range a claim skips, and the Kafka rules they rest on. */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>

#include "config.h"
#include "engine.h"
#include "kafka_rules.h"

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
        {RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, false, KAFKA_FAULT_OUTAGE},
        {RD_KAFKA_RESP_ERR__TRANSPORT, false, KAFKA_FAULT_OUTAGE},
        {RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, false, KAFKA_FAULT_OUTAGE},
        {RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, false, KAFKA_FAULT_OUTAGE},
        /* After a fatal error, time-outs are its echo: the relay's to recover. */
        {RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, true, KAFKA_FAULT_OURS},
        {RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, false, KAFKA_FAULT_PERMANENT},
        {RD_KAFKA_RESP_ERR_INVALID_RECORD, false, KAFKA_FAULT_PERMANENT},
        {RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, false, KAFKA_FAULT_PERMANENT},
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
        cr_assert_str_eq(poison_rules_of(p)->name, *name);
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
