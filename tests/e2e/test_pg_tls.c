/* test_pg_tls.c — the relay to a PostgreSQL that takes TCP only over TLS
 * (tests/support/pg_tls.sh: certificates made at test time, `hostssl` lines
 * only; started by the first test, used by the others). With
 * sslmode=verify-full every row arrives: SCRAM with the password in a
 * passfile or in the conninfo's `_file` twin, and a client certificate; by
 * polling and through the slot (the replication connection over TLS too).
 * Each way of getting it wrong is named, with what to change, in the
 * relay's log and on /readyz within 20 s, in a few lines, nothing marked
 * sent; `migrate` names it too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define SCRAM_PASSWORD "scram-secret-7"

/* snprintf that fails the test instead of cutting a conninfo short. */
#define FMT(buf, len, ...) \
    cr_assert_lt(snprintf(buf, len, __VA_ARGS__), (int)(len), "%s: too long", #buf)

static struct e2e_ctx T, C;    /* C: the client certificate role's table */
static struct e2e_pg_tls S;

static void fini(void)
{
    e2e_teardown(&C);
    e2e_teardown(&T);
}

/* Writes @p text to a file of mode 0600 in the server's directory (libpq
 * ignores a passfile others may read); @return its path. */
static const char *secret_file(const char *name, const char *text)
{
    static char paths[4][700];
    static int next;
    char *path = paths[next++ % 4];
    FMT(path, sizeof paths[0], "%s/%s", S.dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fprintf(f, "%s\n", text);
    fclose(f);
    cr_assert_eq(chmod(path, 0600), 0);
    return path;
}

/* A copy of @p from as @p to, of mode @p mode. */
static void copy_file(const char *from, const char *to, mode_t mode)
{
    FILE *in = fopen(from, "r"), *out = fopen(to, "w");
    cr_assert(in && out, "%s -> %s: %s", from, to, strerror(errno));
    int c;
    while ((c = fgetc(in)) != EOF)
        fputc(c, out);
    fclose(in);
    fclose(out);
    cr_assert_eq(chmod(to, mode), 0);
}

/* A verify-full conninfo to the test's server: @p host is "host=..." (and
 * perhaps hostaddr), @p ca a file of S.tls, @p auth the rest. */
static void conninfo(char *out, size_t len, const char *host, const char *ca, const char *auth)
{
    FMT(out, len, "%s port=%d sslmode=verify-full sslrootcert=%s/%s %s", host, S.port, S.tls,
             ca, auth);
}

/* The SCRAM role, its password in a passfile. */
static void scram_conninfo(char *out, size_t len, const char *password)
{
    char pass[128], auth[900];
    FMT(pass, sizeof pass, "localhost:%d:postgres:relay_scram:%s", S.port, password);
    FMT(auth, sizeof auth, "dbname=postgres user=relay_scram passfile=%s",
             secret_file(password[0] == 's' ? "pgpass" : "pgpass-wrong", pass));
    conninfo(out, len, "host=localhost", "ca.pem", auth);
}

/* The certificate role with @p cert (a name in S.tls, NULL: none). */
static void cert_conninfo(char *out, size_t len, const char *cert)
{
    char auth[900] = "dbname=certs user=relay_cert";
    if (cert)
        FMT(auth, sizeof auth, "dbname=certs user=relay_cert sslcert=%s/%s.pem sslkey=%s/%s.key",
                 S.tls, cert, S.tls, cert);
    conninfo(out, len, "host=localhost", "ca.pem", auth);
}

/* @p t set up as @p name on the test's server (started by the first): its
 * connection is the server's superuser in @p dbname. */
static void on_tls_server(struct e2e_ctx *t, const char *name, bool wal, const char *dbname)
{
    e2e_setup(t, name);
    if (wal)
        e2e_wal_enable(t);
    if (!S.up)
        e2e_pg_tls_start(t, &S);
    PQfinish(t->conn);
    t->conn = e2e_pg_tls_admin(&S, dbname);
}

/* The relay's conninfo for @p t, the table migrated through it. */
static void relay_conninfo(struct e2e_ctx *t, const char *ci)
{
    FMT(t->pg_conninfo, sizeof t->pg_conninfo, "%s", ci);
    e2e_migrate(t);
}

/* Sessions of @p user over TLS, and all of them: what a DBA reads in pg_stat_ssl. */
static void expect_all_tls(const char *user, const char *backend_type, const char *client_dn)
{
    char dn[128] = "";
    if (client_dn)
        FMT(dn, sizeof dn, " AND s.client_dn = '%s'", client_dn);
    long long tls = e2e_query_int(T.conn,
                                  "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s "
                                  "USING (pid) WHERE a.usename = '%s' AND a.backend_type = '%s' "
                                  "AND s.ssl%s", user, backend_type, dn);
    long long all = e2e_query_int(T.conn, "SELECT count(*) FROM pg_stat_activity WHERE usename = "
                                          "'%s' AND backend_type = '%s'", user, backend_type);
    cr_expect_geq(tls, 1, "no %s of %s over TLS%s", backend_type, user, dn);
    cr_expect_eq(tls, all, "%lld of %lld %s sessions of %s over TLS", tls, all, backend_type, user);
}

Test(e2e, pg_tls_polling_with_scram_and_with_a_client_certificate, .fini = fini, .timeout = 180)
{
    char ci[1024];
    on_tls_server(&T, "tlspoll", false, "postgres");
    scram_conninfo(ci, sizeof ci, SCRAM_PASSWORD);
    relay_conninfo(&T, ci);
    e2e_enqueue_series(&T, "order", "k", 5, "created", 1, 60, 0);
    const char *extra[] = {"relay.poll_interval_ms=200", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    e2e_wait_all_sent(&T, 60000);
    e2e_verify_sent_once(&T, "polling over verify-full with SCRAM");
    expect_all_tls("relay_scram", "client backend", NULL);
    cr_expect_not(e2e_relay_log_contains(r, SCRAM_PASSWORD), "the password is in %s", r->log_path);

    on_tls_server(&C, "tlscert", false, "certs");
    cert_conninfo(ci, sizeof ci, "client");
    relay_conninfo(&C, ci);
    e2e_enqueue_series(&C, "order", "k", 5, "created", 1, 60, 0);
    e2e_relay_start(&C, extra);
    e2e_wait_all_sent(&C, 60000);
    e2e_verify_sent_once(&C, "polling over verify-full with a client certificate");
    expect_all_tls("relay_cert", "client backend", "/CN=relay_cert");
}

Test(e2e, pg_tls_wal_capture_over_tls_with_the_conninfo_from_a_file, .fini = fini, .timeout = 180)
{
    char ci[1024], auth[256];
    on_tls_server(&T, "tlswal", true, "postgres");
    /* The password inline, the whole conninfo in a file of mode 0600:
     * postgres.conninfo_file, the twin of postgres.conninfo. */
    FMT(auth, sizeof auth, "dbname=postgres user=relay_scram password=%s", SCRAM_PASSWORD);
    conninfo(ci, sizeof ci, "host=localhost", "ca.pem", auth);
    relay_conninfo(&T, ci);
    e2e_enqueue_series(&T, "order", "k", 5, "created", 1, 60, 0);
    char file[800];
    FMT(file, sizeof file, "postgres.conninfo_file=%s", secret_file("conninfo", ci));
    const char *extra[] = {"postgres.conninfo=", file, NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 30000),
              "never streamed (log %s)", r->log_path);
    e2e_enqueue_series(&T, "order", "k", 5, "created", 61, 120, 0);
    cr_assert(e2e_wal_wait_confirmed(&T, 30000), "the slot was not confirmed (log %s)", r->log_path);
    e2e_check_delivered(&T, "wal capture over verify-full with SCRAM", false, true, 0);
    expect_all_tls("relay_scram", "walsender", NULL);
    expect_all_tls("relay_scram", "client backend", NULL);
    cr_expect_not(e2e_relay_log_contains(r, SCRAM_PASSWORD), "the password is in %s", r->log_path);

    /* The certificate role's replication connection shows its certificate too. */
    on_tls_server(&C, "tlswalcert", true, "certs");
    cert_conninfo(ci, sizeof ci, "client");
    relay_conninfo(&C, ci);
    e2e_enqueue_series(&C, "order", "k", 5, "created", 1, 60, 0);
    r = e2e_relay_start(&C, NULL);
    cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 30000),
              "never streamed (log %s)", r->log_path);
    cr_assert(e2e_wal_wait_confirmed(&C, 30000), "the slot was not confirmed (log %s)", r->log_path);
    e2e_check_delivered(&C, "wal capture over verify-full with a client certificate", false, true,
                        0);
    expect_all_tls("relay_cert", "walsender", "/CN=relay_cert");
}

