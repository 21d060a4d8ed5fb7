/* http_metrics.c — /metrics: relay_stats in the Prometheus text exposition
 * format 0.0.4.
 *
 * Names follow the Prometheus conventions: outbox_relay_ prefix, base units
 * (seconds, bytes), _total for counters. The process_* metrics keep the
 * names every Prometheus client library uses (no prefix), so dashboards and
 * alerts written for them work unchanged. */
#include "daemon/http_metrics.h"

#include <dirent.h>
#include <stddef.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "build_config.h"
#include "core/kafka_rules.h"
#include "core/server_watch.h"
#include "daemon/health.h"

const int http_status_codes[HTTP_STATUS_CODES] = {200, 400, 404, 405, 431, 500, 503, 505};

void http_server_count(struct http_server_stats *st, int code)
{
    st->requests_total++;
    int i = 0;
    while (i < HTTP_STATUS_CODES && http_status_codes[i] != code)
        i++;
    st->by_code[i]++;
}

static void head(struct strbuf *out, const char *name, const char *type, const char *help)
{
    strbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* %.17g round-trips a double; Prometheus parses any Go float syntax. */
static void gauge(struct strbuf *out, const char *name, const char *help, double v)
{
    head(out, name, "gauge", help);
    strbuf_printf(out, "%s %.17g\n", name, v);
}

static void counter(struct strbuf *out, const char *name, const char *help, uint64_t v)
{
    head(out, name, "counter", help);
    strbuf_printf(out, "%s %" PRIu64 "\n", name, v);
}

static void histogram(struct strbuf *out, const char *name, const char *help,
                      const struct stats_histogram *h)
{
    head(out, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < STATS_HIST_BUCKETS; i++) {
        cum += h->counts[i];
        /* %g keeps the bounds as written (0.0025, not 0.0025000000000000001). */
        strbuf_printf(out, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, h->bounds[i], cum);
    }
    strbuf_printf(out, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, h->count);
    strbuf_printf(out, "%s_sum %.17g\n", name, h->sum);
    strbuf_printf(out, "%s_count %" PRIu64 "\n", name, h->count);
}

/* A label value: backslash, double quote and newline escaped. */
static void label_value(struct strbuf *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            strbuf_printf(out, "\\%c", *s);
        else if (*s == '\n')
            strbuf_printf(out, "\\n");
        else
            strbuf_printf(out, "%c", *s);
    }
}

/* ---- the process, from the kernel: cheap enough for every scrape -------- */

static void process_metrics(const struct relay_stats *s, struct strbuf *out)
{
    gauge(out, "process_start_time_seconds", "Start time of the process since the unix epoch.",
          s->start_time);

    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                     (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
        head(out, "process_cpu_seconds_total", "counter", "User and system CPU time spent.");
        strbuf_printf(out, "process_cpu_seconds_total %.6f\n", cpu);
    }

    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        unsigned long size = 0, resident = 0;
        long page = sysconf(_SC_PAGESIZE);
        if (fscanf(f, "%lu %lu", &size, &resident) == 2 && page > 0) {
            gauge(out, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
                  (double)size * (double)page);
            gauge(out, "process_resident_memory_bytes", "Resident memory size in bytes.",
                  (double)resident * (double)page);
        }
        fclose(f);
    }

    DIR *d = opendir("/proc/self/fd");
    if (d) {
        long n = 0;
        while (readdir(d))
            n++;
        closedir(d);
        /* ".", ".." and the directory's own descriptor are not the process's. */
        gauge(out, "process_open_fds", "Number of open file descriptors.", (double)(n - 3));
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        gauge(out, "process_max_fds", "Maximum number of open file descriptors.",
              (double)rl.rlim_cur);
}

/* ---- the periodic verify ([verify] interval), when enabled -------------- */

