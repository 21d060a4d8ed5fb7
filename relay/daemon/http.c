/* http.c — the status endpoint's server on the relay's libuv loop.
 *
 * One request per connection (Connection: close). Each connection has a
 * deadline: the head must arrive, and the response be read, within
 * HTTP_TIMEOUT_MS, so idle and slow clients cannot pin memory; one sweep
 * timer enforces every deadline. At most HTTP_MAX_CONNECTIONS are open, which
 * bounds memory whatever clients do: a connection costs its handle and at
 * most HTTP_MAX_HEAD_BYTES of request target; reads go through one buffer
 * shared by all connections.
 *
 * The cap must not let slow clients lock out the probes (slowloris): a
 * liveness probe refused while the table is full gets a healthy relay
 * restarted. So a new connection at the cap takes the place of the oldest one
 * that already has its answer or, older than HTTP_EVICT_MIN_AGE_MS, has still
 * not sent its request. A probe sends its request with the handshake and is
 * answered on the next turn of the loop, long before it could be evicted; one
 * whose whole request head waits unread is never taken for slow. When
 * nothing can be evicted (a burst of brand-new connections), the newcomer is
 * not accepted yet: it waits in the kernel's accept queue, in arrival order,
 * rather than being reset, and the loop gets on with its other work. */
#include "daemon/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/errors.h"
#include "daemon/http_metrics.h"
#include "daemon/http_request.h"
#include "daemon/http_routes.h"
#include "base/listen_addr.h"
#include "base/log.h"

#define SWEEP_EVERY_MS 1000
/* After the response, wait this long for the client to close its side. */
#define LINGER_MS 2000
/* The connection-cap warning is repeated at most this often. */
#define REJECT_LOG_EVERY_MS 60000
/* While every connection is too young to evict, accepting is retried this often. */
#define ACCEPT_RETRY_MS 10

struct http_conn {
    uv_tcp_t tcp;                /* first member: the handle's owner is the connection */
    struct http_server *srv;
    struct http_conn *prev, *next;
    uint64_t deadline;           /* uv_now() milliseconds */
    uint64_t accepted_ms;        /* uv_now() at accept: eviction picks the oldest */
    struct http_request req;
    struct strbuf resp;
    uv_write_t write;
    uv_shutdown_t shutdown;
    bool responded;              /* the response is queued: later input is discarded */
    bool writing;
    bool eof;                    /* the client closed its side */
    bool closing;
};

struct http_server {
    uv_tcp_t listener;           /* first member: the handle's owner is the server */
    uv_timer_t sweep;
    uv_loop_t *loop;
    const struct relay_config *cfg;
    const struct relay_stats *stats;
    struct http_conn *conns;     /* open connections, not yet closing, oldest first */
    struct http_conn *newest;    /* the last of conns */
    int open;                    /* entries of conns: the cap applies to these */
    bool accept_waiting;         /* libuv holds a connection we have not accepted yet */
    bool admitting;              /* accept_waiting() is making room */
    uv_timer_t retry;            /* tries that accept again while nothing can be evicted */
    struct http_server_stats st;
    int handles;                 /* handles not yet closed: the server is freed at 0 */
    bool stopping;
    uint64_t reject_logged_ms;   /* rate limits of the warnings */
    uint64_t full_logged_ms;
    uint64_t accept_logged_ms;
    char address[INET6_ADDRSTRLEN + 16];
    /* libuv calls alloc_cb and read_cb back to back for one stream, so one
     * buffer serves every connection. */
    char readbuf[16384];
};

/* ---- connections --------------------------------------------------------- */

static void server_handle_closed(struct http_server *srv)
{
    if (--srv->handles == 0 && srv->stopping)
        free(srv);
}

static void accept_waiting(struct http_server *srv);

static void on_conn_closed(uv_handle_t *h)
{
    struct http_conn *c = (struct http_conn *)h;
    struct http_server *srv = c->srv;
    http_request_free(&c->req);
    strbuf_free(&c->resp);
    free(c);
    srv->st.connections--;
    server_handle_closed(srv);
}

