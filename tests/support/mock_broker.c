/* mock_broker.c — the Kafka-protocol broker of the test stack.
 *
 * librdkafka's mock cluster (rdkafka_mock.h) in a process of its own: it
 * listens on free 127.0.0.1 ports, prints the bootstrap servers on stdout and
 * serves until SIGTERM/SIGINT. Fault tests drive it through a control FIFO,
 * one command a line (see usage()). Each command's result goes to stderr.
 *
 * Topics are created automatically on first produce/metadata request with the
 * mock cluster's default of 4 partitions; `topic NAME [P] [RF]` creates one
 * ahead of time with P partitions (default --partitions). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#define MAX_ARGS 72        /* words on one control line */
#define MAX_PUSHED 100000  /* errors pushed by one command */

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void logf_(const char *fmt, ...)
{
    struct timespec ts;
    struct tm tm;
    char when[32];
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof(when), "%H:%M:%S", &tm);
    fprintf(stderr, "%s.%03ld mock-broker: ", when, ts.tv_nsec / 1000000L);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}

static void usage(FILE *out)
{
    fputs("usage: outbox-relay-mock-broker [--brokers N] [--partitions P]\n"
          "                                [--bootstrap-file PATH] [--control FIFO]\n"
          "Prints the bootstrap servers on stdout, then serves until SIGTERM/SIGINT.\n"
          "Control commands (one per line on the FIFO; a line \"@TOKEN command\"\n"
          "appends TOKEN to FIFO.ack once the command is applied):\n"
          "  down <broker_id|-1>              disconnect a broker, refuse connections\n"
          "  up <broker_id|-1>                accept connections again\n"
          "  rtt <broker_id|-1> <ms>          add round-trip delay\n"
          "  errors <api> <n> <err>...        fail the next n requests of <api> (cluster-wide);\n"
          "                                   the last error repeats if fewer than n are given\n"
          "  broker-errors <broker_id> <api> <n> <err> [rtt_ms]\n"
          "                                   same, on one broker, with an optional delay\n"
          "  clear [api]                      drop pending injected errors (all APIs by default)\n"
          "  leader <topic> <partition> <broker_id|-1>\n"
          "  topic <name> [partitions] [replication_factor]\n"
          "  topic-error <topic> <err>        error for the topic in Metadata responses\n"
          "  coordinator <transaction|group> <key> <broker_id>\n"
          "                                   the coordinator of a transactional.id or group\n"
          "<api> is a name (Produce, Fetch, Metadata, InitProducerId, ...) or a number;\n"
          "<err> is a librdkafka error name (NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT,\n"
          "_TRANSPORT, ...) or a number.\n", out);
}

/* ---- names ------------------------------------------------------------- */

static const struct {
    const char *name;
    int16_t key;
} api_names[] = {
    {"Produce", 0},          {"Fetch", 1},           {"ListOffsets", 2},
    {"Offsets", 2},          {"Metadata", 3},        {"OffsetCommit", 8},
    {"OffsetFetch", 9},      {"FindCoordinator", 10}, {"JoinGroup", 11},
    {"Heartbeat", 12},       {"LeaveGroup", 13},     {"SyncGroup", 14},
    {"DescribeGroups", 15},  {"ListGroups", 16},     {"SaslHandshake", 17},
    {"ApiVersions", 18},     {"CreateTopics", 19},   {"InitProducerId", 22},
    {"OffsetForLeaderEpoch", 23}, {"AddPartitionsToTxn", 24},
    {"AddOffsetsToTxn", 25}, {"EndTxn", 26},         {"TxnOffsetCommit", 28},
};

