/* http_context.h — what every response of the status endpoint is rendered
 * from, shared by the request layer (http_request.h), the route table
 * (http_routes.h) and the documents (http_status.h, http_metrics.h). */
#ifndef OUTBOX_HTTP_CONTEXT_H
#define OUTBOX_HTTP_CONTEXT_H

#include "config/config.h"
#include "base/stats.h"

struct http_server_stats; /* http_metrics.h */

/** Everything a response is rendered from. */
struct http_context {
    const struct relay_config *cfg;            /* the live configuration */
    const struct relay_stats *stats;
    const struct http_server_stats *server;    /* may be NULL */
    double now;                                /* unix seconds */
    double mono_now;                           /* stats_mono(): for durations */
};

#endif