/* @p reset: an abortive close (RST), for clients not worth a FIN handshake
 * and a TIME_WAIT on our side. */
static void conn_close(struct http_conn *c, bool reset)
{
    if (c->closing)
        return;
    c->closing = true;
    struct http_server *srv = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        srv->newest = c->prev;
    c->prev = c->next = NULL;
    srv->open--;
    /* Pending write and shutdown requests are cancelled before the close
     * callback runs; their callbacks see c->closing. close_reset refuses a
     * handle with a shutdown under way: then a plain close does. */
    if (!reset || uv_tcp_close_reset(&c->tcp, on_conn_closed) < 0)
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    /* A slot is free: a connection waiting to be accepted can have it. */
    accept_waiting(srv);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    struct http_conn *c = req->data;
    if (c->closing)
        return;
    /* Our side is closed; wait briefly for the client's EOF so that what it
     * sent after the head cannot turn our close into a reset that destroys
     * the response before the client read it. */
    if (status < 0 || c->eof) {
        conn_close(c, false);
        return;
    }
    c->deadline = uv_now(c->srv->loop) + LINGER_MS;
}

static void on_write(uv_write_t *req, int status)
{
    struct http_conn *c = req->data;
    c->writing = false;
    if (c->closing)
        return;
    strbuf_free(&c->resp);
    if (status < 0 || c->eof) {
        conn_close(c, false);
        return;
    }
    c->shutdown.data = c;
    if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) < 0)
        conn_close(c, false);
}

static void respond(struct http_conn *c)
{
    struct http_server *srv = c->srv;
    struct http_context ctx = {
        .cfg = srv->cfg,
        .stats = srv->stats,
        .server = &srv->st,
        .now = stats_now(),
        .mono_now = stats_mono(),
    };
    c->responded = true;
    int status = http_respond(&c->req, &ctx, &c->resp);
    http_server_count(&srv->st, status);
    if (log_enabled(LOG_LVL_DEBUG))
        log_debug("http request", "method=%s target=%s status=%d",
                  c->req.state == HTTP_REQ_DONE
                      ? http_method_str((enum http_method)c->req.parser.method) : "-",
                  log_quote(c->req.url ? c->req.url : ""), status);
    if (c->resp.oom) {
        conn_close(c, false);
        return;
    }
    /* The client gets the same time again to read what we send. */
    c->deadline = uv_now(srv->loop) + HTTP_TIMEOUT_MS;
    uv_buf_t buf = uv_buf_init(c->resp.buf, (unsigned)c->resp.len);
    c->write.data = c;
    if (uv_write(&c->write, (uv_stream_t *)&c->tcp, &buf, 1, on_write) < 0) {
        conn_close(c, false);
        return;
    }
    c->writing = true;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct http_conn *c = (struct http_conn *)h;
    *buf = uv_buf_init(c->srv->readbuf, sizeof(c->srv->readbuf));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct http_conn *c = (struct http_conn *)s;
    if (c->closing)
        return;
    if (nread < 0) {
        /* EOF or a reset. A client that half-closed after its request still
         * gets the response being written. */
        c->eof = true;
        uv_read_stop(s);
        if (!c->writing)
            conn_close(c, false);
        return;
    }
    if (nread == 0 || c->responded)
        return; /* after the response, input is drained and dropped */
    if (http_request_feed(&c->req, buf->base, (size_t)nread) != HTTP_REQ_MORE)
        respond(c);
}

static void free_handle(uv_handle_t *h)
{
    free(h);
}

/* Accepts and resets at once: an unaccepted connection would stop libuv
 * from accepting any other. */
static void reject(struct http_server *srv)
{
    srv->st.connections_total++;
    srv->st.rejected_total++;
    uv_tcp_t *t = malloc(sizeof(*t));
    if (!t) {
        log_error("out of memory refusing a status endpoint connection", "");
        return;
    }
    uv_tcp_init(srv->loop, t);
    if (uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)t) == 0)
        uv_tcp_close_reset(t, free_handle);
    else
        uv_close((uv_handle_t *)t, free_handle);
    uint64_t now = uv_now(srv->loop);
    if (srv->reject_logged_ms == 0 || now - srv->reject_logged_ms >= REJECT_LOG_EVERY_MS) {
        srv->reject_logged_ms = now;
        log_warn("out of memory; closing new status endpoint connections",
                 "rejected_total=%" PRIu64, srv->st.rejected_total);
    }
}

