/* main.c — the command line and the boot order of outbox-relay. */
#include <errno.h>
#include <getopt.h>
#include <librdkafka/rdkafka.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "build_config.h"
#include "base/cli_args.h"
#include "config/config.h"
#include "cmd/config_doc.h"
#include "cmd/dead.h"
#include "base/errors.h"
#include "base/log.h"
#include "cmd/migrate.h"
#include "cmd/profile_check.h"
#include "io/producer.h"
#include "daemon/relay.h"
#include "io/pool_probe.h"
#include "cmd/replay.h"
#include "cmd/slot.h"
#include "cmd/status_cli.h"
#include "cmd/verify.h"

#define MAX_OVERRIDES 256

/* A usage mistake gets one line pointing at the help, not the whole help:
 * the message above it is what the user needs to see. */
static void usage_hint(void)
{
    fputs("Try 'outbox-relay --help' for more information.\n", stderr);
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: outbox-relay COMMAND [-c FILE] [-X section.key=value]... [OPTIONS]\n"
            "\n"
            "Relays rows of a PostgreSQL outbox table to Kafka, at least once, in order\n"
            "per aggregate.\n"
            "\n"
            "Commands:\n"
            "  run            relay until SIGTERM/SIGINT\n"
            "  migrate [--ledger NAME] [--print-sql]\n"
            "                 create or upgrade the outbox table, or a consumer's event\n"
            "                 ledger (safe to run again); --print-sql prints the SQL\n"
            "  check-config   validate the configuration and print it, secrets redacted\n"
            "  status [--url URL] [--json]\n"
            "                 ask a running relay (/status, /readyz) and print a summary;\n"
            "                 exit 0 ready, 1 not ready, 69 unreachable\n"
            "  dead list [--json] | dead requeue ID...|--all | dead drop ID... --yes\n"
            "                 show, retry or delete rows that could not be delivered;\n"
            "                 requeue and drop print counts, with --ids the ids too\n"
            "  verify [--since T] [--until T] [--from-id N] [--to-id N] [--json]\n"
            "                 compare the table with what Kafka holds; exit 1 when rows\n"
            "                 are missing, mismatched or out of order (verify --help)\n"
            "  replay --from-id N --to-id N | --since T | --aggregate TYPE:ID | ...\n"
            "                 publish sent rows again, with a replay header (replay --help)\n"
            "  slot status [--json] | slot drop --yes\n"
            "                 the replication slot of relay.capture = wal: whether it can\n"
            "                 serve and the WAL it holds; exit 1 when missing or lost\n"
            "  version        print the version\n"
            "\n"
            "Options:\n"
            "  -c, --config FILE   configuration file (default " CONFIG_DEFAULT_PATH
            ";\n"
            "                      used only if it exists when -c is not given)\n"
            "  -X section.key=value  set one key, overriding the file and the\n"
            "                      environment (repeatable)\n"
            "      --log-format=logfmt|json  log line format (overrides log.format)\n"
            "      --url URL       status: the relay to ask (default: from http.listen)\n"
            "      --json          status: print the relay's /status JSON as it is\n"
            "  -h, --help          show this help; after a command, that command's usage\n"
            "  -V, --version       print the version\n"
            "\n"
            "Environment: OUTBOX_RELAY_<SECTION>_<KEY>=value sets section.key, over the\n"
            "file and under -X (e.g. OUTBOX_RELAY_POSTGRES_CONNINFO,\n"
            "OUTBOX_RELAY_KAFKA_BOOTSTRAP_SERVERS); libpq's PG* variables apply as usual.\n"
            "\n"
            "Exit status: 0 ok, 64 usage, 69 PostgreSQL unreachable, 70 internal error,\n"
            "78 configuration rejected.\n");
}

static void run_usage(FILE *out)
{
    fprintf(out,
            "Usage: outbox-relay run [-c FILE] [-X section.key=value]... [--log-format=logfmt|json]\n"
            "\n"
            "Relays the outbox table to Kafka until SIGTERM or SIGINT (a second signal exits\n"
            "at once); SIGHUP reads the configuration again. Lost connections to PostgreSQL\n"
            "or Kafka are retried, not fatal. kafka.bootstrap.servers is required.\n"
            "\n"
            "  -c, --config FILE      configuration file (default " CONFIG_DEFAULT_PATH ",\n"
            "                         used only if it exists when -c is not given)\n"
            "  -X section.key=value   set one key over the file and the environment\n"
            "      --log-format=logfmt|json  log line format (overrides log.format)\n"
            "\n"
            "Exit status: 0 clean shutdown, 64 usage, 70 internal error, 78 configuration\n"
            "rejected.\n");
}

