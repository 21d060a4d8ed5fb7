/* test_secrets.c — passwords stay out of what the relay prints and out of its
 * command line: `run`, `migrate` and `dead list` with a conninfo libpq cannot
 * parse (libpq quotes pieces of it, which can be the password) say what is
 * wrong without any piece of the password; a running relay's
 * /proc/PID/cmdline no longer shows the secrets given with -X; secrets read
 * from `_file` twins (and $CREDENTIALS_DIRECTORY) are used, never shown, and
 * refused by name when others can read their file. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testlib.h"

static struct e2e_ctx T;

static void fini(void)
{
    e2e_teardown(&T);
}

struct bad_conninfo {
    const char *what;
    const char *conninfo;
    const char *says;           /* libpq's complaint, which must survive redaction */
    const char *secrets[4];     /* the password and the pieces libpq would quote */
};

/* Each fails in libpq's parser (or option check), before any network I/O. */
static const struct bad_conninfo cases[] = {
    {"stray % in a URI password", "postgresql://relay:Pa%zzSecretOne@127.0.0.1:1/app",
     "invalid percent-encoded token", {"Pa%zzSecretOne", "zzSecretOne", "SecretOne", NULL}},
    {"unquoted space in a password", "host=127.0.0.1 port=1 password=FirstHalf SecondHalf",
     "missing \\\"=\\\"", {"FirstHalf", "SecondHalf", NULL}},
    {"upper-case URI scheme", "POSTGRESQL://relay:UpperCaseSecret@127.0.0.1:1/app",
     "missing \\\"=\\\"", {"UpperCaseSecret", NULL}},
    {"'/' in a URI password", "postgresql://relay:SlashHalf/OtherHalf@127.0.0.1:1/app",
     "invalid integer value", {"SlashHalf", "OtherHalf", NULL}},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static void check_clean(struct e2e_report *rep, const char *cmd, const struct bad_conninfo *c,
                        const char *where, const char *text)
{
    for (size_t i = 0; c->secrets[i]; i++)
        e2e_check(rep, !strstr(text, c->secrets[i]), "%s, %s: %s shows \"%s\": %.600s", cmd, c->what,
                  where, c->secrets[i], text);
}

/* Runs `outbox-relay ARGS... -c empty -X postgres.conninfo=BAD ...` for @p c;
 * @return its exit status, output in *out / *err (caller frees). */
static int run_with(const char *const *words, const struct bad_conninfo *c, int timeout_ms,
                    char **out, char **err)
{
    char conninfo[512], kafka[512], table[128], channel[128];
    snprintf(conninfo, sizeof conninfo, "postgres.conninfo=%s", c->conninfo);
    snprintf(kafka, sizeof kafka, "kafka.bootstrap.servers=%s", T.env->kafka);
    snprintf(table, sizeof table, "relay.table=%s", T.table);
    snprintf(channel, sizeof channel, "relay.notify_channel=%s", T.channel);
    const char *args[E2E_MAX_ARGS];
    int n = 0;
    for (; words[n]; n++)
        args[n] = words[n];
    const char *const rest[] = {
        "-c", T.empty_conf, "-X", conninfo, "-X", kafka, "-X", table, "-X", channel,
        /* reconnect lines come quickly, the status endpoint stays out of the way */
        "-X", "relay.reconnect_interval_ms=20", "-X", "relay.reconnect_max_ms=50",
        "-X", "http.listen=", NULL,
    };
    for (size_t i = 0; rest[i]; i++)
        args[n++] = rest[i];
    args[n] = NULL;
    return e2e_run_relay(args, timeout_ms, out, err);
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

Test(e2e, run_never_logs_the_password_of_a_bad_conninfo, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "secrun");
    struct e2e_report rep = {0};
    for (size_t i = 0; i < N_CASES; i++) {
        const struct bad_conninfo *c = &cases[i];
        char *out = NULL, *err = NULL;
        /* run keeps retrying: it is killed after 1.5 s of reconnect lines */
        const char *words[] = {"run", NULL};
        run_with(words, c, 1500, &out, &err);
        e2e_check(&rep, count(err, "msg=\"postgres connection failed\"") >= 2,
                  "run, %s: fewer than two reconnect lines: %.600s", c->what, err);
        /* one host: one warning an attempt, not a host line repeating it */
        e2e_check(&rep, strchr(c->conninfo, ',') || count(err, "msg=\"postgres host failed\"") == 0,
                  "run, %s: a host line repeats the connection line: %.600s", c->what, err);
        e2e_check(&rep, strstr(err, c->says) != NULL, "run, %s: the error does not say %s: %.600s",
                  c->what, c->says, err);
        check_clean(&rep, "run", c, "stderr", err);
        check_clean(&rep, "run", c, "stdout", out);
        free(out);
        free(err);
    }
    e2e_report_assert(&rep, "run with a bad conninfo");
}

Test(e2e, migrate_never_prints_the_password_of_a_bad_conninfo, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "secmig");
    struct e2e_report rep = {0};
    for (size_t i = 0; i < N_CASES; i++) {
        const struct bad_conninfo *c = &cases[i];
        /* both line formats: JSON escapes differently, the password must not care */
        for (int json = 0; json < 2; json++) {
            const char *words[] = {"migrate", json ? "--log-format=json" : NULL, NULL};
            char *out = NULL, *err = NULL;
            int rc = run_with(words, c, 30000, &out, &err);
            e2e_check(&rep, rc == 69, "migrate, %s: exit %d, expected 69: %.600s", c->what, rc, err);
            e2e_check(&rep, strstr(err, "cannot connect to postgres") != NULL,
                      "migrate, %s: no connection error: %.600s", c->what, err);
            e2e_check(&rep, json || strstr(err, c->says) != NULL,
                      "migrate, %s: the error does not say %s: %.600s", c->what, c->says, err);
            check_clean(&rep, "migrate", c, "stderr", err);
            check_clean(&rep, "migrate", c, "stdout", out);
            free(out);
            free(err);
        }
    }
    e2e_report_assert(&rep, "migrate with a bad conninfo");
}