/* @return whether the end of a request head waits unread in the socket. When
 * the loop stalls (a busy machine), a probe accepted on one turn is read only
 * on the next, and that turn may handle the listener first: its age then says
 * nothing about the client, which sent its whole request at once. */
static bool head_waiting(struct http_conn *c)
{
    uv_os_fd_t fd;
    char buf[HTTP_MAX_HEAD_BYTES];
    if (uv_fileno((const uv_handle_t *)&c->tcp, &fd) < 0)
        return false;
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_PEEK | MSG_DONTWAIT);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    return strstr(buf, "\r\n\r\n") != NULL;
}

/* Closes the connection that costs least to lose, to make room for a new one:
 * the oldest that has its whole answer (only its closing handshake is left),
 * else the oldest that has not sent its request in HTTP_EVICT_MIN_AGE_MS (a
 * slow or idle client). One whose answer is still being written is kept: it
 * will be done or timed out soon. @return false if none qualifies. */
static bool evict_one(struct http_server *srv)
{
    uint64_t now = uv_now(srv->loop);
    struct http_conn *slow = NULL;
    for (struct http_conn *c = srv->conns; c; c = c->next) {
        if (c->responded && !c->writing) {
            srv->st.evicted_total++;
            conn_close(c, false);
            return true;
        }
        if (!slow && !c->responded && now - c->accepted_ms >= HTTP_EVICT_MIN_AGE_MS && !head_waiting(c))
            slow = c;
    }
    if (!slow)
        return false;
    srv->st.evicted_total++;
    conn_close(slow, true);
    return true;
}

static void accept_one(struct http_server *srv)
{
    struct http_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        reject(srv);
        return;
    }
    uv_tcp_init(srv->loop, &c->tcp);
    c->srv = srv;
    srv->handles++;
    srv->st.connections++;
    srv->st.connections_total++;
    srv->open++;
    c->prev = srv->newest;
    if (c->prev)
        c->prev->next = c;
    else
        srv->conns = c;
    srv->newest = c;
    http_request_init(&c->req);
    c->accepted_ms = uv_now(srv->loop);
    c->deadline = c->accepted_ms + HTTP_TIMEOUT_MS;

    if (uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c, false);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
        conn_close(c, false);
}

static void on_retry(uv_timer_t *t)
{
    accept_waiting(t->data);
}

/* Accepts the connection libuv holds, making room for it if the table is
 * full. If nothing can be evicted it stays where it is: libuv stops watching
 * the listener until uv_accept(), so the kernel queues the next ones too. */
static void accept_waiting(struct http_server *srv)
{
    /* conn_close() calls back here: not while this call is evicting. */
    if (!srv->accept_waiting || srv->stopping || srv->admitting)
        return;
    srv->admitting = true;
    bool room = srv->open < HTTP_MAX_CONNECTIONS || evict_one(srv);
    srv->admitting = false;
    if (!room) {
        if (!uv_is_active((uv_handle_t *)&srv->retry))
            uv_timer_start(&srv->retry, on_retry, ACCEPT_RETRY_MS, 0);
        return;
    }
    srv->accept_waiting = false;
    uv_timer_stop(&srv->retry);
    accept_one(srv);
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct http_server *srv = (struct http_server *)listener;
    if (status < 0) {
        /* E.g. out of descriptors: libuv sheds the connection itself; say so
         * once a minute, not once per attempt. */
        uint64_t now = uv_now(srv->loop);
        if (srv->accept_logged_ms == 0 || now - srv->accept_logged_ms >= REJECT_LOG_EVERY_MS) {
            srv->accept_logged_ms = now;
            log_warn("status endpoint accept failed", "error=%s", uv_strerror(status));
        }
        return;
    }
    if (srv->open >= HTTP_MAX_CONNECTIONS) {
        uint64_t now = uv_now(srv->loop);
        if (srv->full_logged_ms == 0 || now - srv->full_logged_ms >= REJECT_LOG_EVERY_MS) {
            srv->full_logged_ms = now;
            log_warn("status endpoint connection cap reached; evicting idle and slow clients",
                     "max_connections=%d evicted_total=%" PRIu64, HTTP_MAX_CONNECTIONS,
                     srv->st.evicted_total);
        }
    }
    srv->accept_waiting = true;
    accept_waiting(srv);
}

