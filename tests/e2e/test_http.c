/* test_http.c — the operator surface against a running relay: the status
 * endpoint with a real HTTP client (curl), `promtool check metrics` on the
 * live /metrics, readiness through Kafka and PostgreSQL outages, hostile and
 * slow clients while events keep flowing. SIGHUP, `outbox-relay status`,
 * logs, sd_notify and listening: test_http_ops.c. */
#include "http_fixture.h"

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
 * in librdkafka's statistics until socket.timeout.ms (10 s by default) cuts a
 * request, and the requests sent again go unanswered too. The acks check
 * must fail within relay.ack_timeout_ms (default 10 s). */
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

    /* Every answer 20 s late: longer than the threshold and than
     * socket.timeout.ms, so requests are cut and sent again, never answered
     * in time. */
    cr_assert(e2e_mock_command(&T, "rtt -1 20000")); /* returns once applied */
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
