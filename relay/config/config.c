/* config.c — the parameter table and everything it drives: defaults, the INI
 * file, -X overrides, validation, redaction and the dump. */
#include "config/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <ini.h>
#include <librdkafka/rdkafka.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/engine.h"
#include "base/errors.h"
#include "core/kafka_rules.h"
#include "core/event.h"
#include "base/listen_addr.h"
#include "base/log.h"
#include "base/redact.h"
#include "core/sql.h"

#define REDACTED REDACT_PLACEHOLDER

enum param_type {
    PARAM_STRING,
    PARAM_INT,
    PARAM_ENUM,      /* a string restricted to choices */
    PARAM_LOG_LEVEL, /* an int holding enum log_level */
    PARAM_BOOL,      /* an int holding 0 or 1; written true or false */
};

/** Extra check of a string value; fills errbuf (without the key) on failure. */
typedef int (*param_check_fn)(const char *value, char *errbuf, size_t errlen);

struct param {
    const char *section;
    const char *key;
    enum param_type type;
    size_t offset;
    const char *def;                    /* as it would be written in the file */
    long min, max;                      /* PARAM_INT */
    const char *const *choices;         /* PARAM_ENUM, NULL-terminated */
    param_check_fn check;               /* PARAM_STRING, optional */
    bool reloadable;                    /* takes effect on SIGHUP */
    const char *desc;
};

static int check_ident(const char *value, char *errbuf, size_t errlen);

static const char *const log_formats[] = {"logfmt", "json", NULL};
static const char *const sent_actions[] = {"mark", "delete", NULL};
/* Indexed by enum relay_fencing. */
static const char *const fencing_modes[] = {"transactional", "none", NULL};
_Static_assert(RELAY_FENCING_NONE == 1, "fencing_modes must follow enum relay_fencing");
static int check_duration(const char *value, char *errbuf, size_t errlen);
/* Indexed by enum log_level; log_level_parse() is the parser. */
static const char *const log_level_names[] = {"error", "warn", "info", "debug"};
_Static_assert(LOG_LVL_DEBUG == 3, "log_level_names must follow enum log_level");

#define OFF(field) offsetof(struct relay_config, field)
#define RELOAD true   /* applied on SIGHUP */
#define RESTART false /* needs a restart */

#define STR(sec, k, field, dflt, chk, rel, d)                                                 \
    {.section = sec, .key = k, .type = PARAM_STRING, .offset = OFF(field), .def = dflt,        \
     .check = chk, .reloadable = rel, .desc = d}
#define INT(sec, k, field, dflt, lo, hi, rel, d)                                              \
    {.section = sec, .key = k, .type = PARAM_INT, .offset = OFF(field), .def = dflt, .min = lo, \
     .max = hi, .reloadable = rel, .desc = d}
#define ENUM(sec, k, field, dflt, ch, rel, d)                                                 \
    {.section = sec, .key = k, .type = PARAM_ENUM, .offset = OFF(field), .def = dflt,          \
     .choices = ch, .reloadable = rel, .desc = d}
#define BOOL(sec, k, field, dflt, rel, d)                                                     \
    {.section = sec, .key = k, .type = PARAM_BOOL, .offset = OFF(field), .def = dflt,          \
     .reloadable = rel, .desc = d}
#define LEVEL(sec, k, field, dflt, rel, d)                                                    \
    {.section = sec, .key = k, .type = PARAM_LOG_LEVEL, .offset = OFF(field), .def = dflt,     \
     .reloadable = rel, .desc = d}

/* Sections in dump order; [kafka] has no rows: its keys go to librdkafka. */
static const char *const sections[] = {"postgres", "kafka", "relay", "http", "log", "verify"};

/* The one table of parameters: defaults, parsing, reload rules and the dump
 * all come from here. Sorted by section, then key. */
