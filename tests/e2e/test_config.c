/* test_config.c — the binary's command line and configuration handling:
 * rejected configuration exits 78 naming the key, bad usage exits 64,
 * check-config accepts a good file and never prints its secrets. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

static struct e2e_ctx T;

static void fini(void)
{
    e2e_teardown(&T);
}

static char *write_conf(const char *name, const char *text)
{
    static char path[700];
    snprintf(path, sizeof(path), "%s/%s", T.logdir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
    return path;
}

struct bad_case {
    const char *what;
    const char *conf_text;      /* NULL: use -c <empty file> */
    const char *x;              /* one -X override, or NULL */
    const char *must_name;      /* the stderr must contain this */
};

/* Runs `outbox-relay SUBCMD -c FILE [-X x]` and checks exit 78 + the key on stderr. */
static void expect_rejected(const char *subcmd, const struct bad_case *c, struct e2e_report *rep)
{
    const char *conf = c->conf_text ? write_conf("bad.conf", c->conf_text) : T.empty_conf;
    const char *args[10];
    int n = 0;
    args[n++] = subcmd;
    args[n++] = "-c";
    args[n++] = conf;
    /* A reachable database and broker, so only the configuration can be the problem. */
    char pg[1024], kafka[1024];
    snprintf(pg, sizeof(pg), "postgres.conninfo=%s", T.env->pg);
    snprintf(kafka, sizeof(kafka), "kafka.bootstrap.servers=%s", T.env->kafka);
    if (!c->conf_text || !strstr(c->conf_text, "[postgres]")) {
        args[n++] = "-X";
        args[n++] = pg;
    }
    args[n++] = "-X";
    args[n++] = kafka;
    if (c->x) {
        args[n++] = "-X";
        args[n++] = c->x;
    }
    args[n] = NULL;

    char *out = NULL, *err = NULL;
    int rc = e2e_run_relay(args, 20000, &out, &err);
    e2e_check(rep, rc == 78, "%s %s: exit status %d, expected 78 (stderr: %.300s)", subcmd, c->what, rc,
              err ? err : "");
    e2e_check(rep, err && strstr(err, c->must_name), "%s %s: stderr does not name \"%s\": %.300s", subcmd,
              c->what, c->must_name, err ? err : "");
    free(out);
    free(err);
}

static const struct bad_case bad_cases[] = {
    {"unknown key", NULL, "relay.bacth_size=10", "relay.bacth_size"},
    {"malformed int", NULL, "relay.batch_size=abc", "relay.batch_size"},
    {"int with trailing junk", NULL, "relay.poll_interval_ms=100ms", "relay.poll_interval_ms"},
    {"int below range", NULL, "relay.batch_size=0", "relay.batch_size"},
    {"int above range", NULL, "relay.batch_size=100001", "relay.batch_size"},
    {"negative int", NULL, "relay.poll_interval_ms=-5", "relay.poll_interval_ms"},
    {"int overflow", NULL, "relay.batch_size=99999999999999999999", "relay.batch_size"},
    {"acks=1 breaks idempotence", NULL, "kafka.acks=1", "kafka.acks"},
    {"idempotence off", NULL, "kafka.enable.idempotence=false", "kafka.enable.idempotence"},
    {"unknown kafka property", NULL, "kafka.no.such.property=1", "kafka.no.such.property"},
    {"SQL injection in relay.table", NULL, "relay.table=outbox\"; DROP TABLE x; --", "relay.table"},
    {"SQL injection in relay.schema", NULL, "relay.schema=public\".\"x", "relay.schema"},
    {"unknown topic placeholder", NULL, "relay.topic=events.${aggregate}", "relay.topic"},
    {"unterminated placeholder", NULL, "relay.topic=events.${aggregate_type", "relay.topic"},
    {"unknown log level", NULL, "log.level=verbose", "log.level"},
    {"unknown section in a file", "[bogus]\nfoo = 1\n", NULL, "bogus"},
    {"unknown key in a file", "[relay]\nbacth_size = 10\n", NULL, "relay.bacth_size"},
    {"bad value in a file", "[relay]\nbatch_size = lots\n", NULL, "relay.batch_size"},
};

Test(e2e, bad_config_check_config, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "badconf");
    struct e2e_report rep = {0};
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++)
        expect_rejected("check-config", &bad_cases[i], &rep);
    e2e_report_assert(&rep, "check-config with bad configuration");
}

/* `run` and `migrate` must reject the same way, at once (no retry loop). */
Test(e2e, bad_config_run_and_migrate, .fini = fini, .timeout = 200)
{
    e2e_setup(&T, "badrun");
    struct e2e_report rep = {0};
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        expect_rejected("run", &bad_cases[i], &rep);
        expect_rejected("migrate", &bad_cases[i], &rep);
    }
    e2e_report_assert(&rep, "run/migrate with bad configuration");
}

