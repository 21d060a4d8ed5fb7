/* http.h — the status endpoint: /livez, /healthz, /readyz, /metrics and
 * /status over HTTP/1.x, served on the relay's libuv loop.
 *
 * Two layers. The server (http_start/http_stop) owns sockets, timeouts and
 * the connection cap. The request layer (http_request_*, http_respond) turns
 * bytes into a complete response without any socket, so the unit tests and
 * the libFuzzer target (tests/fuzz/fuzz_http.c) drive exactly the code the
 * daemon runs. Requests are parsed by libhttp-parser. Every response carries
 * `Connection: close`: scrapers and probes open one connection per request
 * anyway, and it keeps the server free of keep-alive state. */
#ifndef OUTBOX_HTTP_H
#define OUTBOX_HTTP_H

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "stats.h"
#include "strbuf.h"

/** Request line plus headers larger than this are refused with 431. */
#define HTTP_MAX_HEAD_BYTES 8192
/** A client must send its whole request head, and read the response, within this. */
#define HTTP_TIMEOUT_MS 10000
/** At most this many connections are open. A new one beyond it takes the
 *  place of the oldest that is done or has not sent its request within
 *  HTTP_EVICT_MIN_AGE_MS; while none qualifies it waits to be accepted. */
#define HTTP_MAX_CONNECTIONS 256
/** A connection younger than this is never evicted: a real client sends its
 *  request with the handshake, so by then it has been read. */
#define HTTP_EVICT_MIN_AGE_MS 100

struct http_server;

/** What the server counts about itself, for /metrics. */
/** The statuses the endpoint answers with, one label value each. */
#define HTTP_STATUS_CODES 8
extern const int http_status_codes[HTTP_STATUS_CODES];

struct http_server_stats {
    int connections;              /* open right now */
    uint64_t connections_total;   /* accepted, including rejected ones */
    uint64_t rejected_total;      /* closed at once: out of memory */
    uint64_t evicted_total;       /* closed to make room for a new connection */
    uint64_t timeouts_total;      /* closed for being idle or slow */
    uint64_t requests_total;      /* responses sent (any status) */
    uint64_t by_code[HTTP_STATUS_CODES + 1]; /* per http_status_codes[]; last: any other */
};

/** Counts one response of status @p code in @p st (requests_total and the
 *  per-code count of outbox_relay_http_requests_total{code}). */
void http_server_count(struct http_server_stats *st, int code);

/** Everything a response is rendered from. */
struct http_context {
    const struct relay_config *cfg;            /* the live configuration */
    const struct relay_stats *stats;
    const struct http_server_stats *server;    /* may be NULL */
    double now;                                /* unix seconds */
    double mono_now;                           /* stats_mono(): for durations */
};

enum http_req_state {
    HTTP_REQ_MORE = 0,  /* the head is not complete: feed more bytes */
    HTTP_REQ_DONE,      /* the head is complete: respond */
    HTTP_REQ_ERROR,     /* malformed or too large: respond (with req->status) */
};

/** One request being parsed. Only the head is read: no endpoint takes a body. */
struct http_request {
    http_parser parser;
    enum http_req_state state;
    int status;                 /* HTTP_REQ_ERROR: 400, 431, 505 (or 500: no memory) */
    size_t head_bytes;          /* bytes of the head consumed so far */
    size_t field_bytes;         /* URL and header bytes the callbacks saw (stops early) */
    char *url;                  /* request target, NUL-terminated (allocated) */
    size_t url_len, url_cap;
    bool oom;
};

/** Prepares @p req for a new request. */
void http_request_init(struct http_request *req);

/** Frees what @p req allocated; it may be initialised again afterwards. */
void http_request_free(struct http_request *req);

/** Feeds the next @p len bytes received. Bytes after a complete head are
 *  ignored. @return the new state (also in req->state). */
enum http_req_state http_request_feed(struct http_request *req, const char *data, size_t len);

/** Appends the whole response (status line, headers, body unless HEAD) to
 *  @p out for a request in state HTTP_REQ_DONE or HTTP_REQ_ERROR.
 *  @return the status code sent. */
int http_respond(const struct http_request *req, const struct http_context *ctx,
                 struct strbuf *out);

/** Evaluates the readiness checks of ctx->stats (thresholds from ctx->cfg,
 *  at ctx->mono_now); with @p verbose_out (may be NULL) each check is
 *  appended as "[+]name ok" or "[-]name reason" lines.
 *  @return true when every check passes. */
bool http_ready(const struct http_context *ctx, struct strbuf *verbose_out);

/** Appends the Prometheus text exposition (format 0.0.4) to @p out. */
void http_metrics(const struct http_context *ctx, struct strbuf *out);

/** Starts listening on cfg->http_listen (an empty value disables the endpoint:
 *  *out = NULL, return 0). @p cfg and @p stats are read at each request and
 *  must outlive the server. Logs the address actually bound (port 0 picks one).
 *  @return 0, or a negative errno with errbuf naming the problem. */
int http_start(struct http_server **out, uv_loop_t *loop, const struct relay_config *cfg,
               const struct relay_stats *stats, char *errbuf, size_t errlen);

/** Closes the listener and every connection; memory is freed in the close
 *  callbacks, so the loop must run once more. NULL is a no-op. */
void http_stop(struct http_server *srv);

#endif