static void check_config_usage(FILE *out)
{
    fprintf(out,
            "Usage: outbox-relay check-config [-c FILE] [-X section.key=value]...\n"
            "\n"
            "Validates the configuration (file, OUTBOX_RELAY_* environment, -X) and prints\n"
            "the effective configuration, secrets redacted, with the Kafka producer\n"
            "properties the relay sets itself, each marked enforced or default.\n"
            "kafka.bootstrap.servers is required (as by run). Connects to nothing.\n"
            "\n"
            "Exit status: 0 valid, 64 usage, 78 configuration rejected (the message names\n"
            "the key).\n");
}

static void version_usage(FILE *out)
{
    fprintf(out, "Usage: outbox-relay version\n"
                 "\n"
                 "Prints the version of outbox-relay and of the libraries it runs with\n"
                 "(librdkafka, libpq, libuv); the same as -V and --version.\n");
}

static void config_doc_usage(FILE *out)
{
    fprintf(out, "Usage: outbox-relay config-doc --format conf|man|markdown\n"
                 "\n"
                 "Prints the documentation of the configuration keys, generated from the\n"
                 "parameter table: the commented configuration file, outbox-relay.conf(5)\n"
                 "or docs/configuration.md.\n");
}

/* Every command with its usage, which `outbox-relay COMMAND --help` prints
 * before any configuration is read: asking how a command works must not
 * depend on a configuration that loads. */
static const struct command {
    const char *name;
    void (*usage)(FILE *out);
} commands[] = {
    {"run", run_usage},
    {"migrate", migrate_usage},
    {"check-config", check_config_usage},
    {"status", status_cli_usage},
    {"dead", dead_usage},
    {"verify", verify_usage},
    {"replay", replay_usage},
    {"slot", slot_usage},
    {"version", version_usage},
    {"config-doc", config_doc_usage}, /* not in the help: see main() */
};

static const struct command *command_find(const char *name)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

/* A command's own words hold --help when the user asked for it there (`dead
 * --help`, `migrate --ledger x -h`); after "--" everything is an operand. */
static bool help_requested(int n, char *const *words)
{
    for (int i = 0; i < n && strcmp(words[i], "--") != 0; i++)
        if (strcmp(words[i], "--help") == 0 || strcmp(words[i], "-h") == 0)
            return true;
    return false;
}

static void print_version(void)
{
    printf("outbox-relay %s (librdkafka %s, libpq %d, libuv %s)\n", OUTBOX_RELAY_VERSION,
           rd_kafka_version_str(), PQlibVersion(), uv_version_string());
}

/* Where the configuration comes from: read at start and again on SIGHUP. */
struct config_source {
    const char *path;
    bool required;
    char *const *overrides;
    size_t n_overrides;
};

/* Table defaults ← file ← OUTBOX_RELAY_* environment ← -X, then the
 * cross-key rules and librdkafka's own verdict on the [kafka] section. The
 * file is optional unless -c names it: a sidecar container is configured by
 * its environment alone. */
static int load_config(struct relay_config *cfg, char *err, size_t errlen, void *arg)
{
    const struct config_source *src = arg;
    int rc = config_load_layered(cfg, src->path, src->required, environ, src->overrides,
                                 src->n_overrides, err, errlen);
    if (rc == 0)
        rc = config_validate(cfg, err, errlen);
    if (rc == 0) {
        rd_kafka_conf_t *kconf = producer_conf_new(cfg, err, errlen);
        if (!kconf)
            return -EINVAL;
        rd_kafka_conf_destroy(kconf);
    }
    return rc;
}

/* What the command line asked for. */
struct invocation {
    const char *config_path;
    char **overrides;            /* the -X values, then --log-format's */
    size_t n_overrides;
    char log_format_override[64];
    const char *status_url;
    const char *doc_format;
    bool status_json;
    bool want_help;
    char **cmd_args;             /* the command's own words (see cli_take_args) */
    int n_cmd_args;
    const char *cmd;             /* the command word; NULL when none was given */
};

