/* http_routes.c — the status endpoint's route table and the small answers
 * (/livez, /healthz, /readyz); /metrics is http_metrics.c's, /status
 * http_status.c's. See http_routes.h. */
#include "daemon/http_routes.h"

#include <http_parser.h>
#include <string.h>

#include "daemon/health.h"
#include "daemon/http_metrics.h"
#include "daemon/http_status.h"

typedef void (*route_fn)(const struct http_context *ctx, bool verbose, struct http_reply *reply);

static void serve_live(const struct http_context *ctx, bool verbose, struct http_reply *reply)
{
    /* Answering at all proves the loop turns: that is all liveness means. */
    (void)ctx;
    (void)verbose;
    strbuf_printf(&reply->body, "ok\n");
    reply->status = 200;
}

static void serve_readyz(const struct http_context *ctx, bool verbose, struct http_reply *reply)
{
    struct strbuf lines = {0};
    bool ready = health_ready(ctx->stats, ctx->cfg, ctx->mono_now, &lines);
    /* A failing probe says why even without ?verbose: that is when it matters. */
    if (verbose || !ready)
        strbuf_printf(&reply->body, "%s%s", strbuf_str(&lines),
                      ready ? "readyz check passed\n" : "readyz check failed\n");
    else
        strbuf_printf(&reply->body, "ok\n");
    strbuf_free(&lines);
    reply->status = ready ? 200 : 503;
}

static void serve_metrics(const struct http_context *ctx, bool verbose, struct http_reply *reply)
{
    (void)verbose;
    reply->ctype = "text/plain; version=0.0.4; charset=utf-8";
    http_metrics(ctx, &reply->body);
    reply->status = 200;
}

static void serve_status(const struct http_context *ctx, bool verbose, struct http_reply *reply)
{
    (void)verbose;
    if (http_status_render(ctx, &reply->body) < 0) {
        strbuf_printf(&reply->body, "out of memory\n");
        reply->status = 500;
        return;
    }
    reply->ctype = "application/json";
    reply->status = 200;
}

/* Every route takes GET and HEAD: HEAD is answered with GET's headers. */
#define GET_HEAD ((1u << HTTP_GET) | (1u << HTTP_HEAD))

/* The one list of routes: path, methods, handler, what it answers. */
#define HTTP_ROUTES(X)                                                                             \
    X("/livez", GET_HEAD, serve_live, "liveness: 200 while the event loop turns")                 \
    X("/healthz", GET_HEAD, serve_live, "the same as /livez")                                     \
    X("/readyz", GET_HEAD, serve_readyz, "readiness: 200 when every check passes, else 503")      \
    X("/metrics", GET_HEAD, serve_metrics, "Prometheus text format 0.0.4")                        \
    X("/status", GET_HEAD, serve_status, "what the relay knows about itself, as JSON")

static const struct route {
    const char *path;
    unsigned methods;           /* bit (1 << enum http_method) per method taken */
    route_fn fn;
    const char *description;
} routes[] = {
#define ROUTE_ROW(path, methods, fn, description) {path, methods, fn, description},
    HTTP_ROUTES(ROUTE_ROW)
#undef ROUTE_ROW
};

/* " /livez /healthz …": the leading space is skipped. */
static const char route_paths[] =
#define ROUTE_PATH(path, methods, fn, description) " " path
    HTTP_ROUTES(ROUTE_PATH)
#undef ROUTE_PATH
    ;

const char *http_routes_paths(void)
{
    return route_paths + 1;
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

/* 405: the methods @p r takes, in the Allow header ("GET, HEAD") and in
 * words in the body ("GET or HEAD"). */
static void refuse_method(const struct route *r, struct http_reply *reply)
{
    struct strbuf words = {0};
    size_t n = 0, total = 0;
    for (unsigned m = 0; m < 32; m++)
        total += (r->methods >> m) & 1u;
    for (unsigned m = 0; m < 32; m++) {
        if (!((r->methods >> m) & 1u))
            continue;
        const char *name = http_method_str((enum http_method)m);
        n++;
        strbuf_printf(&words, "%s%s", n == 1 ? "" : n == total ? " or " : ", ", name);
        size_t used = strlen(reply->allow);
        snprintf(reply->allow + used, sizeof reply->allow - used, "%s%s", n == 1 ? "" : ", ", name);
    }
    strbuf_printf(&reply->body, "method not allowed (%s)\n", strbuf_str(&words));
    strbuf_free(&words);
    reply->status = 405;
}

void http_route(const char *url, size_t url_len, int method, const struct http_context *ctx,
                struct http_reply *reply)
{
    reply->ctype = "text/plain; charset=utf-8";
    reply->allow[0] = '\0';
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (!url || http_parser_parse_url(url, url_len, 0, &u) != 0 || !(u.field_set & (1 << UF_PATH))) {
        strbuf_printf(&reply->body, "bad request target\n");
        reply->status = 400;
        return;
    }
    const char *path = url + u.field_data[UF_PATH].off;
    size_t plen = u.field_data[UF_PATH].len;
    const char *query = (u.field_set & (1 << UF_QUERY)) ? url + u.field_data[UF_QUERY].off : "";
    size_t qlen = (u.field_set & (1 << UF_QUERY)) ? u.field_data[UF_QUERY].len : 0;

    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const struct route *r = &routes[i];
        if (strlen(r->path) != plen || memcmp(r->path, path, plen) != 0)
            continue;
        if (method < 0 || method >= 32 || !((r->methods >> method) & 1u)) {
            refuse_method(r, reply);
            return;
        }
        r->fn(ctx, query_flag(query, qlen, "verbose"), reply);
        return;
    }
    strbuf_printf(&reply->body, "not found; endpoints: %s\n", http_routes_paths());
    reply->status = 404;
}
