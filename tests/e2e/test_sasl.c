/* test_sasl.c — the relay over SASL_SSL to a real Kafka node (the SASL_SSL
 * listener of tests/support/kafka.sh: a CA of its own, SCRAM-SHA-512 users,
 * the StandardAuthorizer): with the right credentials every row arrives, by
 * SCRAM-SHA-512, SCRAM-SHA-256, PLAIN and OAUTHBEARER; a
 * wrong password and a CA the brokers' certificate does not come from are
 * named within 20 s; a principal without ACLs costs a handful of log lines,
 * not thousands, and /readyz names the right it lacks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>

#include "testlib.h"

static struct e2e_ctx T;

static void fini(void)
{
    e2e_teardown(&T);
}

/* Sets @p T up for the SASL_SSL listener; skips without the stack's own node. */
static void setup_sasl(const char *name, char *bootstrap, size_t len)
{
    e2e_setup(&T, name);
    if (!T.env->kafka_dir)
        cr_skip_test("needs the stack's own Kafka node (kafka.sh)");
    char path[700];
    snprintf(path, sizeof path, "%s/sasl_bootstrap", T.env->kafka_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        cr_skip_test("no SASL_SSL listener: %s", path);
    cr_assert_not_null(fgets(bootstrap, (int)len, f));
    fclose(f);
    bootstrap[strcspn(bootstrap, "\n")] = '\0';
    e2e_migrate(&T);
}

/* Starts a relay with SASL @p mech as @p user with @p password (from a file
 * of mode 0600, as a credential would be) trusting the CA @p ca ("ca.pem" or
 * "foreign-ca.pem"). OAUTHBEARER sends an unsecured JWT whose subject is
 * @p user: the node's built-in validator takes it, no token endpoint. */
static struct e2e_relay *start_mech(const char *bootstrap, const char *mech, const char *user,
                                    const char *password, const char *ca)
{
    static char bs[600], m[128], u[128], pw[800], cafile[800];
    char path[700];
    snprintf(path, sizeof path, "%s/password-%s", T.logdir, user);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fprintf(f, "%s\n", password);
    fclose(f);
    cr_assert_eq(chmod(path, 0600), 0);
    snprintf(bs, sizeof bs, "kafka.bootstrap.servers=%s", bootstrap);
    snprintf(m, sizeof m, "kafka.sasl.mechanism=%s", mech);
    snprintf(cafile, sizeof cafile, "kafka.ssl.ca.location=%s/tls/%s", T.env->kafka_dir, ca);
    if (!strcmp(mech, "OAUTHBEARER")) {
        snprintf(u, sizeof u, "kafka.sasl.oauthbearer.config=principal=%s", user);
        const char *extra[] = {bs, "kafka.security.protocol=SASL_SSL", m,
                               "kafka.enable.sasl.oauthbearer.unsecure.jwt=true", u, cafile, NULL};
        return e2e_relay_start(&T, extra);
    }
    snprintf(u, sizeof u, "kafka.sasl.username=%s", user);
    snprintf(pw, sizeof pw, "kafka.sasl.password_file=%s", path);
    const char *extra[] = {bs, "kafka.security.protocol=SASL_SSL", m, u, pw, cafile, NULL};
    return e2e_relay_start(&T, extra);
}

static struct e2e_relay *start_as(const char *bootstrap, const char *user, const char *password,
                                  const char *ca)
{
    return start_mech(bootstrap, "SCRAM-SHA-512", user, password, ca);
}

/* On a library and broker that cannot do SCRAM together, the relay names
 * the cause within 20 s and reports not ready, instead of delivering. */
static void expect_scram_named(struct e2e_relay *relay)
{
    cr_expect(e2e_relay_wait_log(relay, "cannot authenticate by SCRAM to Kafka 4", 20000),
              "SCRAM on Kafka 4 with librdkafka %s not named within 20 s: %s", rd_kafka_version_str(),
              relay->log_path);
    char *body = NULL;
    int code = e2e_relay_http_get(relay, "/readyz?verbose", &body);
    cr_expect_eq(code, 503, "/readyz: %d %s", code, body ? body : "");
    free(body);
}

static void enqueue(int n)
{
    for (int i = 0; i < n; i++)
        e2e_exec(T.conn, "SELECT %s('order', '%d', 'Created', '{}', NULL, NULL)", T.qenqueue,
                 i % 5);
}

Test(e2e, sasl_ssl_with_the_right_credentials_delivers_every_row, .fini = fini, .timeout = 180)
{
    char bootstrap[512];
    setup_sasl("saslok", bootstrap, sizeof bootstrap);
    enqueue(50);
    struct e2e_relay *relay = start_as(bootstrap, "relay", "relay-secret-1", "ca.pem");
    if (e2e_kafka_scram_refused(&T)) {
        expect_scram_named(relay);
        e2e_relay_kill(relay);
        return;
    }
    e2e_wait_all_sent(&T, 60000);
    e2e_verify_sent_once(&T, "over SASL_SSL");
    cr_expect_not(e2e_relay_log_contains(relay, "relay-secret-1"), "log %s", relay->log_path);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0);
}