static const struct param params[] = {
    STR("postgres", "conninfo", pg_conninfo, "", NULL, RESTART,
        "libpq connection string or URI (\"\" = PG* environment variables)"),

    INT("relay", "ack_timeout_ms", ack_timeout_ms, "10000", 0, 3600000, RELOAD,
        "not ready when messages in flight wait this long for an acknowledgement (0 = never)"),
    BOOL("relay", "allow_row_security", allow_row_security, "false", RESTART,
         "relay although row-level security hides rows from the relay's role (they are never "
         "published; the backlog is then unknown)"),
    INT("relay", "batch_size", batch_size, "1000", 1, 100000, RELOAD,
        "rows claimed and produced per round"),
    ENUM("relay", "fencing", fencing, "transactional", fencing_modes, RESTART,
         "keep a deposed leader from publishing: transactional (Kafka transactions) or none"),
    INT("relay", "max_attempts", max_attempts, "10", 1, 1000000, RELOAD,
        "retriable failures of a row before on_poison applies (permanent errors: 1)"),
    ENUM("relay", "on_poison", on_poison, "hold_aggregate", poison_policy_names, RESTART,
         "a row Kafka will not take: hold_aggregate, dead_letter or halt"),
    ENUM("relay", "on_sent", on_sent, "mark", sent_actions, RESTART,
         "after Kafka acknowledged a row: mark it sent, or delete it"),
    STR("relay", "notify_channel", notify_channel, "outbox_relay", check_ident, RESTART,
        "channel LISTENed on for new-row notifications"),
    INT("relay", "poll_interval_ms", poll_interval_ms, "1000", 10, 3600000, RELOAD,
        "poll the table this often even without notifications"),
    INT("relay", "reconnect_interval_ms", reconnect_interval_ms, "1000", 10, 600000, RELOAD,
        "first wait before reconnecting to PostgreSQL (doubles up to reconnect_max_ms)"),
    INT("relay", "reconnect_max_ms", reconnect_max_ms, "30000", 10, 3600000, RELOAD,
        "longest wait between reconnection attempts"),
    STR("relay", "retention", retention, "7d", check_duration, RESTART,
        "delete sent rows older than this (N, Ns, Nm, Nh, Nd; 0 = keep)"),
    STR("relay", "schema", schema, "public", check_ident, RESTART, "schema of the outbox table"),
    INT("relay", "shutdown_timeout_ms", shutdown_timeout_ms, "10000", 0, 600000, RELOAD,
        "how long to wait for in-flight messages on shutdown"),
    STR("relay", "table", table, "outbox", check_ident, RESTART, "name of the outbox table"),
    STR("relay", "transactional_id", transactional_id, "", NULL, RESTART,
        "Kafka transactional.id of relay.fencing=transactional (\"\" = outbox-relay.<schema>.<table>)"),
    STR("relay", "topic", topic, "outbox.${aggregate_type}", event_topic_template_check, RESTART,
        "topic template for rows without a topic (${aggregate_type}, ${event_type})"),

    STR("http", "listen", http_listen, "127.0.0.1:8423", listen_addr_check, RESTART,
        "IPv4:port or [IPv6]:port of the status endpoint (\"\" = disabled)"),

    ENUM("log", "format", log_format, "logfmt", log_formats, RESTART, "logfmt or json"),
    LEVEL("log", "level", log_level, "info", RELOAD, "error, warn, info or debug"),
    STR("log", "stats_interval", log_stats_interval, "10s", check_duration, RELOAD,
        "while rows are pending or being published, log a progress line this often (0 = never)"),

    STR("verify", "interval", verify_interval, "0", check_duration, RESTART,
        "run verify on a trailing window this often (0 = never)"),
    STR("verify", "lag", verify_lag, "5m", check_duration, RESTART,
        "the window ends this long ago: rows younger than this are not checked yet"),
    STR("verify", "window", verify_window, "1h", check_duration, RESTART,
        "how far back from its end the periodic verify window reaches"),
};

#define N_PARAMS (sizeof params / sizeof params[0])


enum relay_fencing relay_fencing_of(const struct relay_config *cfg)
{
    for (int i = 0; fencing_modes[i]; i++)
        if (cfg->fencing && !strcmp(cfg->fencing, fencing_modes[i]))
            return (enum relay_fencing)i;
    return RELAY_FENCING_TRANSACTIONAL; /* config_set accepts nothing else */
}

void config_transactional_id(const struct relay_config *cfg, char *buf, size_t len)
{
    /* schema and table are plain identifiers: the id needs no quoting. Two
     * relays of one table must share it (that is what fences the old one);
     * relays of different tables on one Kafka cluster must not. */
    if (cfg->transactional_id && *cfg->transactional_id)
        snprintf(buf, len, "%s", cfg->transactional_id);
    else
        snprintf(buf, len, "outbox-relay.%s.%s", cfg->schema, cfg->table);
}

long config_parse_duration(const char *text)
{
    char *end;
    errno = 0;
    long n = strtol(text, &end, 10);
    if (end == text || errno || n < 0)
        return -EINVAL;
    long unit = 1;
    switch (*end) {
    case '\0': case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    case 'd': unit = 86400; break;
    default: return -EINVAL;
    }
    if (*end && end[1])
        return -EINVAL;
    if (n > 100L * 365 * 86400 / unit)
        return -EINVAL;
    return n * unit;
}

static int check_duration(const char *value, char *errbuf, size_t errlen)
{
    if (config_parse_duration(value) >= 0)
        return 0;
    return errbuf_fail(errbuf, errlen, "\"%s\" is not a duration (N, Ns, Nm, Nh or Nd, up to 100 years)",
                value);
}

static int check_ident(const char *value, char *errbuf, size_t errlen)
{
    if (sql_ident_valid(value))
        return 0;
    return errbuf_fail(errbuf, errlen,
                "\"%s\" is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*, at most 48 "
                "bytes)",
                value);
}

static char **str_slot(struct relay_config *cfg, const struct param *p)
{
    return (char **)((char *)cfg + p->offset);
}

static int *int_slot(struct relay_config *cfg, const struct param *p)
{
    return (int *)((char *)cfg + p->offset);
}

static const char *cstr_at(const struct relay_config *cfg, const struct param *p)
{
    return *(char *const *)((const char *)cfg + p->offset);
}

static int int_at(const struct relay_config *cfg, const struct param *p)
{
    return *(const int *)((const char *)cfg + p->offset);
}

static const struct param *param_find(const char *section, const char *key)
{
    for (size_t i = 0; i < N_PARAMS; i++) {
        if (!strcmp(params[i].section, section) && !strcmp(params[i].key, key))
            return &params[i];
    }
    return NULL;
}

static bool section_known(const char *section)
{
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        if (!strcmp(sections[i], section))
            return true;
    }
    return false;
}

static int replace_str(char **slot, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        return -ENOMEM;
    free(*slot);
    *slot = copy;
    return 0;
}

