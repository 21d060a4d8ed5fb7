/* test_http.c — the operator surface against a running relay: the status
 * endpoint with a real HTTP client (curl), `promtool check metrics` on the
 * live /metrics, readiness through Kafka and PostgreSQL outages, hostile
 * clients while events keep flowing, SIGHUP reload, `outbox-relay status`,
 * JSON logs and the journal prefix, sd_notify, and listen failures. */
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

/* ---- the endpoints -------------------------------------------------------- */

Test(e2e, endpoints_with_curl_and_promtool, .fini = fini, .timeout = 180)
{
    e2e_setup(&T, "httpep");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=100",
                           pool("postgres.conninfo=%s password=hunter2secret", T.env->pg), NULL};
    int port;
    struct e2e_relay *relay = start_relay(extra, &port);
    wait_ready(port);
    wait_broker_statistics(port);

    struct reply r = http(port, "GET", "/livez");
    cr_assert_eq(r.code, 200);
    cr_assert_str_eq(r.body, "ok\n");
    reply_free(&r);
    r = http(port, "GET", "/healthz");
    cr_assert_eq(r.code, 200);
    reply_free(&r);
    r = http(port, "GET", "/readyz?verbose");
    cr_assert_eq(r.code, 200);
    cr_assert_str_eq(r.body, "[+]postgres ok\n[+]database ok\n[+]schema ok\n[+]role ok\n[+]kafka ok\n"
                             "[+]acks ok\n[+]producer ok\n[+]relaying ok\n[+]shutdown ok\n"
                             "readyz check passed\n");
    reply_free(&r);

    enqueue_range(1, 20);
    e2e_wait_all_sent(&T, 30000);

    cJSON *doc = status_doc(port);
    cr_assert_str_eq(jget(doc, "role")->valuestring, "leader");
    cr_assert(cJSON_IsTrue(jget(doc, "ready")));
    cr_assert_str_eq(jget(doc, "postgres.state")->valuestring, "up");
    cr_assert(cJSON_IsString(jget(doc, "version")));
    cr_assert(jnum(doc, "kafka.brokers_up") >= 1);
    const cJSON *b;
    int n_brokers = 0;
    cJSON_ArrayForEach(b, jget(doc, "kafka.brokers"))
    {
        cr_assert(cJSON_IsString(jget(b, "name")) && cJSON_IsString(jget(b, "state")));
        n_brokers++;
    }
    cr_assert(n_brokers >= 1, "no broker listed");
    cr_assert(jnum(doc, "events.published_total") >= 20);
    cr_assert(jnum(doc, "events.batches_total") >= 1);
    cr_assert(jnum(doc, "last_batch.rows") >= 1);
    cr_assert(cJSON_IsString(jget(doc, "last_batch.time")));
    cr_assert(jnum(doc, "uptime_seconds") > 0);
    cr_assert(jget(doc, "backlog.rows") && jget(doc, "backlog.oldest_unsent_age_seconds"));
    cr_assert(jget(doc, "dead_letter_count"));
    cr_assert_str_eq(jget(doc, "config.relay.table")->valuestring, T.table);
    cr_assert(strstr(jget(doc, "config.postgres.conninfo")->valuestring, "password=********"));
    cJSON_Delete(doc);

    r = http(port, "GET", "/status");
    cr_assert_null(strstr(r.body, "hunter2secret"), "/status shows the password");
    reply_free(&r);
    cr_assert(!e2e_relay_log_contains(relay, "hunter2secret"), "the log shows the password");
    cr_assert(e2e_relay_log_contains(relay, "msg=\"effective configuration\""));

    /* /metrics: valid for promtool, with the numbers of what just happened. */
    r = http(port, "GET", "/metrics");
    cr_assert_eq(r.code, 200);
    cr_assert(strstr(r.headers, "text/plain; version=0.0.4"), "%s", r.headers);
    char mpath[700];
    snprintf(mpath, sizeof(mpath), "%s/metrics.txt", T.logdir);
    FILE *f = fopen(mpath, "w");
    cr_assert_not_null(f);
    fputs(r.body, f);
    fclose(f);
    cr_assert(access(PROMTOOL, X_OK) == 0, PROMTOOL " is missing (Debian package prometheus)");
    const char *check[] = {"/bin/sh", "-c", pool("%s check metrics < '%s'", PROMTOOL, mpath), NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_cmd(check, 30000, &out, &err);
    cr_assert_eq(rc, 0, "promtool check metrics failed (%d): %s %s", rc, out, err);
    free(out);
    free(err);
    cr_assert(metric(r.body, "outbox_relay_events_published_total") >= 20);
    cr_assert(metric(r.body, "outbox_relay_delivery_latency_seconds_count") >= 20);
    cr_assert(metric(r.body, "outbox_relay_batches_total") >= 1);
    cr_assert_eq(metric(r.body, "outbox_relay_leader"), 1);
    cr_assert_eq(metric(r.body, "outbox_relay_postgres_up"), 1);
    cr_assert_eq(metric(r.body, "outbox_relay_ready"), 1);
    cr_assert(metric(r.body, "outbox_relay_kafka_brokers_up") >= 1);
    cr_assert_eq(metric(r.body, "outbox_relay_events_failed_total{reason=\"invalid\"}"), 0);
    cr_assert(metric(r.body, "process_resident_memory_bytes") > 0);
    reply_free(&r);

    /* HEAD, wrong methods, unknown paths. */
    r = http(port, "HEAD", "/status");
    cr_assert_eq(r.code, 200);
    cr_assert(strstr(r.headers, "Content-Length: "), "%s", r.headers);
    cr_assert(strstr(r.headers, "Content-Type: application/json"), "%s", r.headers);
    reply_free(&r);
    /* curl --head would not notice a body: read the raw answer. */
    char raw[8192];
    size_t raw_len = raw_response(port, "HEAD /status HTTP/1.1\r\nHost: x\r\n\r\n", raw, sizeof(raw));
    cr_assert(raw_len > 4 && !strcmp(raw + raw_len - 4, "\r\n\r\n"), "HEAD sent a body: %s", raw);
    r = http(port, "DELETE", "/status");
    cr_assert_eq(r.code, 405);
    cr_assert(strstr(r.headers, "Allow: GET, HEAD"), "%s", r.headers);
    reply_free(&r);
    r = http(port, "POST", "/metrics");
    cr_assert_eq(r.code, 405);
    reply_free(&r);
    r = http(port, "GET", "/nope");
    cr_assert_eq(r.code, 404);
    reply_free(&r);

    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* ---- readiness through outages ------------------------------------------- */

Test(e2e, readyz_follows_kafka, .fini = fini, .timeout = 240)
{
    e2e_setup(&T, "httpkafka");
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker to take brokers down (OUTBOX_RELAY_TEST_KAFKA is a real one)");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=100", NULL};
    int port;
    struct e2e_relay *relay = start_relay(extra, &port);
    wait_ready(port);

    cr_assert(e2e_mock_command(&T, "down -1"));
    cr_assert(wait_code(port, "/readyz", 503, 30000), "/readyz stayed 200 with every broker down");
    struct reply r = http(port, "GET", "/readyz");
    cr_assert(strstr(r.body, "[-]kafka no broker up"), "%s", r.body);
    cr_assert(strstr(r.body, "[+]postgres ok"), "%s", r.body);
    reply_free(&r);
    cr_assert_eq(scrape(port, "outbox_relay_kafka_brokers_up"), 0);
    cr_assert_eq(scrape(port, "outbox_relay_ready"), 0);

    cr_assert(e2e_mock_command(&T, "up -1"));
    cr_assert(wait_code(port, "/readyz", 200, 60000), "/readyz did not recover after the brokers came back");
    enqueue_range(1, 50);
    e2e_wait_all_sent(&T, 60000);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* Deliveries Kafka acknowledged prove it reachable: /readyz must not wait for
 * librdkafka's first statistics (here a minute away) once rows went out. */
Test(e2e, readyz_ready_on_acknowledged_deliveries_before_statistics, .fini = fini, .timeout = 180)
{
    e2e_setup(&T, "httpacked");
    e2e_migrate(&T);
    enqueue_range(1, 2000);
    const char *extra[] = {"relay.poll_interval_ms=100", "kafka.statistics.interval.ms=60000", NULL};
    int port;
    struct e2e_relay *relay = start_relay(extra, &port);
    e2e_wait_all_sent(&T, 60000);
    struct reply r = http(port, "GET", "/readyz?verbose");
    cr_assert_eq(r.code, 200, "2,000 rows acknowledged, yet /readyz: %d %s", r.code, r.body);
    cr_assert(strstr(r.body, "[+]kafka ok"), "%s", r.body);
    reply_free(&r);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* A hung broker keeps its connections open and answers nothing: it stays UP
 * in librdkafka's statistics until socket.timeout.ms (a minute). The acks
 * check must fail within relay.ack_timeout_ms (default 10 s) instead. */
Test(e2e, readyz_fails_while_a_hung_broker_acknowledges_nothing, .fini = fini, .timeout = 240)
{
    e2e_setup(&T, "httphung");
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker to delay its answers (OUTBOX_RELAY_TEST_KAFKA is a real one)");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=100", NULL};
    int port;
    struct e2e_relay *relay = start_relay(extra, &port);
    wait_ready(port);
    enqueue_range(1, 20);
    e2e_wait_all_sent(&T, 30000);
    cr_assert_eq(scrape(port, "outbox_relay_kafka_in_flight_messages"), 0);

    /* Every answer 20 s late: longer than the threshold, shorter than
     * librdkafka's socket timeout, so no connection is dropped. */
    cr_assert(e2e_mock_command(&T, "rtt -1 20000"));
    e2e_sleep_ms(300); /* the FIFO command is applied asynchronously */
    int64_t t0 = e2e_now_ms();
    enqueue_range(21, 40);
    cr_assert(wait_code(port, "/readyz", 503, 20000), "/readyz stayed 200 with a hung broker");
    int64_t took = e2e_now_ms() - t0;
    struct reply r = http(port, "GET", "/readyz");
    fprintf(stderr, "e2e: hung broker: /readyz 503 after %lld ms: %s", (long long)took, r.body);
    cr_assert(took >= 9500 && took <= 14000,
              "/readyz turned 503 %lld ms after the rows went out; expected 10 s (ack_timeout_ms)",
              (long long)took);
    cr_assert(strstr(r.body, "[-]acks ") && strstr(r.body, " in flight, no acknowledgement for 1"),
              "%s", r.body);
    cr_assert(strstr(r.body, "[+]kafka ok"), "the broker should still look up: %s", r.body);
    reply_free(&r);
    struct reply m = http(port, "GET", "/metrics");
    cr_assert(metric(m.body, "outbox_relay_kafka_ack_wait_seconds") >= 10, "%s", m.body);
    cr_assert(metric(m.body, "outbox_relay_kafka_in_flight_messages") >= 1, "%s", m.body);
    cr_assert_eq(metric(m.body, "outbox_relay_ready"), 0);
    reply_free(&m);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"no acknowledgement from kafka\"", 5000),
              "no warning logged (log %s)", relay->log_path);

    /* The broker answers again: ready once the delayed acknowledgements arrive. */
    cr_assert(e2e_mock_command(&T, "rtt -1 0"));
    cr_assert(wait_code(port, "/readyz", 200, 30000), "/readyz did not recover after the broker did");
    e2e_wait_all_sent(&T, 60000);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"kafka acknowledgements resumed\"", 5000),
              "no recovery logged (log %s)", relay->log_path);
    cr_assert_eq(scrape(port, "outbox_relay_kafka_ack_wait_seconds"), 0);
    verify_delivered("events relayed across a hung broker");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