static void verify_metrics(const struct stats_verify *v, struct strbuf *out)
{
    if (!v->enabled)
        return;
    counter(out, "outbox_relay_verify_runs_total", "Periodic verify runs finished.", v->runs_total);
    counter(out, "outbox_relay_verify_errors_total",
            "Periodic verify runs that could not finish (PostgreSQL or Kafka unreachable).",
            v->errors_total);
    gauge(out, "outbox_relay_verify_last_run_timestamp_seconds",
          "When the last periodic verify finished, since the unix epoch (0 = none yet).",
          v->last_time);
    gauge(out, "outbox_relay_verify_last_run_duration_seconds",
          "How long the last periodic verify took.", v->last_duration);
    /* Absent until a run finished: 0 would claim a clean check. */
    static const struct {
        const char *name, *help;
        size_t off;
    } figures[] = {
        {"outbox_relay_verify_missing_rows",
         "Rows marked sent that Kafka does not hold, in the last verify window.",
         offsetof(struct stats_verify, missing)},
        {"outbox_relay_verify_duplicate_events",
         "Event ids delivered more than once, in the last verify window.",
         offsetof(struct stats_verify, duplicates)},
        {"outbox_relay_verify_out_of_order_aggregates",
         "Aggregates whose first deliveries are not in id order, in the last verify window.",
         offsetof(struct stats_verify, out_of_order)},
        {"outbox_relay_verify_mismatched_messages",
         "Messages whose key, value or headers differ from their row, in the last verify window.",
         offsetof(struct stats_verify, mismatched)},
        {"outbox_relay_verify_unknown_messages",
         "Messages of the last verify window whose event_id no row has (e.g. after retention).",
         offsetof(struct stats_verify, unknown)},
        {"outbox_relay_verify_rows", "Rows in the last verify window.",
         offsetof(struct stats_verify, rows)},
    };
    for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++) {
        head(out, figures[i].name, "gauge", figures[i].help);
        if (v->have_result)
            strbuf_printf(out, "%s %" PRIu64 "\n", figures[i].name,
                          *(const uint64_t *)((const char *)v + figures[i].off));
    }
}

/* ---- relay.capture = wal: the replication slot and the stream ----------- */

/* The slot is lost when PostgreSQL says so (max_slot_wal_keep_size passed)
 * or when a query has run and did not find it. */
static bool slot_lost(const struct stats_slot *sl)
{
    return !strcmp(sl->wal_status, "lost") || (sl->query_time > 0 && !sl->known);
}

/* Only in wal mode, so poll mode's exposition stays as it was. LSNs are
 * printed as integers: a double would round them past 2^53 bytes of WAL.
 * What pg_replication_slots says is absent until a query found the slot. */
static void slot_metrics(const struct stats_slot *sl, struct strbuf *out)
{
    if (!sl->enabled)
        return;
    gauge(out, "outbox_relay_slot_streaming",
          "1 while this relay reads the replication slot (START_REPLICATION answered).",
          sl->streaming ? 1 : 0);
    head(out, "outbox_relay_slot_confirmed_lsn_bytes", "gauge",
         "The LSN this relay last confirmed to PostgreSQL (reported flushed), as a byte position.");
    strbuf_printf(out, "outbox_relay_slot_confirmed_lsn_bytes %" PRIu64 "\n", sl->flushed_lsn);
    gauge(out, "outbox_relay_slot_lag_seconds",
          "Seconds since the commit of the oldest transaction read and not yet confirmed (0 when "
          "none waits).",
          sl->lag_seconds);
    gauge(out, "outbox_relay_slot_lost",
          "1 when the replication slot is lost (wal_status lost) or the last query did not find it.",
          slot_lost(sl) ? 1 : 0);
    counter(out, "outbox_relay_slot_transactions_total",
            "Source transactions relayed from the slot and confirmed.", sl->transactions_total);
    counter(out, "outbox_relay_slot_heartbeats_total",
            "Heartbeat messages written so that the slot moves on an idle database.",
            sl->heartbeats_total);
    counter(out, "outbox_relay_slot_recoveries_total",
            "Failovers whose gap the relay closed (relay.slot_recovery = reconcile).",
            sl->recoveries_total);
    counter(out, "outbox_relay_slot_recovered_events_total",
            "Rows those recoveries published because Kafka did not hold them.",
            sl->recovered_events_total);
    gauge(out, "outbox_relay_slot_last_recovery_timestamp_seconds",
          "When the last recovery ended, since the unix epoch (0 = none).", sl->last_recovery_time);
    gauge(out, "outbox_relay_slot_last_recovery_events",
          "Rows the last recovery published.", (double)sl->last_recovery_events);
    bool known = sl->query_time > 0 && sl->known;
    head(out, "outbox_relay_slot_active", "gauge",
         "1 while a walsender uses the replication slot (pg_replication_slots.active).");
    if (known)
        strbuf_printf(out, "outbox_relay_slot_active %d\n", sl->active ? 1 : 0);
    head(out, "outbox_relay_slot_retained_wal_bytes", "gauge",
         "WAL PostgreSQL keeps for the replication slot: current WAL LSN - restart_lsn.");
    if (known)
        strbuf_printf(out, "outbox_relay_slot_retained_wal_bytes %" PRId64 "\n",
                      sl->retained_bytes);
    head(out, "outbox_relay_slot_lag_bytes", "gauge",
         "WAL written since the slot's confirmed_flush_lsn: current WAL LSN - confirmed_flush_lsn.");
    if (known)
        strbuf_printf(out, "outbox_relay_slot_lag_bytes %" PRId64 "\n", sl->lag_bytes);
    head(out, "outbox_relay_slot_wal_status", "gauge",
         "Always 1; the label is pg_replication_slots.wal_status (reserved, extended, unreserved, "
         "lost).");
    if (known && sl->wal_status[0]) {
        strbuf_printf(out, "outbox_relay_slot_wal_status{status=\"");
        label_value(out, sl->wal_status);
        strbuf_printf(out, "\"} 1\n");
    }
}