static int param_set(struct relay_config *cfg, const struct param *p, const char *value,
                     char *errbuf, size_t errlen)
{
    char why[256];

    switch (p->type) {
    case PARAM_STRING:
        if (p->check && p->check(value, why, sizeof why) < 0)
            return errbuf_fail(errbuf, errlen, "%s.%s: %s", p->section, p->key, why);
        return replace_str(str_slot(cfg, p), value);

    case PARAM_ENUM: {
        char allowed[128] = "";
        for (const char *const *c = p->choices; *c; c++) {
            if (!strcmp(*c, value))
                return replace_str(str_slot(cfg, p), value);
            size_t used = strlen(allowed);
            snprintf(allowed + used, sizeof allowed - used, "%s%s", used ? ", " : "", *c);
        }
        return errbuf_fail(errbuf, errlen, "%s.%s: unknown value \"%s\" (allowed: %s)", p->section,
                    p->key, value, allowed);
    }

    case PARAM_LOG_LEVEL: {
        int level = log_level_parse(value);
        if (level < 0)
            return errbuf_fail(errbuf, errlen,
                        "%s.%s: unknown value \"%s\" (allowed: error, warn, info, debug)",
                        p->section, p->key, value);
        *int_slot(cfg, p) = level;
        return 0;
    }

    case PARAM_BOOL:
        if (!strcmp(value, "true") || !strcmp(value, "false")) {
            *int_slot(cfg, p) = value[0] == 't';
            return 0;
        }
        return errbuf_fail(errbuf, errlen, "%s.%s: unknown value \"%s\" (allowed: true, false)",
                           p->section, p->key, value);

    case PARAM_INT: {
        char *end;
        errno = 0;
        long v = strtol(value, &end, 10);
        if (end == value || *end != '\0')
            return errbuf_fail(errbuf, errlen, "%s.%s: \"%s\" is not an integer (allowed %ld..%ld)",
                        p->section, p->key, value, p->min, p->max);
        if (errno == ERANGE || v < p->min || v > p->max)
            return errbuf_fail(errbuf, errlen, "%s.%s: %s is out of range (allowed %ld..%ld)",
                        p->section, p->key, value, p->min, p->max);
        *int_slot(cfg, p) = (int)v;
        return 0;
    }
    }
    return -EINVAL;
}

void config_init(struct relay_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < N_PARAMS; i++) {
        /* The defaults are checked by the tests; only memory can fail here,
         * and without memory the daemon cannot start anyway. */
        if (param_set(cfg, &params[i], params[i].def, NULL, 0) < 0) {
            fprintf(stderr, "outbox-relay: cannot set default of %s.%s\n", params[i].section,
                    params[i].key);
            abort();
        }
    }
}

static void kafka_free(struct relay_config *cfg)
{
    for (size_t i = 0; i < cfg->n_kafka; i++) {
        free(cfg->kafka[i].key);
        free(cfg->kafka[i].value);
    }
    free(cfg->kafka);
    cfg->kafka = NULL;
    cfg->n_kafka = 0;
}

void config_free(struct relay_config *cfg)
{
    for (size_t i = 0; i < N_PARAMS; i++) {
        if (params[i].type == PARAM_STRING || params[i].type == PARAM_ENUM) {
            char **slot = str_slot(cfg, &params[i]);
            free(*slot);
            *slot = NULL;
        }
    }
    kafka_free(cfg);
}

static int kafka_set(struct relay_config *cfg, const char *key, const char *value,
                     char *errbuf, size_t errlen)
{
    if (!*key)
        return errbuf_fail(errbuf, errlen, "empty key in section kafka");

    /* librdkafka is the authority on its own properties; a scratch conf lets
     * it reject unknown names and bad values now, with its own words. */
    char why[512];
    rd_kafka_conf_t *scratch = rd_kafka_conf_new();
    if (!scratch)
        return -ENOMEM;
    rd_kafka_conf_res_t res = rd_kafka_conf_set(scratch, key, value, why, sizeof why);
    rd_kafka_conf_destroy(scratch);
    if (res != RD_KAFKA_CONF_OK)
        return errbuf_fail(errbuf, errlen, "kafka.%s: %s", key, why);

    for (size_t i = 0; i < cfg->n_kafka; i++) {
        if (!strcmp(cfg->kafka[i].key, key))
            return replace_str(&cfg->kafka[i].value, value);
    }

    struct config_kv *grown = realloc(cfg->kafka, (cfg->n_kafka + 1) * sizeof *grown);
    if (!grown)
        return -ENOMEM;
    cfg->kafka = grown;
    struct config_kv *kv = &cfg->kafka[cfg->n_kafka];
    kv->key = strdup(key);
    kv->value = strdup(value);
    if (!kv->key || !kv->value) {
        free(kv->key);
        free(kv->value);
        return -ENOMEM;
    }
    cfg->n_kafka++;
    return 0;
}

int config_set(struct relay_config *cfg, const char *section, const char *key,
               const char *value, char *errbuf, size_t errlen)
{
    if (!section_known(section)) {
        if (!*section)
            return errbuf_fail(errbuf, errlen, "key \"%s\" is outside of any [section]", key);
        return errbuf_fail(errbuf, errlen, "unknown section \"%s\" (key \"%s.%s\")", section, section,
                    key);
    }
    if (!strcmp(section, "kafka"))
        return kafka_set(cfg, key, value, errbuf, errlen);

    const struct param *p = param_find(section, key);
    if (!p)
        return errbuf_fail(errbuf, errlen, "unknown key \"%s.%s\"", section, key);
    return param_set(cfg, p, value, errbuf, errlen);
}