/* A step's answer when main() goes on to the next one; any other value is
 * the exit status. */
#define GO_ON (-1)

static int too_many_overrides(void)
{
    fprintf(stderr, "outbox-relay: too many -X options (at most %d)\n", MAX_OVERRIDES);
    return EXIT_USAGE;
}

/* Keeps a copy of one -X value and scrubs the original. */
static int add_override(struct invocation *inv, char *arg)
{
    if (inv->n_overrides == MAX_OVERRIDES)
        return too_many_overrides();
    /* A malformed -X is a command-line mistake, not a configuration one. */
    if (!strchr(arg, '=') || !strchr(arg, '.') || strchr(arg, '.') > strchr(arg, '=') ||
        *arg == '.') {
        fprintf(stderr, "outbox-relay: -X %s: expected section.key=value\n", arg);
        usage_hint();
        return EXIT_USAGE;
    }
    inv->overrides[inv->n_overrides] = strdup(arg);
    if (!inv->overrides[inv->n_overrides]) {
        fprintf(stderr, "outbox-relay: out of memory\n");
        return EXIT_SOFTWARE;
    }
    inv->n_overrides++;
    /* As the mysql client does with -p: ps and /proc/PID/cmdline show
     * argv's memory, so the secret in it is overwritten once the copy holds it. */
    config_scrub_override(arg);
    return GO_ON;
}

/* --log-format: like -X log.format=…, applied after every -X so that it wins. */
static int set_log_format(struct invocation *inv, const char *arg)
{
    if (log_format_parse(arg) < 0) {
        fprintf(stderr, "outbox-relay: --log-format: unknown format \"%s\" (logfmt or json)\n",
                arg);
        return EXIT_USAGE;
    }
    snprintf(inv->log_format_override, sizeof(inv->log_format_override), "log.format=%s", arg);
    return GO_ON;
}

/* The options every command shares, with getopt; the command's own words are
 * taken out first (dead drop 7 --yes, verify --since 1h), since getopt only
 * knows the shared ones. */
static int parse_options(int *argc, char **argv, struct invocation *inv)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { "log-format", required_argument, NULL, 'L' },
        { "url", required_argument, NULL, 'U' },
        { "json", no_argument, NULL, 'J' },
        { "format", required_argument, NULL, 'F' },
        { NULL, 0, NULL, 0 },
    };
    static const char shortopts[] = "c:X:hV";
    static const char *const own_args[] = {"dead", "verify", "replay", "migrate", "slot", NULL};
    inv->n_cmd_args = cli_take_args(argc, argv, shortopts, opts, own_args, inv->cmd_args,
                                    MAX_OVERRIDES);
    int c, status = GO_ON;
    while (status == GO_ON && (c = getopt_long(*argc, argv, shortopts, opts, NULL)) != -1) {
        switch (c) {
        case 'c': inv->config_path = optarg; break;
        case 'X': status = add_override(inv, optarg); break;
        /* Whose help depends on the command word, which may come later. */
        case 'h': inv->want_help = true; break;
        case 'V': print_version(); status = EXIT_OK; break;
        case 'L': status = set_log_format(inv, optarg); break;
        case 'U': inv->status_url = optarg; break;
        case 'J': inv->status_json = true; break;
        case 'F': inv->doc_format = optarg; break;
        default: usage_hint(); status = EXIT_USAGE; break;
        }
    }
    if (status == GO_ON && *inv->log_format_override) {
        if (inv->n_overrides == MAX_OVERRIDES)
            return too_many_overrides();
        inv->overrides[inv->n_overrides++] = inv->log_format_override;
    }
    return status;
}

/* --help, anywhere: the help of the command named, or the general one. */
static int answer_help(const struct invocation *inv, int argc, char **argv)
{
    if (!inv->want_help && !help_requested(inv->n_cmd_args, inv->cmd_args))
        return GO_ON;
    if (optind >= argc) {
        usage(stdout);
        return EXIT_OK;
    }
    const struct command *command = command_find(argv[optind]);
    if (!command) {
        fprintf(stderr, "outbox-relay: unknown command \"%s\"\n", argv[optind]);
        usage_hint();
        return EXIT_USAGE;
    }
    command->usage(stdout);
    return EXIT_OK;
}

