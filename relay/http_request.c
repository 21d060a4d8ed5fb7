/* http_request.c — from request bytes to a complete response, without
 * sockets: parsing (libhttp-parser), routing, /livez, /healthz, /readyz and
 * /status. /metrics lives in http_metrics.c. See http.h. */
#include "http.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "build_config.h"

/* ---- parsing ----------------------------------------------------------- */

/* Every byte of the head counts against HTTP_MAX_HEAD_BYTES, not just the
 * URL: a flood of small headers is as costly as one large one. */
static int head_grow(struct http_request *req, size_t n)
{
    req->field_bytes += n;
    if (req->field_bytes > HTTP_MAX_HEAD_BYTES) {
        req->status = 431;
        return -1;
    }
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    struct http_request *req = p->data;
    if (head_grow(req, len) < 0)
        return -1;
    if (req->url_len + len + 1 > req->url_cap) {
        /* Bounded by HTTP_MAX_HEAD_BYTES through head_grow() above. */
        size_t cap = req->url_cap ? req->url_cap : 64;
        while (cap < req->url_len + len + 1)
            cap *= 2;
        char *u = realloc(req->url, cap);
        if (!u) {
            req->oom = true;
            req->status = 500;
            return -1;
        }
        req->url = u;
        req->url_cap = cap;
    }
    memcpy(req->url + req->url_len, at, len);
    req->url_len += len;
    req->url[req->url_len] = '\0';
    return 0;
}

/* Header names and values are not kept: no endpoint depends on one. */
static int on_header_bytes(http_parser *p, const char *at, size_t len)
{
    (void)at;
    return head_grow(p->data, len);
}

static int on_headers_complete(http_parser *p)
{
    struct http_request *req = p->data;
    req->state = HTTP_REQ_DONE;
    /* Stop here: the body (if any) is never read, and execute() returns how
     * far the head went. */
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_url = on_url,
    .on_header_field = on_header_bytes,
    .on_header_value = on_header_bytes,
    .on_headers_complete = on_headers_complete,
};

void http_request_init(struct http_request *req)
{
    memset(req, 0, sizeof(*req));
    http_parser_init(&req->parser, HTTP_REQUEST);
    req->parser.data = req;
}

void http_request_free(struct http_request *req)
{
    free(req->url);
    req->url = NULL;
    req->url_len = req->url_cap = 0;
}

enum http_req_state http_request_feed(struct http_request *req, const char *data, size_t len)
{
    if (req->state != HTTP_REQ_MORE || len == 0)
        return req->state;

    /* The parser pauses right after the head, so what it consumed is head:
     * request line, header lines and the separators the callbacks never see. */
    size_t used = http_parser_execute(&req->parser, &parser_settings, data, len);
    req->head_bytes += used;
    enum http_errno err = HTTP_PARSER_ERRNO(&req->parser);

    if (req->head_bytes > HTTP_MAX_HEAD_BYTES || req->status == 431) {
        req->status = 431;
        req->state = HTTP_REQ_ERROR;
    } else if (req->state == HTTP_REQ_DONE && err == HPE_PAUSED) {
        if (req->parser.http_major != 1) {
            req->status = 505;
            req->state = HTTP_REQ_ERROR;
        }
    } else if (err != HPE_OK) {
        if (req->status == 0)
            req->status = err == HPE_HEADER_OVERFLOW ? 431 : 400;
        req->state = HTTP_REQ_ERROR;
    }
    return req->state;
}

/* ---- small helpers ----------------------------------------------------- */

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
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

static const char *role_name(const struct relay_stats *s)
{
    switch (s->role) {
    case STATS_ROLE_LEADER: return "leader";
    case STATS_ROLE_STANDBY: return "standby";
    default: return "unknown";
    }
}

/* True when the query string has a parameter @p name whose value is not
 * "0" or "false" ("?verbose", "?verbose=1", "?a=b&verbose"). */
static bool query_flag(const char *q, size_t qlen, const char *name)
{
    size_t nlen = strlen(name);
    size_t i = 0;
    while (i < qlen) {
        size_t j = i;
        while (j < qlen && q[j] != '&')
            j++;
        size_t k = i;
        while (k < j && q[k] != '=')
            k++;
        if (k - i == nlen && memcmp(q + i, name, nlen) == 0) {
            if (k == j)
                return true;
            size_t vlen = j - k - 1;
            const char *v = q + k + 1;
            return !((vlen == 1 && v[0] == '0') || (vlen == 5 && memcmp(v, "false", 5) == 0));
        }
        i = j + 1;
    }
    return false;
}

