/* Unit tests of the status endpoint's request layer (relay/daemon/:
 * http_request.c, http_routes.c, health.c, http_status.c, http_metrics.c):
 * parsing, routing, the readiness checks, the documents, and http.listen
 * parsing; no sockets. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "daemon/http_metrics.h"
#include "daemon/http_request.h"
#include "base/listen_addr.h"
#include "base/stats.h"
#include "base/strbuf.h"

#include "http_unit_fixture.h"

TestSuite(http, .init = setup, .fini = teardown);

/* Feeds @p raw in chunks of @p chunk bytes (0 = at once); @return the status sent. */
static int exchange_chunked(const char *raw, size_t len, size_t chunk)
{
    struct http_request req;
    http_request_init(&req);
    enum http_req_state s = HTTP_REQ_MORE;
    for (size_t off = 0; off < len && s == HTTP_REQ_MORE;) {
        size_t n = chunk && chunk < len - off ? chunk : len - off;
        s = http_request_feed(&req, raw + off, n);
        off += n;
    }
    cr_assert_neq(s, HTTP_REQ_MORE, "request not complete: %s", raw);
    strbuf_reset(&out);
    int status = http_respond(&req, &ctx, &out);
    http_request_free(&req);
    return status;
}

static int exchange(const char *raw)
{
    return exchange_chunked(raw, strlen(raw), 0);
}

static const char *body(void)
{
    const char *b = strstr(strbuf_str(&out), "\r\n\r\n");
    cr_assert_not_null(b, "no end of headers in %s", strbuf_str(&out));
    return b + 4;
}

static bool has_header(const char *line)
{
    return strstr(strbuf_str(&out), line) != NULL;
}

Test(http, livez_and_healthz)
{
    cr_assert_eq(exchange("GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"), 200);
    cr_assert_str_eq(body(), "ok\n");
    cr_assert(has_header("Connection: close\r\n"));
    cr_assert(has_header("Content-Length: 3\r\n"));
    cr_assert_eq(exchange("GET /healthz HTTP/1.0\r\n\r\n"), 200);
}

Test(http, byte_by_byte_is_the_same)
{
    const char *raw = "GET /readyz?verbose HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
    cr_assert_eq(exchange_chunked(raw, strlen(raw), 1), 200);
    cr_assert(strstr(body(), "[+]postgres ok\n"));
}

Test(http, head_has_the_headers_of_get_and_no_body)
{
    cr_assert_eq(exchange("GET /status HTTP/1.1\r\n\r\n"), 200);
    size_t get_len = strlen(body());
    char want[64];
    snprintf(want, sizeof(want), "Content-Length: %zu\r\n", get_len);
    cr_assert_eq(exchange("HEAD /status HTTP/1.1\r\n\r\n"), 200);
    cr_assert_str_eq(body(), "");
    cr_assert(has_header(want), "HEAD lacks %s: %s", want, strbuf_str(&out));
    cr_assert(has_header("Content-Type: application/json\r\n"));
}

Test(http, other_methods_are_405_with_allow)
{
    const char *methods[] = {"POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE"};
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        char raw[128];
        snprintf(raw, sizeof(raw), "%s /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", methods[i]);
        cr_assert_eq(exchange(raw), 405, "%s", methods[i]);
        cr_assert(has_header("Allow: GET, HEAD\r\n"));
    }
}

Test(http, unknown_paths_are_404)
{
    cr_assert_eq(exchange("GET / HTTP/1.1\r\n\r\n"), 404);
    cr_assert_eq(exchange("GET /metrics/ HTTP/1.1\r\n\r\n"), 404);
    cr_assert_eq(exchange("GET /statusx HTTP/1.1\r\n\r\n"), 404);
    cr_assert_eq(exchange("POST /nope HTTP/1.1\r\n\r\n"), 404);
}

Test(http, absolute_form_and_query_are_understood)
{
    cr_assert_eq(exchange("GET http://relay:8423/livez?x=1 HTTP/1.1\r\n\r\n"), 200);
}

