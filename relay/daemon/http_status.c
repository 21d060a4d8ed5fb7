/* http_status.c — /status: relay_stats as one JSON document, a section per
 * part of the relay. See http_status.h. */
#include "daemon/http_status.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <time.h>

#include "build_config.h"
#include "core/kafka_rules.h"
#include "core/pg_failure.h"
#include "core/pgoutput.h"
#include "core/server_watch.h"
#include "daemon/health.h"

/* Durations and ages are given to the millisecond. */
static double ms_round(double seconds)
{
    return round(seconds * 1000) / 1000;
}

/* RFC 3339 UTC with milliseconds; "" for 0 (never). */
static void rfc3339(double t, char *buf, size_t len)
{
    if (t <= 0) {
        snprintf(buf, len, "%s", "");
        return;
    }
    time_t secs = (time_t)t;
    struct tm tm;
    gmtime_r(&secs, &tm);
    unsigned ms = (unsigned)((t - (double)secs) * 1000.0) % 1000;
    snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

/* Adds "name": "<RFC 3339>" or null. */
static void add_time(cJSON *obj, const char *name, double t)
{
    char buf[64];
    rfc3339(t, buf, sizeof(buf));
    if (*buf)
        cJSON_AddStringToObject(obj, name, buf);
    else
        cJSON_AddNullToObject(obj, name);
}

/* Adds name: value, or null when @p present is false. */
static void add_number_or_null(cJSON *obj, const char *name, bool present, double value)
{
    if (present)
        cJSON_AddNumberToObject(obj, name, value);
    else
        cJSON_AddNullToObject(obj, name);
}

static void add_string_or_null(cJSON *obj, const char *name, const char *value)
{
    if (value && *value)
        cJSON_AddStringToObject(obj, name, value);
    else
        cJSON_AddNullToObject(obj, name);
}

/* The top: which build, since when, and whether it relays. */
static void add_summary(cJSON *root, const struct http_context *ctx)
{
    const struct relay_stats *s = ctx->stats;
    cJSON_AddStringToObject(root, "version", OUTBOX_RELAY_VERSION);
    add_time(root, "start_time", s->start_time);
    cJSON_AddNumberToObject(root, "uptime_seconds", ms_round(ctx->now - s->start_time));
    cJSON_AddBoolToObject(root, "ready", health_ready(s, ctx->cfg, ctx->mono_now, NULL));
    cJSON_AddStringToObject(root, "role", health_role_name(s->role));
    cJSON_AddBoolToObject(root, "halted", s->halted);
    if (s->halted)
        cJSON_AddStringToObject(root, "halt_reason", s->halt_reason);
    else
        cJSON_AddNullToObject(root, "halt_reason");
}

/* "postgres": the connection, whether it is a session of its own and sees
 * every row, and the table's schema. */
static void add_postgres(cJSON *root, const struct relay_stats *s)
{
    cJSON *pg = cJSON_AddObjectToObject(root, "postgres");
    if (!pg)
        return;
    cJSON_AddStringToObject(pg, "state", s->pg_up ? "up" : "down");
    add_string_or_null(pg, "error", s->pg_up ? NULL : s->pg_error);
    add_string_or_null(pg, "hint", s->pg_up ? NULL : pg_failure_hint(s->pg_error));
    add_number_or_null(pg, "backend_pid", s->backend_pid > 0, s->backend_pid);
    cJSON_AddBoolToObject(pg, "via_proxy", s->via_proxy);
    cJSON_AddBoolToObject(pg, "row_security", s->row_security);
    cJSON_AddBoolToObject(pg, "quiet", s->quiet);
    cJSON_AddBoolToObject(pg, "refused", s->refused);
    add_string_or_null(pg, "refused_reason", s->refused ? s->refused_reason : NULL);
    add_time(pg, "refused_at", s->refused ? s->refused_time : 0);
    add_number_or_null(pg, "schema_version", s->schema_version >= 0, s->schema_version);
    add_string_or_null(pg, "schema_problem", s->schema_problem);
}

/* "server": which PostgreSQL server, and what the connection went through. */
static void add_server(cJSON *root, const struct stats_server *sv, double now)
{
    cJSON *o = cJSON_AddObjectToObject(cJSON_GetObjectItem(root, "postgres"), "server");
    if (!o)
        return;
    bool up = sv->connected_since > 0;
    add_string_or_null(o, "host", up ? sv->host : NULL);
    add_string_or_null(o, "port", up ? sv->port : NULL);
    add_string_or_null(o, "system_identifier", up ? sv->system_id : NULL);
    add_number_or_null(o, "timeline", up && sv->timeline, sv->timeline);
    add_time(o, "connected_since", sv->connected_since);
    add_time(o, "disconnected_since", sv->disconnected_since);
    cJSON_AddNumberToObject(o, "disconnected_seconds", ms_round(server_watch_down_for(sv, now)));
    cJSON_AddNumberToObject(o, "reconnect_attempts_total", (double)sv->reconnect_attempts_total);
    cJSON_AddNumberToObject(o, "failovers_total", (double)sv->failovers_total);
    add_time(o, "last_failover", sv->last_failover_time);
    add_string_or_null(o, "problem", sv->problem);
}

/* "holder": who holds the leader lock a standby waits for. */
static void add_lock_holder(cJSON *lock, const struct stats_lock_holder *h)
{
    cJSON *o = cJSON_AddObjectToObject(lock, "holder");
    if (!o)
        return;
    cJSON_AddNumberToObject(o, "pid", h->pid);
    add_string_or_null(o, "application_name", h->application_name);
    add_string_or_null(o, "client_addr", h->client_addr);
    add_time(o, "backend_start", h->backend_start);
    add_string_or_null(o, "state", h->state);
    add_number_or_null(o, "idle_seconds", h->idle_seconds >= 0, ms_round(h->idle_seconds));
    cJSON_AddBoolToObject(o, "looks_like_relay", h->looks_like_relay);
}

/* "leader_lock": our role since when, and for a standby who holds the lock. */
static void add_leader_lock(cJSON *root, const struct relay_stats *s, double now)
{
    cJSON *lock = cJSON_AddObjectToObject(root, "leader_lock");
    if (!lock)
        return;
    cJSON_AddBoolToObject(lock, "held", s->role == STATS_ROLE_LEADER);
    add_time(lock, "role_since", s->role_since);
    add_number_or_null(lock, "role_seconds", s->role_since > 0, ms_round(now - s->role_since));
    if (s->role == STATS_ROLE_STANDBY && s->holder.known)
        add_lock_holder(lock, &s->holder);
    else
        cJSON_AddNullToObject(lock, "holder");
    bool stuck = s->role == STATS_ROLE_STANDBY && s->standby_stuck;
    bool stalled = s->role == STATS_ROLE_STANDBY && s->standby_stalled;
    cJSON_AddBoolToObject(lock, "standby_stuck", stuck);
    cJSON_AddBoolToObject(lock, "standby_stalled", stalled);
    add_number_or_null(lock, "stalled_seconds", stalled, ms_round(s->standby_stalled_s));
    add_string_or_null(lock, "standby_reason", stuck || stalled ? s->standby_reason : NULL);
}

/* "kafka": the brokers as librdkafka's statistics describe them, and the producer. */
static void add_kafka(cJSON *root, const struct relay_stats *s, double mono_now)
{
    cJSON *kafka = cJSON_AddObjectToObject(root, "kafka");
    if (!kafka)
        return;
    add_number_or_null(kafka, "brokers_up", s->brokers_up >= 0, s->brokers_up);
    add_number_or_null(kafka, "brokers_total", s->brokers_up >= 0, s->brokers_total);
    cJSON_AddNumberToObject(kafka, "producer_queue_messages", (double)s->producer_queue_msgs);
    cJSON_AddBoolToObject(kafka, "producer_fatal", s->producer_fatal);
    int denied = stats_kafka_denial(s);
    add_string_or_null(kafka, "denied", denied ? kafka_denial_name(denied) : NULL);
    add_string_or_null(kafka, "denied_needs", denied ? kafka_denial_need(denied) : NULL);
    add_string_or_null(kafka, "denied_error", denied ? s->kafka_denial_error : NULL);
    cJSON_AddNumberToObject(kafka, "messages_in_flight", (double)s->kafka_in_flight);
    cJSON_AddNumberToObject(kafka, "ack_wait_seconds", ms_round(stats_ack_wait(s, mono_now)));
    cJSON *brokers = cJSON_AddArrayToObject(kafka, "brokers");
    for (int i = 0; brokers && s->brokers_up >= 0 && i < s->n_brokers && i < STATS_MAX_BROKERS;
         i++) {
        cJSON *b = cJSON_CreateObject();
        if (!b)
            break;
        cJSON_AddNumberToObject(b, "id", s->brokers[i].id);
        cJSON_AddStringToObject(b, "name", s->brokers[i].name);
        cJSON_AddStringToObject(b, "state", s->brokers[i].state);
        cJSON_AddItemToArray(brokers, b);
    }
}

/* "backlog": the last measurement, how old it is, and when it will be
 * published at the recent @p rate (rows/s; negative when unknown). */
static void add_backlog(cJSON *root, const struct relay_stats *s, double now, double rate)
{
    cJSON *backlog = cJSON_AddObjectToObject(root, "backlog");
    if (!backlog)
        return;
    bool known = s->backlog_known;
    add_number_or_null(backlog, "rows", known, (double)s->backlog_rows);
    add_number_or_null(backlog, "oldest_unsent_age_seconds", known,
                       known ? ms_round(health_oldest_unsent_age(s, now)) : 0);
    add_number_or_null(backlog, "dead_rows", known, (double)s->dead_rows);
    add_time(backlog, "measured_at", known ? s->backlog_time : 0);
    /* The count is a few seconds old on a backlog that drains at thousands
     * of rows a second: say how old, and what was published since, rather
     * than let it pass for the present. */
    add_number_or_null(backlog, "age_seconds", known, ms_round(fmax(0, now - s->backlog_time)));
    add_number_or_null(backlog, "published_since_measured", known,
                       (double)(s->published_total - s->backlog_published));
    /* at events.rate_per_second, of the rows not published since */
    double eta = stats_backlog_eta(s, rate);
    add_number_or_null(backlog, "eta_seconds", eta >= 0, round(eta * 10) / 10);
    add_string_or_null(backlog, "unknown_reason",
                       s->row_security ? "row-level security hides rows from the relay's role "
                                         "(relay.allow_row_security = true): it cannot count them"
                                       : NULL);
}

static void add_last_batch(cJSON *root, const struct relay_stats *s)
{
    if (s->last_batch_time <= 0) {
        cJSON_AddNullToObject(root, "last_batch");
        return;
    }
    cJSON *lb = cJSON_AddObjectToObject(root, "last_batch");
    if (!lb)
        return;
    cJSON_AddNumberToObject(lb, "rows", s->last_batch_rows);
    cJSON_AddNumberToObject(lb, "duration_seconds", s->last_batch_duration);
    add_time(lb, "time", s->last_batch_time);
}

/* "events": what this process published and failed, and the recent @p rate. */
static void add_events(cJSON *root, const struct relay_stats *s, double rate)
{
    cJSON *ev = cJSON_AddObjectToObject(root, "events");
    if (!ev)
        return;
    cJSON_AddNumberToObject(ev, "published_total", (double)s->published_total);
    add_number_or_null(ev, "rate_per_second", rate >= 0, round(rate * 10) / 10);
    cJSON_AddNumberToObject(ev, "rate_window_seconds", STATS_RATE_WINDOW_S);
    cJSON *failed = cJSON_AddObjectToObject(ev, "failed_total");
    if (failed) {
        cJSON_AddNumberToObject(failed, "invalid", (double)s->failed_total[STATS_FAIL_INVALID]);
        cJSON_AddNumberToObject(failed, "permanent", (double)s->failed_total[STATS_FAIL_PERMANENT]);
        cJSON_AddNumberToObject(failed, "retriable", (double)s->failed_total[STATS_FAIL_RETRIABLE]);
    }
    cJSON_AddNumberToObject(ev, "dead_lettered_total", (double)s->dead_total);
    cJSON_AddNumberToObject(ev, "batches_total", (double)s->batches_total);
}

/* "verify": the periodic verify, null when [verify] interval is 0. */
static void add_verify(cJSON *root, const struct stats_verify *sv)
{
    if (!sv->enabled) {
        cJSON_AddNullToObject(root, "verify");
        return;
    }
    cJSON *vj = cJSON_AddObjectToObject(root, "verify");
    if (!vj)
        return;
    cJSON_AddNumberToObject(vj, "runs_total", (double)sv->runs_total);
    cJSON_AddNumberToObject(vj, "errors_total", (double)sv->errors_total);
    add_time(vj, "last_run", sv->last_time);
    cJSON_AddNumberToObject(vj, "last_duration_seconds", ms_round(sv->last_duration));
    add_string_or_null(vj, "last_error", sv->last_error);
    if (!sv->have_result) {
        cJSON_AddNullToObject(vj, "ok");
        return;
    }
    cJSON_AddBoolToObject(vj, "ok", sv->ok);
    add_time(vj, "window_start", sv->window_start);
    add_time(vj, "window_end", sv->window_end);
    cJSON_AddNumberToObject(vj, "rows", (double)sv->rows);
    cJSON_AddNumberToObject(vj, "pending", (double)sv->pending);
    cJSON_AddNumberToObject(vj, "missing", (double)sv->missing);
    cJSON_AddNumberToObject(vj, "duplicates", (double)sv->duplicates);
    cJSON_AddNumberToObject(vj, "out_of_order", (double)sv->out_of_order);
    cJSON_AddNumberToObject(vj, "mismatched", (double)sv->mismatched);
    cJSON_AddNumberToObject(vj, "unknown", (double)sv->unknown);
}

/* An LSN as PostgreSQL prints it: the high and low 32 bits in hex. */
static void add_lsn(cJSON *obj, const char *name, uint64_t lsn)
{
    char buf[PGO_LSN_TEXT];
    pgo_lsn_text(lsn, buf);
    cJSON_AddStringToObject(obj, name, buf);
}

/* "capture": {"mode": "poll"}, or with relay.capture = wal the slot (named by
 * @p cfg, which may be NULL), the stream from it and what
 * pg_replication_slots last said (null until a query found the slot). */
static void add_capture(cJSON *root, const struct stats_slot *sl, const struct relay_config *cfg)
{
    cJSON *c = cJSON_AddObjectToObject(root, "capture");
    if (!c)
        return;
    cJSON_AddStringToObject(c, "mode", sl->enabled ? "wal" : "poll");
    if (!sl->enabled)
        return;
    add_string_or_null(c, "slot", cfg ? cfg->slot : NULL);
    cJSON_AddBoolToObject(c, "streaming", sl->streaming);
    add_lsn(c, "received_lsn", sl->received_lsn);
    add_lsn(c, "flushed_lsn", sl->flushed_lsn);
    cJSON_AddNumberToObject(c, "lag_seconds", ms_round(sl->lag_seconds));
    add_time(c, "last_commit_time", sl->last_commit_time);
    cJSON_AddNumberToObject(c, "transactions_total", (double)sl->transactions_total);
    cJSON_AddNumberToObject(c, "heartbeats_total", (double)sl->heartbeats_total);
    cJSON_AddNumberToObject(c, "recoveries_total", (double)sl->recoveries_total);
    cJSON_AddNumberToObject(c, "recovered_events_total", (double)sl->recovered_events_total);
    add_time(c, "last_recovery", sl->last_recovery_time);
    add_number_or_null(c, "last_recovery_events", sl->last_recovery_time > 0,
                       (double)sl->last_recovery_events);
    bool known = sl->query_time > 0 && sl->known;
    cJSON_AddBoolToObject(c, "slot_found", known);
    add_time(c, "queried_at", sl->query_time);
    if (known) {
        add_lsn(c, "confirmed_lsn", sl->confirmed_lsn);
        add_lsn(c, "restart_lsn", sl->restart_lsn);
    } else {
        cJSON_AddNullToObject(c, "confirmed_lsn");
        cJSON_AddNullToObject(c, "restart_lsn");
    }
    add_number_or_null(c, "retained_wal_bytes", known, (double)sl->retained_bytes);
    add_number_or_null(c, "lag_bytes", known, (double)sl->lag_bytes);
    add_string_or_null(c, "wal_status", known ? sl->wal_status : NULL);
    if (known)
        cJSON_AddBoolToObject(c, "active", sl->active);
    else
        cJSON_AddNullToObject(c, "active");
    add_number_or_null(c, "active_pid", known && sl->active_pid > 0, sl->active_pid);
    add_string_or_null(c, "problem", sl->problem);
}

static cJSON *status_json(const struct http_context *ctx)
{
    const struct relay_stats *s = ctx->stats;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    add_summary(root, ctx);
    add_postgres(root, s);
    add_server(root, &s->server, ctx->now);
    add_leader_lock(root, s, ctx->now);
    add_kafka(root, s, ctx->mono_now);
    /* rows/s over the last minute, from the counters sampled every second */
    double rate = stats_rate_per_second(&s->publish_rate, ctx->mono_now, s->published_total);
    add_backlog(root, s, ctx->now, rate);
    add_last_batch(root, s);
    add_events(root, s, rate);
    /* The dead-letter count of the table (all relays, all time), when known. */
    add_number_or_null(root, "dead_letter_count", s->backlog_known, (double)s->dead_rows);
    add_verify(root, &s->verify);
    add_capture(root, &s->slot, ctx->cfg);
    cJSON *cfg = ctx->cfg ? config_to_json(ctx->cfg) : NULL;
    if (cfg)
        cJSON_AddItemToObject(root, "config", cfg);
    else
        cJSON_AddNullToObject(root, "config");
    return root;
}

int http_status_render(const struct http_context *ctx, struct strbuf *out)
{
    cJSON *root = status_json(ctx);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return -ENOMEM;
    strbuf_printf(out, "%s\n", text);
    cJSON_free(text);
    return 0;
}
