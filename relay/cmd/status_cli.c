/* status_cli.c — `outbox-relay status`: a small blocking HTTP/1.1 client
 * (one GET per connection, libhttp-parser reading the response) and the
 * summary an operator reads first: ready or not and why, role, backlog,
 * throughput, brokers. */
#include "cmd/status_cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <http_parser.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "build_config.h"
#include "base/errors.h"
#include "base/listen_addr.h"
#include "base/strbuf.h"

#define EXIT_NOT_READY 1
/* The whole exchange with a relay that is alive takes milliseconds. */
#define CONNECT_TIMEOUT_MS 3000
#define REQUEST_TIMEOUT_MS 5000
#define MAX_RESPONSE_BYTES (4 * 1024 * 1024)

struct target {
    char host[256];      /* without IPv6 brackets */
    char port[8];
    char hostport[300];  /* as the Host header wants it */
    char base[512];      /* path prefix, without trailing '/' */
};

struct response {
    int status;          /* 0: none */
    struct strbuf body;
    bool complete;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "http://host:port/prefix", "host:port" or "[::1]:port". */
static int parse_target(const char *url, struct target *t)
{
    char buf[1024];
    if (strncmp(url, "https://", 8) == 0) {
        fprintf(stderr, "outbox-relay status: %s: the status endpoint speaks plain HTTP\n", url);
        return -EINVAL;
    }
    snprintf(buf, sizeof(buf), "%s%s", strstr(url, "://") ? "" : "http://", url);
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (http_parser_parse_url(buf, strlen(buf), 0, &u) != 0 || !(u.field_set & (1 << UF_HOST)) ||
        strncmp(buf, "http://", 7) != 0) {
        fprintf(stderr, "outbox-relay status: \"%s\" is not an http://host:port URL\n", url);
        return -EINVAL;
    }
    int hlen = u.field_data[UF_HOST].len;
    snprintf(t->host, sizeof(t->host), "%.*s", hlen, buf + u.field_data[UF_HOST].off);
    snprintf(t->port, sizeof(t->port), "%u", (u.field_set & (1 << UF_PORT)) ? u.port : 80);
    bool v6 = strchr(t->host, ':') != NULL;
    snprintf(t->hostport, sizeof(t->hostport), v6 ? "[%s]:%s" : "%s:%s", t->host, t->port);
    t->base[0] = '\0';
    if (u.field_set & (1 << UF_PATH)) {
        int plen = u.field_data[UF_PATH].len;
        const char *p = buf + u.field_data[UF_PATH].off;
        while (plen > 0 && p[plen - 1] == '/')
            plen--;
        snprintf(t->base, sizeof(t->base), "%.*s", plen, p);
    }
    return 0;
}

/* The URL a relay with @p cfg listens on; wildcard addresses are asked on loopback. */
static int target_from_config(const struct relay_config *cfg, char *url, size_t len)
{
    const char *listen = cfg->http_listen ? cfg->http_listen : "";
    if (!*listen) {
        fprintf(stderr, "outbox-relay status: the status endpoint is disabled (http.listen is "
                        "empty); pass --url\n");
        return -ENOENT;
    }
    char err[256];
    if (listen_addr_parse(listen, NULL, err, sizeof(err)) < 0) {
        fprintf(stderr, "outbox-relay status: http.listen: %s\n", err);
        return -EINVAL;
    }
    if (strncmp(listen, "0.0.0.0:", 8) == 0)
        snprintf(url, len, "http://127.0.0.1:%s", listen + 8);
    else if (strncmp(listen, "[::]:", 5) == 0)
        snprintf(url, len, "http://[::1]:%s", listen + 5);
    else
        snprintf(url, len, "http://%s", listen);
    return 0;
}

/* ---- one GET ----------------------------------------------------------- */

static int connect_to(const struct target *t, char *why, size_t whylen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(t->host, t->port, &hints, &res);
    if (rc != 0) {
        snprintf(why, whylen, "%s: %s", t->host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    snprintf(why, whylen, "no address");
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            snprintf(why, whylen, "socket: %s", strerror(errno));
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int err = 0;
            socklen_t elen = sizeof(err);
            int n = poll(&p, 1, CONNECT_TIMEOUT_MS);
            if (n == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == 0)
                break;
            snprintf(why, whylen, "connect: %s", n == 0 ? "timed out" : strerror(err ? err : errno));
        } else {
            snprintf(why, whylen, "connect: %s", strerror(errno));
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

static int on_status_code(http_parser *p, const char *at, size_t len)
{
    (void)at;
    (void)len;
    struct response *r = p->data;
    r->status = (int)p->status_code;
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    struct response *r = p->data;
    strbuf_printf(&r->body, "%.*s", (int)len, at);
    return r->body.oom ? -1 : 0;
}

static int on_complete(http_parser *p)
{
    ((struct response *)p->data)->complete = true;
    return 0;
}

static const http_parser_settings response_settings = {
    .on_status = on_status_code,
    .on_body = on_body,
    .on_message_complete = on_complete,
};

/* GET base+path. @return 0 with @p r filled, or -1 with @p why. */
static int get(const struct target *t, const char *path, struct response *r, char *why,
               size_t whylen)
{
    memset(r, 0, sizeof(*r));
    int fd = connect_to(t, why, whylen);
    if (fd < 0)
        return -1;

    char req[1200];
    int n = snprintf(req, sizeof(req),
                     "GET %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: outbox-relay/%s\r\n"
                     "Accept: */*\r\nConnection: close\r\n\r\n",
                     t->base, path, t->hostport, OUTBOX_RELAY_VERSION);
    int64_t deadline = now_ms() + REQUEST_TIMEOUT_MS;
    for (int off = 0; off < n;) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int left = (int)(deadline - now_ms());
        if (left <= 0 || poll(&p, 1, left) != 1) {
            snprintf(why, whylen, "sending the request timed out");
            close(fd);
            return -1;
        }
        ssize_t w = send(fd, req + off, (size_t)(n - off), MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EINTR) {
            snprintf(why, whylen, "send: %s", strerror(errno));
            close(fd);
            return -1;
        }
        off += w > 0 ? (int)w : 0;
    }

    http_parser parser;
    http_parser_init(&parser, HTTP_RESPONSE);
    parser.data = r;
    size_t total = 0;
    char buf[16384];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(deadline - now_ms());
        if (left <= 0 || poll(&p, 1, left) != 1) {
            snprintf(why, whylen, "no complete response within %d ms", REQUEST_TIMEOUT_MS);
            break;
        }
        ssize_t got = recv(fd, buf, sizeof(buf), 0);
        if (got < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (got < 0) {
            snprintf(why, whylen, "recv: %s", strerror(errno));
            break;
        }
        total += (size_t)got;
        /* A zero-length execute tells the parser about EOF (a body without length). */
        size_t used = http_parser_execute(&parser, &response_settings, buf, (size_t)got);
        if (HTTP_PARSER_ERRNO(&parser) != HPE_OK || used != (size_t)got) {
            snprintf(why, whylen, "not an HTTP response (%s)",
                     http_errno_description(HTTP_PARSER_ERRNO(&parser)));
            break;
        }
        if (r->complete)
            break;
        if (got == 0) {
            snprintf(why, whylen, "the connection closed before a complete response");
            break;
        }
        if (total > MAX_RESPONSE_BYTES) {
            snprintf(why, whylen, "response larger than %d bytes", MAX_RESPONSE_BYTES);
            break;
        }
    }
    close(fd);
    if (!r->complete) {
        strbuf_free(&r->body);
        return -1;
    }
    return 0;
}

/* ---- the summary ------------------------------------------------------- */

static const cJSON *item(const cJSON *obj, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(obj, name);
}

static double num(const cJSON *obj, const char *name, double dflt)
{
    const cJSON *v = item(obj, name);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *str(const cJSON *obj, const char *name, const char *dflt)
{
    const cJSON *v = item(obj, name);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

static void print_duration(double s)
{
    if (s < 0)
        printf("unknown");
    else if (s < 60)
        printf("%.1f s", s);
    else if (s < 3600)
        printf("%d min %d s", (int)(s / 60), (int)s % 60);
    else if (s < 86400)
        printf("%d h %d min", (int)(s / 3600), (int)(s / 60) % 60);
    else
        printf("%d d %d h", (int)(s / 86400), (int)(s / 3600) % 24);
}

/* "1,234,567": a backlog of six or seven digits is read at a glance. */
static const char *grouped(double v, char *buf, size_t len)
{
    char digits[32];
    snprintf(digits, sizeof(digits), "%.0f", v < 0 ? 0 : v);
    size_t n = strlen(digits), o = 0;
    for (size_t i = 0; i < n && o + 2 < len; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

/* "  backlog     28,882 rows (measured 3 s ago, 1,200 published since), 9,500
 * rows/s, drains in ~3 s": the count is as old as the query that made it,
 * and the rate and what was published since say where it is now. */
static void print_backlog(const cJSON *st)
{
    const cJSON *backlog = item(st, "backlog");
    double rows = num(backlog, "rows", -1);
    if (rows < 0) {
        printf("  backlog     not measured yet\n");
        return;
    }
    char a[32], b[32];
    double since = num(backlog, "published_since_measured", 0);
    printf("  backlog     %s rows (measured ", grouped(rows, a, sizeof(a)));
    print_duration(num(backlog, "age_seconds", -1));
    printf(" ago");
    if (since > 0)
        printf(", %s published since", grouped(since, b, sizeof(b)));
    printf(")");
    double rate = num(item(st, "events"), "rate_per_second", -1);
    double eta = num(backlog, "eta_seconds", -1);
    if (rate < 0)
        printf(", rate not known yet");
    else if (rate < 10)
        printf(", %.1f rows/s", rate);
    else
        printf(", %s rows/s", grouped(rate, a, sizeof(a)));
    if (rows > 0 && eta == 0) {
        printf(", all published since");
    } else if (rows > 0 && eta > 0) {
        printf(", drains in ~");
        print_duration(eta);
    } else if (rows > 0 && rate == 0) {
        printf(", not draining");
    }
    printf("\n              oldest unsent ");
    print_duration(num(backlog, "oldest_unsent_age_seconds", -1));
    printf(", %.0f dead\n", num(backlog, "dead_rows", 0));
}

/* "12.3 MiB": WAL sizes span bytes to hundreds of GiB. */
static const char *bytes(double v, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

/* relay.capture = wal: "  capture     wal, slot outbox_relay: streaming,
 * flushed 0/1A2B3C4, lag 0.4 s" and what pg_replication_slots said. Poll
 * mode prints nothing: its summary is the one it always was. */
static void print_capture(const cJSON *st)
{
    const cJSON *c = item(st, "capture");
    if (strcmp(str(c, "mode", "poll"), "wal") != 0)
        return;
    char a[32], b[32];
    printf("  capture     wal, slot %s: %s, flushed %s (received %s), lag ", str(c, "slot", "?"),
           cJSON_IsTrue(item(c, "streaming")) ? "streaming" : "NOT STREAMING",
           str(c, "flushed_lsn", "?"), str(c, "received_lsn", "?"));
    print_duration(num(c, "lag_seconds", -1));
    printf(", %s transactions, %s heartbeats\n",
           grouped(num(c, "transactions_total", 0), a, sizeof(a)),
           grouped(num(c, "heartbeats_total", 0), b, sizeof(b)));
    if (cJSON_IsTrue(item(c, "slot_found"))) {
        printf("              slot %s", cJSON_IsTrue(item(c, "active")) ? "active" : "inactive");
        if (num(c, "active_pid", 0) > 0)
            printf(" (pid %.0f)", num(c, "active_pid", 0));
        printf(", wal_status %s, confirmed %s, retains %s", str(c, "wal_status", "?"),
               str(c, "confirmed_lsn", "?"), bytes(num(c, "retained_wal_bytes", 0), a, sizeof(a)));
        printf(", %s behind\n", bytes(num(c, "lag_bytes", 0), b, sizeof(b)));
    } else {
        printf("              slot %s\n",
               cJSON_IsString(item(c, "queried_at")) ? "NOT FOUND" : "not queried yet");
    }
    if (cJSON_IsString(item(c, "problem")))
        printf("  PROBLEM     %s\n", str(c, "problem", ""));
}

/* "up on HOST:PORT, timeline T (N failovers seen)", or since when it is down. */
static void print_postgres(const cJSON *pg)
{
    const cJSON *sv = item(pg, "server");
    printf("  postgres    %s", str(pg, "state", "?"));
    if (sv && str(sv, "host", NULL))
        printf(" on %s:%s", str(sv, "host", "?"), str(sv, "port", "?"));
    if (num(sv, "timeline", 0) > 0)
        printf(", timeline %.0f", num(sv, "timeline", 0));
    if (num(sv, "disconnected_seconds", 0) > 0)
        printf(", for %.0f s (%.0f connects tried)", num(sv, "disconnected_seconds", 0),
               num(sv, "reconnect_attempts_total", 0));
    if (num(sv, "failovers_total", 0) > 0)
        printf(" (%.0f failover%s seen)", num(sv, "failovers_total", 0),
               num(sv, "failovers_total", 0) > 1 ? "s" : "");
    printf("\n");
    if (sv && str(sv, "problem", NULL))
        printf("  PROBLEM     %s\n", str(sv, "problem", ""));
}

static void print_summary(const char *url, const cJSON *st, bool ready, const char *readyz)
{
    printf("outbox-relay %s at %s: %s\n", str(st, "version", "?"), url,
           ready ? "ready" : "NOT READY");
    /* Why not ready: the failed checks, as /readyz words them. */
    for (const char *line = readyz; !ready && line && *line;) {
        const char *end = strchr(line, '\n');
        int len = end ? (int)(end - line) : (int)strlen(line);
        if (len > 3 && strncmp(line, "[-]", 3) == 0)
            printf("  failing     %.*s\n", len - 3, line + 3);
        line = end ? end + 1 : NULL;
    }

    printf("  role        %s\n", str(st, "role", "?"));
    print_postgres(item(st, "postgres"));

    const cJSON *kafka = item(st, "kafka");
    double up = num(kafka, "brokers_up", -1), total = num(kafka, "brokers_total", -1);
    if (up < 0)
        printf("  kafka       brokers not known yet");
    else
        printf("  kafka       %.0f of %.0f brokers up", up, total);
    const cJSON *b;
    const char *sep = " (";
    cJSON_ArrayForEach(b, item(kafka, "brokers"))
    {
        printf("%s%s %s", sep, str(b, "name", "?"), str(b, "state", "?"));
        sep = ", ";
    }
    printf("%s; %.0f messages queued\n", *sep == ',' ? ")" : "",
           num(kafka, "producer_queue_messages", 0));

    print_backlog(st);
    print_capture(st);

    const cJSON *ev = item(st, "events");
    const cJSON *failed = item(ev, "failed_total");
    printf("  published   %.0f events in %.0f batches (failed: %.0f invalid, %.0f permanent, "
           "%.0f retriable; dead-lettered %.0f)\n",
           num(ev, "published_total", 0), num(ev, "batches_total", 0), num(failed, "invalid", 0),
           num(failed, "permanent", 0), num(failed, "retriable", 0),
           num(ev, "dead_lettered_total", 0));

    const cJSON *lb = item(st, "last_batch");
    if (cJSON_IsObject(lb))
        printf("  last batch  %.0f rows in %.3f s at %s\n", num(lb, "rows", 0),
               num(lb, "duration_seconds", 0), str(lb, "time", "?"));
    else
        printf("  last batch  none yet\n");
    if (cJSON_IsTrue(item(st, "halted")))
        printf("  HALTED      %s\n", str(st, "halt_reason", ""));
    printf("  uptime      ");
    print_duration(num(st, "uptime_seconds", -1));
    printf("\n");
}

void status_cli_usage(FILE *out)
{
    fprintf(out,
            "Usage: outbox-relay status [--url URL] [--json]\n"
            "       (plus the -c FILE and -X section.key=value options of every command)\n"
            "\n"
            "Asks a running relay for /status and /readyz and prints a summary: ready or\n"
            "not and why, its role, PostgreSQL, the brokers, the backlog (how long ago it\n"
            "was measured, what was published since, the publish rate of the last minute\n"
            "and when the backlog drains at that rate), with relay.capture = wal the\n"
            "replication slot, and what was published.\n"
            "\n"
            "  --url URL   the relay to ask, e.g. http://127.0.0.1:8423 (default: from\n"
            "              http.listen; a wildcard address is asked on loopback); with\n"
            "              --url no configuration is read\n"
            "  --json      print the relay's /status JSON as it is\n"
            "\n"
            "Exit status: 0 ready, 1 not ready, 64 a URL it cannot use, 69 unreachable,\n"
            "78 configuration rejected.\n");
}

int status_cli_run(const char *url, const struct relay_config *cfg, bool json)
{
    char derived[600];
    if (!url) {
        int rc = cfg ? target_from_config(cfg, derived, sizeof(derived)) : -ENOENT;
        if (rc == -EINVAL)
            return EXIT_CONFIG;
        if (rc < 0)
            return EXIT_UNAVAILABLE;
        url = derived;
    }
    struct target t;
    if (parse_target(url, &t) < 0)
        return EXIT_USAGE;

    char why[512] = "";
    struct response st, rz;
    if (get(&t, "/status", &st, why, sizeof(why)) < 0) {
        fprintf(stderr, "outbox-relay status: %s unreachable: %s\n", url, why);
        return EXIT_UNAVAILABLE;
    }
    if (get(&t, "/readyz?verbose", &rz, why, sizeof(why)) < 0) {
        fprintf(stderr, "outbox-relay status: %s unreachable: %s\n", url, why);
        strbuf_free(&st.body);
        return EXIT_UNAVAILABLE;
    }

    int status;
    cJSON *doc = st.status == 200 ? cJSON_Parse(strbuf_str(&st.body)) : NULL;
    if (!doc || (rz.status != 200 && rz.status != 503)) {
        fprintf(stderr,
                "outbox-relay status: %s does not look like outbox-relay (/status: HTTP %d, "
                "/readyz: HTTP %d)\n",
                url, st.status, rz.status);
        status = EXIT_UNAVAILABLE;
    } else {
        bool ready = rz.status == 200;
        if (json)
            fputs(strbuf_str(&st.body), stdout);
        else
            print_summary(url, doc, ready, strbuf_str(&rz.body));
        status = ready ? EXIT_OK : EXIT_NOT_READY;
    }
    cJSON_Delete(doc);
    strbuf_free(&st.body);
    strbuf_free(&rz.body);
    fflush(stdout);
    return status;
}