Test(http, malformed_requests_are_400)
{
    const char *bad[] = {
        "GARBAGE\r\n\r\n",
        "GET\r\n\r\n",
        "GET /livez HTTP/1.1\r\nBad Header\r\n\r\n",
        "GET /livez HTTP/x.y\r\n\r\n",
        "\x01\x02\x03\r\n\r\n",
        "GET /livez HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "FROB /livez HTTP/1.1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(exchange(bad[i]), 400, "case %zu: %s", i, strbuf_str(&out));
}

Test(http, other_http_versions_are_505)
{
    cr_assert_eq(exchange("GET /livez HTTP/2.0\r\n\r\n"), 505);
}

static char *big_request(const char *prefix, size_t n, const char *suffix)
{
    size_t len = strlen(prefix) + n + strlen(suffix);
    char *s = malloc(len + 1);
    cr_assert_not_null(s);
    strcpy(s, prefix);
    memset(s + strlen(prefix), 'a', n);
    strcpy(s + strlen(prefix) + n, suffix);
    return s;
}

Test(http, oversized_heads_are_431)
{
    char *url = big_request("GET /", HTTP_MAX_HEAD_BYTES, " HTTP/1.1\r\n\r\n");
    cr_assert_eq(exchange(url), 431);
    free(url);
    char *hdr = big_request("GET /livez HTTP/1.1\r\nX-Big: ", HTTP_MAX_HEAD_BYTES, "\r\n\r\n");
    cr_assert_eq(exchange(hdr), 431);
    cr_assert_eq(exchange_chunked(hdr, strlen(hdr), 7), 431);
    free(hdr);

    /* Many small headers: only the separators add up. */
    struct strbuf many = {0};
    strbuf_printf(&many, "GET /livez HTTP/1.1\r\n");
    for (int i = 0; i < 3000; i++)
        strbuf_printf(&many, "A: b\r\n");
    strbuf_printf(&many, "\r\n");
    cr_assert_eq(exchange(strbuf_str(&many)), 431);
    strbuf_free(&many);

    /* Just under the limit is fine. */
    char *fits = big_request("GET /livez HTTP/1.1\r\nX: ", HTTP_MAX_HEAD_BYTES - 100, "\r\n\r\n");
    cr_assert_eq(exchange(fits), 200);
    free(fits);
}

Test(http, a_body_is_not_waited_for)
{
    struct http_request req;
    http_request_init(&req);
    const char *raw = "POST /status HTTP/1.1\r\nContent-Length: 100000\r\n\r\npartial";
    cr_assert_eq(http_request_feed(&req, raw, strlen(raw)), HTTP_REQ_DONE);
    cr_assert_eq(http_respond(&req, &ctx, &out), 405);
    http_request_free(&req);
}

Test(http, readyz_passes_when_everything_is_up)
{
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 200);
    cr_assert_str_eq(body(), "ok\n");
    cr_assert_eq(exchange("GET /readyz?verbose HTTP/1.1\r\n\r\n"), 200);
    cr_assert_str_eq(body(), "[+]postgres ok\n[+]database ok\n[+]schema ok\n[+]role ok\n[+]kafka ok\n"
                             "[+]acks ok\n[+]producer ok\n[+]relaying ok\n[+]shutdown ok\n"
                             "readyz check passed\n");
    cr_assert_eq(exchange("GET /readyz?verbose=0 HTTP/1.1\r\n\r\n"), 200);
    cr_assert_str_eq(body(), "ok\n");
}

Test(http, readyz_names_each_failing_check)
{
    st.pg_up = false;
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]postgres not connected\n"), "%s", body());
    cr_assert(strstr(body(), "readyz check failed\n"));
    /* Why it failed, and for a certificate what to change. */
    snprintf(st.pg_error, sizeof st.pg_error, "connection to server at \"db\" (10.0.0.5), port "
             "5432 failed: SSL error: certificate verify failed");
    cr_assert_eq(exchange("GET /readyz?verbose HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]postgres not connected: connection to server at \"db\" (10.0.0.5), "
                             "port 5432 failed: SSL error: certificate verify failed; the server's "
                             "certificate does not come from a CA in sslrootcert"), "%s", body());
    st.pg_error[0] = '\0';
    st.pg_up = true;

    st.role = STATS_ROLE_UNKNOWN;
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]role "));
    st.role = STATS_ROLE_STANDBY; /* a standby is ready: it takes over when needed */
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 200);

    st.stopping = true;
    cr_assert_eq(exchange("GET /readyz?verbose HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]shutdown stopping"), "%s", body());
    st.stopping = false;

    st.brokers_up = 0;
    st.brokers_total = 3;
    cr_assert_eq(exchange("GET /readyz?verbose HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]kafka no broker up (3 known)\n"), "%s", body());
    st.brokers_up = -1;
    cr_assert_eq(exchange("GET /readyz?verbose HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]kafka no statistics from librdkafka and no answer from a broker yet\n"),
              "%s", body());
    /* An acknowledged delivery proves the broker reachable before statistics come. */
    st.kafka_answered = true;
    cr_assert_eq(exchange("GET /readyz?verbose HTTP/1.1\r\n\r\n"), 200, "%s", body());
    cr_assert(strstr(body(), "[+]kafka ok\n"), "%s", body());
    /* Statistics decide once they come. */
    st.brokers_up = 0;
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 503);
    st.kafka_answered = false;
    st.brokers_up = 2;

    st.producer_fatal = true;
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]producer "));
    st.producer_fatal = false;

    st.halted = true;
    snprintf(st.halt_reason, sizeof(st.halt_reason), "outbox row 7 cannot be delivered");
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]relaying halted: outbox row 7 cannot be delivered\n"), "%s",
              body());
    cr_assert(strstr(body(), "[+]postgres ok\n"));
}