/* ---- /readyz ----------------------------------------------------------- */

static void check_line(struct strbuf *out, bool ok, const char *name, const char *why)
{
    if (out)
        strbuf_printf(out, "[%c]%s %s\n", ok ? '+' : '-', name, ok ? "ok" : why);
}

bool http_ready(const struct http_context *ctx, struct strbuf *out)
{
    const struct relay_stats *s = ctx->stats;
    bool ready = true;
    char why[320];

    ready &= s->pg_up;
    check_line(out, s->pg_up, "postgres",
               s->refused ? "not connected (relaying refused; see database)" : "not connected");

    /* The connection is a session of its own and this role sees every row. */
    ready &= !s->refused;
    if (s->refused) {
        struct strbuf reason = {0};
        strbuf_printf(&reason, "refused: %s", s->refused_reason);
        check_line(out, false, "database", strbuf_str(&reason));
        strbuf_free(&reason);
    } else {
        check_line(out, true, "database", "");
    }

    /* The table is the one this binary's statements were written for. */
    bool schema = s->schema_problem[0] == '\0';
    ready &= schema;
    check_line(out, schema, "schema", s->schema_problem);

    /* A standby is ready to take over, unless it waits behind something
     * that will not let go: then it names the holder. */
    bool role = s->role != STATS_ROLE_UNKNOWN && !(s->role == STATS_ROLE_STANDBY && s->standby_stuck);
    ready &= role;
    check_line(out, role, "role",
               s->refused                     ? "none (relaying refused; see database)"
               : !schema                       ? "none (waiting for the schema; see schema)"
               : s->role == STATS_ROLE_UNKNOWN ? "not known yet (leader lock not queried since connecting)"
                                               : s->standby_reason);

    bool kafka = s->brokers_up > 0;
    ready &= kafka;
    if (s->brokers_up < 0)
        snprintf(why, sizeof(why), "no statistics from librdkafka yet");
    else
        snprintf(why, sizeof(why), "no broker up (%d known)", s->brokers_total);
    check_line(out, kafka, "kafka", why);

    /* A broker that holds its connections and answers nothing is still UP
     * above: messages waiting with no acknowledgement at all is what shows it. */
    int limit_ms = ctx->cfg ? ctx->cfg->ack_timeout_ms : 0;
    double wait = stats_ack_wait(s, ctx->mono_now);
    bool acks = limit_ms <= 0 || wait * 1000 < limit_ms;
    ready &= acks;
    snprintf(why, sizeof(why), "%lld message%s in flight, no acknowledgement for %.0f s",
             (long long)s->kafka_in_flight, s->kafka_in_flight == 1 ? "" : "s", floor(wait));
    check_line(out, acks, "acks", why);

    ready &= !s->producer_fatal;
    check_line(out, !s->producer_fatal, "producer", "fatal error; the producer is being replaced");

    ready &= !s->halted;
    snprintf(why, sizeof(why), "halted: %s", s->halt_reason);
    check_line(out, !s->halted, "relaying", why);

    /* A relay draining for shutdown takes no new work: let the orchestrator
     * stop routing to it. */
    ready &= !s->stopping;
    check_line(out, !s->stopping, "shutdown", "stopping: draining in-flight deliveries");
    return ready;
}

static int serve_readyz(const struct http_context *ctx, bool verbose, struct strbuf *body,
                        const char **ctype)
{
    (void)ctype;
    struct strbuf lines = {0};
    bool ready = http_ready(ctx, &lines);
    /* A failing probe says why even without ?verbose: that is when it matters. */
    if (verbose || !ready)
        strbuf_printf(body, "%s%s", strbuf_str(&lines),
                      ready ? "readyz check passed\n" : "readyz check failed\n");
    else
        strbuf_printf(body, "ok\n");
    strbuf_free(&lines);
    return ready ? 200 : 503;
}

/* ---- /status ----------------------------------------------------------- */

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

/* "postgres": whether the connection is a session of its own and sees every row. */
static void add_session(cJSON *pg, const struct relay_stats *s)
{
    add_number_or_null(pg, "backend_pid", s->backend_pid > 0, s->backend_pid);
    cJSON_AddBoolToObject(pg, "via_proxy", s->via_proxy);
    cJSON_AddBoolToObject(pg, "row_security", s->row_security);
    cJSON_AddBoolToObject(pg, "refused", s->refused);
    add_string_or_null(pg, "refused_reason", s->refused ? s->refused_reason : NULL);
    add_time(pg, "refused_at", s->refused ? s->refused_time : 0);
    add_number_or_null(pg, "schema_version", s->schema_version >= 0, s->schema_version);
    add_string_or_null(pg, "schema_problem", s->schema_problem);
}

