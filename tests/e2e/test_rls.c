/* test_rls.c — row-level security on the outbox table.
 *
 * A policy that hides rows from the relay's role would keep them unpublished
 * for ever while the backlog said 0. The relay must refuse to run unless
 * relay.allow_row_security = true; with it, it relays what it sees and says
 * that the backlog is unknown; and a policy that appears while it runs must
 * fail its claims (not hide rows) and then be refused too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "testlib.h"

#define CURL "/usr/bin/curl"
#define ROWS 1000
#define HIDDEN 100

static struct e2e_ctx T;
static char role[96];

static void fini(void)
{
    if (T.conn && role[0]) {
        e2e_exec(T.conn, "DROP TABLE IF EXISTS %s CASCADE", T.qtable);
        e2e_exec(T.conn, "DROP OWNED BY \"%s\"", role);
        e2e_exec(T.conn, "DROP ROLE IF EXISTS \"%s\"", role);
        role[0] = '\0';
    }
    e2e_teardown(&T);
}

/* The test table with ROWS rows, HIDDEN of them (aggregate_id 'hidden') for a
 * policy to hide, and a role without BYPASSRLS that may relay it. */
static void setup_table_and_role(const char *name)
{
    e2e_setup(&T, name);
    e2e_migrate(&T);
    snprintf(role, sizeof(role), "%s_role", T.name);
    e2e_exec(T.conn, "DROP ROLE IF EXISTS \"%s\"", role);
    e2e_exec(T.conn, "CREATE ROLE \"%s\" LOGIN NOSUPERUSER NOBYPASSRLS", role);
    e2e_exec(T.conn, "GRANT USAGE ON SCHEMA public TO \"%s\"", role);
    e2e_exec(T.conn, "GRANT SELECT, UPDATE, DELETE ON %s TO \"%s\"", T.qtable, role);
    /* The floor the relay claims from (schema/005), as docs/operations.md says. */
    e2e_exec(T.conn, "GRANT SELECT, UPDATE ON \"public\".\"%s_floor\" TO \"%s\"", T.table, role);
    e2e_exec(T.conn,
             "SELECT count(%s('customer', CASE WHEN i %% 10 = 0 THEN 'hidden' ELSE 'c' || (i %% 7) END,"
             " 'updated', jsonb_build_object('i', i))) FROM generate_series(1, %d) AS i",
             T.qenqueue, ROWS);
}

static void enable_policy(void)
{
    e2e_exec(T.conn, "ALTER TABLE %s ENABLE ROW LEVEL SECURITY", T.qtable);
    e2e_exec(T.conn, "CREATE POLICY visible ON %s TO \"%s\" USING (aggregate_id <> 'hidden')",
             T.qtable, role);
}

/* "postgres.conninfo=… user=<role>": libpq takes the last user= given. */
static const char *role_conninfo(void)
{
    static char buf[512];
    snprintf(buf, sizeof(buf), "postgres.conninfo=%s user=%s", T.env->pg, role);
    return buf;
}

static int http_get(struct e2e_relay *r, const char *path, char **body)
{
    int port = e2e_relay_http_port(r, 20000);
    cr_assert(port > 0, "no status endpoint port in %s", r->log_path);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    const char *argv[] = {CURL, "-s", "-m", "10", "-w", "\n%{http_code}", url, NULL};
    char *out = NULL;
    int code = -1;
    if (e2e_run_cmd(argv, 15000, &out, NULL) == 0 && out) {
        char *nl = strrchr(out, '\n');
        if (nl) {
            code = atoi(nl + 1);
            *nl = '\0';
        }
    }
    *body = out ? out : strdup("");
    return code;
}

static long long sent_rows(void)
{
    return e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NOT NULL", T.qtable);
}

Test(e2e, row_security_is_refused, .fini = fini, .timeout = 200)
{
    setup_table_and_role("rls");
    enable_policy();

    const char *extra[] = {"relay.poll_interval_ms=100", role_conninfo(), NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(r, "msg=\"refusing to relay\"", 30000),
              "the relay did not refuse row-level security (log %s)", r->log_path);
    char want[256];
    snprintf(want, sizeof(want), "row-level security filters \\\"public\\\".\\\"%s\\\" for role \\\"%s\\\"",
             T.table, role);
    cr_assert(e2e_relay_log_contains(r, want), "the refusal does not say \"%s\" (log %s)", want,
              r->log_path);
    cr_assert(e2e_relay_log_contains(r, "relay.allow_row_security = true"),
              "the refusal does not name the opt-in (log %s)", r->log_path);

    snprintf(want, sizeof(want), "[-]database refused: row-level security filters \"public\".\"%s\"",
             T.table);
    char *body;
    int code = http_get(r, "/readyz?verbose", &body);
    cr_assert_eq(code, 503, "/readyz answered %d:\n%s", code, body);
    cr_assert(strstr(body, want), "/readyz lacks \"%s\":\n%s", want, body);
    free(body);
    code = http_get(r, "/status", &body);
    cr_assert_eq(code, 200);
    cJSON *doc = cJSON_Parse(body);
    cr_assert_not_null(doc, "%s", body);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "backlog"), "rows")),
              "a refused relay reports a backlog: %s", body);
    cJSON_Delete(doc);
    free(body);

    e2e_sleep_ms(1000);
    cr_assert_eq(sent_rows(), 0, "a refused relay marked rows sent");
    cr_assert(e2e_relay_alive(r), "the refused relay exited (log %s)", r->log_path);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
}