/* --- the INI file -------------------------------------------------------- */

struct ini_ctx {
    struct relay_config *cfg;
    FILE *file;
    const char *path;
    char *line;          /* getline buffer */
    size_t cap;
    int lineno;
    int err;             /* first error found by the reader or the handler */
    int err_line;
    char *errbuf;
    size_t errlen;
};

/* inih reads into a fixed buffer and would split a longer line into two,
 * silently; this reader refuses such a line instead. It also strips leading
 * whitespace so that indented keys are keys, not continuations of the
 * previous value. */
static char *ini_read_line(char *str, int num, void *stream)
{
    struct ini_ctx *ctx = stream;
    if (ctx->err)
        return NULL; /* stop at the first error */

    errno = 0;
    ssize_t n = getline(&ctx->line, &ctx->cap, ctx->file);
    if (n < 0) {
        if (ferror(ctx->file)) {
            ctx->err = errno ? -errno : -EIO;
            ctx->err_line = ctx->lineno + 1;
            snprintf(ctx->errbuf, ctx->errlen, "%s: %s", ctx->path, strerror(-ctx->err));
        }
        return NULL;
    }
    ctx->lineno++;

    char *s = ctx->line;
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    while (*s == ' ' || *s == '\t') {
        s++;
        n--;
    }

    if ((size_t)n != strlen(s)) {
        ctx->err = -EINVAL;
        ctx->err_line = ctx->lineno;
        snprintf(ctx->errbuf, ctx->errlen, "%s:%d: line contains a NUL byte", ctx->path,
                 ctx->lineno);
        return NULL;
    }
    /* inih sizes its buffer for the line plus "\r\n\0"; a line filling it
     * would look unfinished to a build of inih that grows its buffer. */
    if (n > num - 3) {
        ctx->err = -EINVAL;
        ctx->err_line = ctx->lineno;
        snprintf(ctx->errbuf, ctx->errlen, "%s:%d: line is longer than %d bytes", ctx->path,
                 ctx->lineno, num - 3);
        return NULL;
    }
    memcpy(str, s, (size_t)n + 1);
    return str;
}

static int ini_on_value(void *user, const char *section, const char *key, const char *value)
{
    struct ini_ctx *ctx = user;
    char why[768];

    int rc = config_set(ctx->cfg, section, key, value, why, sizeof why);
    if (rc < 0 && !ctx->err) {
        ctx->err = rc;
        ctx->err_line = ctx->lineno;
        snprintf(ctx->errbuf, ctx->errlen, "%s:%d: %s", ctx->path, ctx->lineno,
                 rc == -ENOMEM ? "out of memory" : why);
    }
    return rc == 0;
}

static int load_file(struct relay_config *cfg, const char *path, bool path_required,
                     char *errbuf, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        int err = errno;
        if (err == ENOENT && !path_required)
            return 0;
        snprintf(errbuf, errlen, "%s: %s", path, strerror(err));
        return -err;
    }

    struct ini_ctx ctx = {
        .cfg = cfg, .file = f, .path = path, .errbuf = errbuf, .errlen = errlen,
    };
    int ret = ini_parse_stream(ini_read_line, &ctx, ini_on_value, &ctx);
    free(ctx.line);
    fclose(f);

    /* inih reports the first bad line, which may be a syntax error before
     * anything the handler or the reader rejected. */
    if (ret > 0 && (!ctx.err || ret < ctx.err_line)) {
        snprintf(errbuf, errlen, "%s:%d: syntax error (expected [section] or key = value)",
                 path, ret);
        return -EINVAL;
    }
    if (ctx.err)
        return ctx.err;
    if (ret == -2) {
        snprintf(errbuf, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    return ret == 0 ? 0 : -EINVAL;
}

static int apply_override(struct relay_config *cfg, const char *ov, char *errbuf,
                          size_t errlen)
{
    const char *eq = strchr(ov, '=');
    size_t namelen = eq ? (size_t)(eq - ov) : strlen(ov);
    const char *dot = memchr(ov, '.', namelen);

    /* Only the name is echoed: the value may be a password. */
    if (!eq || !dot || dot == ov || dot + 1 == eq)
        return errbuf_fail(errbuf, errlen, "malformed override \"%.*s\" (expected section.key=value)",
                    (int)namelen, ov);

    char *section = strndup(ov, (size_t)(dot - ov));
    char *key = strndup(dot + 1, (size_t)(eq - dot - 1));
    int rc = -ENOMEM;
    if (section && key)
        rc = config_set(cfg, section, key, eq + 1, errbuf, errlen);
    if (rc == -ENOMEM)
        snprintf(errbuf, errlen, "out of memory");
    free(section);
    free(key);
    return rc;
}

/* --- the environment ------------------------------------------------------ */

#define ENV_PREFIX "OUTBOX_RELAY_"
#define ENV_PREFIX_LEN (sizeof ENV_PREFIX - 1)

/* Names under the prefix that belong to the project's own tools, not to the
 * configuration: the test harness exports them and the relays it starts
 * inherit them. @p name is the part after the prefix, up to '='. */
static bool env_reserved(const char *name, size_t len)
{
    static const char *const exact[] = {"BIN", "MOCK_BROKER"};
    if (len >= 5 && !strncmp(name, "TEST_", 5))
        return true;
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
        if (strlen(exact[i]) == len && !strncmp(name, exact[i], len))
            return true;
    }
    return false;
}