/* A hung broker: connections open, brokers UP, nothing acknowledged. */
Test(http, readyz_fails_when_messages_wait_too_long_for_an_acknowledgement)
{
    cr_assert_eq(cfg.ack_timeout_ms, 10000, "the documented default");
    st.kafka_in_flight = 20;
    st.kafka_ack_clock = ctx.mono_now - 9.9;
    cr_assert_eq(exchange("GET /readyz?verbose HTTP/1.1\r\n\r\n"), 200);
    cr_assert(strstr(body(), "[+]acks ok\n"), "%s", body());

    st.kafka_ack_clock = ctx.mono_now - 12.4;
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]acks 20 messages in flight, no acknowledgement for 12 s\n"), "%s",
              body());
    cr_assert(strstr(body(), "[+]kafka ok\n"), "%s", body());
    cr_assert_eq(exchange("GET /metrics HTTP/1.1\r\n\r\n"), 200);
    const char *wait = strstr(body(), "\noutbox_relay_kafka_ack_wait_seconds ");
    cr_assert_not_null(wait, "%s", body());
    cr_assert_float_eq(strtod(wait + strlen("\noutbox_relay_kafka_ack_wait_seconds "), NULL), 12.4,
                       0.001);
    cr_assert(strstr(body(), "\noutbox_relay_kafka_in_flight_messages 20\n"), "%s", body());
    cr_assert(strstr(body(), "\noutbox_relay_ready 0\n"), "%s", body());

    st.kafka_in_flight = 1;
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]acks 1 message in flight, no acknowledgement for 12 s\n"), "%s",
              body());

    /* The threshold is read at each request: a reload changes it at once. */
    cfg.ack_timeout_ms = 15000;
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 200);
    cfg.ack_timeout_ms = 0; /* off */
    st.kafka_ack_clock = ctx.mono_now - 3600;
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 200);
    cfg.ack_timeout_ms = 10000;

    /* Every message acknowledged, the commit waiting for a hung coordinator:
     * the relay is as stuck as with messages in flight. */
    st.kafka_in_flight = 0;
    st.kafka_committing = true;
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]acks 0 messages in flight and a transaction ending, no "
                             "acknowledgement for 3600 s\n"), "%s", body());
    st.kafka_committing = false;

    /* A replaced producer's messages, or an init of transactions, not
     * answered: nothing in flight, and the relay as stuck. */
    st.kafka_owed = true;
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]acks nothing in flight, but kafka has answered neither the "
                             "initialisation of transactions nor a replaced producer's messages for "
                             "3600 s\n"), "%s", body());
    st.kafka_owed = false;

    /* Nothing in flight: no evidence either way, however old the last ack. */
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 200);
    cr_assert_eq(exchange("GET /metrics HTTP/1.1\r\n\r\n"), 200);
    cr_assert(strstr(body(), "\noutbox_relay_kafka_ack_wait_seconds 0\n"), "%s", body());
}