Test(e2e, readyz_follows_postgres, .fini = fini, .timeout = 240)
{
    e2e_setup(&T, "httppg");
    if (!T.env->stack_sh || !T.env->stack_dir)
        cr_skip_test("needs OUTBOX_RELAY_TEST_STACK_SH and _DIR to stop PostgreSQL");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.reconnect_interval_ms=200",
                           "relay.reconnect_max_ms=1000", NULL};
    int port;
    struct e2e_relay *relay = start_relay(extra, &port);
    wait_ready(port);

    const char *stop[] = {"stop", "-m", "fast", "-w", "-t", "60", NULL};
    pg_ctl(stop);
    cr_assert(wait_code(port, "/readyz", 503, 30000), "/readyz stayed 200 with PostgreSQL stopped");
    struct reply r = http(port, "GET", "/readyz");
    cr_assert(strstr(r.body, "[-]postgres not connected"), "%s", r.body);
    reply_free(&r);
    cr_assert_eq(scrape(port, "outbox_relay_postgres_up"), 0);
    /* The endpoint keeps answering while the relay retries. */
    r = http(port, "GET", "/livez");
    cr_assert_eq(r.code, 200);
    reply_free(&r);

    const char *start[] = {"start", "-w", "-t", "60", NULL};
    pg_ctl(start);
    int64_t deadline = e2e_now_ms() + 30000;
    for (PQreset(T.conn); PQstatus(T.conn) != CONNECTION_OK && e2e_now_ms() < deadline;) {
        e2e_sleep_ms(200);
        PQreset(T.conn);
    }
    cr_assert_eq(PQstatus(T.conn), CONNECTION_OK, "PostgreSQL does not accept connections again: %s",
                 PQerrorMessage(T.conn));
    cr_assert(wait_code(port, "/readyz", 200, 60000), "/readyz did not recover after PostgreSQL came back");
    enqueue_range(1, 50);
    e2e_wait_all_sent(&T, 60000);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* ---- hostile clients -------------------------------------------------------- */