/* Each mechanism the node offers delivers its own rows: the principal, and
 * so the ACLs, are the same user's whichever way it authenticates. */
Test(e2e, sasl_ssl_scram_sha_256_plain_and_oauthbearer_each_deliver, .fini = fini, .timeout = 240)
{
    char bootstrap[512];
    setup_sasl("saslmech", bootstrap, sizeof bootstrap);
    const char *mechs[] = {"SCRAM-SHA-256", "PLAIN", "OAUTHBEARER"};
    for (size_t i = e2e_kafka_scram_refused(&T) ? 1 : 0; i < sizeof mechs / sizeof *mechs; i++) {
        enqueue(20);
        struct e2e_relay *relay = start_mech(bootstrap, mechs[i], "relay", "relay-secret-1", "ca.pem");
        e2e_wait_all_sent(&T, 60000);
        cr_expect_not(e2e_relay_log_contains(relay, "relay-secret-1"), "%s: log %s", mechs[i],
                      relay->log_path);
        cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "%s", mechs[i]);
    }
    e2e_verify_sent_once(&T, "over SASL_SSL, three mechanisms");
}

Test(e2e, sasl_ssl_names_a_wrong_password_and_a_foreign_ca, .fini = fini, .timeout = 180)
{
    char bootstrap[512];
    setup_sasl("saslbad", bootstrap, sizeof bootstrap);
    struct e2e_relay *relay = start_as(bootstrap, "relay", "not-the-password", "ca.pem");
    cr_expect(e2e_relay_wait_log(relay, "SASL_AUTHENTICATION_FAILED", 20000) ||
                  e2e_relay_log_contains(relay, "error=_AUTHENTICATION"),
              "a wrong password is not named within 20 s: %s", relay->log_path);
    cr_expect_not(e2e_relay_log_contains(relay, "not-the-password"), "log %s", relay->log_path);
    e2e_relay_kill(relay);

    relay = start_as(bootstrap, "relay", "relay-secret-1", "foreign-ca.pem");
    cr_expect(e2e_relay_wait_log(relay, "certificate verify failed", 20000),
              "a foreign CA is not named within 20 s: %s", relay->log_path);
    e2e_relay_kill(relay);
}

Test(e2e, sasl_ssl_principal_without_acls_names_the_missing_right, .fini = fini, .timeout = 180)
{
    char bootstrap[512];
    setup_sasl("saslnoacl", bootstrap, sizeof bootstrap);
    enqueue(3);
    const char *mech = e2e_kafka_scram_refused(&T) ? "PLAIN" : "SCRAM-SHA-512";
    struct e2e_relay *relay = start_mech(bootstrap, mech, "noacl", "noacl-secret-2", "ca.pem");
    cr_assert(e2e_relay_wait_log(relay, "msg=\"kafka refuses the relay's principal a right", 30000),
              "log %s", relay->log_path);
    sleep(15);
    int lines = e2e_relay_log_count(relay, "\n");
    cr_expect_lt(lines, 60, "%d log lines: %s", lines, relay->log_path);
    cr_expect_eq(e2e_relay_log_count(relay, "msg=\"kafka refuses the relay's principal a right"), 1,
                 "log %s", relay->log_path);
    char *body = NULL;
    int code = e2e_relay_http_get(relay, "/readyz?verbose", &body);
    cr_expect_eq(code, 503, "/readyz: %d %s", code, body ? body : "");
    cr_expect(body && (strstr(body, "TransactionalId") || strstr(body, "IdempotentWrite") ||
                       strstr(body, "on the topic")),
              "/readyz: %s", body ? body : "");
    free(body);
    e2e_relay_kill(relay);
}
