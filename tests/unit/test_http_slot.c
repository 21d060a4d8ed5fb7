/* Unit tests of what the status endpoint and `outbox-relay status` show of
 * relay.capture = wal (relay/daemon/http_metrics.c, http_status.c, health.c,
 * relay/cmd/status_cli.c): the slot's figures filled by hand as the capture
 * code fills them, and poll mode left as it was. No PostgreSQL. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/stats.h"
#include "base/strbuf.h"
#include "cmd/status_cli.h"
#include "config/config.h"
#include "daemon/http_metrics.h"
#include "daemon/http_request.h"

#include "http_unit_fixture.h"

TestSuite(http_slot, .init = setup, .fini = teardown);

/* relay.capture = wal, the slot "orders_slot" streamed by this leader, as
 * daemon/relay_capture.c and relay_capture_slot.c would fill it. */
static void wal_mode(void)
{
    char *const ov[] = {"relay.capture=wal", "relay.slot=orders_slot"};
    char err[512];
    cr_assert_eq(config_load(&cfg, NULL, false, ov, 2, err, sizeof(err)), 0, "%s", err);
    struct stats_slot *sl = &st.slot;
    sl->enabled = true;
    sl->streaming = true;
    sl->received_lsn = 0x16B37A0;
    sl->flushed_lsn = 0x100016B3748ull;   /* past 4 GiB: the high word shows */
    sl->transactions_total = 1204;
    sl->heartbeats_total = 33;
    sl->lag_seconds = 0.4;
    sl->last_commit_time = ctx.now - 1;
    sl->known = true;
    sl->query_time = ctx.now - 2;
    sl->active = true;
    sl->active_pid = 4242;
    snprintf(sl->wal_status, sizeof sl->wal_status, "reserved");
    sl->confirmed_lsn = 0x100016B3748ull;
    sl->restart_lsn = 0x1000016B000ull;
    sl->retained_bytes = 12345678;
    sl->lag_bytes = 2048;
}

/* @return the body the endpoint answers GET @p path with, its status in @p status. */
static const char *respond(const char *path, int *status)
{
    char raw[256];
    snprintf(raw, sizeof raw, "GET %s HTTP/1.1\r\n\r\n", path);
    struct http_request req;
    http_request_init(&req);
    cr_assert_neq(http_request_feed(&req, raw, strlen(raw)), HTTP_REQ_MORE);
    strbuf_reset(&out);
    *status = http_respond(&req, &ctx, &out);
    http_request_free(&req);
    const char *b = strstr(strbuf_str(&out), "\r\n\r\n");
    cr_assert_not_null(b);
    return b + 4;
}

static const char *get(const char *path, int want_status)
{
    int status;
    const char *b = respond(path, &status);
    cr_assert_eq(status, want_status, "%s: %d\n%s", path, status, b);
    return b;
}

Test(http_slot, poll_mode_has_no_slot_metrics_and_no_slot_check)
{
    const char *m = get("/metrics", 200);
    cr_assert_null(strstr(m, "outbox_relay_slot_"), "poll mode shows slot metrics:\n%s", m);
    const char *r = get("/readyz?verbose", 200);
    cr_assert_null(strstr(r, "slot"), "%s", r);
    cJSON *doc = cJSON_Parse(get("/status", 200));
    cr_assert_not_null(doc);
    cJSON *c = cJSON_GetObjectItem(doc, "capture");
    cr_assert_str_eq(cJSON_GetObjectItem(c, "mode")->valuestring, "poll");
    cr_assert_eq(cJSON_GetArraySize(c), 1, "poll mode's capture is {\"mode\":\"poll\"}");
    cJSON_Delete(doc);
}

Test(http_slot, metrics_show_the_slot_and_the_stream)
{
    wal_mode();
    const char *m = get("/metrics", 200);
    const char *want[] = {
        "# TYPE outbox_relay_slot_streaming gauge\noutbox_relay_slot_streaming 1\n",
        "# TYPE outbox_relay_slot_confirmed_lsn_bytes gauge\n"
        "outbox_relay_slot_confirmed_lsn_bytes 1099535431496\n",
        "\noutbox_relay_slot_retained_wal_bytes 12345678\n",
        "\noutbox_relay_slot_lag_bytes 2048\n",
        "\noutbox_relay_slot_lag_seconds 0.40000000000000002\n",
        "# TYPE outbox_relay_slot_active gauge\noutbox_relay_slot_active 1\n",
        "# TYPE outbox_relay_slot_lost gauge\noutbox_relay_slot_lost 0\n",
        "\noutbox_relay_slot_wal_status{status=\"reserved\"} 1\n",
        "# TYPE outbox_relay_slot_transactions_total counter\n"
        "outbox_relay_slot_transactions_total 1204\n",
        "# TYPE outbox_relay_slot_heartbeats_total counter\noutbox_relay_slot_heartbeats_total 33\n",
        "# HELP outbox_relay_slot_retained_wal_bytes ",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(m, want[i]), "/metrics lacks \"%s\":\n%s", want[i], m);
}

