/* config.c — loading the configuration: defaults from the table
 * (config_table.c), the INI file, OUTBOX_RELAY_* environment variables, -X
 * overrides, cross-key validation and what a reload may change. */
#include "config/config_int.h"

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
#include "core/sql_debezium.h"
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

void config_transactional_id_slot(const struct relay_config *cfg, unsigned slot, char *buf, size_t len)
{
    char id[240];
    config_transactional_id(cfg, id, sizeof id);
    snprintf(buf, len, "%s%s", id, slot ? ".spare" : "");
}

void config_init(struct relay_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < config_n_params; i++) {
        /* The defaults are checked by the tests; only memory can fail here,
         * and without memory the daemon cannot start anyway. */
        if (config_param_set(cfg, &config_params[i], config_params[i].def, NULL, 0) < 0) {
            fprintf(stderr, "outbox-relay: cannot set default of %s.%s\n", config_params[i].section,
                    config_params[i].key);
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
    for (size_t i = 0; i < cfg->n_kafka_files; i++) {
        free(cfg->kafka_files[i].key);
        free(cfg->kafka_files[i].value);
    }
    free(cfg->kafka_files);
    cfg->kafka_files = NULL;
    cfg->n_kafka_files = 0;
}

void config_free(struct relay_config *cfg)
{
    for (size_t i = 0; i < config_n_params; i++)
        config_param_free(cfg, &config_params[i]);
    kafka_free(cfg);
}


static int kafka_set(struct relay_config *cfg, const char *key, const char *value,
                     char *errbuf, size_t errlen)
{
    if (!*key)
        return errbuf_fail(errbuf, errlen, "empty key in section kafka");
    char base[128];
    if (config_key_is_file_twin(key, base, sizeof base))
        return config_kafka_file_set(cfg, key, value, errbuf, errlen);

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
            {
            char *copy = strdup(value);
            if (!copy)
                return -ENOMEM;
            free(cfg->kafka[i].value);
            cfg->kafka[i].value = copy;
            return 0;
        }
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
    if (!config_section_known(section)) {
        if (!*section)
            return errbuf_fail(errbuf, errlen, "key \"%s\" is outside of any [section]", key);
        return errbuf_fail(errbuf, errlen, "unknown section \"%s\" (key \"%s.%s\")", section, section,
                    key);
    }
    if (!strcmp(section, "kafka"))
        return kafka_set(cfg, key, value, errbuf, errlen);

    const struct param *p = config_param_find(section, key);
    if (!p)
        return errbuf_fail(errbuf, errlen, "unknown key \"%s.%s\"", section, key);
    int rc = config_param_set(cfg, p, value, errbuf, errlen);
    if (rc == 0)
        cfg->explicit_set[p - config_params] = true;
    return rc;
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
    for (size_t s = 0; s < config_n_sections && !section; s++) {
        size_t n = strlen(config_section_names[s]);
        if (n + 1 < len && !strncasecmp(name, config_section_names[s], n) && name[n] == '_') {
            section = config_section_names[s];
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
    /* A secret's file twin keeps its '_': OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE
     * is kafka.sasl.password_file. */
    if (kafka && klen > 5 && !strcmp(key + klen - 5, ".file"))
        key[klen - 5] = '_';

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
    int rc = config_resolve_secret_files(cfg, errbuf, errlen);
    if (rc < 0)
        return rc;
    rc = config_apply_profile(cfg, errbuf, errlen);
    if (rc < 0)
        return rc;
    return config_validate(cfg, errbuf, errlen);
}

/* --- validation ---------------------------------------------------------- */

/* The column keys name what an Insert is read from: the claim of capture =
 * poll reads the relay's own columns, which are the keys' defaults in the
 * table, and places none. */
static bool columns_default(const struct relay_config *cfg)
{
    for (size_t i = 0; i < config_n_params; i++) {
        const struct param *p = &config_params[i];
        if (strcmp(p->section, "relay") != 0 ||
            (strncmp(p->key, "column_", 7) != 0 && strcmp(p->key, "additional_placement") != 0))
            continue;
        if (!config_param_is_default(cfg, p))
            return false;
    }
    return true;
}

static int profile_validate(const struct relay_config *cfg, char *errbuf, size_t errlen)
{
    if (cfg->profile == RELAY_PROFILE_DEBEZIUM && cfg->retention_ms != 0)
        return errbuf_fail(errbuf, errlen,
                           "relay.retention must be 0 with relay.profile = debezium: Debezium's "
                           "table belongs to the application, which deletes its rows itself");
    bool json = cfg->key_converter != EVENT_CONVERTER_STRING ||
                cfg->value_converter != EVENT_CONVERTER_STRING || cfg->expand_json_payload ||
                cfg->tombstone_on_empty_payload;
    if (json && cfg->profile != RELAY_PROFILE_DEBEZIUM)
        return errbuf_fail(errbuf, errlen,
                           "relay.key_converter, relay.value_converter, "
                           "relay.expand_json_payload and relay.tombstone_on_empty_payload need "
                           "relay.profile = debezium: the relay's own messages carry the row's "
                           "bytes, which verify compares");
    struct event_placement pl;
    bool envelope = event_placement_parse(cfg->additional_placement, &pl, NULL, 0) == 0 &&
                    event_placement_has(&pl, EVENT_PLACE_ENVELOPE);
    if ((envelope || cfg->expand_json_payload) && cfg->value_converter == EVENT_CONVERTER_STRING)
        return errbuf_fail(errbuf, errlen,
                           "%s needs relay.value_converter = json or json_with_schema: with "
                           "StringConverter the Event Router writes a Connect struct's "
                           "toString(), not JSON",
                           envelope ? "envelope placement" : "relay.expand_json_payload");
    if (envelope && cfg->value_converter == EVENT_CONVERTER_JSON_SCHEMA &&
        !*cfg->connect_topic_prefix)
        return errbuf_fail(errbuf, errlen,
                           "envelope placement with relay.value_converter = json_with_schema "
                           "needs relay.connect_topic_prefix, the connector's topic.prefix: the "
                           "envelope's schema is named after it");
    if (cfg->capture == RELAY_CAPTURE_POLL && cfg->profile == RELAY_PROFILE_OUTBOX &&
        !columns_default(cfg))
        return errbuf_fail(errbuf, errlen,
                           "relay.column_* and relay.additional_placement need relay.capture = "
                           "wal or relay.profile = debezium: the claim of capture = poll reads "
                           "the relay's own table, made by migrate");
    return 0;
}

int config_validate(const struct relay_config *cfg, char *errbuf, size_t errlen)
{
    int prc = profile_validate(cfg, errbuf, errlen);
    if (prc < 0)
        return prc;
    /* Unset, the producer sizes its queue for the batches in flight. */
    long queue = LONG_MAX;
    for (size_t i = 0; i < cfg->n_kafka; i++) {
        int rc = kafka_check_property(cfg->kafka[i].key, cfg->kafka[i].value, errbuf, errlen);
        if (rc < 0)
            return rc;
        if (!strcmp(cfg->kafka[i].key, "queue.buffering.max.messages"))
            queue = strtol(cfg->kafka[i].value, NULL, 10);
    }
    int src = config_check_kafka_security(cfg, errbuf, errlen);
    if (src < 0)
        return src;
    src = config_check_pg_files(cfg, errbuf, errlen);
    if (src < 0)
        return src;
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

const char *config_claim_relation(const struct relay_config *cfg,
                                  char buf[CONFIG_RELATION_MAX])
{
    if (cfg->profile != RELAY_PROFILE_DEBEZIUM || cfg->capture != RELAY_CAPTURE_POLL ||
        sql_debezium_view_name(cfg->table, buf, CONFIG_RELATION_MAX) < 0)
        return cfg->table;
    return buf;
}

size_t config_placed_count(const struct relay_config *cfg)
{
    char view[CONFIG_RELATION_MAX];
    struct event_placement pl;
    if (config_claim_relation(cfg, view) == cfg->table ||
        event_placement_parse(cfg->additional_placement, &pl, NULL, 0) < 0)
        return 0;
    return pl.n;
}

int config_reload_check(const struct relay_config *cur, const struct relay_config *next,
                        char *errbuf, size_t errlen)
{
    for (size_t i = 0; i < config_n_params; i++) {
        const struct param *p = &config_params[i];
        if (p->reloadable)
            continue;
        if (!config_param_equal(cur, next, p))
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
    for (size_t i = 0; i < config_n_params; i++) {
        const struct param *p = &config_params[i];
        if (config_param_equal(cur, next, p))
            continue;
        if (!p->reloadable) {
            log_warn("config key needs a restart; keeping the running value", "key=%s.%s",
                     p->section, p->key);
            continue;
        }
        if (config_param_copy(cur, next, p) < 0)
            continue;
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