Test(http, readyz_says_why_relaying_was_refused)
{
    st.refused = true;
    st.pg_up = false;
    snprintf(st.refused_reason, sizeof(st.refused_reason), "the connection is pooled");
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]database refused: the connection is pooled\n"), "%s", body());
    cr_assert(strstr(body(), "[-]postgres not connected (relaying refused; see database)\n"), "%s",
              body());
    st.role = STATS_ROLE_UNKNOWN;
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]role none (relaying refused; see database)\n"), "%s", body());
    cr_assert_eq(exchange("GET /status HTTP/1.1\r\n\r\n"), 200);
    cJSON *doc = cJSON_Parse(body());
    cr_assert_not_null(doc);
    cJSON *pg = cJSON_GetObjectItem(doc, "postgres");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(pg, "refused")));
    cr_assert_str_eq(cJSON_GetObjectItem(pg, "refused_reason")->valuestring,
                     "the connection is pooled");
    cJSON_Delete(doc);
    cr_assert_eq(exchange("GET /metrics HTTP/1.1\r\n\r\n"), 200);
    cr_assert(strstr(body(), "\noutbox_relay_refused 1\n"), "%s", body());
}

Test(http, status_says_why_postgres_is_not_connected)
{
    st.pg_up = false;
    snprintf(st.pg_error, sizeof st.pg_error, "connection to server at \"db\" (10.0.0.5), port "
             "5432 failed: FATAL:  connection requires a valid client certificate");
    cr_assert_eq(exchange("GET /status HTTP/1.1\r\n\r\n"), 200);
    cJSON *doc = cJSON_Parse(body());
    cr_assert_not_null(doc);
    cJSON *pg = cJSON_GetObjectItem(doc, "postgres");
    cr_assert_str_eq(cJSON_GetObjectItem(pg, "state")->valuestring, "down");
    cr_assert_str_eq(cJSON_GetObjectItem(pg, "error")->valuestring, st.pg_error);
    cr_assert_str_eq(cJSON_GetObjectItem(pg, "hint")->valuestring,
                     "the server requires a client certificate for this role: set sslcert and "
                     "sslkey");
    cJSON_Delete(doc);
    /* Connected: neither, whatever the last failure was. */
    st.pg_up = true;
    cr_assert_eq(exchange("GET /status HTTP/1.1\r\n\r\n"), 200);
    doc = cJSON_Parse(body());
    pg = cJSON_GetObjectItem(doc, "postgres");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(pg, "error")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(pg, "hint")));
    cJSON_Delete(doc);
}

Test(http, a_stuck_standby_names_the_lock_holder)
{
    st.role = STATS_ROLE_STANDBY;
    st.role_since = ctx.now - 40;
    st.holder = (struct stats_lock_holder){.known = true, .pid = 4242, .application_name = "psql",
                                           .client_addr = "10.0.0.5", .backend_start = 1.7e9,
                                           .state = "idle", .idle_seconds = 39.5};
    /* Standing by alone is ready: a standby takes over when needed. */
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 200);
    cr_assert_eq(exchange("GET /status HTTP/1.1\r\n\r\n"), 200);
    cJSON *doc = cJSON_Parse(body());
    cr_assert_not_null(doc);
    cJSON *lock = cJSON_GetObjectItem(doc, "leader_lock");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(lock, "held")));
    cr_assert_float_eq(cJSON_GetObjectItem(lock, "role_seconds")->valuedouble, 40, 0.01);
    cJSON *h = cJSON_GetObjectItem(lock, "holder");
    cr_assert_eq(cJSON_GetObjectItem(h, "pid")->valuedouble, 4242);
    cr_assert_str_eq(cJSON_GetObjectItem(h, "application_name")->valuestring, "psql");
    cr_assert_str_eq(cJSON_GetObjectItem(h, "client_addr")->valuestring, "10.0.0.5");
    cr_assert_str_eq(cJSON_GetObjectItem(h, "backend_start")->valuestring, "2023-11-14T22:13:20.000Z");
    cr_assert_str_eq(cJSON_GetObjectItem(h, "state")->valuestring, "idle");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(h, "looks_like_relay")));
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(lock, "standby_stuck")));
    cJSON_Delete(doc);

    st.standby_stuck = true;
    snprintf(st.standby_reason, sizeof(st.standby_reason), "standby for 40 s behind backend 4242");
    cr_assert_eq(exchange("GET /readyz?verbose HTTP/1.1\r\n\r\n"), 503);
    cr_assert(strstr(body(), "[-]role standby for 40 s behind backend 4242\n"), "%s", body());
    /* The leader itself is never stuck behind anybody. */
    st.role = STATS_ROLE_LEADER;
    cr_assert_eq(exchange("GET /readyz HTTP/1.1\r\n\r\n"), 200);
}

