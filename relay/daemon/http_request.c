/* http_request.c — from request bytes to a complete response, without
 * sockets: the head parsed by libhttp-parser, the answer asked of the route
 * table (http_routes.c), the status line and headers around it. See
 * http_request.h. */
#include "daemon/http_request.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/http_routes.h"

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

/* ---- the response ------------------------------------------------------ */

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

int http_respond(const struct http_request *req, const struct http_context *ctx,
                 struct strbuf *out)
{
    struct http_reply reply = {.ctype = "text/plain; charset=utf-8"};
    if (req->state == HTTP_REQ_DONE) {
        http_route(req->url, req->url_len, req->parser.method, ctx, &reply);
    } else {
        reply.status = req->status ? req->status : 400;
        strbuf_printf(&reply.body, "%s\n", reason_phrase(reply.status));
    }
    if (reply.body.oom) {
        strbuf_reset(&reply.body);
        reply.ctype = "text/plain; charset=utf-8";
        reply.status = 500;
        strbuf_printf(&reply.body, "out of memory\n");
    }
    /* HEAD: the headers GET would send, Content-Length included, no body. */
    bool head = req->state == HTTP_REQ_DONE && req->parser.method == HTTP_HEAD;

    strbuf_printf(out,
                  "HTTP/1.1 %d %s\r\n"
                  "Content-Type: %s\r\n"
                  "Content-Length: %zu\r\n"
                  "Cache-Control: no-store\r\n"
                  "X-Content-Type-Options: nosniff\r\n"
                  "%s%s%s"
                  "Connection: close\r\n"
                  "\r\n"
                  "%s",
                  reply.status, reason_phrase(reply.status), reply.ctype, reply.body.len,
                  reply.allow[0] ? "Allow: " : "", reply.allow, reply.allow[0] ? "\r\n" : "",
                  head ? "" : strbuf_str(&reply.body));
    strbuf_free(&reply.body);
    return reply.status;
}