/* "leader_lock": our role since when, and for a standby who holds the lock. */
static void add_leader_lock(cJSON *root, const struct relay_stats *s, double now)
{
    cJSON *lock = cJSON_AddObjectToObject(root, "leader_lock");
    if (!lock)
        return;
    cJSON_AddBoolToObject(lock, "held", s->role == STATS_ROLE_LEADER);
    add_time(lock, "role_since", s->role_since);
    add_number_or_null(lock, "role_seconds", s->role_since > 0,
                       round((now - s->role_since) * 1000) / 1000);
    const struct stats_lock_holder *h = &s->holder;
    if (s->role == STATS_ROLE_STANDBY && h->known) {
        cJSON *o = cJSON_AddObjectToObject(lock, "holder");
        if (o) {
            cJSON_AddNumberToObject(o, "pid", h->pid);
            add_string_or_null(o, "application_name", h->application_name);
            add_string_or_null(o, "client_addr", h->client_addr);
            add_time(o, "backend_start", h->backend_start);
            add_string_or_null(o, "state", h->state);
            add_number_or_null(o, "idle_seconds", h->idle_seconds >= 0,
                               round(h->idle_seconds * 1000) / 1000);
            cJSON_AddBoolToObject(o, "looks_like_relay", h->looks_like_relay);
        }
    } else {
        cJSON_AddNullToObject(lock, "holder");
    }
    cJSON_AddBoolToObject(lock, "standby_stuck", s->role == STATS_ROLE_STANDBY && s->standby_stuck);
    add_string_or_null(lock, "standby_reason",
                       s->role == STATS_ROLE_STANDBY && s->standby_stuck ? s->standby_reason : NULL);
}

