/* http.h — the status endpoint's server: /livez, /healthz, /readyz, /metrics
 * and /status over HTTP/1.x, served on the relay's libuv loop.
 *
 * The server owns sockets, timeouts and the connection cap; what a request is
 * answered is the request layer's (http_request.h) and the route table's
 * (http_routes.h). */
#ifndef OUTBOX_HTTP_H
#define OUTBOX_HTTP_H

#include <stddef.h>
#include <uv.h>

#include "config/config.h"
#include "base/stats.h"

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