Test(e2e, hostile_requests_while_relaying, .fini = fini, .timeout = 180)
{
    e2e_setup(&T, "httphostile");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=50", NULL};
    int port;
    struct e2e_relay *relay = start_relay(extra, &port);
    wait_ready(port);
    enqueue_range(1, 500);

    cr_assert_eq(raw_str(port, "GARBAGE\r\n\r\n"), 400);
    cr_assert_eq(raw_str(port, "GET /livez HTTP/1.1\r\nNo colon here\r\n\r\n"), 400);
    cr_assert_eq(raw_str(port, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"), 400); /* TLS hello */
    static char big[20000];
    int n = snprintf(big, sizeof(big), "GET /status HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(big + n, 'a', 16000);
    memcpy(big + n + 16000, "\r\n\r\n", 4);
    cr_assert_eq(raw_exchange(port, big, (size_t)n + 16004), 431, "16 KiB header");
    n = snprintf(big, sizeof(big), "GET /");
    memset(big + n, 'a', 10000);
    n += 10000;
    n += snprintf(big + n, sizeof(big) - (size_t)n, " HTTP/1.1\r\n\r\n");
    cr_assert_eq(raw_exchange(port, big, (size_t)n), 431, "10 KiB request line");
    cr_assert_eq(raw_str(port, "GET /livez HTTP/2.0\r\n\r\n"), 505);
    struct reply r = http(port, "PUT", "/livez");
    cr_assert_eq(r.code, 405);
    reply_free(&r);
    r = http(port, "GET", "/../etc/passwd");
    cr_assert_eq(r.code, 404);
    reply_free(&r);

    /* A client that never finishes its request is cut off at the timeout (10 s). */
    int fd = tcp_connect(port);
    const char partial[] = "GET /livez HTTP/1.1\r\nHost: x\r\n";
    cr_assert_eq(send(fd, partial, sizeof(partial) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(partial) - 1);
    int64_t t0 = e2e_now_ms();
    char buf[256];
    ssize_t got = recv(fd, buf, sizeof(buf), 0);
    int64_t waited = e2e_now_ms() - t0;
    close(fd);
    cr_assert(got <= 0, "the slow client got an answer: %.*s", (int)got, buf);
    cr_assert(waited >= 8000 && waited <= 15000, "slow client closed after %lld ms, expected ~10 s",
              (long long)waited);
    cr_assert(scrape(port, "outbox_relay_http_timeouts_total") >= 1);

    e2e_wait_all_sent(&T, 60000);
    verify_delivered("events relayed during hostile requests");
    cr_assert(e2e_relay_alive(relay), "relay exited (log %s)", relay->log_path);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

#define N_IDLE 1000

Test(e2e, thousand_idle_connections_while_relaying, .fini = fini, .timeout = 240)
{
    e2e_setup(&T, "httpidle");
    struct rlimit rl;
    cr_assert(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_cur < N_IDLE + 100) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 4096 ? 4096 : rl.rlim_max;
        cr_assert(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s", strerror(errno));
    }
    if (rl.rlim_cur < N_IDLE + 100)
        cr_skip_test("RLIMIT_NOFILE hard limit %lu is too low for %d connections",
                     (unsigned long)rl.rlim_max, N_IDLE);
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=100", NULL};
    int port;
    struct e2e_relay *relay = start_relay(extra, &port);
    wait_ready(port);

    /* Warm up: librdkafka's buffers and the batch arrays are allocated now,
     * so that what grows later is the connections' doing. */
    enqueue_range(1, 500);
    e2e_wait_all_sent(&T, 60000);
    long before = rss_kib(relay->pid);

    static struct pollfd fds[N_IDLE];
    for (int i = 0; i < N_IDLE; i++) {
        fds[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        fds[i].events = POLLOUT;
        cr_assert(fds[i].fd >= 0, "socket %d: %s", i, strerror(errno));
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int rc = connect(fds[i].fd, (struct sockaddr *)&a, sizeof(a));
        cr_assert(rc == 0 || errno == EINPROGRESS, "connect %d: %s", i, strerror(errno));
    }
    /* Every connection is established (or already reset by the cap). */
    int64_t deadline = e2e_now_ms() + 8000;
    int pending = N_IDLE;
    while (pending > 0 && e2e_now_ms() < deadline) {
        cr_assert(poll(fds, N_IDLE, 200) >= 0);
        pending = 0;
        for (int i = 0; i < N_IDLE; i++) {
            if (fds[i].events && fds[i].revents)
                fds[i].events = 0; /* done: stop asking */
            pending += fds[i].events != 0;
        }
    }
    cr_assert_eq(pending, 0, "%d connections not established after 8 s", pending);

    /* The cap holds, yet a probe beyond it is served: it takes the place of
     * the oldest idle connection. */
    struct reply r = http(port, "GET", "/livez");
    cr_assert_eq(r.code, 200, "a probe beyond the cap was not served: %d", r.code);
    reply_free(&r);
    cr_assert(scrape(port, "outbox_relay_http_connections") <= 256 + 2); /* + closing ones */

    enqueue_range(501, 1500);
    e2e_wait_all_sent(&T, 60000);
    long during = rss_kib(relay->pid);
    cr_assert(e2e_relay_alive(relay), "relay exited (log %s)", relay->log_path);
    fprintf(stderr, "e2e: relay RSS %ld KiB before, %ld KiB with %d idle connections\n", before,
            during, N_IDLE);
    cr_assert(during - before < 16 * 1024, "RSS grew by %ld KiB with %d idle connections",
              during - before, N_IDLE);

    /* The idle ones left are cut at the timeout. */
    int64_t cut = e2e_now_ms() + 20000;
    while (scrape(port, "outbox_relay_http_timeouts_total") < 200 && e2e_now_ms() < cut)
        e2e_sleep_ms(250);
    struct reply m = http(port, "GET", "/metrics");
    cr_assert(metric(m.body, "outbox_relay_http_connections_evicted_total") >= N_IDLE - 256,
              "%s", m.body);
    cr_assert_eq(metric(m.body, "outbox_relay_http_connections_rejected_total"), 0);
    cr_assert(metric(m.body, "outbox_relay_http_timeouts_total") >= 200);
    cr_assert(metric(m.body, "outbox_relay_http_connections") <= 2);
    reply_free(&m);
    for (int i = 0; i < N_IDLE; i++)
        close(fds[i].fd);

    verify_delivered("events relayed with 1000 idle connections");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* ---- probes among slow clients ------------------------------------------------ */

#define N_SLOW 400

/* Slowloris: N_SLOW connections that send a request head one byte a second
 * and never finish it; each one the relay closes is opened again at once. */
struct slow_clients {
    int port;
    atomic_bool stop;
    atomic_long opened;
    pthread_t thread;
};

static int slow_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

static void *slow_run(void *arg)
{
    struct slow_clients *sc = arg;
    static struct pollfd fds[N_SLOW];
    static bool started[N_SLOW];
    const char head[] = "GET /livez HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    for (int i = 0; i < N_SLOW; i++) {
        fds[i] = (struct pollfd){.fd = slow_open(sc->port), .events = POLLOUT};
        started[i] = false;
        atomic_fetch_add(&sc->opened, 1);
    }
    int64_t next_drip = e2e_now_ms() + 1000;
    while (!atomic_load(&sc->stop)) {
        if (poll(fds, N_SLOW, 50) < 0)
            break;
        for (int i = 0; i < N_SLOW; i++) {
            short ev = fds[i].revents;
            bool gone = fds[i].fd < 0 || (ev & (POLLERR | POLLHUP | POLLNVAL));
            if (!gone && (ev & POLLIN)) {
                char buf[256];
                gone = recv(fds[i].fd, buf, sizeof(buf), 0) <= 0;
            }
            if (!gone && (ev & POLLOUT) && !started[i]) {
                gone = send(fds[i].fd, head, sizeof(head) - 1, MSG_NOSIGNAL) < 0;
                started[i] = true;
                fds[i].events = POLLIN;
            }
            if (gone) {
                if (fds[i].fd >= 0)
                    close(fds[i].fd);
                fds[i] = (struct pollfd){.fd = slow_open(sc->port), .events = POLLOUT};
                started[i] = false;
                atomic_fetch_add(&sc->opened, 1);
            }
        }
        if (e2e_now_ms() >= next_drip) {
            next_drip += 1000;
            for (int i = 0; i < N_SLOW; i++)
                if (started[i])
                    send(fds[i].fd, "a", 1, MSG_NOSIGNAL);
        }
    }
    for (int i = 0; i < N_SLOW; i++)
        if (fds[i].fd >= 0)
            close(fds[i].fd);
    return NULL;
}

/* One GET /livez as a probe does it: @return the status code (0: no answer,
 * the connection refused, reset or timed out), its time in @p ms. */
static int probe_livez(int port, int timeout_ms, int64_t *ms)
{
    int64_t t0 = e2e_now_ms();
    int code = 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)); /* bounds connect() too */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    const char req[] = "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.29\r\n"
                       "Accept: */*\r\nConnection: close\r\n\r\n";
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)sizeof(req) - 1) {
        char buf[1024];
        size_t got = 0;
        for (ssize_t r; got < sizeof(buf) - 1 && (r = recv(fd, buf + got, sizeof(buf) - 1 - got, 0)) > 0;)
            got += (size_t)r;
        buf[got] = '\0';
        if (sscanf(buf, "HTTP/1.1 %d ", &code) != 1 || !strstr(buf, "\r\n\r\nok\n"))
            code = 0;
    }
    close(fd);
    *ms = e2e_now_ms() - t0;
    return code;
}

/* CPU seconds (user + system) the process used so far. */
static double cpu_seconds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    unsigned long ut = 0, st = 0;
    /* After "(comm)": state and 10 fields, then utime and stime. */
    int n = fscanf(f, "%*d (%*[^)]) %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
    fclose(f);
    cr_assert_eq(n, 2, "cannot parse %s", path);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

#define PROBE_SECONDS 30
#define PROBE_BOUND_MS 1000 /* a kubelet probe's default timeoutSeconds */

Test(e2e, liveness_probes_answered_among_slow_clients, .fini = fini, .timeout = 240)
{
    e2e_setup(&T, "httpslow");
    struct rlimit rl;
    cr_assert(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_cur < N_SLOW + 100) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 4096 ? 4096 : rl.rlim_max;
        cr_assert(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s", strerror(errno));
    }
    if (rl.rlim_cur < N_SLOW + 100)
        cr_skip_test("RLIMIT_NOFILE hard limit %lu is too low for %d connections",
                     (unsigned long)rl.rlim_max, N_SLOW);
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=100", NULL};
    int port;
    struct e2e_relay *relay = start_relay(extra, &port);
    wait_ready(port);

    double cpu0 = cpu_seconds(relay->pid);
    static struct slow_clients sc;
    sc.port = port;
    atomic_store(&sc.stop, false);
    atomic_store(&sc.opened, 0);
    cr_assert_eq(pthread_create(&sc.thread, NULL, slow_run, &sc), 0);
    e2e_sleep_ms(2000); /* the slow clients fill the table first */

    enqueue_range(1, 1000);
    static int64_t lat[PROBE_SECONDS * 20 + 16];
    int probes = 0, ok = 0, in_bound = 0;
    int64_t end = e2e_now_ms() + PROBE_SECONDS * 1000;
    while (e2e_now_ms() < end && probes < (int)(sizeof(lat) / sizeof(lat[0]))) {
        int64_t ms;
        int code = probe_livez(port, 5000, &ms);
        ok += code == 200;
        in_bound += code == 200 && ms <= PROBE_BOUND_MS;
        lat[probes++] = code == 200 ? ms : INT64_MAX;
        e2e_sleep_ms(50);
    }
    /* A real client too, while the slow ones are still there. */
    struct reply r = http(port, "GET", "/livez");
    int curl_code = r.code;
    reply_free(&r);
    atomic_store(&sc.stop, true);
    double cpu = cpu_seconds(relay->pid) - cpu0;
    pthread_join(sc.thread, NULL);
    double evicted = scrape(port, "outbox_relay_http_connections_evicted_total");

    qsort(lat, (size_t)probes, sizeof(lat[0]), cmp_i64);
    int64_t p50 = lat[probes / 2], p99 = lat[probes * 99 / 100], worst = lat[probes - 1];
    fprintf(stderr,
            "e2e: %d slow clients (%ld connections opened): %d of %d /livez probes answered, %d "
            "within %d ms; p50 %lld ms, p99 %lld ms, max %lld ms; evicted %.0f; curl %d; relay "
            "CPU %.1f s\n",
            N_SLOW, atomic_load(&sc.opened), ok, probes, in_bound, PROBE_BOUND_MS, (long long)p50,
            p99 == INT64_MAX ? -1LL : (long long)p99, worst == INT64_MAX ? -1LL : (long long)worst,
            evicted, curl_code, cpu);
    cr_assert(probes >= 50, "only %d probes in %d s", probes, PROBE_SECONDS);
    cr_assert_eq(ok, probes, "%d of %d /livez probes unanswered among %d slow clients",
                 probes - ok, probes, N_SLOW);
    cr_assert(in_bound >= probes * 99 / 100, "only %d of %d /livez probes answered within %d ms",
              in_bound, probes, PROBE_BOUND_MS);
    cr_assert_eq(curl_code, 200, "curl's /livez among the slow clients answered %d", curl_code);
    cr_assert(evicted >= N_SLOW - 256, "the slow clients were not evicted (%.0f)", evicted);

    e2e_wait_all_sent(&T, 60000);
    verify_delivered("events relayed among slow clients");
    cr_assert(e2e_relay_alive(relay), "relay exited (log %s)", relay->log_path);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* ---- SIGHUP ------------------------------------------------------------------- */

static void write_conf(const char *text)
{
    char tmp[700];
    snprintf(tmp, sizeof(tmp), "%s.tmp", T.empty_conf);
    FILE *f = fopen(tmp, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    cr_assert(rename(tmp, T.empty_conf) == 0); /* never a half-written file to read */
}

static void wait_log_count(struct e2e_relay *r, const char *needle, int n, int timeout_ms)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    while (e2e_relay_log_count(r, needle) < n) {
        cr_assert(e2e_now_ms() < deadline, "\"%s\" did not appear %d time(s) (log %s)", needle, n,
                  r->log_path);
        e2e_sleep_ms(50);
    }
}

Test(e2e, sighup_reloads_live_keys_and_keeps_a_broken_file_out, .fini = fini, .timeout = 180)
{
    e2e_setup(&T, "httphup");
    e2e_migrate(&T);
    write_conf("[relay]\nbatch_size = 50\npoll_interval_ms = 100\n");
    int port;
    struct e2e_relay *relay = start_relay(NULL, &port);
    wait_ready(port);
    cJSON *doc = status_doc(port);
    cr_assert_eq(jnum(doc, "config.relay.batch_size"), 50);
    cJSON_Delete(doc);

    /* A live key and a key that needs a restart. */
    write_conf("[relay]\nbatch_size = 7\npoll_interval_ms = 100\non_sent = delete\n");
    cr_assert(kill(relay->pid, SIGHUP) == 0);
    wait_log_count(relay, "msg=\"configuration reloaded\"", 1, 10000);
    cr_assert(e2e_relay_log_contains(relay, "msg=\"config key reloaded\" key=relay.batch_size"));
    cr_assert(e2e_relay_log_contains(relay, "key=relay.on_sent"), "the restart-only key is not named");
    doc = status_doc(port);
    cr_assert_eq(jnum(doc, "config.relay.batch_size"), 7);
    cr_assert_str_eq(jget(doc, "config.relay.on_sent")->valuestring, "mark");
    cJSON_Delete(doc);

    /* It takes effect: 30 rows committed at once go in batches of at most 7. */
    double batches = scrape(port, "outbox_relay_batches_total");
    enqueue_range(1, 30);
    e2e_wait_all_sent(&T, 30000);
    e2e_sleep_ms(300); /* the last batch is counted once its marks are written */
    double used = scrape(port, "outbox_relay_batches_total") - batches;
    cr_assert(used >= 5, "30 rows took %.0f batches with batch_size=7", used);
    doc = status_doc(port);
    cr_assert(jnum(doc, "last_batch.rows") <= 7);
    cJSON_Delete(doc);

    /* A file that does not validate changes nothing. */
    write_conf("[relay]\nbatch_size = lots\n");
    cr_assert(kill(relay->pid, SIGHUP) == 0);
    wait_log_count(relay, "msg=\"configuration reload rejected; keeping the running configuration\"", 1,
                   10000);
    cr_assert(e2e_relay_log_contains(relay, "relay.batch_size"));
    doc = status_doc(port);
    cr_assert_eq(jnum(doc, "config.relay.batch_size"), 7);
    cJSON_Delete(doc);
    enqueue_range(31, 60);
    e2e_wait_all_sent(&T, 30000);
    cr_assert(e2e_relay_alive(relay), "relay exited (log %s)", relay->log_path);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* ---- outbox-relay status ------------------------------------------------------- */

Test(e2e, status_command_exit_codes, .fini = fini, .timeout = 180)
{
    e2e_setup(&T, "httpcli");
    e2e_migrate(&T);
    int port;
    struct e2e_relay *relay = start_relay(NULL, &port);
    wait_ready(port);
    enqueue_range(1, 10);
    e2e_wait_all_sent(&T, 30000);
    wait_broker_statistics(port);

    const char *url = pool("http://127.0.0.1:%d", port);
    char *out = NULL, *err = NULL;
    const char *human[] = {"status", "--url", url, NULL};
    int rc = e2e_run_relay(human, 20000, &out, &err);
    cr_assert_eq(rc, 0, "status of a ready relay exited %d: %s %s", rc, out, err);
    cr_assert(strstr(out, ": ready\n"), "%s", out);
    cr_assert(strstr(out, "role        leader"), "%s", out);
    cr_assert(strstr(out, "published   "), "%s", out);
    cr_assert(strstr(out, "backlog     "), "%s", out);
    cr_assert(strstr(out, "brokers up"), "%s", out);
    free(out);
    free(err);

    const char *json[] = {"status", "--json", "--url", url, NULL};
    rc = e2e_run_relay(json, 20000, &out, &err);
    cr_assert_eq(rc, 0, "%s %s", out, err);
    cJSON *doc = cJSON_Parse(out);
    cr_assert_not_null(doc, "status --json printed no JSON: %s", out);
    cr_assert(cJSON_IsTrue(jget(doc, "ready")));
    cr_assert(jnum(doc, "events.published_total") >= 10);
    cJSON_Delete(doc);
    free(out);
    free(err);

    /* Without --url: from http.listen of the configuration. */
    const char *cfg[] = {"status", "-c", T.empty_conf, "-X", pool("http.listen=127.0.0.1:%d", port),
                         NULL};
    rc = e2e_run_relay(cfg, 20000, &out, &err);
    cr_assert_eq(rc, 0, "status from the configuration exited %d: %s %s", rc, out, err);
    free(out);
    free(err);

    /* Nothing listening, or the endpoint disabled: 69. */
    const char *nobody[] = {"status", "--url", pool("http://127.0.0.1:%d", free_port()), NULL};
    rc = e2e_run_relay(nobody, 20000, &out, &err);
    cr_assert_eq(rc, 69, "status of nothing exited %d: %s %s", rc, out, err);
    cr_assert(strstr(err, "unreachable"), "%s", err);
    free(out);
    free(err);
    const char *disabled[] = {"status", "-c", T.empty_conf, "-X", "http.listen=", NULL};
    rc = e2e_run_relay(disabled, 20000, &out, &err);
    cr_assert_eq(rc, 69, "%s %s", out, err);
    free(out);
    free(err);
    const char *https[] = {"status", "--url", "https://127.0.0.1:1", NULL};
    rc = e2e_run_relay(https, 20000, &out, &err);
    cr_assert_eq(rc, 64, "%s %s", out, err);
    free(out);
    free(err);

    /* A relay that cannot reach PostgreSQL answers but is not ready: 1, and says why. */
    const char *extra[] = {pool("postgres.conninfo=host=127.0.0.1 port=%d connect_timeout=2", free_port()),
                           NULL};
    int port2;
    start_relay(extra, &port2);
    const char *down[] = {"status", "--url", pool("http://127.0.0.1:%d", port2), NULL};
    rc = e2e_run_relay(down, 20000, &out, &err);
    cr_assert_eq(rc, 1, "status of a relay without PostgreSQL exited %d: %s %s", rc, out, err);
    cr_assert(strstr(out, "NOT READY"), "%s", out);
    cr_assert(strstr(out, "failing     postgres not connected"), "%s", out);
    free(out);
    free(err);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* A backlog count is as old as the query that made it (every 5 s): /status
 * says how old, what was published since, the publish rate of the last
 * minute and when the backlog drains at that rate, and `status` prints them,
 * on a real drain. */
#define DRAIN_ROWS 6000
Test(e2e, status_backlog_age_rate_and_eta_while_draining, .fini = fini, .timeout = 240)
{
    e2e_setup(&T, "httpeta");
    e2e_migrate(&T);
    enqueue_range(1, DRAIN_ROWS);
    /* Small batches to a broker 10 ms away: the drain takes seconds, not one. */
    e2e_mock_command(&T, "rtt -1 10");
    const char *extra[] = {"relay.batch_size=20", NULL};
    int port;
    struct e2e_relay *relay = start_relay(extra, &port);
    const char *url = pool("http://127.0.0.1:%d", port);

    /* Mid-drain: a measured backlog, a known rate and an ETA. */
    cJSON *mid = NULL;
    int64_t deadline = e2e_now_ms() + 60000;
    while (!mid && e2e_now_ms() < deadline) {
        cJSON *doc = status_doc(port);
        const cJSON *rows = jget(doc, "backlog.rows"), *rate = jget(doc, "events.rate_per_second");
        if (cJSON_IsNumber(rows) && rows->valuedouble > 0 && cJSON_IsNumber(rate) && rate->valuedouble > 0)
            mid = doc;
        else
            cJSON_Delete(doc);
        if (!mid)
            e2e_sleep_ms(100);
    }
    cr_assert_not_null(mid, "no /status showed a measured backlog with a known rate during the drain");
    double rows = jnum(mid, "backlog.rows"), age = jnum(mid, "backlog.age_seconds");
    double since = jnum(mid, "backlog.published_since_measured"), rate = jnum(mid, "events.rate_per_second");
    double eta = jnum(mid, "backlog.eta_seconds");
    cr_assert(cJSON_IsString(jget(mid, "backlog.measured_at")), "backlog.measured_at is not a time");
    cr_assert(age >= 0 && age < 7, "backlog.age_seconds %.3f: the backlog is measured every 5 s", age);
    cr_assert(since >= 0 && since <= DRAIN_ROWS, "backlog.published_since_measured %.0f", since);
    cr_assert(rate > 0 && rate < 1e6, "events.rate_per_second %.1f", rate);
    cr_assert_eq(jnum(mid, "events.rate_window_seconds"), 60);
    double want = (rows > since ? rows - since : 0) / rate;
    cr_assert(eta >= 0 && eta <= want * 1.1 + 0.2 && eta >= want * 0.9 - 0.2,
              "backlog.eta_seconds %.1f, expected about (rows %.0f - published since %.0f) / rate %.1f = %.1f", eta,
              rows, since, rate, want);
    cJSON_Delete(mid);

    /* The human summary, while rows remain. */
    char *out = NULL, *err = NULL;
    bool seen = false;
    for (int i = 0; i < 100 && !seen; i++) {
        const char *human[] = {"status", "--url", url, NULL};
        int rc = e2e_run_relay(human, 20000, &out, &err);
        cr_assert_eq(rc, 0, "status exited %d: %s %s", rc, out, err);
        const char *b = strstr(out, "  backlog     ");
        cr_assert(b && strstr(b, " rows (measured ") && strstr(b, " ago") && strstr(b, "oldest unsent"),
                  "status does not say when the backlog was measured: %s", out);
        seen = strstr(b, " rows/s, drains in ~") != NULL && strncmp(b, "  backlog     0 rows", 20) != 0;
        if (!seen)
            cr_assert(e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NULL", T.qtable) > 0 ||
                          i < 3,
                      "drained before status printed a rate and an ETA: %s", out);
        free(out);
        free(err);
    }
    cr_assert(seen, "status never printed \"N rows/s, drains in ~\" during the drain");

    /* Drained: the next measurement says 0 rows, and the ETA is 0. */
    e2e_wait_all_sent(&T, 120000);
    cJSON *end = NULL;
    deadline = e2e_now_ms() + 15000;
    while (e2e_now_ms() < deadline) {
        end = status_doc(port);
        if (jnum(end, "backlog.rows") == 0)
            break;
        cJSON_Delete(end);
        end = NULL;
        e2e_sleep_ms(250);
    }
    cr_assert_not_null(end, "/status never measured the drained backlog as 0 rows");
    cr_assert_eq(jnum(end, "backlog.eta_seconds"), 0);
    cr_assert(jnum(end, "events.published_total") >= DRAIN_ROWS);
    cJSON_Delete(end);
    const char *json[] = {"status", "--json", "--url", url, NULL};
    cr_assert_eq(e2e_run_relay(json, 20000, &out, &err), 0, "status --json: %s", err);
    cJSON *doc = cJSON_Parse(out);
    cr_assert_not_null(doc, "status --json printed no JSON: %s", out);
    cr_assert(cJSON_IsNumber(jget(doc, "backlog.age_seconds")) && cJSON_IsNumber(jget(doc, "backlog.eta_seconds")) &&
                  cJSON_IsNumber(jget(doc, "events.rate_per_second")),
              "status --json lacks the age, the ETA or the rate: %s", out);
    cJSON_Delete(doc);
    free(out);
    free(err);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* ---- logs ---------------------------------------------------------------------- */

/* The first line of @p log containing @p needle, copied (free it), or NULL. */
static char *line_with(const char *log, const char *needle)
{
    const char *at = strstr(log, needle);
    if (!at)
        return NULL;
    while (at > log && at[-1] != '\n')
        at--;
    const char *eol = strchr(at, '\n');
    return strndup(at, eol ? (size_t)(eol - at) : strlen(at));
}

/* While there is work, a progress line every log.stats_interval, and one line
 * when the backlog has drained; nothing while idle. */
Test(e2e, progress_lines_while_draining_and_quiet_when_idle, .fini = fini, .timeout = 180)
{
    e2e_setup(&T, "httpprog");
    e2e_migrate(&T);
    enqueue_range(1, DRAIN_ROWS);
    e2e_mock_command(&T, "rtt -1 10"); /* a drain of several seconds, as above */
    const char *extra[] = {"relay.batch_size=20", "log.stats_interval=1s", NULL};
    int port;
    struct e2e_relay *relay = start_relay(extra, &port);
    e2e_wait_all_sent(&T, 120000);
    wait_log_count(relay, "msg=\"backlog drained\"", 1, 15000);

    char *log = e2e_relay_log(relay);
    int lines = e2e_relay_log_count(relay, "msg=\"progress\"");
    cr_assert(lines >= 2, "expected a progress line a second during a drain of seconds, found %d (log %s)", lines,
              relay->log_path);
    char *busy = line_with(log, "msg=\"progress\" published=");
    cr_assert(busy && strstr(busy, "level=info") && strstr(busy, " rows_per_second=") && strstr(busy, " backlog=") &&
                  strstr(busy, " oldest_pending_seconds="),
              "a progress line lacks a field: %s", busy ? busy : "(none)");
    free(busy);
    char *drained = line_with(log, "msg=\"backlog drained\"");
    long long rows = -1;
    const char *r = strstr(drained, " rows=");
    if (r)
        rows = strtoll(r + 6, NULL, 10);
    cr_assert(rows > 0 && rows <= DRAIN_ROWS && strstr(drained, " seconds=") && strstr(drained, "level=info"),
              "the drained line does not say how many rows in how long: %s", drained);
    free(drained);
    cr_assert_eq(e2e_relay_log_count(relay, "msg=\"backlog drained\""), 1, "more than one drained line for one backlog");
    free(log);

    /* Idle: no progress line and no drained line, for several intervals. */
    e2e_sleep_ms(2000);
    int settled = e2e_relay_log_count(relay, "msg=\"progress\"");
    e2e_sleep_ms(5000);
    cr_assert_eq(e2e_relay_log_count(relay, "msg=\"progress\""), settled, "progress lines while idle (log %s)", relay->log_path);
    cr_assert_eq(e2e_relay_log_count(relay, "msg=\"backlog drained\""), 1, "a drained line while idle");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* Every line of @p text is a JSON object with ts, level and msg (after an
 * optional "<N>" prefix, required when @p prefix). @return the lines parsed. */
static int check_json_lines(const char *text, bool prefix, const char *what)
{
    int n = 0;
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        cr_assert_not_null(eol, "%s: last line unterminated: %s", what, line);
        char *copy = strndup(line, (size_t)(eol - line));
        const char *json = copy;
        if (prefix) {
            cr_assert(copy[0] == '<' && copy[2] == '>' && copy[1] >= '3' && copy[1] <= '7',
                      "%s: no <N> prefix: %s", what, copy);
            json = copy + 3;
        }
        cJSON *doc = cJSON_Parse(json);
        cr_assert(cJSON_IsObject(doc), "%s: not a JSON object: %s", what, copy);
        cr_assert(cJSON_IsString(jget(doc, "ts")) && cJSON_IsString(jget(doc, "level")) &&
                      cJSON_IsString(jget(doc, "msg")),
                  "%s: ts/level/msg missing: %s", what, copy);
        const char *lvl = jget(doc, "level")->valuestring;
        cr_assert(!strcmp(lvl, "error") || !strcmp(lvl, "warn") || !strcmp(lvl, "info") ||
                      !strcmp(lvl, "debug"),
                  "%s: level %s", what, lvl);
        cJSON_Delete(doc);
        free(copy);
        n++;
        line = eol + 1;
    }
    return n;
}

/* The first line whose msg is @p msg, parsed (cJSON_Delete it). */
static cJSON *find_line(const char *text, const char *msg)
{
    char needle[200];
    snprintf(needle, sizeof(needle), "\"msg\":\"%s\"", msg);
    const char *at = strstr(text, needle);
    cr_assert_not_null(at, "no line with msg %s", msg);
    while (at > text && at[-1] != '\n')
        at--;
    const char *eol = strchr(at, '\n');
    char *copy = strndup(at, (size_t)(eol - at));
    cJSON *doc = cJSON_Parse(copy);
    free(copy);
    cr_assert_not_null(doc);
    return doc;
}

Test(e2e, json_logs_parse_line_by_line, .fini = fini, .timeout = 180)
{
    e2e_setup(&T, "httplog");
    e2e_migrate(&T);
    const char *args[E2E_MAX_ARGS];
    int n = 0;
    args[n++] = "run";
    e2e_base_args(&T, args, &n);
    args[n++] = "-X";
    args[n++] = "http.listen=127.0.0.1:0";
    args[n++] = "-X";
    args[n++] = "relay.poll_interval_ms=100";
    args[n++] = "--log-format=json";
    args[n] = NULL;
    struct e2e_relay *relay = e2e_spawn(&T, args);
    cr_assert(e2e_relay_wait_log(relay, "\"msg\":\"became leader\"", 30000), "no leader line (log %s)",
              relay->log_path);
    enqueue_range(1, 20);
    e2e_wait_all_sent(&T, 30000);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");

    char *log = e2e_relay_log(relay);
    int lines = check_json_lines(log, false, "run --log-format=json");
    cr_assert(lines >= 5, "only %d lines", lines);
    cJSON *d = find_line(log, "outbox-relay starting");
    cr_assert(cJSON_IsString(jget(d, "version")));
    cr_assert(cJSON_IsNumber(jget(d, "pid")));
    cJSON_Delete(d);
    d = find_line(log, "effective configuration");
    cr_assert_eq(cJSON_GetObjectItem(d, "relay.batch_size")->valuedouble, 1000);
    cr_assert_str_eq(cJSON_GetObjectItem(d, "relay.table")->valuestring, T.table);
    cr_assert_str_eq(cJSON_GetObjectItem(d, "log.format")->valuestring, "json");
    cJSON_Delete(d);
    d = find_line(log, "became leader");
    cr_assert_str_eq(jget(d, "schema")->valuestring, "public");
    cJSON_Delete(d);
    d = find_line(log, "stopped");
    cr_assert(jget(d, "published_total")->valuedouble >= 20);
    cJSON_Delete(d);
    free(log);

    /* log.format=json from the configuration does the same. */
    const char *margs[E2E_MAX_ARGS];
    n = 0;
    margs[n++] = "migrate";
    e2e_base_args(&T, margs, &n);
    margs[n++] = "-X";
    margs[n++] = "log.format=json";
    margs[n] = NULL;
    char *out = NULL, *err = NULL;
    cr_assert_eq(e2e_run_relay(margs, 30000, &out, &err), 0, "%s", err);
    cr_assert(check_json_lines(err, false, "migrate -X log.format=json") >= 1);
    free(out);
    free(err);

    /* Under systemd, stderr is the journal stream $JOURNAL_STREAM names: each
     * line starts with its priority. A stale variable (stderr redirected
     * elsewhere) must not add it. */
    const char *sargs[E2E_MAX_ARGS + 8] = {
        "/bin/sh", "-c",
        "JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) exec \"$@\"", "sh", T.env->relay_bin};
    int k = 5;
    for (int i = 0; margs[i]; i++)
        sargs[k++] = margs[i];
    sargs[k] = NULL;
    cr_assert_eq(e2e_run_cmd(sargs, 30000, &out, &err), 0, "%s", err);
    cr_assert(check_json_lines(err, true, "migrate under the journal") >= 1);
    cr_assert(strncmp(err, "<6>{", 4) == 0, "%s", err);
    free(out);
    free(err);
    sargs[2] = "JOURNAL_STREAM=1:1 exec \"$@\"";
    cr_assert_eq(e2e_run_cmd(sargs, 30000, &out, &err), 0, "%s", err);
    cr_assert(err[0] == '{', "prefix without the journal: %s", err);
    free(out);
    free(err);

    const char *bad[] = {"check-config", "--log-format=yaml", NULL};
    cr_assert_eq(e2e_run_relay(bad, 10000, NULL, NULL), 64);
}

/* ---- systemd notifications -------------------------------------------------------- */

/* A datagram socket in the abstract namespace, as $NOTIFY_SOCKET names it ("@name"). */
static int notify_socket(char *env, size_t len)
{
    static int seq;
    char name[64];
    snprintf(name, sizeof(name), "outbox-relay-e2e-%d-%d", (int)getpid(), seq++);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    cr_assert(fd >= 0, "socket: %s", strerror(errno));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path + 1, name, strlen(name));
    cr_assert(bind(fd, (struct sockaddr *)&sa,
                   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name))) == 0,
              "bind: %s", strerror(errno));
    snprintf(env, len, "@%s", name);
    return fd;
}

struct notices {
    int ready, watchdog, stopping, status;
    bool ready_after_leader;     /* the log said "became leader" before READY=1 arrived */
    char last_status[256];
};

/* Reads what arrived on @p fd for up to @p ms, or until @p until (a substring) arrives. */
static void collect(int fd, struct e2e_relay *relay, struct notices *n, int ms, const char *until)
{
    int64_t deadline = e2e_now_ms() + ms;
    for (;;) {
        int left = (int)(deadline - e2e_now_ms());
        if (left <= 0)
            return;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left < 100 ? left : 100) <= 0)
            continue;
        char buf[1024];
        ssize_t got = recv(fd, buf, sizeof(buf) - 1, 0);
        if (got <= 0)
            continue;
        buf[got] = '\0';
        for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
            if (!strcmp(l, "READY=1")) {
                n->ready++;
                n->ready_after_leader = e2e_relay_log_contains(relay, "msg=\"became leader\"");
            } else if (!strcmp(l, "WATCHDOG=1")) {
                n->watchdog++;
            } else if (!strcmp(l, "STOPPING=1")) {
                n->stopping++;
            } else if (!strncmp(l, "STATUS=", 7)) {
                n->status++;
                snprintf(n->last_status, sizeof(n->last_status), "%s", l + 7);
            }
            if (until && strstr(l, until))
                return;
        }
    }
}

Test(e2e, sd_notify_ready_status_watchdog_stopping, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "httpnotify");
    e2e_migrate(&T);
    char env[128];
    int fd = notify_socket(env, sizeof(env));
    /* The relay inherits these at fork; the test's own environment is restored at once. */
    setenv("NOTIFY_SOCKET", env, 1);
    setenv("WATCHDOG_USEC", "400000", 1);
    unsetenv("WATCHDOG_PID");
    int port;
    struct e2e_relay *relay = start_relay(NULL, &port);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");

    struct notices n = {0};
    collect(fd, relay, &n, 30000, "READY=1");
    cr_assert_eq(n.ready, 1, "no READY=1 within 30 s");
    cr_assert(n.ready_after_leader, "READY=1 came before the role was known");
    collect(fd, relay, &n, 8000, "STATUS=");
    cr_assert(n.status >= 1, "no STATUS= within 8 s of READY=1");
    cr_assert(strstr(n.last_status, "leader") && strstr(n.last_status, "postgres up") &&
                  strstr(n.last_status, "backlog "),
              "STATUS=%s", n.last_status);
    collect(fd, relay, &n, 1500, NULL);
    cr_assert(n.watchdog >= 3, "%d WATCHDOG=1 in about 2 s with WatchdogSec=0.4 s", n.watchdog);
    cr_assert_eq(n.ready, 1, "READY=1 sent %d times", n.ready);

    cr_assert(kill(relay->pid, SIGTERM) == 0);
    collect(fd, relay, &n, 15000, "STOPPING=1");
    cr_assert_eq(n.stopping, 1, "no STOPPING=1 after SIGTERM");
    cr_assert_eq(e2e_wait_exit(relay, 30000), 0);
    close(fd);

    /* Without PostgreSQL there is no READY=1, but the loop still pets the watchdog. */
    fd = notify_socket(env, sizeof(env));
    setenv("NOTIFY_SOCKET", env, 1);
    setenv("WATCHDOG_USEC", "400000", 1);
    const char *nopg[] = {pool("postgres.conninfo=host=127.0.0.1 port=%d connect_timeout=2", free_port()),
                          NULL};
    relay = start_relay(nopg, &port);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    memset(&n, 0, sizeof(n));
    collect(fd, relay, &n, 3000, NULL);
    cr_assert_eq(n.ready, 0, "READY=1 without PostgreSQL");
    cr_assert(n.watchdog >= 3, "%d WATCHDOG=1 in 3 s", n.watchdog);
    close(fd);
}