Test(http_slot, metrics_say_lost_when_postgres_does_or_the_slot_is_gone)
{
    wal_mode();
    snprintf(st.slot.wal_status, sizeof st.slot.wal_status, "lost");
    const char *m = get("/metrics", 200);
    cr_assert(strstr(m, "\noutbox_relay_slot_lost 1\n"), "%s", m);
    cr_assert(strstr(m, "\noutbox_relay_slot_wal_status{status=\"lost\"} 1\n"), "%s", m);

    /* The query ran and found no slot: lost too, and what the slot was is no
     * longer known: those series are absent rather than 0. */
    st.slot.known = false;
    st.slot.wal_status[0] = '\0';
    m = get("/metrics", 200);
    cr_assert(strstr(m, "\noutbox_relay_slot_lost 1\n"), "%s", m);
    cr_assert_null(strstr(m, "\noutbox_relay_slot_retained_wal_bytes "), "%s", m);
    cr_assert_null(strstr(m, "\noutbox_relay_slot_active "), "%s", m);
    cr_assert_null(strstr(m, "\noutbox_relay_slot_wal_status{"), "%s", m);

    /* Not queried yet: not known, not lost. */
    st.slot.query_time = 0;
    m = get("/metrics", 200);
    cr_assert(strstr(m, "\noutbox_relay_slot_lost 0\n"), "%s", m);
}

Test(http_slot, status_has_the_capture_object)
{
    wal_mode();
    cJSON *doc = cJSON_Parse(get("/status", 200));
    cr_assert_not_null(doc);
    cJSON *c = cJSON_GetObjectItem(doc, "capture");
    cr_assert(cJSON_IsObject(c));
    cr_assert_str_eq(cJSON_GetObjectItem(c, "mode")->valuestring, "wal");
    cr_assert_str_eq(cJSON_GetObjectItem(c, "slot")->valuestring, "orders_slot");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(c, "streaming")));
    /* as PostgreSQL prints them: %X/%X of the high and low 32 bits */
    cr_assert_str_eq(cJSON_GetObjectItem(c, "received_lsn")->valuestring, "0/16B37A0");
    cr_assert_str_eq(cJSON_GetObjectItem(c, "flushed_lsn")->valuestring, "100/16B3748");
    cr_assert_str_eq(cJSON_GetObjectItem(c, "confirmed_lsn")->valuestring, "100/16B3748");
    cr_assert_str_eq(cJSON_GetObjectItem(c, "restart_lsn")->valuestring, "100/16B000");
    cr_assert_eq(cJSON_GetObjectItem(c, "retained_wal_bytes")->valuedouble, 12345678);
    cr_assert_eq(cJSON_GetObjectItem(c, "lag_bytes")->valuedouble, 2048);
    cr_assert_float_eq(cJSON_GetObjectItem(c, "lag_seconds")->valuedouble, 0.4, 1e-9);
    cr_assert_str_eq(cJSON_GetObjectItem(c, "wal_status")->valuestring, "reserved");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(c, "active")));
    cr_assert_eq(cJSON_GetObjectItem(c, "active_pid")->valuedouble, 4242);
    cr_assert_eq(cJSON_GetObjectItem(c, "transactions_total")->valuedouble, 1204);
    cr_assert_eq(cJSON_GetObjectItem(c, "heartbeats_total")->valuedouble, 33);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(c, "last_commit_time")));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(c, "slot_found")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(c, "problem")));
    cJSON_Delete(doc);

    snprintf(st.slot.problem, sizeof st.slot.problem, "replication slot \"orders_slot\" does not exist");
    st.slot.known = false;
    doc = cJSON_Parse(get("/status", 200));
    c = cJSON_GetObjectItem(doc, "capture");
    cr_assert_str_eq(cJSON_GetObjectItem(c, "problem")->valuestring,
                     "replication slot \"orders_slot\" does not exist");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(c, "slot_found")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(c, "restart_lsn")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(c, "retained_wal_bytes")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(c, "wal_status")));
    cJSON_Delete(doc);
}

