/* Unit tests of relay/base/stats.c: the publish rate over the last minute from
 * per-second samples, the backlog's estimate and ETA, and the counts by topic. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/stats.h"

Test(stats, rate_unknown_before_a_second_of_samples)
{
    struct stats_rate r;
    memset(&r, 0, sizeof(r));
    cr_assert_lt(stats_rate_per_second(&r, 100.0, 0), 0);
    stats_rate_sample(&r, 100.0, 0);
    cr_assert_lt(stats_rate_per_second(&r, 100.5, 50), 0);
    cr_assert_float_eq(stats_rate_per_second(&r, 102.0, 200), 100.0, 1e-9);
}

Test(stats, rate_samples_at_most_once_a_second)
{
    struct stats_rate r;
    memset(&r, 0, sizeof(r));
    stats_rate_sample(&r, 10.0, 0);
    stats_rate_sample(&r, 10.4, 40);
    stats_rate_sample(&r, 10.9, 90);
    cr_assert_eq(r.n, 1);
    stats_rate_sample(&r, 11.0, 100);
    cr_assert_eq(r.n, 2);
}

/* A burst long ago does not count: only the last minute does. */
Test(stats, rate_covers_the_last_minute_only)
{
    struct stats_rate r;
    memset(&r, 0, sizeof(r));
    uint64_t count = 0;
    for (int t = 0; t <= 200; t++) {
        if (t < 100)
            count += 1000; /* 1000 rows/s for 100 s, then nothing */
        stats_rate_sample(&r, t, count);
    }
    cr_assert_eq(r.n, STATS_RATE_SLOTS);
    cr_assert_float_eq(stats_rate_per_second(&r, 200.0, count), 0.0, 1e-9);
    /* 30 s into a rate of 10 rows/s after that: 300 rows over the 60 s window. */
    for (int t = 201; t <= 230; t++) {
        count += 10;
        stats_rate_sample(&r, t, count);
    }
    cr_assert_float_eq(stats_rate_per_second(&r, 230.0, count), 300.0 / 60.0, 1e-9);
}

Test(stats, backlog_left_and_eta)
{
    struct relay_stats s;
    stats_init(&s);
    cr_assert_eq(stats_backlog_left(&s), -1);
    cr_assert_lt(stats_backlog_eta(&s, 100), 0);

    s.published_total = 1000;
    s.backlog_known = true;
    s.backlog_rows = 5000;
    s.backlog_published = s.published_total;
    cr_assert_eq(stats_backlog_left(&s), 5000);
    cr_assert_float_eq(stats_backlog_eta(&s, 1000), 5.0, 1e-9);
    cr_assert_lt(stats_backlog_eta(&s, 0), 0, "no rate: no ETA");

    /* 3 s later, 3000 rows published since the measurement. */
    s.published_total += 3000;
    cr_assert_eq(stats_backlog_left(&s), 2000);
    cr_assert_float_eq(stats_backlog_eta(&s, 1000), 2.0, 1e-9);

    /* More published than measured (rows written since): nothing left to estimate. */
    s.published_total += 9000;
    cr_assert_eq(stats_backlog_left(&s), 0);
    cr_assert_float_eq(stats_backlog_eta(&s, 0), 0.0, 1e-9);
}

/* Rows of a Kafka transaction count by topic once it committed, as the total
 * does; an aborted one's rows are produced again and counted then. */
Test(stats, published_by_topic_counts_committed_transactions_only)
{
    struct relay_stats st;
    stats_init(&st);
    stats_count_published(&st, "orders", false);
    stats_count_published(&st, "orders", true);
    stats_count_published(&st, "orders", true);
    cr_assert_eq(st.topics[0].published, 1, "acknowledged in an open transaction: not yet");
    stats_settle_published(&st, false);
    cr_assert_eq(st.topics[0].published, 1, "aborted: not counted");
    stats_count_published(&st, "orders", true);
    stats_count_published(&st, "payments", true);
    stats_settle_published(&st, true);
    cr_assert_eq(st.topics[0].published, 2);
    cr_assert_eq(st.topics[1].published, 1);
    cr_assert_eq(st.topics[0].unsettled + st.topics[1].unsettled, 0);
}

/* The wait on Kafka, as producer.c keeps it across a producer's replacement. */
Test(stats, a_replaced_producer_does_not_restart_the_wait_on_kafka)
{
    struct relay_stats s;
    stats_init(&s);
    stats_kafka_wait_begins(&s, 100.0); /* the first message out */
    s.kafka_in_flight = 20;
    cr_assert_float_eq(stats_ack_wait(&s, 112.0), 12.0, 1e-9);

    /* Replaced (producer_start): its messages gone, not answered. */
    s.kafka_owed = stats_kafka_waiting(&s);
    s.kafka_in_flight = 0;
    cr_assert_float_eq(stats_ack_wait(&s, 113.0), 13.0, 1e-9, "the wait ended with the instance");
    stats_kafka_wait_begins(&s, 114.0); /* the new instance's init, or its first message */
    s.kafka_in_flight = 20;
    cr_assert_float_eq(stats_ack_wait(&s, 115.0), 15.0, 1e-9, "the wait restarted with the new instance");

    /* Answered: nothing owed; the next wait starts afresh. */
    s.kafka_owed = false;
    s.kafka_in_flight = 0;
    cr_assert_float_eq(stats_ack_wait(&s, 116.0), 0.0, 1e-9);
    stats_kafka_wait_begins(&s, 117.0);
    s.kafka_in_flight = 1;
    cr_assert_float_eq(stats_ack_wait(&s, 118.0), 1.0, 1e-9);
}
