/* process.c — running the outbox-relay binary and other programs: commands
 * to completion, relays in the background, their logs (see testlib.h). */
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

/* ---- processes ---------------------------------------------------------- */

/* fork + exec with stdout/stderr sent to files; the child dies with us. */
static pid_t spawn(const char *const argv[], int out_fd, int err_fd)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        sigset_t none;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        closefrom(3);
        execv(argv[0], (char *const *)argv);
        dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

static int decode_status(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

/* Waits up to timeout_ms for pid; @return true and *status if it ended. */
static bool wait_pid(pid_t pid, int timeout_ms, int *status)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return true;
        if (r < 0 && errno != EINTR)
            return true; /* not our child any more: nothing to wait for */
        if (e2e_now_ms() >= deadline)
            return false;
        e2e_sleep_ms(10);
    }
}

int e2e_run_cmd(const char *const argv[], int timeout_ms, char **out, char **err)
{
    char out_path[] = "/tmp/e2e-out-XXXXXX", err_path[] = "/tmp/e2e-err-XXXXXX";
    int ofd = mkstemp(out_path), efd = mkstemp(err_path);
    cr_assert(ofd >= 0 && efd >= 0, "mkstemp: %s", strerror(errno));

    pid_t pid = spawn(argv, ofd, efd);
    close(ofd);
    close(efd);
    int st = 0, rc;
    if (wait_pid(pid, timeout_ms, &st)) {
        rc = decode_status(st);
    } else {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        rc = -1;
    }
    if (out)
        *out = tl_read_file(out_path, NULL);
    if (err)
        *err = tl_read_file(err_path, NULL);
    unlink(out_path);
    unlink(err_path);
    return rc;
}