static cJSON *status_json(const struct http_context *ctx)
{
    const struct relay_stats *s = ctx->stats;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;

    cJSON_AddStringToObject(root, "version", OUTBOX_RELAY_VERSION);
    add_time(root, "start_time", s->start_time);
    cJSON_AddNumberToObject(root, "uptime_seconds", round((ctx->now - s->start_time) * 1000) / 1000);
    cJSON_AddBoolToObject(root, "ready", http_ready(ctx, NULL));
    cJSON_AddStringToObject(root, "role", role_name(s));
    cJSON_AddBoolToObject(root, "halted", s->halted);
    if (s->halted)
        cJSON_AddStringToObject(root, "halt_reason", s->halt_reason);
    else
        cJSON_AddNullToObject(root, "halt_reason");

    cJSON *pg = cJSON_AddObjectToObject(root, "postgres");
    if (pg) {
        cJSON_AddStringToObject(pg, "state", s->pg_up ? "up" : "down");
        add_session(pg, s);
    }
    add_leader_lock(root, s, ctx->now);

    cJSON *kafka = cJSON_AddObjectToObject(root, "kafka");
    if (kafka) {
        if (s->brokers_up >= 0) {
            cJSON_AddNumberToObject(kafka, "brokers_up", s->brokers_up);
            cJSON_AddNumberToObject(kafka, "brokers_total", s->brokers_total);
        } else {
            cJSON_AddNullToObject(kafka, "brokers_up");
            cJSON_AddNullToObject(kafka, "brokers_total");
        }
        cJSON_AddNumberToObject(kafka, "producer_queue_messages", (double)s->producer_queue_msgs);
        cJSON_AddBoolToObject(kafka, "producer_fatal", s->producer_fatal);
        cJSON_AddNumberToObject(kafka, "messages_in_flight", (double)s->kafka_in_flight);
        cJSON_AddNumberToObject(kafka, "ack_wait_seconds",
                                round(stats_ack_wait(s, ctx->mono_now) * 1000) / 1000);
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

    /* rows/s over the last minute, from the counters sampled every second */
    double rate = stats_rate_per_second(&s->publish_rate, ctx->mono_now, s->published_total);
    cJSON *backlog = cJSON_AddObjectToObject(root, "backlog");
    if (backlog) {
        if (s->backlog_known) {
            cJSON_AddNumberToObject(backlog, "rows", (double)s->backlog_rows);
            /* The query ran up to 5 s ago: the oldest row has aged since. */
            double age = s->oldest_unsent_age;
            if (s->backlog_rows > 0 && ctx->now > s->backlog_time)
                age += ctx->now - s->backlog_time;
            cJSON_AddNumberToObject(backlog, "oldest_unsent_age_seconds", round(age * 1000) / 1000);
            cJSON_AddNumberToObject(backlog, "dead_rows", (double)s->dead_rows);
        } else {
            cJSON_AddNullToObject(backlog, "rows");
            cJSON_AddNullToObject(backlog, "oldest_unsent_age_seconds");
            cJSON_AddNullToObject(backlog, "dead_rows");
        }
        add_time(backlog, "measured_at", s->backlog_known ? s->backlog_time : 0);
        /* The count is a few seconds old on a backlog that drains at
         * thousands of rows a second: say how old, and what was published
         * since, rather than let it pass for the present. */
        add_number_or_null(backlog, "age_seconds", s->backlog_known,
                           round(fmax(0, ctx->now - s->backlog_time) * 1000) / 1000);
        add_number_or_null(backlog, "published_since_measured", s->backlog_known,
                           (double)(s->published_total - s->backlog_published));
        /* at events.rate_per_second, of the rows not published since */
        double eta = stats_backlog_eta(s, rate);
        add_number_or_null(backlog, "eta_seconds", eta >= 0, round(eta * 10) / 10);
        if (s->row_security)
            cJSON_AddStringToObject(backlog, "unknown_reason",
                                    "row-level security hides rows from the relay's role "
                                    "(relay.allow_row_security = true): it cannot count them");
        else
            cJSON_AddNullToObject(backlog, "unknown_reason");
    }

    if (s->last_batch_time > 0) {
        cJSON *lb = cJSON_AddObjectToObject(root, "last_batch");
        if (lb) {
            cJSON_AddNumberToObject(lb, "rows", s->last_batch_rows);
            cJSON_AddNumberToObject(lb, "duration_seconds", s->last_batch_duration);
            add_time(lb, "time", s->last_batch_time);
        }
    } else {
        cJSON_AddNullToObject(root, "last_batch");
    }

    cJSON *ev = cJSON_AddObjectToObject(root, "events");
    if (ev) {
        cJSON_AddNumberToObject(ev, "published_total", (double)s->published_total);
        add_number_or_null(ev, "rate_per_second", rate >= 0, round(rate * 10) / 10);
        cJSON_AddNumberToObject(ev, "rate_window_seconds", STATS_RATE_WINDOW_S);
        cJSON *failed = cJSON_AddObjectToObject(ev, "failed_total");
        if (failed) {
            cJSON_AddNumberToObject(failed, "invalid", (double)s->failed_total[STATS_FAIL_INVALID]);
            cJSON_AddNumberToObject(failed, "permanent",
                                    (double)s->failed_total[STATS_FAIL_PERMANENT]);
            cJSON_AddNumberToObject(failed, "retriable",
                                    (double)s->failed_total[STATS_FAIL_RETRIABLE]);
        }
        cJSON_AddNumberToObject(ev, "dead_lettered_total", (double)s->dead_total);
        cJSON_AddNumberToObject(ev, "batches_total", (double)s->batches_total);
    }
    /* The dead-letter count of the table (all relays, all time), when known. */
    if (s->backlog_known)
        cJSON_AddNumberToObject(root, "dead_letter_count", (double)s->dead_rows);
    else
        cJSON_AddNullToObject(root, "dead_letter_count");

    /* The periodic verify: null when [verify] interval is 0. */
    const struct stats_verify *sv = &s->verify;
    cJSON *vj = sv->enabled ? cJSON_AddObjectToObject(root, "verify") : NULL;
    if (!sv->enabled)
        cJSON_AddNullToObject(root, "verify");
    if (vj) {
        cJSON_AddNumberToObject(vj, "runs_total", (double)sv->runs_total);
        cJSON_AddNumberToObject(vj, "errors_total", (double)sv->errors_total);
        add_time(vj, "last_run", sv->last_time);
        cJSON_AddNumberToObject(vj, "last_duration_seconds", round(sv->last_duration * 1000) / 1000);
        if (sv->last_error[0])
            cJSON_AddStringToObject(vj, "last_error", sv->last_error);
        else
            cJSON_AddNullToObject(vj, "last_error");
        if (sv->have_result) {
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
        } else {
            cJSON_AddNullToObject(vj, "ok");
        }
    }

    cJSON *cfg = ctx->cfg ? config_to_json(ctx->cfg) : NULL;
    if (cfg)
        cJSON_AddItemToObject(root, "config", cfg);
    else
        cJSON_AddNullToObject(root, "config");
    return root;
}

static int serve_status(const struct http_context *ctx, bool verbose, struct strbuf *body,
                        const char **ctype)
{
    (void)verbose;
    cJSON *root = status_json(ctx);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) {
        strbuf_printf(body, "out of memory\n");
        return 500;
    }
    *ctype = "application/json";
    strbuf_printf(body, "%s\n", text);
    cJSON_free(text);
    return 200;
}