Test(e2e, dead_list_never_prints_the_password_of_a_bad_conninfo, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "secdead");
    struct e2e_report rep = {0};
    for (size_t i = 0; i < N_CASES; i++) {
        const struct bad_conninfo *c = &cases[i];
        const char *words[] = {"dead", "list", NULL};
        char *out = NULL, *err = NULL;
        int rc = run_with(words, c, 30000, &out, &err);
        e2e_check(&rep, rc == 69, "dead list, %s: exit %d, expected 69: %.600s", c->what, rc, err);
        e2e_check(&rep, strstr(err, "cannot connect to postgres") != NULL,
                  "dead list, %s: no connection error: %.600s", c->what, err);
        check_clean(&rep, "dead list", c, "stderr", err);
        check_clean(&rep, "dead list", c, "stdout", out);
        free(out);
        free(err);
    }
    e2e_report_assert(&rep, "dead list with a bad conninfo");
}

/* @return /proc/PID/cmdline with its NULs as spaces (caller frees). */
static char *cmdline_of(pid_t pid)
{
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert(fd >= 0, "open %s: %s", path, strerror(errno));
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    cr_assert(n > 0, "read %s", path);
    for (ssize_t i = 0; i < n; i++)
        buf[i] = buf[i] ? buf[i] : ' ';
    buf[n] = '\0';
    return strdup(buf);
}

Test(e2e, running_relay_hides_its_secrets_from_the_command_line, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "seccmd");
    e2e_migrate(&T);
    /* The test database trusts local connections, so the password is carried
     * but not needed: the relay must still connect with the real conninfo. */
    char conninfo[1024];
    snprintf(conninfo, sizeof conninfo, "postgres.conninfo=%s password=CmdlineSecret1", T.env->pg);
    const char *extra[] = {conninfo, "kafka.sasl.password=KafkaSecret2",
                           "kafka.ssl.key.password=KeySecret3", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000), "log %s", relay->log_path);

    char *cmd = cmdline_of(relay->pid);
    const char *secrets[] = {"CmdlineSecret1", "KafkaSecret2", "KeySecret3"};
    for (size_t i = 0; i < 3; i++)
        cr_expect_null(strstr(cmd, secrets[i]), "/proc/PID/cmdline shows %s: %s", secrets[i], cmd);
    cr_expect_not_null(strstr(cmd, "password=********"), "cmdline: %s", cmd);
    cr_expect_not_null(strstr(cmd, "relay.table="), "other options are kept: %s", cmd);
    free(cmd);

    /* SIGHUP reads the -X options again: from the copies, not the scrubbed
     * argv, so nothing seems to have changed. */
    cr_assert(kill(relay->pid, SIGHUP) == 0);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"configuration reloaded\" changed=0", 10000),
              "log %s", relay->log_path);
    cr_expect_not(e2e_relay_log_contains(relay, "needs a restart"), "log %s", relay->log_path);
    cr_expect_not(e2e_relay_log_contains(relay, "need a restart"), "log %s", relay->log_path);

    /* It relays, and its log never showed a secret either. */
    e2e_exec(T.conn, "SELECT %s('a', '1', 'Created', '{}', NULL, NULL)", T.qenqueue);
    e2e_wait_all_sent(&T, 30000);
    char *log = e2e_relay_log(relay);
    for (size_t i = 0; i < 3; i++)
        cr_expect_null(strstr(log, secrets[i]), "the log shows %s", secrets[i]);
    free(log);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0);
}

