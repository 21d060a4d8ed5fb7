/* http_metrics.h — /metrics: the Prometheus text exposition of relay_stats,
 * and what the status endpoint's server counts about itself for it. */
#ifndef OUTBOX_HTTP_METRICS_H
#define OUTBOX_HTTP_METRICS_H

#include <stdint.h>

#include "daemon/http_context.h"
#include "base/strbuf.h"

/** The statuses the endpoint answers with, one label value each. */
#define HTTP_STATUS_CODES 8
extern const int http_status_codes[HTTP_STATUS_CODES];

/** What the server counts about itself, for /metrics. */
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

/** Appends the Prometheus text exposition (format 0.0.4) to @p out. */
void http_metrics(const struct http_context *ctx, struct strbuf *out);

#endif