/* ---- the others -------------------------------------------------------- */

static int serve_live(const struct http_context *ctx, bool verbose, struct strbuf *body,
                      const char **ctype)
{
    /* Answering at all proves the loop turns: that is all liveness means. */
    (void)ctx;
    (void)verbose;
    (void)ctype;
    strbuf_printf(body, "ok\n");
    return 200;
}

static int serve_metrics(const struct http_context *ctx, bool verbose, struct strbuf *body,
                         const char **ctype)
{
    (void)verbose;
    *ctype = "text/plain; version=0.0.4; charset=utf-8";
    http_metrics(ctx, body);
    return 200;
}

typedef int (*route_fn)(const struct http_context *ctx, bool verbose, struct strbuf *body,
                        const char **ctype);

static const struct route {
    const char *path;
    route_fn fn;
} routes[] = {
    {"/livez", serve_live},
    {"/healthz", serve_live},
    {"/readyz", serve_readyz},
    {"/metrics", serve_metrics},
    {"/status", serve_status},
};

/* ---- the response ------------------------------------------------------ */

static int route(const struct http_request *req, const struct http_context *ctx,
                 struct strbuf *body, const char **ctype, bool *allow)
{
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (!req->url || http_parser_parse_url(req->url, req->url_len, 0, &u) != 0 ||
        !(u.field_set & (1 << UF_PATH))) {
        strbuf_printf(body, "bad request target\n");
        return 400;
    }
    const char *path = req->url + u.field_data[UF_PATH].off;
    size_t plen = u.field_data[UF_PATH].len;
    const char *query = (u.field_set & (1 << UF_QUERY)) ? req->url + u.field_data[UF_QUERY].off : "";
    size_t qlen = (u.field_set & (1 << UF_QUERY)) ? u.field_data[UF_QUERY].len : 0;

    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        if (strlen(routes[i].path) != plen || memcmp(routes[i].path, path, plen) != 0)
            continue;
        if (req->parser.method != HTTP_GET && req->parser.method != HTTP_HEAD) {
            *allow = true;
            strbuf_printf(body, "method not allowed (GET or HEAD)\n");
            return 405;
        }
        return routes[i].fn(ctx, query_flag(query, qlen, "verbose"), body, ctype);
    }
    strbuf_printf(body, "not found; endpoints: /livez /healthz /readyz /metrics /status\n");
    return 404;
}

int http_respond(const struct http_request *req, const struct http_context *ctx,
                 struct strbuf *out)
{
    struct strbuf body = {0};
    const char *ctype = "text/plain; charset=utf-8";
    bool allow = false;
    int status;

    if (req->state == HTTP_REQ_DONE) {
        status = route(req, ctx, &body, &ctype, &allow);
    } else {
        status = req->status ? req->status : 400;
        strbuf_printf(&body, "%s\n", reason_phrase(status));
    }
    if (body.oom) {
        strbuf_reset(&body);
        ctype = "text/plain; charset=utf-8";
        status = 500;
        strbuf_printf(&body, "out of memory\n");
    }
    /* HEAD: the headers GET would send, Content-Length included, no body. */
    bool head = req->state == HTTP_REQ_DONE && req->parser.method == HTTP_HEAD;

    strbuf_printf(out,
                  "HTTP/1.1 %d %s\r\n"
                  "Content-Type: %s\r\n"
                  "Content-Length: %zu\r\n"
                  "Cache-Control: no-store\r\n"
                  "X-Content-Type-Options: nosniff\r\n"
                  "%s"
                  "Connection: close\r\n"
                  "\r\n"
                  "%s",
                  status, reason_phrase(status), ctype, body.len,
                  allow ? "Allow: GET, HEAD\r\n" : "", head ? "" : strbuf_str(&body));
    strbuf_free(&body);
    return status;
}
