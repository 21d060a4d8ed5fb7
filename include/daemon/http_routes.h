/* http_routes.h — the status endpoint's one route table: which paths exist,
 * the methods they take and who answers them. It drives routing, the 404's
 * list of endpoints and the start-up log line. */
#ifndef OUTBOX_HTTP_ROUTES_H
#define OUTBOX_HTTP_ROUTES_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/http_context.h"
#include "base/strbuf.h"

/** What a route answers; the request layer wraps it into a response. */
struct http_reply {
    int status;
    const char *ctype;          /* Content-Type */
    char allow[48];             /* the Allow header's value (405), "" otherwise */
    struct strbuf body;
};

/** Answers a request for @p url (the request target, @p url_len bytes; NULL
 *  when there is none) with method @p method (libhttp-parser's enum
 *  http_method) into @p reply, whose body must be empty: the route's answer,
 *  or 400 (no path), 404 (no route) or 405 (a method the route does not take). */
void http_route(const char *url, size_t url_len, int method, const struct http_context *ctx,
                struct http_reply *reply);

/** @return the paths of every route, separated by spaces ("/livez /healthz …"). */
const char *http_routes_paths(void);

#endif
