/* test_http_ops.c — operating a running relay: SIGHUP reload, `outbox-relay
 * status`, the progress lines and JSON logs, sd_notify, and the status
 * endpoint's listen addresses and failures. */
#include "http_fixture.h"

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
    cr_assert_eq(cJSON_GetObjectItem(d, "relay.batch_size")->valuedouble, 2000);
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