/* ---- the PostgreSQL server and the connection to it ---------------------- */

/* Which server, what happened to the connection: an alert on how long it has
 * been down, a panel of failovers. The identity is absent until read. */
static void server_metrics_pg(const struct stats_server *sv, double now, struct strbuf *out)
{
    head(out, "outbox_relay_postgres_server_info", "gauge",
         "Always 1; the labels name the PostgreSQL server of the session (host and port it "
         "connected to, system identifier).");
    if (sv->connected_since > 0) {
        strbuf_printf(out, "outbox_relay_postgres_server_info{host=\"");
        label_value(out, sv->host);
        strbuf_printf(out, "\",port=\"");
        label_value(out, sv->port);
        strbuf_printf(out, "\",system_identifier=\"");
        label_value(out, sv->system_id);
        strbuf_printf(out, "\"} 1\n");
    }
    head(out, "outbox_relay_postgres_timeline", "gauge",
         "The timeline of the session's server (it grows by one at each promotion).");
    if (sv->timeline)
        strbuf_printf(out, "outbox_relay_postgres_timeline %u\n", sv->timeline);
    counter(out, "outbox_relay_postgres_failovers_total",
            "Failovers seen: a session's server on a later timeline of the same system.",
            sv->failovers_total);
    gauge(out, "outbox_relay_postgres_last_failover_timestamp_seconds",
          "When the last failover was seen, since the unix epoch (0 = none).",
          sv->last_failover_time);
    counter(out, "outbox_relay_postgres_reconnect_attempts_total",
            "Connects tried without a session (each a round of the conninfo's hosts).",
            sv->reconnect_attempts_total);
    gauge(out, "outbox_relay_postgres_disconnected_seconds",
          "Seconds without a PostgreSQL session (0 while connected).",
          server_watch_down_for(sv, now));
    gauge(out, "outbox_relay_postgres_stale_primary",
          "1 while the session's server is an old primary on an earlier timeline than one this "
          "relay saw (split brain): nothing is relayed from it.",
          sv->problem[0] ? 1 : 0);
}

/* ---- what runs, and in which state -------------------------------------- */

static void build_info(struct strbuf *out)
{
    head(out, "outbox_relay_build_info", "gauge",
         "Always 1; the labels say which build runs.");
    strbuf_printf(out, "outbox_relay_build_info{version=\"");
    label_value(out, OUTBOX_RELAY_VERSION);
    strbuf_printf(out, "\",librdkafka=\"");
    label_value(out, rd_kafka_version_str());
    strbuf_printf(out, "\"} 1\n");
}

static void state_metrics(const struct http_context *ctx, struct strbuf *out)
{
    const struct relay_stats *s = ctx->stats;
    gauge(out, "outbox_relay_config_last_reload_success",
          "1 if the last configuration reload (SIGHUP) succeeded, or none was tried.",
          s->reload_ok ? 1 : 0);
    gauge(out, "outbox_relay_config_last_reload_success_timestamp_seconds",
          "When the configuration was last loaded successfully (start or SIGHUP), since the "
          "unix epoch.",
          s->reload_time);
    gauge(out, "outbox_relay_ready", "1 when every readiness check of /readyz passes.",
          health_ready(s, ctx->cfg, ctx->mono_now, NULL) ? 1 : 0);
    gauge(out, "outbox_relay_leader", "1 while this relay holds the leader lock.",
          s->role == STATS_ROLE_LEADER ? 1 : 0);
    gauge(out, "outbox_relay_standby_stalled",
          "1 while this relay stands by and rows have waited relay.standby_stall_timeout with no "
          "leader marking or deleting any.",
          s->role == STATS_ROLE_STANDBY && s->standby_stalled ? 1 : 0);
    gauge(out, "outbox_relay_postgres_up", "1 while the PostgreSQL connection is up.",
          s->pg_up ? 1 : 0);
    gauge(out, "outbox_relay_quiet",
          "1 while the relay holds the quiet lock: claiming one batch after another, it needs no "
          "NOTIFY, and writers send none.",
          s->quiet ? 1 : 0);
    gauge(out, "outbox_relay_halted",
          "1 after on_poison=halt stopped relaying (a restart is needed).", s->halted ? 1 : 0);
    gauge(out, "outbox_relay_refused",
          "1 after relaying was refused: a pooled session or row-level security (a restart is "
          "needed).",
          s->refused ? 1 : 0);
    gauge(out, "outbox_relay_row_security",
          "1 while row-level security hides rows from the relay (allowed by "
          "relay.allow_row_security): the backlog metrics are then absent.",
          s->row_security ? 1 : 0);
}