Test(e2e, missing_config_file, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "noconf");
    char path[700];
    snprintf(path, sizeof(path), "%s/does-not-exist.conf", T.logdir);
    struct e2e_report rep = {0};
    const char *subcmds[] = {"check-config", "run", "migrate"};
    for (size_t i = 0; i < 3; i++) {
        const char *args[] = {subcmds[i], "-c", path, NULL};
        char *err = NULL;
        int rc = e2e_run_relay(args, 20000, NULL, &err);
        e2e_check(&rep, rc == 78, "%s -c <missing file>: exit %d, expected 78 (stderr: %.300s)", subcmds[i], rc,
                  err ? err : "");
        e2e_check(&rep, err && strstr(err, path), "%s -c <missing file>: stderr does not name the file: %.300s",
                  subcmds[i], err ? err : "");
        free(err);
    }
    e2e_report_assert(&rep, "missing config file");
}

Test(e2e, bad_usage, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "usage");
    struct e2e_report rep = {0};
    static const char *const cases[][4] = {
        {"frobnicate", NULL},
        {"frobnicate", "-c", "/dev/null", NULL},
        {"--no-such-flag", "run", NULL},
        {NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *err = NULL;
        int rc = e2e_run_relay(cases[i], 20000, NULL, &err);
        char shown[200] = "";
        for (int j = 0; cases[i][j]; j++)
            snprintf(shown + strlen(shown), sizeof(shown) - strlen(shown), " %s", cases[i][j]);
        e2e_check(&rep, rc == 64, "outbox-relay%s: exit %d, expected 64 (stderr: %.200s)", shown, rc,
                  err ? err : "");
        e2e_check(&rep, err && *err, "outbox-relay%s: nothing on stderr", shown);
        /* The mistake and a pointer to --help, not the whole help. */
        size_t lines = 0;
        for (const char *p = err; p && *p; p++)
            lines += *p == '\n';
        e2e_check(&rep, err && strstr(err, "--help") && lines <= 3,
                  "outbox-relay%s: expected the mistake and a hint at --help, got %zu lines: %.300s", shown, lines,
                  err ? err : "");
        free(err);
    }

    /* And the informational ones succeed. */
    const char *const ok_cases[][2] = {{"version", NULL}, {"--version", NULL}, {"-V", NULL}, {"--help", NULL}};
    for (size_t i = 0; i < sizeof(ok_cases) / sizeof(ok_cases[0]); i++) {
        char *out = NULL;
        int rc = e2e_run_relay(ok_cases[i], 20000, &out, NULL);
        e2e_check(&rep, rc == 0, "outbox-relay %s: exit %d, expected 0", ok_cases[i][0], rc);
        e2e_check(&rep, out && *out, "outbox-relay %s printed nothing on stdout", ok_cases[i][0]);
        if (i < 3)
            e2e_check(&rep, out && strstr(out, "0.1"), "outbox-relay %s does not print the version: %.200s",
                      ok_cases[i][0], out ? out : "");
        free(out);
    }

    /* Each command's --help prints that command's usage, not the global help
     * and not a usage error, and reads no configuration: a rejected key
     * beside it changes nothing. */
    static const char *const commands[] = {"run",  "migrate", "check-config", "status",
                                           "dead", "verify",  "replay",       "version"};
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        for (int variant = 0; variant < 3; variant++) {
            const char *args[6] = {commands[i], variant == 1 ? "-h" : "--help", NULL};
            if (variant == 2) {
                args[2] = "-X";
                args[3] = "relay.batch_size=lots";
            }
            char *out = NULL, *err = NULL;
            int rc = e2e_run_relay(args, 20000, &out, &err);
            char want[64];
            snprintf(want, sizeof(want), "Usage: outbox-relay %s", commands[i]);
            e2e_check(&rep, rc == 0, "outbox-relay %s %s%s: exit %d, expected 0 (stderr: %.200s)", commands[i],
                      args[1], variant == 2 ? " -X <bad>" : "", rc, err ? err : "");
            e2e_check(&rep, out && strncmp(out, want, strlen(want)) == 0,
                      "outbox-relay %s %s does not start with \"%s\": %.200s", commands[i], args[1], want,
                      out ? out : "");
            e2e_check(&rep, out && !strstr(out, "Commands:"), "outbox-relay %s %s printed the global help",
                      commands[i], args[1]);
            e2e_check(&rep, !err || !*err, "outbox-relay %s %s wrote to stderr: %.200s", commands[i], args[1],
                      err ? err : "");
            free(out);
            free(err);
        }
    }
    e2e_report_assert(&rep, "usage");
}

