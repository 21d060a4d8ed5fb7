/* http_request.h — the status endpoint's request layer: bytes in, a complete
 * response out, without any socket, so the unit tests and the libFuzzer
 * target (tests/fuzz/fuzz_http.c) drive exactly the code the daemon runs.
 * Requests are parsed by libhttp-parser; only the head is read. Every
 * response carries `Connection: close`: scrapers and probes open one
 * connection per request anyway, and it keeps the server free of keep-alive
 * state. */
#ifndef OUTBOX_HTTP_REQUEST_H
#define OUTBOX_HTTP_REQUEST_H

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>

#include "daemon/http_context.h"
#include "base/strbuf.h"

/** Request line plus headers larger than this are refused with 431. */
#define HTTP_MAX_HEAD_BYTES 8192

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

#endif