/* ---- each way of getting it wrong, side by side -------------------------- */

struct wrong {
    const char *what;
    const char *needle;         /* libpq's words: in the log and on /readyz */
    const char *hint;           /* what to change: the same */
    char ci[1024];
    struct e2e_relay *r;
    int64_t started_ms;
};

#define WRONG_PASSWORD "wrong-password-3"
#define NAMED_WITHIN_MS 20000
#define MAX_LINES 60

static void start_wrong(struct wrong *w)
{
    FMT(T.pg_conninfo, sizeof T.pg_conninfo, "%s", w->ci);
    const char *extra[] = {"relay.poll_interval_ms=200", NULL};
    w->started_ms = e2e_now_ms();
    w->r = e2e_relay_start(&T, extra);
}

/* Named within NAMED_WITHIN_MS of its start, in at most MAX_LINES lines in
 * that time, not ready, no secret in its log. */
static void check_wrong(struct wrong *w)
{
    int64_t left = w->started_ms + NAMED_WITHIN_MS - e2e_now_ms();
    cr_expect(e2e_relay_wait_log(w->r, w->needle, left > 0 ? (int)left : 1),
              "%s: \"%s\" is not in the log within %d s (%s)", w->what, w->needle,
              NAMED_WITHIN_MS / 1000, w->r->log_path);
    left = w->started_ms + NAMED_WITHIN_MS - e2e_now_ms();
    if (left > 0)
        e2e_sleep_ms((int)left);
    int lines = e2e_relay_log_count(w->r, "\n");
    cr_expect_leq(lines, MAX_LINES, "%s: %d log lines in %d s (%s)", w->what, lines,
                  NAMED_WITHIN_MS / 1000, w->r->log_path);
    cr_expect(e2e_relay_log_contains(w->r, w->hint), "%s: no hint \"%s\" in %s", w->what, w->hint,
              w->r->log_path);
    char *body = NULL;
    int code = e2e_relay_http_get(w->r, "/readyz?verbose", &body);
    cr_expect_eq(code, 503, "%s: /readyz answered %d: %s", w->what, code, body);
    cr_expect(strstr(body, "[-]postgres not connected: ") && strstr(body, w->needle) &&
                  strstr(body, w->hint),
              "%s: /readyz does not say why: %s", w->what, body);
    free(body);
    body = NULL;
    code = e2e_relay_http_get(w->r, "/status", &body);
    cr_expect(code == 200 && strstr(body, "\"hint\":") && strstr(body, w->hint),
              "%s: /status does not say why (%d): %s", w->what, code, body);
    free(body);
    cr_expect_not(e2e_relay_log_contains(w->r, SCRAM_PASSWORD), "%s: the password is in %s",
                  w->what, w->r->log_path);
    cr_expect_not(e2e_relay_log_contains(w->r, WRONG_PASSWORD), "%s: the password is in %s",
                  w->what, w->r->log_path);
    cr_expect(e2e_relay_alive(w->r), "%s: the relay exited (%s)", w->what, w->r->log_path);
}