/* Exactly one command word, and no option of another command. */
static int check_command(struct invocation *inv, int argc, char **argv)
{
    if (optind != argc - 1) {
        fprintf(stderr, "outbox-relay: %s\n", optind >= argc ? "no command given" : "one command at a time");
        usage_hint();
        return EXIT_USAGE;
    }
    const char *cmd = inv->cmd = argv[optind];
    /* Options that belong to one command are a mistake anywhere else. */
    const char *misplaced = inv->status_url && strcmp(cmd, "status") != 0 ? "--url applies to status only"
                            : inv->status_json && strcmp(cmd, "status") != 0 ? "--json applies to status (and dead list)"
                            : inv->doc_format && strcmp(cmd, "config-doc") != 0 ? "--format applies to config-doc only"
                                                                                : NULL;
    if (misplaced) {
        fprintf(stderr, "outbox-relay: %s\n", misplaced);
        usage_hint();
        return EXIT_USAGE;
    }
    return GO_ON;
}

/* The commands that read no configuration. */
static int run_without_config(const struct invocation *inv)
{
    const char *cmd = inv->cmd;
    if (strcmp(cmd, "version") == 0) {
        print_version();
        return EXIT_OK;
    }
    /* Not in the help: it prints the documentation of the configuration keys
     * for the source tree's generated files (conffile, man page, docs/configuration.md). */
    if (strcmp(cmd, "config-doc") == 0) {
        if (!inv->doc_format || config_doc(inv->doc_format, stdout) != 0) {
            fprintf(stderr, "outbox-relay: config-doc --format conf|man|markdown\n");
            return EXIT_USAGE;
        }
        return EXIT_OK;
    }
    /* With --url, status needs no configuration: it asks the relay that has one. */
    if (strcmp(cmd, "status") == 0 && inv->status_url)
        return status_cli_run(inv->status_url, NULL, inv->status_json);
    if (!command_find(cmd)) {
        fprintf(stderr, "outbox-relay: unknown command \"%s\"\n", cmd);
        usage_hint();
        return EXIT_USAGE;
    }
    return GO_ON;
}

/* Loads the configuration, which run and check-config need brokers in, and
 * applies its logging settings. @return GO_ON or EXIT_CONFIG. */
static int configure(struct relay_config *cfg, const char *cmd, struct config_source *src)
{
    char err[1024];
    if (load_config(cfg, err, sizeof(err), src) != 0 ||
        ((!strcmp(cmd, "run") || !strcmp(cmd, "check-config")) &&
         config_require_brokers(cfg, err, sizeof(err)) != 0)) {
        fprintf(stderr, "outbox-relay: configuration rejected: %s\n", err);
        return EXIT_CONFIG;
    }
    log_set_level(cfg->log_level);
    log_set_format(cfg->log_format);
    return GO_ON;
}

/* The pooler probe takes two connections and a few round trips: it runs on
 * a thread of its own while the producer and the status endpoint start, and
 * the relay connects only once it has answered. */
struct probe_job {
    const char *conninfo;
    enum pool_probe_result result;
    char why[512];
    uv_thread_t thread;
    bool threaded;
};

static void probe_run(void *arg)
{
    struct probe_job *job = arg;
    job->result = pool_probe(job->conninfo, job->why, sizeof job->why);
}

/* A relay behind a transaction pooler would stand by or refuse later,
 * silently to anyone not reading /readyz: say it now and stop. A database
 * not reachable yet is probed again by the relay's own checks. */
static int probe_wait(void *arg)
{
    struct probe_job *job = arg;
    if (job->threaded)
        uv_thread_join(&job->thread);
    else
        probe_run(job);
    if (job->result == POOL_PROBE_SHARED) {
        log_error("refusing to relay", "reason=%s", log_quote(job->why));
        return EXIT_CONFIG;
    }
    /* Not a verdict: the relay's own checks watch its session from here. */
    if (job->result == POOL_PROBE_UNKNOWN)
        log_warn("could not check whether the connection to PostgreSQL is pooled",
                 "reason=%s", log_quote(job->why));
    return EXIT_OK;
}