static bool all_digits(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
    }
    return true;
}

/* @return the length of "TCP"/"UDP"/"SCTP" at @p s (upper case, as in the
 * variable's name; lower case, as in its value), or 0. */
static size_t proto_len(const char *s, size_t n, bool upper)
{
    static const char *const protos[] = {"tcp", "udp", "sctp"};
    for (size_t i = 0; i < sizeof protos / sizeof protos[0]; i++) {
        size_t m = strlen(protos[i]);
        if (m > n)
            continue;
        size_t j = 0;
        while (j < m && s[j] == (upper ? protos[i][j] - 'a' + 'A' : protos[i][j]))
            j++;
        if (j == m)
            return m;
    }
    return 0;
}

/* "proto://host:port", as Kubernetes writes <SVC>_PORT and <SVC>_PORT_<n>_<PROTO>. */
static bool is_service_url(const char *v)
{
    size_t n = proto_len(v, strlen(v), false);
    if (!n || strncmp(v + n, "://", 3) != 0)
        return false;
    const char *colon = strrchr(v, ':');
    return colon > v + n + 3 && all_digits(colon + 1, strlen(colon + 1));
}

/* Kubernetes injects the address of every Service of the pod's namespace as
 * <NAME>_SERVICE_HOST, <NAME>_SERVICE_PORT[_<PORTNAME>], <NAME>_PORT and
 * <NAME>_PORT_<n>_<PROTO>[_PROTO|_PORT|_ADDR] (NAME the Service's name in upper
 * case, '-' as '_'): a Service called outbox-relay, or outbox-relay-metrics,
 * puts OUTBOX_RELAY_* names into the relay's environment that no operator
 * wrote. They are recognised by name *and* value (an address, a port number,
 * a proto:// URL), so that a typo such as OUTBOX_RELAY_HTTP_PORT=8423 is still
 * rejected. @p name is the part after the prefix, @p len its length. */
static bool env_service_link(const char *name, size_t len, const char *value)
{
    for (size_t i = 0; i < len; i++) {
        if (name[i] != '_' && i != 0)
            continue;
        const char *rest = name + i + (i ? 1 : 0);
        size_t n = len - (size_t)(rest - name);
        if (n == 12 && !strncmp(rest, "SERVICE_HOST", 12))
            return *value != '\0' && strspn(value, "0123456789abcdefABCDEF.:") == strlen(value);
        if (n >= 12 && !strncmp(rest, "SERVICE_PORT", 12) && (n == 12 || rest[12] == '_'))
            return all_digits(value, strlen(value));
        if (n == 4 && !strncmp(rest, "PORT", 4))
            return is_service_url(value);
        if (n > 5 && !strncmp(rest, "PORT_", 5)) {
            /* PORT_<n>_<PROTO>[_PROTO|_PORT|_ADDR] */
            const char *d = rest + 5;
            size_t digits = strspn(d, "0123456789");
            if (!digits || d[digits] != '_')
                continue;
            const char *p = d + digits + 1;
            size_t left = n - 5 - digits - 1;
            size_t pl = proto_len(p, left, true);
            if (!pl)
                continue;
            if (left == pl)
                return is_service_url(value);
            const char *sfx = p + pl;
            size_t sl = left - pl;
            if (sl == 6 && !strncmp(sfx, "_PROTO", 6))
                return proto_len(value, strlen(value), false) == strlen(value) && *value;
            if (sl == 5 && !strncmp(sfx, "_PORT", 5))
                return all_digits(value, strlen(value));
            if (sl == 5 && !strncmp(sfx, "_ADDR", 5))
                return *value != '\0' &&
                       strspn(value, "0123456789abcdefABCDEF.:") == strlen(value);
        }
    }
    return false;
}

/* Applies one OUTBOX_RELAY_<SECTION>_<KEY>=value entry of the environment.
 * Messages name the variable, as a file error names the line: that is what
 * the operator has to find and fix. */