static void kafka_metrics(const struct http_context *ctx, struct strbuf *out)
{
    const struct relay_stats *s = ctx->stats;
    gauge(out, "outbox_relay_kafka_brokers_up", "Kafka brokers in state UP.",
          s->brokers_up > 0 ? s->brokers_up : 0);
    gauge(out, "outbox_relay_kafka_brokers", "Kafka brokers known from the cluster metadata.",
          s->brokers_total);
    gauge(out, "outbox_relay_producer_queue_messages",
          "Messages in the producer's queues, not yet acknowledged.",
          (double)s->producer_queue_msgs);
    gauge(out, "outbox_relay_kafka_in_flight_messages",
          "Messages produced and not yet acknowledged or failed.", (double)s->kafka_in_flight);
    gauge(out, "outbox_relay_kafka_ack_wait_seconds",
          "Seconds since the last acknowledgement while messages are in flight or a commit "
          "waits (0 when neither).",
          stats_ack_wait(s, ctx->mono_now));
    gauge(out, "outbox_relay_producer_fatal",
          "1 while the producer is in a fatal state (it is then replaced).",
          s->producer_fatal ? 1 : 0);
    /* One series per right, so that an alert can name the one refused. */
    head(out, "outbox_relay_kafka_denied", "gauge",
         "1 while Kafka refuses the relay's principal this right (a missing ACL, bad "
         "credentials); the producer is retried with a back-off of up to a minute.");
    int denied = stats_kafka_denial(s);
    for (int d = KAFKA_DENIAL_AUTHENTICATION; d < KAFKA_DENIAL_COUNT; d++)
        strbuf_printf(out, "outbox_relay_kafka_denied{right=\"%s\"} %d\n",
                      kafka_denial_name((enum kafka_denial)d), denied == d);
}

/* ---- rows and batches ---------------------------------------------------- */

static void event_metrics(const struct relay_stats *s, struct strbuf *out)
{
    counter(out, "outbox_relay_events_published_total",
            "Outbox rows acknowledged by Kafka.", s->published_total);
    head(out, "outbox_relay_events_published_by_topic_total", "counter",
         "Outbox rows acknowledged by Kafka, by topic (the first " STATS_MAX_TOPICS_TEXT
         " topics; the rest as topic=\"" STATS_TOPIC_OTHER "\").");
    for (int i = 0; i < s->n_topics; i++) {
        strbuf_printf(out, "outbox_relay_events_published_by_topic_total{topic=\"");
        label_value(out, s->topics[i].name);
        strbuf_printf(out, "\"} %" PRIu64 "\n", s->topics[i].published);
    }
    if (s->published_other)
        strbuf_printf(out,
                      "outbox_relay_events_published_by_topic_total{topic=\"" STATS_TOPIC_OTHER
                      "\"} %" PRIu64 "\n",
                      s->published_other);
    head(out, "outbox_relay_events_failed_total", "counter",
         "Outbox rows that failed, by reason: invalid (before producing), permanent or "
         "retriable (Kafka's verdict).");
    static const char *const reasons[STATS_FAIL_NREASONS] = {"invalid", "permanent", "retriable"};
    for (int i = 0; i < STATS_FAIL_NREASONS; i++)
        strbuf_printf(out, "outbox_relay_events_failed_total{reason=\"%s\"} %" PRIu64 "\n",
                      reasons[i], s->failed_total[i]);
    counter(out, "outbox_relay_events_dead_lettered_total",
            "Outbox rows this process moved to the dead letter state.", s->dead_total);
}