static int run_relay(struct relay_config *cfg, struct config_source *src)
{
    log_info("outbox-relay starting", "version=%s pid=%ld", OUTBOX_RELAY_VERSION, (long)getpid());
    /* Once, secrets redacted: what this process runs with, for the record. */
    char *effective = config_to_logfmt(cfg);
    log_info("effective configuration", "%s", effective ? effective : "");
    free(effective);
    struct probe_job probe = { .conninfo = cfg->pg_conninfo };
    probe.threaded = uv_thread_create(&probe.thread, probe_run, &probe) == 0;
    char why[512];
    /* The debezium profile reads the application's table: one missing or
     * mistyped column would make every event poison, so say it now. */
    int prc = profile_check(cfg, &cfg->connect_columns, why, sizeof why);
    if (prc == -EINVAL) {
        log_error("refusing to relay", "reason=%s", log_quote(why));
        fprintf(stderr, "outbox-relay: configuration rejected: %s\n", why);
        probe_wait(&probe);
        return EXIT_CONFIG;
    }
    /* JsonConverter's schemas say whether a column is nullable: without the
     * catalog the relay cannot write them. */
    if (prc < 0 && (cfg->key_converter == EVENT_CONVERTER_JSON_SCHEMA ||
                    cfg->value_converter == EVENT_CONVERTER_JSON_SCHEMA)) {
        log_error("refusing to relay", "reason=%s",
                  log_quote("json_with_schema needs the table's columns at start and "
                            "PostgreSQL is not reachable"));
        probe_wait(&probe);
        return EXIT_UNAVAILABLE;
    }
    return relay_run(cfg, load_config, src, probe_wait, &probe);
}

static int run_command(const struct invocation *inv, struct relay_config *cfg,
                       struct config_source *src)
{
    const char *cmd = inv->cmd;
    if (strcmp(cmd, "status") == 0)
        return status_cli_run(NULL, cfg, inv->status_json);
    if (strcmp(cmd, "check-config") == 0) {
        config_dump_ext(cfg, stdout, producer_dump_settings);
        return EXIT_OK;
    }
    if (strcmp(cmd, "dead") == 0)
        return dead_main(cfg, inv->n_cmd_args, inv->cmd_args);
    /* They build each row's message as the relay does: under json_with_schema
     * that needs the columns' schemas (a failure shows in what they report). */
    if ((strcmp(cmd, "verify") == 0 || strcmp(cmd, "replay") == 0) &&
        cfg->profile == RELAY_PROFILE_DEBEZIUM) {
        char why[512];
        if (profile_check(cfg, &cfg->connect_columns, why, sizeof why) == -EINVAL) {
            fprintf(stderr, "outbox-relay %s: configuration rejected: %s\n", cmd, why);
            return EXIT_CONFIG;
        }
    }
    if (strcmp(cmd, "verify") == 0)
        return verify_main(cfg, inv->n_cmd_args, inv->cmd_args);
    if (strcmp(cmd, "replay") == 0)
        return replay_main(cfg, inv->n_cmd_args, inv->cmd_args);
    if (strcmp(cmd, "migrate") == 0)
        return migrate_main(cfg, inv->n_cmd_args, inv->cmd_args);
    if (strcmp(cmd, "slot") == 0)
        return slot_main(cfg, inv->n_cmd_args, inv->cmd_args);
    return run_relay(cfg, src);
}

int main(int argc, char **argv)
{
    /* The -X values are kept (static: reachable until exit, whichever return
     * ends main) and read again on SIGHUP. */
    static char *overrides[MAX_OVERRIDES];
    char *cmd_args[MAX_OVERRIDES];
    struct invocation inv = {.overrides = overrides, .cmd_args = cmd_args};

    int status = parse_options(&argc, argv, &inv);
    if (status == GO_ON)
        status = answer_help(&inv, argc, argv);
    if (status == GO_ON)
        status = check_command(&inv, argc, argv);
    if (status == GO_ON)
        status = run_without_config(&inv);
    if (status != GO_ON)
        return status;

    struct config_source src = {
        .path = inv.config_path ? inv.config_path : CONFIG_DEFAULT_PATH,
        .required = inv.config_path != NULL,
        .overrides = overrides,
        .n_overrides = inv.n_overrides,
    };
    struct relay_config cfg;
    config_init(&cfg);
    status = configure(&cfg, inv.cmd, &src);
    if (status == GO_ON)
        status = run_command(&inv, &cfg, &src);
    config_free(&cfg);
    return status;
}