Test(http, row_security_makes_the_backlog_unknown)
{
    st.row_security = true;
    cr_assert_eq(exchange("GET /status HTTP/1.1\r\n\r\n"), 200);
    cJSON *doc = cJSON_Parse(body());
    cr_assert_not_null(doc);
    cJSON *backlog = cJSON_GetObjectItem(doc, "backlog");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(backlog, "rows")));
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(backlog, "unknown_reason")));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "postgres"), "row_security")));
    cJSON_Delete(doc);
    cr_assert_eq(exchange("GET /metrics HTTP/1.1\r\n\r\n"), 200);
    cr_assert(strstr(body(), "\noutbox_relay_row_security 1\n"), "%s", body());
    cr_assert_null(strstr(body(), "\noutbox_relay_backlog_rows "), "%s", body());
}

Test(http, status_is_json_with_what_an_operator_needs)
{
    char *const ov[] = {"postgres.conninfo=host=db password=hunter2", "kafka.sasl.password=s3cret",
                        "relay.batch_size=77"};
    char err[512];
    cr_assert_eq(config_load(&cfg, NULL, false, ov, 3, err, sizeof(err)), 0, "%s", err);
    st.published_total = 12;
    st.failed_total[STATS_FAIL_PERMANENT] = 2;
    st.backlog_known = true;
    st.backlog_rows = 5;
    st.oldest_unsent_age = 1.5;
    st.backlog_time = ctx.now - 1;
    st.dead_rows = 3;
    st.last_batch_rows = 10;
    st.last_batch_duration = 0.25;
    st.last_batch_time = ctx.now - 2;
    st.n_brokers = 1;
    st.brokers[0] = (struct stats_broker){.id = 1, .name = "k1:9092", .state = "UP"};
    st.kafka_in_flight = 7;
    st.kafka_ack_clock = ctx.mono_now - 0.25;

    cr_assert_eq(exchange("GET /status HTTP/1.1\r\n\r\n"), 200);
    cr_assert_null(strstr(body(), "hunter2"));
    cr_assert_null(strstr(body(), "s3cret"));
    cJSON *doc = cJSON_Parse(body());
    cr_assert_not_null(doc, "not JSON: %s", body());
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "role")->valuestring, "leader");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(doc, "ready")));
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "postgres"), "state")->valuestring, "up");
    cJSON *kafka = cJSON_GetObjectItem(doc, "kafka");
    cJSON *b0 = cJSON_GetArrayItem(cJSON_GetObjectItem(kafka, "brokers"), 0);
    cr_assert_str_eq(cJSON_GetObjectItem(b0, "name")->valuestring, "k1:9092");
    cr_assert_str_eq(cJSON_GetObjectItem(b0, "state")->valuestring, "UP");
    cr_assert_eq(cJSON_GetObjectItem(kafka, "messages_in_flight")->valuedouble, 7);
    cr_assert_float_eq(cJSON_GetObjectItem(kafka, "ack_wait_seconds")->valuedouble, 0.25, 0.001);
    cJSON *backlog = cJSON_GetObjectItem(doc, "backlog");
    cr_assert_eq(cJSON_GetObjectItem(backlog, "rows")->valuedouble, 5);
    /* measured a second ago at 1.5 s: 2.5 s now */
    cr_assert_float_eq(cJSON_GetObjectItem(backlog, "oldest_unsent_age_seconds")->valuedouble, 2.5,
                       0.01);
    cr_assert_eq(cJSON_GetObjectItem(doc, "dead_letter_count")->valuedouble, 3);
    cJSON *lb = cJSON_GetObjectItem(doc, "last_batch");
    cr_assert_eq(cJSON_GetObjectItem(lb, "rows")->valuedouble, 10);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(lb, "time")));
    cJSON *events = cJSON_GetObjectItem(doc, "events");
    cr_assert_eq(cJSON_GetObjectItem(events, "published_total")->valuedouble, 12);
    cr_assert_eq(
        cJSON_GetObjectItem(cJSON_GetObjectItem(events, "failed_total"), "permanent")->valuedouble, 2);
    cJSON *c = cJSON_GetObjectItem(doc, "config");
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "relay"), "batch_size")->valuedouble, 77);
    cr_assert_str_eq(
        cJSON_GetObjectItem(cJSON_GetObjectItem(c, "kafka"), "sasl.password")->valuestring, "********");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "postgres"), "conninfo")->valuestring,
                     "host=db password=********");
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(doc, "uptime_seconds")));
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(doc, "version")));
    cJSON_Delete(doc);
}