static void on_sweep(uv_timer_t *t)
{
    struct http_server *srv = t->data;
    uint64_t now = uv_now(srv->loop);
    struct http_conn *next;
    for (struct http_conn *c = srv->conns; c; c = next) {
        next = c->next;
        if (now >= c->deadline) {
            if (!c->responded)
                srv->st.timeouts_total++;
            conn_close(c, true);
        }
    }
}

/* ---- the server ------------------------------------------------------------ */

static void on_server_handle_closed(uv_handle_t *h)
{
    server_handle_closed(h->data);
}

int http_start(struct http_server **out, uv_loop_t *loop, const struct relay_config *cfg,
               const struct relay_stats *stats, char *errbuf, size_t errlen)
{
    *out = NULL;
    if (!cfg->http_listen || !*cfg->http_listen)
        return 0;

    struct sockaddr_storage addr;
    int rc = listen_addr_parse(cfg->http_listen, &addr, errbuf, errlen);
    if (rc < 0)
        return rc;

    struct http_server *srv = calloc(1, sizeof(*srv));
    if (!srv) {
        errbuf_fail(errbuf, errlen, "out of memory");
        return -ENOMEM;
    }
    srv->loop = loop;
    srv->cfg = cfg;
    srv->stats = stats;
    uv_tcp_init(loop, &srv->listener);
    srv->listener.data = srv;
    srv->handles = 1;

    rc = uv_tcp_bind(&srv->listener, (const struct sockaddr *)&addr, 0);
    if (rc == 0)
        /* The kernel caps it at net.core.somaxconn: a burst of probes and
         * scrapers waits in the accept queue instead of retrying SYNs. */
        rc = uv_listen((uv_stream_t *)&srv->listener, SOMAXCONN, on_connection);
    if (rc < 0) {
        errbuf_fail(errbuf, errlen, "http.listen=%s: cannot listen: %s", cfg->http_listen,
             uv_strerror(rc));
        srv->stopping = true;
        uv_close((uv_handle_t *)&srv->listener, on_server_handle_closed);
        return rc;
    }

    /* Port 0 picks a free port: log the one we got, so that it can be found. */
    struct sockaddr_storage bound;
    int blen = sizeof(bound);
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&bound, &blen) == 0) {
        if (bound.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&bound, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&bound, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
        }
    }
    snprintf(srv->address, sizeof(srv->address), bound.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d",
             ip, port);

    uv_timer_init(loop, &srv->sweep);
    srv->sweep.data = srv;
    srv->handles++;
    uv_timer_init(loop, &srv->retry);
    srv->retry.data = srv;
    srv->handles++;
    uv_timer_start(&srv->sweep, on_sweep, SWEEP_EVERY_MS, SWEEP_EVERY_MS);

    log_info("status endpoint listening", "address=%s endpoints=\"%s\"", srv->address,
             http_routes_paths());
    *out = srv;
    return 0;
}

void http_stop(struct http_server *srv)
{
    if (!srv || srv->stopping)
        return;
    srv->stopping = true;
    uv_close((uv_handle_t *)&srv->listener, on_server_handle_closed);
    uv_timer_stop(&srv->sweep);
    uv_close((uv_handle_t *)&srv->sweep, on_server_handle_closed);
    uv_close((uv_handle_t *)&srv->retry, on_server_handle_closed);
    while (srv->conns)
        conn_close(srv->conns, false);
}
