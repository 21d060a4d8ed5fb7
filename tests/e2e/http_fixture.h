/* http_fixture.h — what the operator-surface tests share: the test's stack,
 * HTTP and raw-socket clients of a relay's status endpoint, /status and
 * /metrics readers, PostgreSQL stopped and started. Static: each test file
 * is its own program and uses a part of it. */
#ifndef OUTBOX_TEST_HTTP_FIXTURE_H
#define OUTBOX_TEST_HTTP_FIXTURE_H

#pragma GCC diagnostic ignored "-Wunused-function"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "testlib.h"

#define CURL "/usr/bin/curl"
#define PROMTOOL "/usr/bin/promtool"

static struct e2e_ctx T;
static bool pg_stopped;

static void pg_ctl(const char *const *args);

static void fini(void)
{
    if (T.env) {
        e2e_mock_command(&T, "up -1");
        e2e_mock_command(&T, "rtt -1 0");
        if (pg_stopped) {
            /* Other tests share this PostgreSQL: never leave it stopped. */
            const char *start[] = {"start", "-w", "-t", "60", NULL};
            pg_ctl(start);
        }
    }
    e2e_teardown(&T);
}

/* ---- helpers ------------------------------------------------------------ */

static void enqueue_range(int lo, int hi)
{
    e2e_enqueue_series(&T, "order", "k", 10, "created", lo, hi, 0);
}

struct reply {
    int code;        /* -1: no HTTP answer (curl failed) */
    char *body;
    char *headers;
};

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return strdup("");
    struct strbuf_like {
        char *p;
        size_t n, cap;
    } b = {malloc(4096), 0, 4096};
    cr_assert_not_null(b.p);
    size_t r;
    while ((r = fread(b.p + b.n, 1, b.cap - b.n - 1, f)) > 0) {
        b.n += r;
        if (b.cap - b.n - 1 == 0) {
            b.cap *= 2;
            b.p = realloc(b.p, b.cap);
            cr_assert_not_null(b.p);
        }
    }
    fclose(f);
    b.p[b.n] = '\0';
    return b.p;
}

static void reply_free(struct reply *r)
{
    free(r->body);
    free(r->headers);
    memset(r, 0, sizeof(*r));
}

/* One request with curl: METHOD (GET, HEAD, or anything for -X) to http://HOST:PORT/PATH. */
static struct reply http_host(const char *host, int port, const char *method, const char *path)
{
    cr_assert(access(CURL, X_OK) == 0, CURL " is missing (Debian package curl)");
    char url[300], hdr[] = "/tmp/e2e-hdr-XXXXXX", body[] = "/tmp/e2e-body-XXXXXX";
    snprintf(url, sizeof(url), "http://%s:%d%s", host, port, path);
    int fd1 = mkstemp(hdr), fd2 = mkstemp(body);
    cr_assert(fd1 >= 0 && fd2 >= 0);
    close(fd1);
    close(fd2);
    const char *argv[16];
    int n = 0;
    argv[n++] = CURL;
    argv[n++] = "-sS";
    argv[n++] = "-g"; /* [::1] is an address, not a glob */
    argv[n++] = "--max-time";
    argv[n++] = "10";
    argv[n++] = "-D";
    argv[n++] = hdr;
    argv[n++] = "-o";
    argv[n++] = body;
    argv[n++] = "-w";
    argv[n++] = "%{http_code}";
    if (!strcmp(method, "HEAD")) {
        argv[n++] = "--head";
    } else if (strcmp(method, "GET") != 0) {
        argv[n++] = "-X";
        argv[n++] = method;
    }
    argv[n++] = url;
    argv[n] = NULL;
    char *out = NULL;
    int rc = e2e_run_cmd(argv, 20000, &out, NULL);
    struct reply r = {.code = -1};
    if (rc == 0 && out)
        r.code = atoi(out);
    r.body = slurp(body);
    r.headers = slurp(hdr);
    free(out);
    unlink(hdr);
    unlink(body);
    return r;
}

static struct reply http(int port, const char *method, const char *path)
{
    return http_host("127.0.0.1", port, method, path);
}

/* Polls GET path until it answers @p want; @return true if it did within @p timeout_ms. */
static bool wait_code(int port, const char *path, int want, int timeout_ms)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        struct reply r = http(port, "GET", path);
        int code = r.code;
        reply_free(&r);
        if (code == want)
            return true;
        if (e2e_now_ms() >= deadline)
            return false;
        e2e_sleep_ms(200);
    }
}

static cJSON *status_doc(int port)
{
    struct reply r = http(port, "GET", "/status");
    cr_assert_eq(r.code, 200, "/status answered %d: %s", r.code, r.body);
    cJSON *doc = cJSON_Parse(r.body);
    cr_assert_not_null(doc, "/status is not JSON: %.500s", r.body);
    reply_free(&r);
    return doc;
}