Test(http, status_before_anything_is_known)
{
    stats_init(&st);
    cr_assert_eq(exchange("GET /status HTTP/1.1\r\n\r\n"), 200);
    cJSON *doc = cJSON_Parse(body());
    cr_assert_not_null(doc);
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "role")->valuestring, "unknown");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(doc, "ready")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(doc, "last_batch")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "backlog"), "rows")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "kafka"), "brokers_up")));
    cJSON_Delete(doc);
}

Test(http, metrics_has_every_documented_family)
{
    stats_observe(&st.batch_duration, 0.003);
    stats_observe(&st.batch_duration, 100);
    st.backlog_known = true;
    st.backlog_rows = 4;
    struct http_server_stats srv = {.connections = 2, .rejected_total = 1, .evicted_total = 5};
    ctx.server = &srv;
    cr_assert_eq(exchange("GET /metrics HTTP/1.1\r\n\r\n"), 200);
    cr_assert(has_header("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
    const char *want[] = {
        "outbox_relay_build_info{version=\"",
        "\nprocess_start_time_seconds ",
        "\nprocess_cpu_seconds_total ",
        "\nprocess_resident_memory_bytes ",
        "\noutbox_relay_events_published_total 0\n",
        "\noutbox_relay_events_failed_total{reason=\"invalid\"} 0\n",
        "\noutbox_relay_events_failed_total{reason=\"permanent\"} 0\n",
        "\noutbox_relay_events_failed_total{reason=\"retriable\"} 0\n",
        "\noutbox_relay_events_dead_lettered_total 0\n",
        "\noutbox_relay_batches_total 0\n",
        "# TYPE outbox_relay_batch_duration_seconds histogram\n",
        "\noutbox_relay_batch_duration_seconds_bucket{le=\"0.0025\"} 0\n",
        "\noutbox_relay_batch_duration_seconds_bucket{le=\"0.005\"} 1\n",
        "\noutbox_relay_batch_duration_seconds_bucket{le=\"30\"} 1\n",
        "\noutbox_relay_batch_duration_seconds_bucket{le=\"+Inf\"} 2\n",
        "\noutbox_relay_batch_duration_seconds_count 2\n",
        "\noutbox_relay_batch_duration_seconds_sum 100.003",
        "# TYPE outbox_relay_delivery_latency_seconds histogram\n",
        "\noutbox_relay_backlog_rows 4\n",
        "\noutbox_relay_oldest_unsent_age_seconds ",
        "\noutbox_relay_dead_rows 0\n",
        "\noutbox_relay_leader 1\n",
        "\noutbox_relay_postgres_up 1\n",
        "\noutbox_relay_kafka_brokers_up 1\n",
        "\noutbox_relay_producer_queue_messages 0\n",
        "\noutbox_relay_kafka_in_flight_messages 0\n",
        "\noutbox_relay_kafka_ack_wait_seconds 0\n",
        "\noutbox_relay_halted 0\n",
        "\noutbox_relay_ready 1\n",
        "\noutbox_relay_http_connections 2\n",
        "\noutbox_relay_http_connections_rejected_total 1\n",
        "\noutbox_relay_http_connections_evicted_total 5\n",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_assert(strstr(body(), want[i]), "/metrics lacks \"%s\":\n%s", want[i], body());
}

Test(http, metrics_count_responses_by_status_code)
{
    struct http_server_stats srv = {0};
    http_server_count(&srv, 200);
    http_server_count(&srv, 200);
    http_server_count(&srv, 503);
    http_server_count(&srv, 418); /* never sent; counted, not lost */
    cr_assert_eq(srv.requests_total, 4);
    ctx.server = &srv;
    cr_assert_eq(exchange("GET /metrics HTTP/1.1\r\n\r\n"), 200);
    const char *want[] = {
        "# TYPE outbox_relay_http_requests_total counter\n",
        "\noutbox_relay_http_requests_total{code=\"200\"} 2\n",
        "\noutbox_relay_http_requests_total{code=\"503\"} 1\n",
        "\noutbox_relay_http_requests_total{code=\"404\"} 0\n",
        "\noutbox_relay_http_requests_total{code=\"other\"} 1\n",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_assert(strstr(body(), want[i]), "/metrics lacks \"%s\":\n%s", want[i], body());
}

Test(http, metrics_count_published_rows_per_topic_within_a_bound)
{
    stats_count_published(&st, "orders.order", false);
    stats_count_published(&st, "orders.order", false);
    stats_count_published(&st, "we\"ird", false);
    char name[32];
    for (int i = 0; i < STATS_MAX_TOPICS + 10; i++) {
        snprintf(name, sizeof name, "t%d", i);
        stats_count_published(&st, name, false);
    }
    cr_assert_eq(st.n_topics, STATS_MAX_TOPICS);
    cr_assert_eq(st.published_other, 12); /* 2 of the 64 slots went to the first topics */
    cr_assert_eq(exchange("GET /metrics HTTP/1.1\r\n\r\n"), 200);
    cr_assert(strstr(body(), "\noutbox_relay_events_published_by_topic_total{topic=\"orders.order\"} 2\n"),
              "%s", body());
    cr_assert(strstr(body(), "{topic=\"we\\\"ird\"} 1\n"), "label not escaped:\n%s", body());
    cr_assert(strstr(body(), "{topic=\"__other__\"} 12\n"), "%s", body());
    cr_assert_null(strstr(body(), "{topic=\"t70\"}"));
}

Test(http, metrics_say_whether_the_last_reload_succeeded)
{
    cr_assert_eq(exchange("GET /metrics HTTP/1.1\r\n\r\n"), 200);
    cr_assert(strstr(body(), "\noutbox_relay_config_last_reload_success 1\n"), "%s", body());
    cr_assert(strstr(body(), "\noutbox_relay_config_last_reload_success_timestamp_seconds "), "%s", body());
    double before = st.reload_time;
    stats_reloaded(&st, false);
    cr_assert_eq(st.reload_time, before, "a failed reload moved the success timestamp");
    cr_assert_eq(exchange("GET /metrics HTTP/1.1\r\n\r\n"), 200);
    cr_assert(strstr(body(), "\noutbox_relay_config_last_reload_success 0\n"), "%s", body());
    stats_reloaded(&st, true);
    cr_assert(st.reload_ok && st.reload_time >= before);
}

Test(http, metrics_leave_out_an_unknown_backlog)
{
    cr_assert_eq(exchange("GET /metrics HTTP/1.1\r\n\r\n"), 200);
    cr_assert_null(strstr(body(), "\noutbox_relay_backlog_rows "));
    cr_assert(strstr(body(), "# TYPE outbox_relay_backlog_rows gauge\n"));
}

Test(http, listen_addresses)
{
    struct sockaddr_storage a;
    char err[256];
    cr_assert_eq(listen_addr_parse("127.0.0.1:8423", &a, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(a.ss_family, AF_INET);
    cr_assert_eq(ntohs(((struct sockaddr_in *)&a)->sin_port), 8423);
    cr_assert_eq(listen_addr_parse("[::1]:9", &a, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(a.ss_family, AF_INET6);
    cr_assert_eq(listen_addr_parse("[::]:0", &a, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(listen_addr_parse("0.0.0.0:65535", &a, err, sizeof(err)), 0, "%s", err);

    const char *bad[] = {"8423", ":8423", "::1:8423", "[::1]8423", "[::1]", "localhost:8423",
                         "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:80x",
                         "[]:80", "1.2.3:80", "127.0.0.1:123456"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        cr_assert_eq(listen_addr_parse(bad[i], &a, err, sizeof(err)), -EINVAL, "%s accepted", bad[i]);
        cr_assert(strstr(err, bad[i]), "error for %s does not quote it: %s", bad[i], err);
    }
    cr_assert_eq(listen_addr_check("", err, sizeof(err)), 0);
}

Test(http, listen_is_checked_by_the_config_table)
{
    char err[512];
    char *const ov[] = {"http.listen=localhost:80"};
    cr_assert_eq(config_load(&cfg, NULL, false, ov, 1, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "http.listen"), "%s", err);
    char *const off[] = {"http.listen="};
    cr_assert_eq(config_load(&cfg, NULL, false, off, 1, err, sizeof(err)), 0, "%s", err);
    cr_assert_str_eq(cfg.http_listen, "");
}