static int parse_int(const char *s, long min, long max, long *out)
{
    char *end;
    long v;

    if (!s || !*s)
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static int parse_api(const char *s, int16_t *out)
{
    long v;

    for (size_t i = 0; i < sizeof(api_names) / sizeof(api_names[0]); i++) {
        if (!strcasecmp(s, api_names[i].name) ||
            (!strncasecmp(s, api_names[i].name, strlen(api_names[i].name)) &&
             !strcasecmp(s + strlen(api_names[i].name), "Request"))) {
            *out = api_names[i].key;
            return 0;
        }
    }
    if (parse_int(s, 0, 32767, &v))
        return -1;
    *out = (int16_t)v;
    return 0;
}

/* Any name librdkafka knows: "NOT_ENOUGH_REPLICAS", "RD_KAFKA_RESP_ERR_…",
 * "_TRANSPORT", or the numeric code. */
static int parse_err(const char *s, rd_kafka_resp_err_t *out)
{
    const struct rd_kafka_err_desc *descs;
    size_t n;
    long v;

    if (!strncasecmp(s, "RD_KAFKA_RESP_ERR_", 18))
        s += 18;
    rd_kafka_get_err_descs(&descs, &n);
    for (size_t i = 0; i < n; i++) {
        if (descs[i].name && !strcasecmp(descs[i].name, s)) {
            *out = descs[i].code;
            return 0;
        }
    }
    if (parse_int(s, -200, 32767, &v))
        return -1;
    *out = (rd_kafka_resp_err_t)v;
    return 0;
}

/* ---- commands ---------------------------------------------------------- */

struct ctx {
    rd_kafka_mock_cluster_t *mc;
    int default_partitions;
    int broker_cnt;
    const char *ack_path; /* where "@TOKEN command" lines are acknowledged */
};

static void report(const char *cmd, rd_kafka_resp_err_t err)
{
    if (err)
        logf_("command \"%s\" failed: %s", cmd, rd_kafka_err2name(err));
    else
        logf_("command \"%s\" ok", cmd);
}

static void apply_command(struct ctx *c, char *line)
{
    char copy[1024];
    char *argv[MAX_ARGS];
    int argc = 0;
    char *save = NULL;
    long a, b, n, rf;
    int16_t api;
    rd_kafka_resp_err_t err;

    snprintf(copy, sizeof(copy), "%s", line);
    for (char *tok = strtok_r(line, " \t\r\n", &save); tok && argc < (int)(sizeof(argv) / sizeof(argv[0]));
         tok = strtok_r(NULL, " \t\r\n", &save))
        argv[argc++] = tok;
    if (argc == 0 || argv[0][0] == '#')
        return;

#define BAD(why) do { logf_("command \"%s\" rejected: %s", copy, why); return; } while (0)

    if (!strcmp(argv[0], "down") || !strcmp(argv[0], "up")) {
        if (argc != 2 || parse_int(argv[1], -1, INT32_MAX, &a))
            BAD("expected: down|up <broker_id|-1>");
        err = !strcmp(argv[0], "down") ? rd_kafka_mock_broker_set_down(c->mc, (int32_t)a)
                                       : rd_kafka_mock_broker_set_up(c->mc, (int32_t)a);
        report(copy, err);
    } else if (!strcmp(argv[0], "rtt")) {
        if (argc != 3 || parse_int(argv[1], -1, INT32_MAX, &a) || parse_int(argv[2], 0, INT_MAX, &b))
            BAD("expected: rtt <broker_id|-1> <ms>");
        report(copy, rd_kafka_mock_broker_set_rtt(c->mc, (int32_t)a, (int)b));
    } else if (!strcmp(argv[0], "errors")) {
        if (argc < 4 || parse_api(argv[1], &api) || parse_int(argv[2], 1, MAX_PUSHED, &n))
            BAD("expected: errors <api> <n (1..100000)> <err>...");
        rd_kafka_resp_err_t *errs = malloc((size_t)n * sizeof(*errs));
        if (!errs)
            BAD("out of memory");
        /* the last name repeats up to n: each word is parsed once */
        for (long i = 0; i < n; i++) {
            if (i > 0 && 3 + i >= argc) {
                errs[i] = errs[i - 1];
            } else if (parse_err(argv[3 + i], &errs[i])) {
                free(errs);
                BAD("unknown error name");
            }
        }
        rd_kafka_mock_push_request_errors_array(c->mc, api, (size_t)n, errs);
        free(errs);
        logf_("command \"%s\" ok: next %ld request(s) of ApiKey %d fail", copy, n, api);
    } else if (!strcmp(argv[0], "broker-errors")) {
        long rtt = 0;
        if (argc < 5 || argc > 6 || parse_int(argv[1], 0, INT32_MAX, &a) || parse_api(argv[2], &api) ||
            parse_int(argv[3], 1, MAX_PUSHED, &n) || parse_err(argv[4], &err) ||
            (argc == 6 && parse_int(argv[5], 0, INT_MAX, &rtt)))
            BAD("expected: broker-errors <broker_id> <api> <n> <err> [rtt_ms]");
        rd_kafka_resp_err_t res = RD_KAFKA_RESP_ERR_NO_ERROR;
        for (long i = 0; i < n && !res; i++)
            res = rd_kafka_mock_broker_push_request_error_rtts(c->mc, (int32_t)a, api, 1, err, (int)rtt);
        report(copy, res);
    } else if (!strcmp(argv[0], "clear")) {
        if (argc == 2) {
            if (parse_api(argv[1], &api))
                BAD("expected: clear [api]");
            rd_kafka_mock_clear_request_errors(c->mc, api);
        } else if (argc == 1) {
            for (int16_t k = 0; k < 70; k++)
                rd_kafka_mock_clear_request_errors(c->mc, k);
        } else {
            BAD("expected: clear [api]");
        }
        report(copy, RD_KAFKA_RESP_ERR_NO_ERROR);
    } else if (!strcmp(argv[0], "leader")) {
        if (argc != 4 || parse_int(argv[2], 0, INT32_MAX, &a) || parse_int(argv[3], -1, INT32_MAX, &b))
            BAD("expected: leader <topic> <partition> <broker_id|-1>");
        report(copy, rd_kafka_mock_partition_set_leader(c->mc, argv[1], (int32_t)a, (int32_t)b));
    } else if (!strcmp(argv[0], "topic")) {
        a = c->default_partitions;
        rf = c->broker_cnt < 3 ? c->broker_cnt : 3;
        if (argc < 2 || argc > 4 || (argc >= 3 && parse_int(argv[2], 1, 100000, &a)) ||
            (argc == 4 && parse_int(argv[3], 1, 1000, &rf)))
            BAD("expected: topic <name> [partitions] [replication_factor]");
        report(copy, rd_kafka_mock_topic_create(c->mc, argv[1], (int)a, (int)rf));
    } else if (!strcmp(argv[0], "coordinator")) {
        if (argc != 4 || (strcmp(argv[1], "transaction") && strcmp(argv[1], "group")) ||
            parse_int(argv[3], 0, INT32_MAX, &a))
            BAD("expected: coordinator <transaction|group> <key> <broker_id>");
        report(copy, rd_kafka_mock_coordinator_set(c->mc, argv[1], argv[2], (int32_t)a));
    } else if (!strcmp(argv[0], "topic-error")) {
        if (argc != 3 || parse_err(argv[2], &err))
            BAD("expected: topic-error <topic> <err>");
        rd_kafka_mock_topic_set_error(c->mc, argv[1], err);
        report(copy, RD_KAFKA_RESP_ERR_NO_ERROR);
    } else {
        BAD("unknown command");
    }
#undef BAD
}

/* A line "@TOKEN command" is acknowledged once applied: TOKEN is appended to
 * the acknowledgement file, so a test knows the fault is in place before it
 * starts the relay (a FIFO write returns before the broker has read it). */
static void run_command(struct ctx *c, char *line)
{
    char token[64] = "";
    if (line[0] == '@') {
        size_t len = strcspn(line + 1, " \t");
        if (len == 0 || len >= sizeof(token)) {
            logf_("command \"%s\" rejected: bad acknowledgement token", line);
            return;
        }
        memcpy(token, line + 1, len);
        token[len] = '\0';
        line += 1 + len;
        line += strspn(line, " \t");
    }
    apply_command(c, line);
    if (!token[0] || !c->ack_path)
        return;
    int fd = open(c->ack_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0660);
    if (fd < 0) {
        logf_("open %s: %s", c->ack_path, strerror(errno));
        return;
    }
    dprintf(fd, "%s\n", token);
    close(fd);
}

/* ---- control FIFO ------------------------------------------------------ */

struct control {
    const char *path;
    int rfd;            /* read end */
    int keep_wfd;       /* our own writer, so the read end never sees EOF */
    char buf[4096];
    size_t len;
};

static int control_open(struct control *ctl)
{
    struct stat st;

    if (stat(ctl->path, &st) == 0) {
        if (!S_ISFIFO(st.st_mode)) {
            logf_("control path %s exists and is not a FIFO", ctl->path);
            return -1;
        }
    } else if (mkfifo(ctl->path, 0660) != 0 && errno != EEXIST) {
        logf_("mkfifo %s: %s", ctl->path, strerror(errno));
        return -1;
    }
    ctl->rfd = open(ctl->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (ctl->rfd < 0) {
        logf_("open %s: %s", ctl->path, strerror(errno));
        return -1;
    }
    if (ctl->keep_wfd < 0)
        ctl->keep_wfd = open(ctl->path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    ctl->len = 0;
    return 0;
}

static void control_close(struct control *ctl)
{
    if (ctl->rfd >= 0)
        close(ctl->rfd);
    ctl->rfd = -1;
}

/* Reads what is there and runs every complete line. */
static void control_read(struct control *ctl, struct ctx *c)
{
    for (;;) {
        ssize_t r = read(ctl->rfd, ctl->buf + ctl->len, sizeof(ctl->buf) - 1 - ctl->len);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                logf_("read %s: %s", ctl->path, strerror(errno));
            return;
        }
        if (r == 0) {
            /* EOF: all writers gone (only if our own writer could not be opened). */
            if (ctl->len) {
                ctl->buf[ctl->len] = '\0';
                run_command(c, ctl->buf);
            }
            control_close(ctl);
            control_open(ctl);
            return;
        }
        ctl->len += (size_t)r;
        ctl->buf[ctl->len] = '\0';
        char *start = ctl->buf, *nl;
        while ((nl = strchr(start, '\n'))) {
            *nl = '\0';
            run_command(c, start);
            start = nl + 1;
        }
        ctl->len = strlen(start);
        memmove(ctl->buf, start, ctl->len + 1);
        if (ctl->len == sizeof(ctl->buf) - 1) {
            logf_("control line too long, dropped");
            ctl->len = 0;
        }
    }
}

/* ---- main -------------------------------------------------------------- */

/* Real Kafka brokers set TCP_NODELAY (socket.nodelay); librdkafka's mock
 * does not, and Nagle's algorithm on its responses meets the client's delayed
 * ACK in ~40 ms stalls that no real deployment has. Linux hands the option of
 * a listening socket down to the connections it accepts, so setting it on the
 * mock's listeners is enough. */
static void disable_nagle_on_listeners(void)
{
    int n = 0;
    for (int fd = 3; fd < 4096; fd++) {
        int listening = 0, domain = 0;
        socklen_t len = sizeof(listening);
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 || !listening)
            continue;
        len = sizeof(domain);
        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0 ||
            (domain != AF_INET && domain != AF_INET6))
            continue;
        int one = 1;
        if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0)
            n++;
    }
    logf_("TCP_NODELAY set on %d listening sockets", n);
}