/* ---- listening ------------------------------------------------------------------ */

Test(e2e, listen_addresses_and_failures, .fini = fini, .timeout = 180)
{
    e2e_setup(&T, "httplisten");
    e2e_migrate(&T);

    /* A port another process holds: a configuration error, exit 78. */
    int holder = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    cr_assert(bind(holder, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(holder, 1) == 0);
    cr_assert(getsockname(holder, (struct sockaddr *)&a, &alen) == 0);
    const char *busy[] = {pool("http.listen=127.0.0.1:%d", ntohs(a.sin_port)), NULL};
    struct e2e_relay *r = e2e_relay_start(&T, busy);
    cr_assert_eq(e2e_wait_exit(r, 30000), 78, "a busy port did not exit 78 (log %s)", r->log_path);
    cr_assert(e2e_relay_log_contains(r, "cannot start the status endpoint"));
    cr_assert(e2e_relay_log_contains(r, "address already in use"));
    close(holder);

    /* A malformed address is rejected with the configuration, naming the key. */
    const char *bad[] = {"check-config", "-c", T.empty_conf, "-X", "http.listen=localhost:80", NULL};
    char *out = NULL, *err = NULL;
    cr_assert_eq(e2e_run_relay(bad, 10000, &out, &err), 78);
    cr_assert(strstr(err, "http.listen"), "%s", err);
    free(out);
    free(err);

    /* Empty: no endpoint, the relay runs. */
    const char *off[] = {"http.listen=", NULL};
    r = e2e_relay_start(&T, off);
    cr_assert(e2e_relay_wait_log(r, "msg=\"became leader\"", 30000), "log %s", r->log_path);
    cr_assert(!e2e_relay_log_contains(r, "status endpoint listening"));
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);

    /* IPv6 literal, where the host has IPv6 loopback. */
    int s6 = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool have_v6 = s6 >= 0 && bind(s6, (struct sockaddr *)&a6, sizeof(a6)) == 0;
    if (s6 >= 0)
        close(s6);
    if (!have_v6) {
        fprintf(stderr, "e2e: no IPv6 loopback here; [::1] not tried\n");
        return;
    }
    const char *v6[] = {"http.listen=[::1]:0", NULL};
    r = e2e_relay_start(&T, v6);
    int port = e2e_relay_http_port(r, 30000);
    cr_assert(port > 0, "log %s", r->log_path);
    cr_assert(e2e_relay_log_contains(r, "address=[::1]:"));
    struct reply rep = http_host("[::1]", port, "GET", "/livez");
    cr_assert_eq(rep.code, 200);
    reply_free(&rep);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
}