static const cJSON *jget(const cJSON *obj, const char *path)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", path);
    const cJSON *cur = obj;
    for (char *save = NULL, *tok = strtok_r(buf, ".", &save); tok; tok = strtok_r(NULL, ".", &save))
        cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
    return cur;
}

static double jnum(const cJSON *obj, const char *path)
{
    const cJSON *v = jget(obj, path);
    cr_assert(cJSON_IsNumber(v), "/status: %s is not a number", path);
    return v->valuedouble;
}

/* The value of sample @p name (with labels, as written) in a /metrics text; NAN if absent. */
static double metric(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (!strncmp(p, name, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return -1e300;
}

static double scrape(int port, const char *name)
{
    struct reply r = http(port, "GET", "/metrics");
    cr_assert_eq(r.code, 200, "/metrics answered %d", r.code);
    double v = metric(r.body, name);
    reply_free(&r);
    return v;
}

/* Starts a relay with @p extra and waits for its status endpoint and leadership. */
static struct e2e_relay *start_relay(const char *const *extra, int *port)
{
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    *port = e2e_relay_http_port(relay, 30000);
    cr_assert(*port > 0, "no \"status endpoint listening\" line (log %s)", relay->log_path);
    return relay;
}

static void wait_ready(int port)
{
    if (!wait_code(port, "/readyz", 200, 40000)) {
        struct reply r = http(port, "GET", "/readyz?verbose");
        cr_assert_fail("/readyz did not turn 200 within 40 s: %d %s", r.code, r.body);
    }
}

/* Readiness can come before librdkafka's first statistics (a broker that
 * answered is enough): what reads the brokers' figures waits for them. */
static void wait_broker_statistics(int port)
{
    for (int i = 0; i < 100; i++) {
        if (scrape(port, "outbox_relay_kafka_brokers_up") >= 1)
            return;
        usleep(100 * 1000);
    }
    cr_assert_fail("no broker statistics within 10 s");
}

static void verify_delivered(const char *what)
{
    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(&T, 60000, &rows, &msgs, &rep);
    for (size_t i = 0; i < rows.n; i++) {
        e2e_check(&rep, rows.v[i].deliveries >= 1, "row %lld not in Kafka", (long long)rows.v[i].id);
        e2e_check(&rep, rows.v[i].sent, "row %lld has sent_at NULL", (long long)rows.v[i].id);
    }
    e2e_report_assert(&rep, what);
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
}

static void pg_ctl(const char *const *args)
{
    const char *argv[16] = {"/bin/bash", T.env->stack_sh, "pg_ctl", T.env->stack_dir};
    int n = 4;
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = e2e_run_cmd(argv, 90000, &out, &err);
    cr_assert_eq(rc, 0, "stack.sh pg_ctl %s failed (%d): %s %s", args[0], rc, out ? out : "",
                 err ? err : "");
    free(out);
    free(err);
    pg_stopped = !strcmp(args[0], "stop");
}

/* A TCP port on 127.0.0.1 that nothing listens on (bound, then released). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    cr_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

static int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0, "socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect: %s", strerror(errno));
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Sends @p len bytes as they are and reads the answer until the server
 * closes (into @p buf, NUL-terminated). @return its length. */
static size_t raw_send(int port, const char *data, size_t len, char *buf, size_t cap)
{
    int fd = tcp_connect(port);
    for (size_t off = 0; off < len;) {
        ssize_t w = send(fd, data + off, len - off, MSG_NOSIGNAL);
        if (w <= 0)
            break; /* the server may answer and close before reading it all */
        off += (size_t)w;
    }
    size_t got = 0;
    for (;;) {
        ssize_t r = recv(fd, buf + got, cap - 1 - got, 0);
        if (r <= 0 || (got += (size_t)r) >= cap - 1)
            break;
    }
    buf[got] = '\0';
    close(fd);
    return got;
}

static size_t raw_response(int port, const char *request, char *buf, size_t cap)
{
    return raw_send(port, request, strlen(request), buf, cap);
}

/* @return the status code of the answer to @p len raw bytes, 0 if none. */
static int raw_exchange(int port, const char *data, size_t len)
{
    char buf[4096];
    raw_send(port, data, len, buf, sizeof(buf));
    int code = 0;
    if (sscanf(buf, "HTTP/1.1 %d ", &code) != 1)
        code = 0;
    return code;
}

static int raw_str(int port, const char *s)
{
    return raw_exchange(port, s, strlen(s));
}

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    long kib = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

static const char *pool(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static const char *pool(const char *fmt, ...)
{
    static char bufs[8][1024];
    static int next;
    char *s = bufs[next++ % 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof(bufs[0]), fmt, ap);
    va_end(ap);
    return s;
}

#endif