static int apply_env(struct relay_config *cfg, const char *entry, char *errbuf, size_t errlen)
{
    const char *eq = strchr(entry, '=');
    const char *name = entry + ENV_PREFIX_LEN;
    size_t len = (size_t)(eq - name);
    int vlen = (int)(eq - entry); /* the variable's name, for messages */

    if (env_reserved(name, len) || env_service_link(name, len, eq + 1))
        return 0;

    /* Upper case only: variable names are case-sensitive, and a lower-case
     * spelling is far more likely a mistake than a deliberate second name. */
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
            return errbuf_fail(errbuf, errlen,
                        "environment variable %.*s: not a configuration variable (expected "
                        "OUTBOX_RELAY_<SECTION>_<KEY> in upper case)",
                        vlen, entry);
    }

    const char *section = NULL;
    size_t seclen = 0;
    for (size_t s = 0; s < sizeof sections / sizeof sections[0] && !section; s++) {
        size_t n = strlen(sections[s]);
        if (n + 1 < len && !strncasecmp(name, sections[s], n) && name[n] == '_') {
            section = sections[s];
            seclen = n;
        }
    }
    if (!section)
        return errbuf_fail(errbuf, errlen,
                    "unknown environment variable %.*s (expected OUTBOX_RELAY_<SECTION>_<KEY>, "
                    "SECTION one of POSTGRES, KAFKA, RELAY, HTTP, LOG, VERIFY)",
                    vlen, entry);

    /* The key is the rest in lower case. librdkafka's property names use
     * dots where a variable name cannot, and none contains '_' (those that
     * do are callbacks, which cannot be set from text), so '_' maps to '.'
     * in [kafka]; the relay's own keys keep their '_'. */
    char key[256];
    size_t klen = len - seclen - 1;
    if (klen >= sizeof key)
        return errbuf_fail(errbuf, errlen, "environment variable %.*s: name too long", vlen, entry);
    bool kafka = !strcmp(section, "kafka");
    for (size_t i = 0; i < klen; i++) {
        char c = name[seclen + 1 + i];
        key[i] = c == '_' && kafka ? '.' : (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    key[klen] = '\0';

    char why[768];
    int rc = config_set(cfg, section, key, eq + 1, why, sizeof why);
    if (rc == -ENOMEM) {
        errbuf_fail(errbuf, errlen, "out of memory");
        return -ENOMEM;
    }
    if (rc < 0)
        return errbuf_fail(errbuf, errlen, "environment variable %.*s: %s", vlen, entry, why);
    return 0;
}

int config_load_env(struct relay_config *cfg, char *const *envp, char *errbuf, size_t errlen)
{
    if (!envp)
        return 0;
    for (char *const *e = envp; *e; e++) {
        if (strncmp(*e, ENV_PREFIX, ENV_PREFIX_LEN) != 0 || !strchr(*e, '='))
            continue;
        int rc = apply_env(cfg, *e, errbuf, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int config_load(struct relay_config *cfg, const char *path, bool path_required,
                char *const *overrides, size_t n_overrides, char *errbuf, size_t errlen)
{
    return config_load_layered(cfg, path, path_required, NULL, overrides, n_overrides, errbuf,
                               errlen);
}

int config_load_layered(struct relay_config *cfg, const char *path, bool path_required,
                        char *const *envp, char *const *overrides, size_t n_overrides,
                        char *errbuf, size_t errlen)
{
    char scratch[1];
    if (!errbuf || !errlen) {
        errbuf = scratch;
        errlen = sizeof scratch;
    }
    errbuf[0] = '\0';

    /* Each layer overrides the one before; validation runs once at the end so
     * that a later layer may repair what an earlier one set (e.g. -X
     * kafka.acks=all over a file's acks=1). */
    if (path) {
        int rc = load_file(cfg, path, path_required, errbuf, errlen);
        if (rc < 0)
            return rc;
    }
    if (envp) {
        int rc = config_load_env(cfg, envp, errbuf, errlen);
        if (rc < 0)
            return rc;
    }
    for (size_t i = 0; i < n_overrides; i++) {
        int rc = apply_override(cfg, overrides[i], errbuf, errlen);
        if (rc < 0)
            return rc;
    }
    return config_validate(cfg, errbuf, errlen);
}

/* --- validation ---------------------------------------------------------- */

int config_validate(const struct relay_config *cfg, char *errbuf, size_t errlen)
{
    /* Unset, the producer sizes its queue for the batches in flight. */
    long queue = LONG_MAX;
    for (size_t i = 0; i < cfg->n_kafka; i++) {
        int rc = kafka_check_property(cfg->kafka[i].key, cfg->kafka[i].value, errbuf, errlen);
        if (rc < 0)
            return rc;
        if (!strcmp(cfg->kafka[i].key, "queue.buffering.max.messages"))
            queue = strtol(cfg->kafka[i].value, NULL, 10);
    }
    /* Every batch in flight must fit the producer's queue at once; otherwise
     * each one stops early and the relay crawls at a fraction of a batch. */
    if ((long)cfg->batch_size * RELAY_BATCHES_IN_FLIGHT > queue)
        return errbuf_fail(errbuf, errlen,
                           "relay.batch_size=%d needs a producer queue of %ld messages (%d batches in "
                           "flight) but kafka.queue.buffering.max.messages is %ld",
                           cfg->batch_size, (long)cfg->batch_size * RELAY_BATCHES_IN_FLIGHT,
                           RELAY_BATCHES_IN_FLIGHT, queue);
    return 0;
}

int config_require_brokers(const struct relay_config *cfg, char *errbuf, size_t errlen)
{
    /* metadata.broker.list is librdkafka's other name for it. */
    for (size_t i = 0; i < cfg->n_kafka; i++) {
        const char *k = cfg->kafka[i].key;
        if ((!strcmp(k, "bootstrap.servers") || !strcmp(k, "metadata.broker.list")) &&
            cfg->kafka[i].value[strspn(cfg->kafka[i].value, " \t,")] != '\0')
            return 0;
    }
    return errbuf_fail(errbuf, errlen,
                       "kafka.bootstrap.servers is not set: the relay needs the brokers to "
                       "publish to (host:port[,host:port...]; environment: "
                       "OUTBOX_RELAY_KAFKA_BOOTSTRAP_SERVERS)");
}

int config_reload_check(const struct relay_config *cur, const struct relay_config *next,
                        char *errbuf, size_t errlen)
{
    for (size_t i = 0; i < N_PARAMS; i++) {
        const struct param *p = &params[i];
        if (p->reloadable)
            continue;
        bool same = (p->type == PARAM_STRING || p->type == PARAM_ENUM)
                        ? !strcmp(cstr_at(cur, p), cstr_at(next, p))
                        : int_at(cur, p) == int_at(next, p);
        if (!same)
            return errbuf_fail(errbuf, errlen, "%s.%s cannot change on reload (restart needed)",
                        p->section, p->key);
    }

    bool same = cur->n_kafka == next->n_kafka;
    for (size_t i = 0; same && i < cur->n_kafka; i++) {
        same = !strcmp(cur->kafka[i].key, next->kafka[i].key) &&
               !strcmp(cur->kafka[i].value, next->kafka[i].value);
    }
    if (!same)
        return errbuf_fail(errbuf, errlen, "kafka settings cannot change on reload (restart needed)");
    return 0;
}

int config_reload_apply(struct relay_config *cur, const struct relay_config *next)
{
    int applied = 0;
    for (size_t i = 0; i < N_PARAMS; i++) {
        const struct param *p = &params[i];
        bool is_str = p->type == PARAM_STRING || p->type == PARAM_ENUM;
        if (is_str ? !strcmp(cstr_at(cur, p), cstr_at(next, p)) : int_at(cur, p) == int_at(next, p))
            continue;
        if (!p->reloadable) {
            log_warn("config key needs a restart; keeping the running value", "key=%s.%s",
                     p->section, p->key);
            continue;
        }
        if (is_str) {
            if (replace_str(str_slot(cur, p), cstr_at(next, p)) < 0)
                continue;
        } else {
            *int_slot(cur, p) = int_at(next, p);
        }
        log_info("config key reloaded", "key=%s.%s", p->section, p->key);
        applied++;
    }
    bool same = cur->n_kafka == next->n_kafka;
    for (size_t i = 0; same && i < cur->n_kafka; i++)
        same = !strcmp(cur->kafka[i].key, next->kafka[i].key) &&
               !strcmp(cur->kafka[i].value, next->kafka[i].value);
    if (!same)
        log_warn("kafka settings need a restart; keeping the running producer", "");
    return applied;
}

/* --- secrets ------------------------------------------------------------- */

bool config_key_is_secret(const char *key)
{
    static const char *const secret[] = {
        "conninfo", /* may carry a password; see config_redact_conninfo() */
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "ssl.key.pem",
    };
    for (size_t i = 0; i < sizeof secret / sizeof secret[0]; i++) {
        if (!strcmp(key, secret[i]))
            return true;
    }
    return strcasestr(key, "password") || strcasestr(key, "secret");
}

char *config_redact_conninfo(const char *conninfo)
{
    return redact_conninfo(conninfo);
}

void config_scrub_override(char *override)
{
    char *eq = strchr(override, '=');
    if (!eq)
        return;
    char *value = eq + 1;
    size_t room = strlen(value);
    const char *dot = memchr(override, '.', (size_t)(eq - override));
    const char *key_start = dot ? dot + 1 : override;
    char key[128];
    size_t keylen = (size_t)(eq - key_start);
    snprintf(key, sizeof key, "%.*s", (int)keylen, key_start);

    char *masked = NULL;
    if (dot && (size_t)(dot - override) == 8 && !strncmp(override, "postgres", 8) &&
        !strcmp(key, "conninfo"))
        masked = redact_conninfo(value); /* host and dbname stay readable in ps */
    else if (keylen >= sizeof key || config_key_is_secret(key)) /* too long to tell: mask */
        masked = strdup(REDACTED);
    else
        return;
    /* The new text must fit the old bytes: what does not fit is cut, which
     * can only drop text, never reveal it; the rest is zeroed. */
    size_t n = masked ? strlen(masked) : 0;
    if (n > room)
        n = room;
    if (masked)
        memcpy(value, masked, n);
    memset(value + n, '\0', room - n);
    free(masked);
}

/* --- the dump ------------------------------------------------------------ */

static void dump_param(const struct relay_config *cfg, const struct param *p, FILE *out)
{
    fprintf(out, "# %s%s\n", p->desc, p->reloadable ? " (reloadable)" : "");
    switch (p->type) {
    case PARAM_STRING:
    case PARAM_ENUM: {
        const char *v = cstr_at(cfg, p) ? cstr_at(cfg, p) : "";
        if (!strcmp(p->section, "postgres") && !strcmp(p->key, "conninfo")) {
            char *redacted = config_redact_conninfo(v);
            fprintf(out, "%s = %s\n", p->key, redacted ? redacted : REDACTED);
            free(redacted);
        } else {
            fprintf(out, "%s = %s\n", p->key, config_key_is_secret(p->key) ? REDACTED : v);
        }
        break;
    }
    case PARAM_INT:
        fprintf(out, "%s = %d\n", p->key, int_at(cfg, p));
        break;
    case PARAM_BOOL:
        fprintf(out, "%s = %s\n", p->key, int_at(cfg, p) ? "true" : "false");
        break;
    case PARAM_LOG_LEVEL: {
        int level = int_at(cfg, p);
        fprintf(out, "%s = %s\n", p->key,
                level >= 0 && level <= LOG_LVL_DEBUG ? log_level_names[level] : "info");
        break;
    }
    }
}

void config_dump(const struct relay_config *cfg, FILE *out)
{
    config_dump_ext(cfg, out, NULL);
}

void config_dump_ext(const struct relay_config *cfg, FILE *out,
                     void (*kafka_extra)(const struct relay_config *cfg, FILE *out))
{
    fputs("# outbox-relay effective configuration (secrets redacted)\n", out);
    for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++) {
        fprintf(out, "\n[%s]\n", sections[s]);
        if (!strcmp(sections[s], "kafka")) {
            fputs("# librdkafka producer properties\n", out);
            for (size_t i = 0; i < cfg->n_kafka; i++) {
                const struct config_kv *kv = &cfg->kafka[i];
                fprintf(out, "%s = %s\n", kv->key,
                        config_key_is_secret(kv->key) ? REDACTED : kv->value);
            }
            if (kafka_extra)
                kafka_extra(cfg, out);
            continue;
        }
        for (size_t i = 0; i < N_PARAMS; i++) {
            if (!strcmp(params[i].section, sections[s]))
                dump_param(cfg, &params[i], out);
        }
    }
}

/* --- the table, for the documentation ------------------------------------ */

bool config_param_info(size_t i, struct config_param_info *info)
{
    if (i >= N_PARAMS)
        return false;
    const struct param *p = &params[i];
    static const char *const level_choices[] = {"error", "warn", "info", "debug", NULL};
    static const char *const bool_choices[] = {"true", "false", NULL};
    *info = (struct config_param_info){
        .section = p->section,
        .key = p->key,
        .def = p->def,
        .desc = p->desc,
        .is_int = p->type == PARAM_INT,
        .min = p->min,
        .max = p->max,
        .choices = p->type == PARAM_ENUM ? p->choices
                   : p->type == PARAM_LOG_LEVEL ? level_choices
                   : p->type == PARAM_BOOL ? bool_choices : NULL,
        .reloadable = p->reloadable,
        .secret = config_key_is_secret(p->key),
    };
    return true;
}

const char *const *config_sections(size_t *n)
{
    *n = sizeof sections / sizeof sections[0];
    return sections;
}

/* --- the effective configuration as data --------------------------------- */

/* The value of @p p as text, secrets masked the way config_dump() masks them.
 * @return an allocated string, or NULL without memory. */
static char *param_text(const struct relay_config *cfg, const struct param *p)
{
    char num[16];
    switch (p->type) {
    case PARAM_STRING:
    case PARAM_ENUM: {
        const char *v = cstr_at(cfg, p) ? cstr_at(cfg, p) : "";
        if (!strcmp(p->section, "postgres") && !strcmp(p->key, "conninfo"))
            return config_redact_conninfo(v);
        return strdup(config_key_is_secret(p->key) ? REDACTED : v);
    }
    case PARAM_INT:
        snprintf(num, sizeof num, "%d", int_at(cfg, p));
        return strdup(num);
    case PARAM_BOOL:
        return strdup(int_at(cfg, p) ? "true" : "false");
    case PARAM_LOG_LEVEL: {
        int level = int_at(cfg, p);
        return strdup(level >= 0 && level <= LOG_LVL_DEBUG ? log_level_names[level] : "info");
    }
    }
    return NULL;
}

struct cJSON *config_to_json(const struct relay_config *cfg)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++) {
        cJSON *sec = cJSON_AddObjectToObject(root, sections[s]);
        if (!sec)
            goto oom;
        if (!strcmp(sections[s], "kafka")) {
            for (size_t i = 0; i < cfg->n_kafka; i++) {
                const struct config_kv *kv = &cfg->kafka[i];
                if (!cJSON_AddStringToObject(sec, kv->key,
                                             config_key_is_secret(kv->key) ? REDACTED : kv->value))
                    goto oom;
            }
            continue;
        }
        for (size_t i = 0; i < N_PARAMS; i++) {
            const struct param *p = &params[i];
            if (strcmp(p->section, sections[s]) != 0)
                continue;
            /* Numbers stay numbers, so that a consumer can compare them. */
            if (p->type == PARAM_INT) {
                if (!cJSON_AddNumberToObject(sec, p->key, int_at(cfg, p)))
                    goto oom;
                continue;
            }
            if (p->type == PARAM_BOOL) {
                if (!cJSON_AddBoolToObject(sec, p->key, int_at(cfg, p)))
                    goto oom;
                continue;
            }
            char *text = param_text(cfg, p);
            cJSON *item = text ? cJSON_AddStringToObject(sec, p->key, text) : NULL;
            free(text);
            if (!item)
                goto oom;
        }
    }
    return root;
oom:
    cJSON_Delete(root);
    return NULL;
}

char *config_to_logfmt(const struct relay_config *cfg)
{
    char *res = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&res, &len);
    if (!out)
        return NULL;
    const char *sep = "";
    for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++) {
        if (!strcmp(sections[s], "kafka")) {
            for (size_t i = 0; i < cfg->n_kafka; i++) {
                const struct config_kv *kv = &cfg->kafka[i];
                fprintf(out, "%skafka.%s=%s", sep, kv->key,
                        log_quote(config_key_is_secret(kv->key) ? REDACTED : kv->value));
                sep = " ";
            }
            continue;
        }
        for (size_t i = 0; i < N_PARAMS; i++) {
            const struct param *p = &params[i];
            if (strcmp(p->section, sections[s]) != 0)
                continue;
            char *text = param_text(cfg, p);
            if (p->type == PARAM_INT || p->type == PARAM_BOOL)
                fprintf(out, "%s%s.%s=%s", sep, p->section, p->key, text ? text : "");
            else
                fprintf(out, "%s%s.%s=%s", sep, p->section, p->key, log_quote(text ? text : REDACTED));
            free(text);
            sep = " ";
        }
    }
    bool failed = ferror(out) != 0;
    if (fclose(out) != 0 || failed) {
        free(res);
        return NULL;
    }
    return res;
}