static void batch_metrics(const struct relay_stats *s, struct strbuf *out)
{
    counter(out, "outbox_relay_transactions_aborted_total",
            "Kafka transactions aborted (relay.fencing=transactional); their rows are produced again.",
            s->txn_aborted_total);
    counter(out, "outbox_relay_producer_stalls_total",
            "Kafka producers replaced because their transaction waited on a broker that stopped "
            "answering, or behind a commit its coordinator could not complete; their rows are "
            "produced again.",
            s->producer_stalled_total);
    counter(out, "outbox_relay_batches_total", "Batches claimed, produced and marked.",
            s->batches_total);
    histogram(out, "outbox_relay_batch_duration_seconds",
              "Time from claiming a batch to its marks being written.", &s->batch_duration);
    histogram(out, "outbox_relay_delivery_latency_seconds",
              "Time from a row's created_at to Kafka's acknowledgement.", &s->delivery_latency);
    gauge(out, "outbox_relay_last_batch_rows", "Rows in the last completed batch.",
          s->last_batch_rows);
    gauge(out, "outbox_relay_last_batch_timestamp_seconds",
          "When the last batch completed, since the unix epoch (0 = none yet).",
          s->last_batch_time);
}

/* The backlog comes from a query every few seconds; before the first one
 * there is no number to give, and 0 would claim an empty table. */
static void backlog_metrics(const struct http_context *ctx, struct strbuf *out)
{
    const struct relay_stats *s = ctx->stats;
    head(out, "outbox_relay_backlog_rows", "gauge", "Outbox rows not yet sent (dead rows excluded).");
    if (s->backlog_known)
        strbuf_printf(out, "outbox_relay_backlog_rows %" PRId64 "\n", s->backlog_rows);
    head(out, "outbox_relay_oldest_unsent_age_seconds", "gauge",
         "Age of the oldest unsent row (0 when there is none).");
    if (s->backlog_known)
        strbuf_printf(out, "outbox_relay_oldest_unsent_age_seconds %.17g\n",
                      health_oldest_unsent_age(s, ctx->now));
    head(out, "outbox_relay_dead_rows", "gauge",
         "Dead-lettered rows in the table that were never sent.");
    if (s->backlog_known)
        strbuf_printf(out, "outbox_relay_dead_rows %" PRId64 "\n", s->dead_rows);
    head(out, "outbox_relay_backlog_timestamp_seconds", "gauge",
         "When the backlog figures were measured, since the unix epoch.");
    if (s->backlog_known)
        strbuf_printf(out, "outbox_relay_backlog_timestamp_seconds %.17g\n", s->backlog_time);
}

/* ---- the status endpoint itself ------------------------------------------ */

static void server_metrics(const struct http_server_stats *h, struct strbuf *out)
{
    gauge(out, "outbox_relay_http_connections", "Open connections to the status endpoint.",
          h->connections);
    counter(out, "outbox_relay_http_connections_total",
            "Connections accepted by the status endpoint.", h->connections_total);
    counter(out, "outbox_relay_http_connections_rejected_total",
            "Connections closed at once for lack of memory.", h->rejected_total);
    counter(out, "outbox_relay_http_connections_evicted_total",
            "Connections closed to make room for a new one at the connection cap: the oldest "
            "that had its answer or had not sent its request.", h->evicted_total);
    counter(out, "outbox_relay_http_timeouts_total",
            "Connections closed because the client was idle or too slow.", h->timeouts_total);
    head(out, "outbox_relay_http_requests_total", "counter",
         "Responses sent by the status endpoint, by status code.");
    for (int i = 0; i <= HTTP_STATUS_CODES; i++) {
        if (i < HTTP_STATUS_CODES)
            strbuf_printf(out, "outbox_relay_http_requests_total{code=\"%d\"} %" PRIu64 "\n",
                          http_status_codes[i], h->by_code[i]);
        else if (h->by_code[i])
            strbuf_printf(out, "outbox_relay_http_requests_total{code=\"other\"} %" PRIu64 "\n",
                          h->by_code[i]);
    }
}

void http_metrics(const struct http_context *ctx, struct strbuf *out)
{
    const struct relay_stats *s = ctx->stats;
    build_info(out);
    process_metrics(s, out);
    state_metrics(ctx, out);
    server_metrics_pg(&s->server, ctx->now, out);
    kafka_metrics(ctx, out);
    event_metrics(s, out);
    batch_metrics(s, out);
    backlog_metrics(ctx, out);
    verify_metrics(&s->verify, out);
    slot_metrics(&s->slot, out);
    if (ctx->server)
        server_metrics(ctx->server, out);
}