int e2e_run_relay(const char *const args[], int timeout_ms, char **out, char **err)
{
    const char *argv[E2E_MAX_ARGS + 2];
    int n = 0;
    argv[n++] = e2e_env()->relay_bin;
    for (int i = 0; args && args[i]; i++) {
        cr_assert(n < E2E_MAX_ARGS, "too many arguments");
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    return e2e_run_cmd(argv, timeout_ms, out, err);
}

/* Option strings live as long as the context: keep them in a static pool. */
static const char *pool_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static const char *pool_fmt(const char *fmt, ...)
{
    static char pool[16][1024];
    static int next;
    char *s = pool[next++ % 16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof(pool[0]), fmt, ap);
    va_end(ap);
    return s;
}

void e2e_base_args(struct e2e_ctx *t, const char **argv, int *argc)
{
    int n = *argc;
    argv[n++] = "-c";
    argv[n++] = t->empty_conf;
    argv[n++] = "-X";
    argv[n++] = pool_fmt("postgres.conninfo=%s", *t->pg_conninfo ? t->pg_conninfo : t->env->pg);
    argv[n++] = "-X";
    argv[n++] = pool_fmt("kafka.bootstrap.servers=%s", t->kafka);
    argv[n++] = "-X";
    argv[n++] = pool_fmt("relay.table=%s", t->table);
    argv[n++] = "-X";
    argv[n++] = pool_fmt("relay.topic=%s", t->topic_template);
    argv[n++] = "-X";
    argv[n++] = pool_fmt("relay.notify_channel=%s", t->channel);
    if (t->wal) {
        argv[n++] = "-X";
        argv[n++] = "relay.capture=wal";
        argv[n++] = "-X";
        argv[n++] = pool_fmt("relay.slot=%s", t->table);
        argv[n++] = "-X";
        argv[n++] = pool_fmt("relay.publication=%s", t->table);
    }
    *argc = n;
}

void e2e_migrate(struct e2e_ctx *t)
{
    const char *args[E2E_MAX_ARGS];
    int n = 0;
    args[n++] = "migrate";
    e2e_base_args(t, args, &n);
    args[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = e2e_run_relay(args, 60000, &out, &err);
    cr_assert(rc == 0, "outbox-relay migrate exited %d\nstdout: %s\nstderr: %s", rc, out ? out : "",
              err ? err : "");
    free(out);
    free(err);
}

/* Takes the test's next process slot, starts @p argv with stdout and stderr
 * in <logdir>/<kind>-N.log. */
static struct e2e_relay *launch(struct e2e_ctx *t, const char *kind, const char *const *argv)
{
    cr_assert(t->n_relays < E2E_MAX_RELAYS, "too many processes in one test");
    struct e2e_relay *r = &t->relays[t->n_relays];
    memset(r, 0, sizeof(*r));
    snprintf(r->log_path, sizeof(r->log_path), "%s/%s-%d.log", t->logdir, kind, t->n_relays);
    int fd = open(r->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    cr_assert(fd >= 0, "open %s: %s", r->log_path, strerror(errno));
    r->pid = spawn(argv, fd, fd);
    close(fd);
    t->n_relays++;
    return r;
}

struct e2e_relay *e2e_relay_start(struct e2e_ctx *t, const char *const *extra)
{
    const char *argv[E2E_MAX_ARGS + 2];
    int n = 0;
    argv[n++] = t->env->relay_bin;
    argv[n++] = "run";
    e2e_base_args(t, argv, &n);
    /* Relays of a test run side by side: each gets a port of its own for the
     * status endpoint (logged; see e2e_relay_http_port). @p extra may override. */
    argv[n++] = "-X";
    argv[n++] = "http.listen=127.0.0.1:0";
    for (int i = 0; extra && extra[i]; i++) {
        cr_assert(n + 2 < E2E_MAX_ARGS, "too many arguments");
        argv[n++] = "-X";
        argv[n++] = extra[i];
    }
    argv[n] = NULL;
    return launch(t, "relay", argv);
}

struct e2e_relay *e2e_relay_start_capturing(struct e2e_ctx *t, const char *const *extra,
                                            int timeout_ms)
{
    struct e2e_relay *r = e2e_relay_start(t, extra);
    const char *line = t->wal ? "streaming from the replication slot" : "postgres connected";
    cr_assert(e2e_relay_wait_log(r, line, timeout_ms), "no \"%s\" within %d ms (log %s)", line,
              timeout_ms, r->log_path);
    return r;
}

bool e2e_relay_alive(struct e2e_relay *r)
{
    if (r->pid <= 0)
        return false;
    int st;
    pid_t w = waitpid(r->pid, &st, WNOHANG);
    if (w == r->pid) {
        r->status = st;
        r->pid = 0;
        return false;
    }
    return true;
}

bool e2e_relay_log_contains(const struct e2e_relay *r, const char *needle)
{
    char *s = tl_read_file(r->log_path, NULL);
    bool found = s && strstr(s, needle);
    free(s);
    return found;
}

bool e2e_relay_wait_log(struct e2e_relay *r, const char *needle, int timeout_ms)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        if (e2e_relay_log_contains(r, needle))
            return true;
        if (!e2e_relay_alive(r))
            return e2e_relay_log_contains(r, needle);
        if (e2e_now_ms() >= deadline)
            return false;
        e2e_sleep_ms(50);
    }
}

int e2e_relay_stop(struct e2e_relay *r, int timeout_ms)
{
    if (r->pid <= 0)
        return decode_status(r->status);
    kill(r->pid, SIGTERM);
    int st = 0;
    if (wait_pid(r->pid, timeout_ms, &st)) {
        r->status = st;
        r->pid = 0;
        return decode_status(st);
    }
    kill(r->pid, SIGKILL);
    waitpid(r->pid, &st, 0);
    r->status = st;
    r->pid = 0;
    return -1;
}

void e2e_relay_kill(struct e2e_relay *r)
{
    if (r->pid <= 0)
        return;
    kill(r->pid, SIGKILL);
    int st = 0;
    waitpid(r->pid, &st, 0);
    r->status = st;
    r->pid = 0;
}

void e2e_relay_dump_log(const struct e2e_relay *r, int lines)
{
    size_t len = 0;
    char *s = tl_read_file(r->log_path, &len);
    if (!s) {
        fprintf(stderr, "(no log at %s)\n", r->log_path);
        return;
    }
    const char *p = s + len;
    int seen = 0;
    while (p > s && seen <= lines) {
        p--;
        if (*p == '\n')
            seen++;
    }
    if (p > s)
        p++;
    fprintf(stderr, "%s%s", p, len && s[len - 1] != '\n' ? "\n" : "");
    free(s);
}

struct e2e_relay *e2e_spawn(struct e2e_ctx *t, const char *const *args)
{
    const char *argv[E2E_MAX_ARGS + 2];
    int n = 0;
    argv[n++] = t->env->relay_bin;
    for (int i = 0; args && args[i]; i++) {
        cr_assert(n < E2E_MAX_ARGS, "too many arguments");
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    return launch(t, "proc", argv);
}

int e2e_wait_exit(struct e2e_relay *r, int timeout_ms)
{
    if (r->pid <= 0)
        return decode_status(r->status);
    int st = 0;
    if (wait_pid(r->pid, timeout_ms, &st)) {
        r->status = st;
        r->pid = 0;
        return decode_status(st);
    }
    e2e_relay_kill(r);
    return -1;
}

char *e2e_relay_log(const struct e2e_relay *r)
{
    char *s = tl_read_file(r->log_path, NULL);
    return s ? s : strdup("");
}

int e2e_relay_log_count(const struct e2e_relay *r, const char *needle)
{
    char *s = tl_read_file(r->log_path, NULL);
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    free(s);
    return n;
}

int e2e_dead(struct e2e_ctx *t, const char *const *words, const char *const *extra, char **out,
             char **err)
{
    const char *args[E2E_MAX_ARGS];
    int n = 0;
    args[n++] = "dead";
    for (int i = 0; words && words[i]; i++) {
        cr_assert(n < E2E_MAX_ARGS - 16, "too many arguments");
        args[n++] = words[i];
    }
    /* After the action and ids: the options may follow them. */
    e2e_base_args(t, args, &n);
    for (int i = 0; extra && extra[i]; i++) {
        cr_assert(n + 3 < E2E_MAX_ARGS, "too many arguments");
        args[n++] = "-X";
        args[n++] = extra[i];
    }
    args[n] = NULL;
    return e2e_run_relay(args, 30000, out, err);
}