int main(int argc, char **argv)
{
    long brokers = 3, partitions = 4;
    const char *bootstrap_file = NULL, *control_path = NULL;
    char errstr[512];
    struct sigaction sa;

    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(opt, "--brokers") && val && !parse_int(val, 1, 64, &brokers)) {
            i++;
        } else if (!strcmp(opt, "--partitions") && val && !parse_int(val, 1, 10000, &partitions)) {
            i++;
        } else if (!strcmp(opt, "--bootstrap-file") && val) {
            bootstrap_file = val;
            i++;
        } else if (!strcmp(opt, "--control") && val) {
            control_path = val;
            i++;
        } else {
            fprintf(stderr, "outbox-relay-mock-broker: bad argument: %s\n", opt);
            usage(stderr);
            return 64;
        }
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "client.id", "outbox-relay-mock-broker", errstr, sizeof(errstr)) !=
        RD_KAFKA_CONF_OK) {
        logf_("conf: %s", errstr);
        return 1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!rk) {
        logf_("rd_kafka_new: %s", errstr);
        return 1;
    }
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, (int)brokers);
    if (!mc) {
        logf_("rd_kafka_mock_cluster_new failed");
        rd_kafka_destroy(rk);
        return 1;
    }
    disable_nagle_on_listeners();
    const char *bootstraps = rd_kafka_mock_cluster_bootstraps(mc);

    if (bootstrap_file) {
        char tmp[PATH_MAX];
        FILE *f;
        snprintf(tmp, sizeof(tmp), "%s.tmp", bootstrap_file);
        if (!(f = fopen(tmp, "w")) || fprintf(f, "%s\n", bootstraps) < 0 || fclose(f) != 0 ||
            rename(tmp, bootstrap_file) != 0) {
            logf_("cannot write %s: %s", bootstrap_file, strerror(errno));
            rd_kafka_mock_cluster_destroy(mc);
            rd_kafka_destroy(rk);
            return 1;
        }
    }

    char ack_path[PATH_MAX];
    if (control_path)
        snprintf(ack_path, sizeof(ack_path), "%s.ack", control_path);
    struct ctx c = {.mc = mc, .default_partitions = (int)partitions, .broker_cnt = (int)brokers,
                    .ack_path = control_path ? ack_path : NULL};
    struct control ctl = {.path = control_path, .rfd = -1, .keep_wfd = -1};
    if (control_path && control_open(&ctl) != 0) {
        rd_kafka_mock_cluster_destroy(mc);
        rd_kafka_destroy(rk);
        return 1;
    }

    printf("%s\n", bootstraps);
    fflush(stdout);
    logf_("serving %ld broker(s) at %s (pid %ld)%s%s", brokers, bootstraps, (long)getpid(),
          control_path ? ", control FIFO " : "", control_path ? control_path : "");

    while (!stop_requested) {
        struct pollfd pfd = {.fd = ctl.rfd, .events = POLLIN};
        int r = poll(&pfd, ctl.rfd >= 0 ? 1 : 0, 200);
        if (r > 0 && (pfd.revents & (POLLIN | POLLHUP)))
            control_read(&ctl, &c);
        else if (r > 0 && (pfd.revents & (POLLERR | POLLNVAL))) {
            control_close(&ctl);
            control_open(&ctl);
        }
        rd_kafka_poll(rk, 0);
    }

    logf_("stopping");
    control_close(&ctl);
    if (ctl.keep_wfd >= 0)
        close(ctl.keep_wfd);
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return 0;
}