Test(http_slot, readyz_has_a_slot_check_in_wal_mode)
{
    wal_mode();
    cr_assert_str_eq(get("/readyz?verbose", 200),
                     "[+]postgres ok\n[+]database ok\n[+]schema ok\n[+]role ok\n[+]slot ok\n"
                     "[+]kafka ok\n[+]acks ok\n[+]producer ok\n[+]relaying ok\n[+]shutdown ok\n"
                     "readyz check passed\n");

    snprintf(st.slot.problem, sizeof st.slot.problem, "the publication outbox_relay does not exist");
    const char *r = get("/readyz?verbose", 503);
    cr_assert(strstr(r, "[-]slot the publication outbox_relay does not exist\n"), "%s", r);
    cr_assert(strstr(get("/metrics", 200), "\noutbox_relay_ready 0\n"));
    cJSON *doc = cJSON_Parse(get("/status", 200));
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(doc, "ready")));
    cJSON_Delete(doc);

    st.slot.problem[0] = '\0';
    snprintf(st.slot.wal_status, sizeof st.slot.wal_status, "lost");
    r = get("/readyz?verbose", 503);
    cr_assert(strstr(r, "[-]slot the replication slot is lost (wal_status lost)"), "%s", r);

    /* unreserved: PostgreSQL may remove its WAL at the next checkpoint, but
     * it has not: still readable (the retained-WAL alert speaks of it). */
    snprintf(st.slot.wal_status, sizeof st.slot.wal_status, "unreserved");
    get("/readyz", 200);
}

/* ---- `outbox-relay status` against a canned relay ----------------------- */

/* Answers the next two requests (/status, then /readyz?verbose) on @p fd
 * with what the endpoint renders now, from a child; @return its pid. */
static pid_t serve_two(int fd)
{
    const char *paths[] = {"/status", "/readyz?verbose"};
    char *bodies[2];
    int codes[2];
    for (int i = 0; i < 2; i++)
        bodies[i] = strdup(respond(paths[i], &codes[i]));
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    for (int i = 0; i < 2 && pid == 0; i++) {
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            _exit(1);
        char buf[2048];
        if (recv(c, buf, sizeof buf, 0) <= 0) /* the request, sent at once */
            _exit(1);
        dprintf(c, "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                codes[i], strlen(bodies[i]), bodies[i]);
        close(c);
    }
    if (pid == 0)
        _exit(0);
    free(bodies[0]);
    free(bodies[1]);
    return pid;
}

/* Runs `outbox-relay status --url` against the endpoint as it renders now;
 * @return what it printed. */
static char *status_command(int *rc)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(fd, 4), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    pid_t pid = serve_two(fd);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u", ntohs(a.sin_port));

    fflush(stdout);
    FILE *tmp = tmpfile();
    int saved = dup(STDOUT_FILENO);
    dup2(fileno(tmp), STDOUT_FILENO);
    *rc = status_cli_run(url, NULL, false);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    close(fd);
    waitpid(pid, NULL, 0);

    long len = ftell(tmp);
    char *text = calloc(1, (size_t)len + 1);
    rewind(tmp);
    cr_assert_eq(fread(text, 1, (size_t)len, tmp), (size_t)len);
    fclose(tmp);
    return text;
}

Test(http_slot, status_command_prints_the_capture_in_wal_mode_only)
{
    int rc;
    char *text = status_command(&rc);
    cr_assert_eq(rc, 0, "%s", text);
    cr_assert_null(strstr(text, "capture"), "poll mode prints no capture line:\n%s", text);
    free(text);

    wal_mode();
    text = status_command(&rc);
    cr_assert_eq(rc, 0, "%s", text);
    cr_assert(strstr(text, "\n  capture     wal, slot orders_slot: streaming, flushed 100/16B3748 "
                           "(received 0/16B37A0), lag 0.4 s, 1,204 transactions, 33 heartbeats\n"
                           "              slot active (pid 4242), wal_status reserved, confirmed "
                           "100/16B3748, retains 11.8 MiB, 2.0 KiB behind\n"),
              "%s", text);
    free(text);

    st.slot.streaming = false;
    st.slot.known = false;
    snprintf(st.slot.problem, sizeof st.slot.problem, "replication slot \"orders_slot\" does not exist");
    text = status_command(&rc);
    cr_assert_eq(rc, 1, "not ready: %s", text);
    cr_assert(strstr(text, "  failing     slot replication slot \"orders_slot\" does not exist\n"),
              "%s", text);
    cr_assert(strstr(text, "wal, slot orders_slot: NOT STREAMING"), "%s", text);
    cr_assert(strstr(text, "\n              slot NOT FOUND\n"), "%s", text);
    cr_assert(strstr(text, "\n  PROBLEM     replication slot \"orders_slot\" does not exist\n"),
              "%s", text);
    free(text);
}
