/* stats.c — see stats.h. */
#include "base/stats.h"

#include <string.h>
#include <sys/time.h>
#include <time.h>

/* A batch takes milliseconds to seconds; an event's end-to-end latency from
 * commit to acknowledgement ranges from a millisecond to minutes of backlog. */
static const double batch_bounds[STATS_HIST_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
};
static const double latency_bounds[STATS_HIST_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 120, 600,
};

void stats_init(struct relay_stats *s)
{
    memset(s, 0, sizeof(*s));
    s->batch_duration.bounds = batch_bounds;
    s->delivery_latency.bounds = latency_bounds;
    s->brokers_up = -1;
    s->schema_version = -1;
    s->start_time = stats_now();
    /* The process runs with a configuration that loaded: that counts as
     * the first success, as Prometheus itself reports it. */
    s->reload_ok = true;
    s->reload_time = s->start_time;
}

void stats_count_published(struct relay_stats *s, const char *topic, bool in_txn)
{
    uint64_t *count = NULL;
    for (int i = 0; i < s->n_topics && !count; i++)
        if (!strcmp(s->topics[i].name, topic))
            count = in_txn ? &s->topics[i].unsettled : &s->topics[i].published;
    if (!count && s->n_topics < STATS_MAX_TOPICS && strlen(topic) < sizeof s->topics[0].name) {
        struct stats_topic *t = &s->topics[s->n_topics++];
        memcpy(t->name, topic, strlen(topic) + 1);
        count = in_txn ? &t->unsettled : &t->published;
    }
    if (!count)
        count = in_txn ? &s->unsettled_other : &s->published_other;
    (*count)++;
}

void stats_settle_published(struct relay_stats *s, bool committed)
{
    for (int i = 0; i < s->n_topics; i++) {
        if (committed)
            s->topics[i].published += s->topics[i].unsettled;
        s->topics[i].unsettled = 0;
    }
    if (committed)
        s->published_other += s->unsettled_other;
    s->unsettled_other = 0;
}

void stats_reloaded(struct relay_stats *s, bool ok)
{
    s->reload_ok = ok;
    if (ok)
        s->reload_time = stats_now();
}

void stats_observe(struct stats_histogram *h, double value)
{
    h->count++;
    h->sum += value;
    for (int i = 0; i < STATS_HIST_BUCKETS; i++) {
        if (value <= h->bounds[i]) {
            h->counts[i]++;
            return;
        }
    }
    h->inf++;
}

double stats_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

double stats_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void stats_rate_sample(struct stats_rate *r, double mono, uint64_t count)
{
    if (r->n > 0) {
        int last = (r->next + STATS_RATE_SLOTS - 1) % STATS_RATE_SLOTS;
        if (mono - r->mono[last] < 1.0)
            return;
    }
    r->mono[r->next] = mono;
    r->count[r->next] = count;
    r->next = (r->next + 1) % STATS_RATE_SLOTS;
    if (r->n < STATS_RATE_SLOTS)
        r->n++;
}

double stats_rate_per_second(const struct stats_rate *r, double mono, uint64_t count)
{
    /* The oldest sample still inside the window, walking from the oldest held. */
    for (int k = 0; k < r->n; k++) {
        int i = (r->next + STATS_RATE_SLOTS - r->n + k) % STATS_RATE_SLOTS;
        double span = mono - r->mono[i];
        if (span > STATS_RATE_WINDOW_S + 0.5)
            continue;
        if (span < 1.0 || count < r->count[i])
            return -1;
        return (double)(count - r->count[i]) / span;
    }
    return -1;
}

int64_t stats_backlog_left(const struct relay_stats *s)
{
    if (!s->backlog_known)
        return -1;
    uint64_t since = s->published_total - s->backlog_published;
    return since >= (uint64_t)s->backlog_rows ? 0 : s->backlog_rows - (int64_t)since;
}

double stats_backlog_eta(const struct relay_stats *s, double rate)
{
    int64_t left = stats_backlog_left(s);
    if (left == 0)
        return 0;
    if (left < 0 || rate <= 0)
        return -1;
    return (double)left / rate;
}

bool stats_kafka_waiting(const struct relay_stats *s)
{
    return s->kafka_in_flight > 0 || s->kafka_committing || s->kafka_owed;
}

void stats_kafka_wait_begins(struct relay_stats *s, double mono_now)
{
    if (!stats_kafka_waiting(s))
        s->kafka_ack_clock = mono_now;
}

double stats_ack_wait(const struct relay_stats *s, double mono_now)
{
    if (!stats_kafka_waiting(s) || mono_now <= s->kafka_ack_clock)
        return 0;
    return mono_now - s->kafka_ack_clock;
}

int stats_kafka_denial(const struct relay_stats *s)
{
    return s->kafka_answered ? 0 : s->kafka_denial;
}

bool stats_denial_named(const struct relay_stats *s, int d)
{
    return d > 0 && (s->kafka_denials_named & (1u << d));
}