Test(e2e, pg_tls_each_mistake_is_named_soon_in_a_few_lines, .fini = fini, .timeout = 180)
{
    char ci[1024], pass[128], auth[900];
    on_tls_server(&T, "tlswrong", false, "postgres");
    scram_conninfo(ci, sizeof ci, SCRAM_PASSWORD);
    relay_conninfo(&T, ci);
    e2e_enqueue_series(&T, "order", "k", 5, "created", 1, 20, 0);

    /* Any host: the one the certificate does not name too. */
    FMT(pass, sizeof pass, "*:%d:postgres:relay_scram:%s", S.port, SCRAM_PASSWORD);
    FMT(auth, sizeof auth, "dbname=postgres user=relay_scram passfile=%s",
             secret_file("pgpass-any", pass));
    struct wrong w[] = {
        {.what = "a server certificate from a CA the relay does not trust",
         .needle = "certificate verify failed", .hint = "does not come from a CA in sslrootcert"},
        {.what = "a server certificate for another host name",
         .needle = "does not match host name", .hint = "does not name the host"},
        {.what = "no client certificate where one is required",
         .needle = "connection requires a valid client certificate",
         .hint = "set sslcert and sslkey"},
        {.what = "an expired client certificate", .needle = "certificate expired",
         .hint = "client certificate (sslcert) as expired"},
        {.what = "a client certificate from a CA the server does not trust",
         .needle = "unknown ca", .hint = "does not trust the CA that signed the client"},
        {.what = "a wrong password", .needle = "password authentication failed for user",
         .hint = "refused the password"},
    };
    conninfo(w[0].ci, sizeof w[0].ci, "host=localhost", "foreign-ca.pem", auth);
    conninfo(w[1].ci, sizeof w[1].ci, "host=db.invalid hostaddr=127.0.0.1", "ca.pem", auth);
    cert_conninfo(w[2].ci, sizeof w[2].ci, NULL);
    cert_conninfo(w[3].ci, sizeof w[3].ci, "expired");
    cert_conninfo(w[4].ci, sizeof w[4].ci, "foreign-client");
    scram_conninfo(w[5].ci, sizeof w[5].ci, WRONG_PASSWORD);
    size_t n = sizeof w / sizeof w[0];
    for (size_t i = 0; i < n; i++)
        start_wrong(&w[i]);

    /* migrate connects once and exits: 69, unreachable, saying why. */
    FMT(T.pg_conninfo, sizeof T.pg_conninfo, "%s", w[0].ci);
    const char *args[E2E_MAX_ARGS];
    int argc = 0;
    args[argc++] = "migrate";
    e2e_base_args(&T, args, &argc);
    args[argc] = NULL;
    char *out = NULL, *err = NULL;
    int rc = e2e_run_relay(args, 60000, &out, &err);
    cr_expect_eq(rc, 69, "migrate with a foreign CA exited %d: %s", rc, err);
    cr_expect(err && strstr(err, "certificate verify failed") && strstr(err, w[0].hint),
              "migrate does not say why: %s", err);
    free(out);
    free(err);

    /* A client key others may read: libpq would refuse it at every connect;
     * check-config says so at once, exit 78. */
    char key[800], open_key[800], conf[1100];
    FMT(key, sizeof key, "%s/client.key", S.tls);
    FMT(open_key, sizeof open_key, "%s/open-client.key", S.dir);
    copy_file(key, open_key, 0644);
    FMT(auth, sizeof auth, "dbname=certs user=relay_cert sslcert=%s/client.pem sslkey=%s", S.tls,
        open_key);
    conninfo(ci, sizeof ci, "host=localhost", "ca.pem", auth);
    FMT(conf, sizeof conf, "postgres.conninfo=%s", ci);
    const char *check[] = {"check-config", "-c", T.empty_conf, "-X", conf, "-X",
                           "kafka.bootstrap.servers=127.0.0.1:9", NULL};
    rc = e2e_run_relay(check, 30000, &out, &err);
    cr_expect_eq(rc, 78, "check-config with a key others may read exited %d: %s", rc, err);
    cr_expect(err && strstr(err, "sslkey") && strstr(err, "may be read by group or others"),
              "check-config does not name the key: %s", err);
    free(out);
    free(err);

    for (size_t i = 0; i < n; i++)
        check_wrong(&w[i]);
    cr_expect_eq(e2e_count_where(&T, "sent_at IS NOT NULL"), 0, "rows marked sent");
}