/* More command-line mistakes, beyond the unknown subcommand. */
Test(e2e, bad_usage_more, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "usage2");
    struct e2e_report rep = {0};
    static const char *const cases[][5] = {
        {NULL},
        {"run", "--no-such-option", NULL},
        {"check-config", "-X", NULL},
        {"check-config", "-c", NULL},
        {"check-config", "-X", "foo", NULL},
        {"check-config", "--json", NULL},
        {"check-config", "--url", "http://127.0.0.1:1/", NULL},
        {"migrate", "--format", "man", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *err = NULL;
        int rc = e2e_run_relay(cases[i], 20000, NULL, &err);
        char shown[200] = "";
        for (int j = 0; cases[i][j]; j++)
            snprintf(shown + strlen(shown), sizeof(shown) - strlen(shown), " %s", cases[i][j]);
        e2e_check(&rep, rc == 64, "outbox-relay%s: exit %d, expected 64 (stderr: %.200s)", shown, rc,
                  err ? err : "");
        free(err);
    }
    e2e_report_assert(&rep, "more usage errors");
}

Test(e2e, check_config_good_and_redacted, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "goodconf");
    char text[2048];
    snprintf(text, sizeof(text),
             "# a complete, valid configuration\n"
             "[postgres]\n"
             "conninfo = host=127.0.0.1 port=5432 dbname=app user=relay password=secret123\n"
             "[kafka]\n"
             "bootstrap.servers = %s\n"
             "linger.ms = 5\n"
             "[relay]\n"
             "schema = public\n"
             "table = outbox\n"
             "topic = events.${aggregate_type}.${event_type}\n"
             "notify_channel = outbox_relay\n"
             "batch_size = 500\n"
             "poll_interval_ms = 250\n"
             "[log]\n"
             "level = debug\n",
             T.env->kafka);
    const char *conf = write_conf("good.conf", text);
    struct e2e_report rep = {0};

    const char *args[] = {"check-config", "-c", conf, NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_relay(args, 20000, &out, &err);
    e2e_check(&rep, rc == 0, "check-config of a good file exited %d (stderr: %.400s)", rc, err ? err : "");
    e2e_check(&rep, !(out && strstr(out, "secret123")) && !(err && strstr(err, "secret123")),
              "check-config printed the password: stdout %.400s stderr %.400s", out ? out : "", err ? err : "");
    free(out);
    free(err);

    /* The URI form of a conninfo, and -X overrides on top of the file. */
    const char *args2[] = {"check-config", "-c", conf,
                           "-X", "postgres.conninfo=postgresql://relay:secret123@127.0.0.1:5432/app",
                           "-X", "relay.batch_size=10", NULL};
    rc = e2e_run_relay(args2, 20000, &out, &err);
    e2e_check(&rep, rc == 0, "check-config with a URI conninfo exited %d (stderr: %.400s)", rc, err ? err : "");
    e2e_check(&rep, !(out && strstr(out, "secret123")) && !(err && strstr(err, "secret123")),
              "check-config printed the password of a URI conninfo: stdout %.400s stderr %.400s",
              out ? out : "", err ? err : "");
    free(out);
    free(err);
    e2e_report_assert(&rep, "check-config of a good configuration");
}

Test(e2e, check_config_redacts_kafka_secrets, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "kafkasecret");
    const char *args[] = {"check-config", "-c", T.empty_conf,
                          "-X", "postgres.conninfo=host=127.0.0.1 dbname=app",
                          "-X", "kafka.bootstrap.servers=127.0.0.1:9092",
                          "-X", "kafka.security.protocol=sasl_plaintext",
                          "-X", "kafka.sasl.mechanisms=PLAIN",
                          "-X", "kafka.sasl.username=relay",
                          "-X", "kafka.sasl.password=kafkasecret456", NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_relay(args, 20000, &out, &err);
    cr_expect_eq(rc, 0, "check-config with SASL settings exited %d (stderr: %.400s)", rc, err ? err : "");
    cr_expect(!(out && strstr(out, "kafkasecret456")) && !(err && strstr(err, "kafkasecret456")),
              "check-config printed kafka.sasl.password: stdout %.400s stderr %.400s", out ? out : "",
              err ? err : "");
    free(out);
    free(err);
}

/* The variables the kubelet injects for a Service named outbox-relay (port
 * 8423 named status), as a pod of that namespace sees them. */