Test(e2e, row_security_allowed_relays_what_it_sees_and_knows_no_backlog, .fini = fini,
     .timeout = 200)
{
    setup_table_and_role("rlsok");
    enable_policy();

    const char *extra[] = {"relay.poll_interval_ms=100", "relay.allow_row_security=true",
                           role_conninfo(), NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_wait_sql(&T, 60000, "SELECT count(*) = %d FROM %s WHERE sent_at IS NOT NULL",
                           ROWS - HIDDEN, T.qtable),
              "the visible rows were not relayed (%lld sent; log %s)", sent_rows(), r->log_path);
    cr_assert(e2e_relay_log_contains(r, "msg=\"relaying only the rows row-level security lets "
                                        "this role see"),
              "no warning about row-level security (log %s)", r->log_path);
    cr_assert(!e2e_relay_log_contains(r, "msg=\"refusing to relay\""));

    /* Past the first backlog query (every 5 s): still no count of what it cannot see. */
    e2e_sleep_ms(6000);
    char *body;
    int code = http_get(r, "/status", &body);
    cr_assert_eq(code, 200);
    cJSON *doc = cJSON_Parse(body);
    cr_assert_not_null(doc, "%s", body);
    cJSON *backlog = cJSON_GetObjectItem(doc, "backlog");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(backlog, "rows")), "a backlog is reported: %s", body);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(backlog, "unknown_reason")), "%s", body);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "postgres"), "row_security")),
              "%s", body);
    cJSON_Delete(doc);
    free(body);
    code = http_get(r, "/metrics", &body);
    cr_assert_eq(code, 200);
    cr_assert(strstr(body, "\noutbox_relay_row_security 1\n"), "%s", body);
    cr_assert_null(strstr(body, "\noutbox_relay_backlog_rows "), "a backlog metric is reported");
    free(body);

    /* Every visible row once, no hidden one. */
    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(&T, 60000, &rows, &msgs, &rep);
    cr_assert_eq(rows.n, (size_t)ROWS);
    for (size_t i = 0; i < rows.n; i++) {
        const struct e2e_row *row = &rows.v[i];
        bool hidden = strcmp(row->aggregate_id, "hidden") == 0;
        e2e_check(&rep, row->deliveries == (hidden ? 0 : 1), "row %lld (%s) delivered %d times",
                  (long long)row->id, row->aggregate_id, row->deliveries);
        e2e_check(&rep, row->sent == !hidden, "row %lld (%s) sent=%d", (long long)row->id,
                  row->aggregate_id, row->sent);
    }
    e2e_report_assert(&rep, "row-level security allowed");
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
}

Test(e2e, a_policy_added_while_running_is_refused, .fini = fini, .timeout = 200)
{
    setup_table_and_role("rlslate");
    const char *extra[] = {"relay.poll_interval_ms=100", role_conninfo(), NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    e2e_wait_all_sent(&T, 60000);

    enable_policy();
    e2e_exec(T.conn, "SELECT %s('customer', 'late', 'updated', '{}')", T.qenqueue);
    cr_assert(e2e_relay_wait_log(r, "row-level security policy", 30000),
              "a policy added while running went unnoticed (log %s)", r->log_path);
    cr_assert(e2e_relay_log_contains(r, "msg=\"claim failed\""), "(log %s)", r->log_path);
    /* The failure makes it check again, and refuse like at start. */
    cr_assert(e2e_relay_wait_log(r, "msg=\"refusing to relay\"", 30000),
              "the relay did not refuse after the policy appeared (log %s)", r->log_path);
    cr_assert_eq(sent_rows(), ROWS, "a row was marked although the claim must fail");
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);

    /* Started again, it refuses at once. */
    r = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(r, "msg=\"refusing to relay\"", 30000),
              "a restarted relay did not refuse (log %s)", r->log_path);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
}