/* Writes @p text to LOGDIR/@p name with @p mode; @return its path (static). */
static const char *secret_file(const char *name, const char *text, mode_t mode)
{
    static char path[700];
    snprintf(path, sizeof path, "%s/%s", T.logdir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
    cr_assert_eq(chmod(path, mode), 0);
    return path;
}

Test(e2e, check_config_refuses_a_secret_file_others_can_read, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "secfile");
    const char *path = secret_file("kafka-password", "FileSecret6\n", 0644);
    char twin[800];
    snprintf(twin, sizeof twin, "kafka.sasl.password_file=%s", path);
    const char *args[E2E_MAX_ARGS] = {"check-config"};
    int n = 1;
    e2e_base_args(&T, args, &n);
    args[n++] = "-X";
    args[n++] = twin;
    args[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = e2e_run_relay(args, 30000, &out, &err);
    cr_expect_eq(rc, 78, "exit %d: %s", rc, err);
    cr_expect_not_null(strstr(err, "kafka.sasl.password_file"), "%s", err);
    cr_expect_not_null(strstr(err, "readable by group or others"), "%s", err);
    cr_expect_null(strstr(err, "FileSecret6"), "%s", err);
    cr_expect_null(strstr(out, "FileSecret6"), "%s", out);
    free(out);
    free(err);

    cr_assert_eq(chmod(path, 0600), 0);
    rc = e2e_run_relay(args, 30000, &out, &err);
    cr_expect_eq(rc, 0, "exit %d: %s", rc, err);
    cr_expect_not_null(strstr(out, "sasl.password = ********"), "%s", out);
    cr_expect_not_null(strstr(out, "sasl.password_file = "), "%s", out);
    cr_expect_null(strstr(out, "FileSecret6"), "%s", out);
    cr_expect_null(strstr(err, "FileSecret6"), "%s", err);
    free(out);
    free(err);
}

/* The conninfo from a credential, as LoadCredential= leaves it: the relay
 * connects with it and neither its log nor /status shows the password. */
Test(e2e, relay_reads_its_conninfo_from_the_credentials_directory, .fini = fini,
     .timeout = 120)
{
    e2e_setup(&T, "seccred");
    e2e_migrate(&T);
    char conninfo[1024];
    snprintf(conninfo, sizeof conninfo, "%s password=CredConninfo7\n", T.env->pg);
    secret_file("pg-conninfo", conninfo, 0400);
    cr_assert_eq(setenv("CREDENTIALS_DIRECTORY", T.logdir, 1), 0);
    const char *extra[] = {"postgres.conninfo=", "postgres.conninfo_file=pg-conninfo", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    unsetenv("CREDENTIALS_DIRECTORY");
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000), "log %s", relay->log_path);
    e2e_exec(T.conn, "SELECT %s('a', '1', 'Created', '{}', NULL, NULL)", T.qenqueue);
    e2e_wait_all_sent(&T, 30000);
    cr_expect(e2e_relay_log_contains(relay, "conninfo_file=pg-conninfo") ||
                  e2e_relay_log_contains(relay, "conninfo_file=\"pg-conninfo\""),
              "the start-up line names the file: %s", relay->log_path);
    cr_expect_not(e2e_relay_log_contains(relay, "CredConninfo7"), "log %s", relay->log_path);
    char *cmd = cmdline_of(relay->pid);
    cr_expect_null(strstr(cmd, "CredConninfo7"), "%s", cmd);
    free(cmd);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0);
}