static const char *const service_links[][2] = {
    {"OUTBOX_RELAY_SERVICE_HOST", "10.96.12.7"},
    {"OUTBOX_RELAY_SERVICE_PORT", "8423"},
    {"OUTBOX_RELAY_SERVICE_PORT_STATUS", "8423"},
    {"OUTBOX_RELAY_PORT", "tcp://10.96.12.7:8423"},
    {"OUTBOX_RELAY_PORT_8423_TCP", "tcp://10.96.12.7:8423"},
    {"OUTBOX_RELAY_PORT_8423_TCP_PROTO", "tcp"},
    {"OUTBOX_RELAY_PORT_8423_TCP_PORT", "8423"},
    {"OUTBOX_RELAY_PORT_8423_TCP_ADDR", "10.96.12.7"},
};
#define N_LINKS (sizeof service_links / sizeof service_links[0])

static void service_links_set(bool on)
{
    for (size_t i = 0; i < N_LINKS; i++) {
        if (on)
            setenv(service_links[i][0], service_links[i][1], 1);
        else
            unsetenv(service_links[i][0]);
    }
}

static void fini_links(void)
{
    service_links_set(false);
    unsetenv("OUTBOX_RELAY_RELAY_TABEL");
    e2e_teardown(&T);
}

/* A Service named like the relay must not crash-loop it: the relay starts with
 * those variables in its environment and relays; a typo next to them is still
 * rejected with exit 78 naming the variable. */
Test(e2e, kubernetes_service_links_are_not_configuration, .fini = fini_links, .timeout = 120)
{
    e2e_setup(&T, "svclinks");
    e2e_migrate(&T);
    service_links_set(true);

    char *out = NULL, *err = NULL;
    const char *check[] = {"check-config", "-c", T.empty_conf, "-X", "kafka.bootstrap.servers=127.0.0.1:9092", NULL};
    int rc = e2e_run_relay(check, 30000, &out, &err);
    cr_expect_eq(rc, 0, "check-config with the service variables exited %d: %.400s", rc, err ? err : "");
    free(out);
    free(err);

    struct e2e_relay *relay = e2e_relay_start(&T, NULL);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000),
              "the relay did not become leader with the service variables set (log %s)",
              relay->log_path);
    e2e_exec(T.conn, "SELECT %s('order', '1', 'OrderPaid', '{}', NULL, NULL)", T.qenqueue);
    e2e_wait_all_sent(&T, 30000);
    cr_expect_eq(e2e_relay_stop(relay, 20000), 0, "the relay did not stop cleanly");

    setenv("OUTBOX_RELAY_RELAY_TABEL", "events", 1);
    out = err = NULL;
    rc = e2e_run_relay(check, 30000, &out, &err);
    cr_expect_eq(rc, 78, "a typo next to the service variables: exit %d, expected 78", rc);
    cr_expect(err && strstr(err, "OUTBOX_RELAY_RELAY_TABEL"), "the message does not name the typo: %.400s",
              err ? err : "");
    free(out);
    free(err);
}

/* check-config names the missing brokers instead of printing an empty [kafka]
 * section, and prints what the relay sets on its producer. */
Test(e2e, check_config_requires_brokers_and_shows_the_producer_settings, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "brokers");
    char *out = NULL, *err = NULL;
    const char *none[] = {"check-config", "-c", T.empty_conf, NULL};
    int rc = e2e_run_relay(none, 30000, &out, &err);
    cr_expect_eq(rc, 78, "check-config without brokers exited %d, expected 78", rc);
    cr_expect(err && strstr(err, "kafka.bootstrap.servers"), "the message does not name the key: %.400s",
              err ? err : "");
    free(out);
    free(err);

    const char *run[] = {"run", "-c", T.empty_conf, NULL};
    out = err = NULL;
    rc = e2e_run_relay(run, 30000, &out, &err);
    cr_expect_eq(rc, 78, "run without brokers exited %d, expected 78", rc);
    free(out);
    free(err);

    const char *some[] = {"check-config", "-c", T.empty_conf, "-X", "kafka.bootstrap.servers=127.0.0.1:9092",
                          "-X", "kafka.linger.ms=5", NULL};
    out = err = NULL;
    rc = e2e_run_relay(some, 30000, &out, &err);
    cr_assert_eq(rc, 0, "check-config exited %d: %.400s", rc, err ? err : "");
    static const char *const want[] = {
        "bootstrap.servers = 127.0.0.1:9092\n",
        "# enforced by the relay (the guarantees depend on it)\nenable.idempotence = true\n",
        "# enforced by the relay (the guarantees depend on it)\nacks = all\n",
        "# default of the relay (may be set here)\nmax.in.flight.requests.per.connection = 1\n",
        "linger.ms = 5\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(out && strstr(out, want[i]), "check-config does not print \"%s\": %.2000s", want[i],
                  out ? out : "");
    cr_expect(out && !strstr(out, "linger.ms = 0"), "the relay's linger.ms shown over the operator's");
    free(out);
    free(err);
}
