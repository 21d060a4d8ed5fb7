/* config_table.c — the one table of configuration keys: each key's type,
 * default, range, unit, choices (the enum it maps to), whether a reload may
 * change it, and its description. Parsing, validation, reload rules, the
 * dumps and the generated documentation (conffile, outbox-relay.conf(5),
 * docs/configuration.md) all come from here; values are parsed once, at load,
 * into struct relay_config's typed fields. */
#include "config/config_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <limits.h>
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
#include "core/sql_capture.h"

static int check_ident(const char *value, char *errbuf, size_t errlen);
static int check_slot(const char *value, char *errbuf, size_t errlen);
static int check_ident_or_empty(const char *value, char *errbuf, size_t errlen);

static const char *const sent_actions[] = {"mark", "delete", NULL};
_Static_assert(RELAY_ON_SENT_DELETE == 1, "sent_actions must follow enum relay_on_sent");
static const char *const fencing_modes[] = {"transactional", "none", NULL};
_Static_assert(RELAY_FENCING_NONE == 1, "fencing_modes must follow enum relay_fencing");
static const char *const capture_modes[] = {"poll", "wal", NULL};
_Static_assert(RELAY_CAPTURE_WAL == 1, "capture_modes must follow enum relay_capture");
static const char *const slot_recoveries[] = {"reconcile", "stop", NULL};
_Static_assert(RELAY_SLOT_RECOVERY_STOP == 1, "slot_recoveries must follow enum relay_slot_recovery");
static const char *const slot_failovers[] = {"off", "on", NULL};
_Static_assert(RELAY_SLOT_FAILOVER_ON == 1, "slot_failovers must follow enum relay_slot_failover");
static const char *const profiles[] = {"outbox", "debezium", NULL};
_Static_assert(RELAY_PROFILE_DEBEZIUM == 1, "profiles must follow enum relay_profile");
static const char *const converters[] = {"string", "json", "json_with_schema", NULL};
_Static_assert(EVENT_CONVERTER_JSON_SCHEMA == 2, "converters must follow enum event_converter");
static const char *const log_formats[] = {"logfmt", "json", NULL};
_Static_assert(LOG_FORMAT_JSON == 1, "log_formats must follow enum log_format");
/* Indexed by enum log_level; log_level_parse() is the parser. */
static const char *const log_level_names[] = {"error", "warn", "info", "debug", NULL};
_Static_assert(LOG_LVL_DEBUG == 3, "log_level_names must follow enum log_level");
static const char *const bool_names[] = {"true", "false", NULL};

#define OFF(field) offsetof(struct relay_config, field)
#define RELOAD true   /* applied on SIGHUP */
#define RESTART false /* needs a restart */

#define STR(sec, k, field, dflt, chk, rel, d)                                                 \
    {.section = sec, .key = k, .type = PARAM_STRING, .offset = OFF(field), .def = dflt,        \
     .check = chk, .reloadable = rel, .desc = d}
#define INT(sec, k, field, dflt, lo, hi, u, rel, d)                                           \
    {.section = sec, .key = k, .type = PARAM_INT, .offset = OFF(field), .def = dflt, .min = lo, \
     .max = hi, .unit = u, .reloadable = rel, .desc = d}
#define DUR(sec, k, field, dflt, rel, d)                                                      \
    {.section = sec, .key = k, .type = PARAM_DURATION, .offset = OFF(field), .def = dflt,      \
     .reloadable = rel, .desc = d}
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
const char *const config_section_names[] = {"postgres", "kafka", "relay", "http", "log", "verify"};
const size_t config_n_sections = sizeof config_section_names / sizeof config_section_names[0];

/* The one table of parameters: defaults, parsing, reload rules and the dump
 * all come from here. Sorted by section, then key. */
const struct param config_params[] = {
    STR("postgres", "conninfo", pg_conninfo, "", NULL, RESTART,
        "libpq connection string or URI (\"\" = PG* environment variables); the files it names "
        "must be readable, sslkey and passfile not by others"),
    STR("postgres", "conninfo_file", pg_conninfo_file, "", NULL, RESTART,
        "a file holding the conninfo instead (mode 0600 or stricter; a relative path is read "
        "from $CREDENTIALS_DIRECTORY when systemd sets it)"),

    INT("relay", "ack_timeout_ms", ack_timeout_ms, "10000", 0, 3600000, "ms", RELOAD,
        "not ready when messages in flight wait this long for an acknowledgement (0 = never)"),
    STR("relay", "additional_placement", additional_placement, "", event_placement_check, RESTART,
        "capture=wal or profile=debezium: columns placed in headers, the envelope or the "
        "partition, \"column:header|envelope[:name],column:partition\" ("
        "table.fields.additional.placement)"),
    BOOL("relay", "allow_row_security", allow_row_security, "false", RESTART,
         "relay although row-level security hides rows from the relay's role (they are never "
         "published; the backlog is then unknown)"),
    INT("relay", "batch_size", batch_size, "2000", 1, 100000, "rows", RELOAD,
        "rows claimed and produced per round"),
    ENUM("relay", "capture", capture, "poll", capture_modes, RESTART,
         "how events are read: poll (claim rows, then mark or delete them) or wal (a logical "
         "replication slot through pgoutput: rows are only read)"),
    STR("relay", "column_aggregate_id", column_aggregate_id, "aggregate_id", check_ident, RESTART,
        "capture=wal or profile=debezium: the column of the Kafka key (debezium: aggregateid)"),
    STR("relay", "column_aggregate_type", column_aggregate_type, "aggregate_type", check_ident,
        RESTART, "capture=wal or profile=debezium: the column of ${aggregate_type} and ${routedByValue} in the topic "
                 "(debezium: aggregatetype, the Event Router's route.by.field)"),
    STR("relay", "column_created_at", column_created_at, "created_at", check_ident_or_empty,
        RESTART, "capture=wal or profile=debezium: the message timestamp's column; \"\" = the "
                 "commit time, polled the insert time (debezium: \"\"; table.field.event.timestamp)"),
    STR("relay", "column_event_id", column_event_id, "event_id", check_ident, RESTART,
        "capture=wal or profile=debezium: the column of the event id (debezium: id)"),
    STR("relay", "column_event_type", column_event_type, "event_type", check_ident_or_empty,
        RESTART, "capture=wal or profile=debezium: the column of ${event_type}, \"\" = none (debezium: type)"),
    STR("relay", "column_payload", column_payload, "payload", check_ident, RESTART,
        "capture=wal or profile=debezium: the column of the message value (debezium: payload)"),
    BOOL("relay", "expand_json_payload", expand_json_payload, "false", RESTART,
         "debezium, value_converter = json*: a payload holding a JSON object is written as that "
         "object (the Event Router's table.expand.json.payload = true)"),
    STR("relay", "connect_topic_prefix", connect_topic_prefix, "", NULL, RESTART,
        "debezium, value_converter = json_with_schema and envelope placement: the connector's "
        "topic.prefix, which names the envelope's schema"),
    ENUM("relay", "fencing", fencing, "transactional", fencing_modes, RESTART,
         "keep a deposed leader from publishing: transactional (Kafka transactions) or none"),
    DUR("relay", "heartbeat_interval", heartbeat_ms, "10s", RELOAD,
        "capture=wal: on an idle database write a logical message this often so the slot moves "
        "and PostgreSQL can release WAL (0 = never)"),
    STR("relay", "id_header", id_header, "", NULL, RESTART,
        "a header carrying the event id, \"\" = none (debezium: id)"),
    ENUM("relay", "key_converter", key_converter, "string", converters, RESTART,
         "debezium: the key as Connect's key.converter writes it: string (StringConverter), "
         "json (JsonConverter, schemas.enable=false) or json_with_schema"),
    INT("relay", "max_attempts", max_attempts, "10", 1, 1000000, "attempts", RELOAD,
        "retriable failures of a row before on_poison applies (permanent errors: 1)"),
    STR("relay", "message_prefix", message_prefix, "outbox", NULL, RESTART,
        "capture=wal: pg_logical_emit_message() events with this prefix are relayed too"),
    ENUM("relay", "on_poison", on_poison, "hold_aggregate", poison_policy_names, RESTART,
         "a row Kafka will not take: hold_aggregate, dead_letter or halt (relay.profile = debezium "
         "with capture = wal: halt only)"),
    ENUM("relay", "on_sent", on_sent, "mark", sent_actions, RESTART,
         "after Kafka acknowledged a row: mark it sent, or delete it (capture=wal: rows are never "
         "marked; delete removes them once the slot moved past them)"),
    STR("relay", "notify_channel", notify_channel, "outbox_relay", check_ident, RESTART,
        "channel LISTENed on for new-row notifications"),
    INT("relay", "poll_interval_ms", poll_interval_ms, "1000", 10, 3600000, "ms", RELOAD,
        "poll the table this often even without notifications"),
    INT("relay", "reconnect_interval_ms", reconnect_interval_ms, "1000", 10, 600000, "ms", RELOAD,
        "first wait before reconnecting to PostgreSQL (doubles up to reconnect_max_ms)"),
    INT("relay", "reconnect_max_ms", reconnect_max_ms, "30000", 10, 3600000, "ms", RELOAD,
        "longest wait between reconnection attempts"),
    ENUM("relay", "profile", profile, "outbox", profiles, RESTART,
         "outbox or debezium (Debezium's outbox table, the Event Router's messages: other "
         "defaults of capture, topic, retention, column_*, id_header, relay_headers)"),
    STR("relay", "publication", publication, "outbox_relay", check_ident, RESTART,
        "capture=wal: the publication of the outbox table (created by migrate)"),
    BOOL("relay", "relay_headers", relay_headers, "true", RESTART,
         "write the relay's own headers (event_id, event_type, aggregate_type, aggregate_id, "
         "outbox_id, created_at; debezium: false)"),
    DUR("relay", "retention", retention_ms, "7d", RESTART,
        "delete sent rows older than this (capture=wal: rows created longer ago) (N, Ns, Nm, Nh, Nd; "
        "0 = keep)"),
    STR("relay", "schema", schema, "public", check_ident, RESTART, "schema of the outbox table"),
    INT("relay", "shutdown_timeout_ms", shutdown_timeout_ms, "10000", 0, 600000, "ms", RELOAD,
        "how long to wait for in-flight messages on shutdown"),
    STR("relay", "slot", slot, "outbox_relay", check_slot, RESTART,
        "capture=wal: the logical replication slot (created by migrate)"),
    ENUM("relay", "slot_failover", slot_failover, "off", slot_failovers, RESTART,
         "capture=wal, PostgreSQL 17+: on creates the slot with failover, kept by standbys with "
         "sync_replication_slots = on (see operations: failover slots)"),
    ENUM("relay", "slot_recovery", slot_recovery, "reconcile", slot_recoveries, RESTART,
         "capture=wal, a failover left the slot missing or behind: reconcile (publish the rows "
         "Kafka lacks, then stream; as stop unless the table keeps every event) or stop (not ready)"),
    DUR("relay", "standby_stall_timeout", standby_stall_timeout_ms, "60s", RELOAD,
        "a standby that sees rows wait this long while no leader marks or deletes any says so "
        "(log, /status, /readyz, outbox_relay_standby_stalled; 0 = never)"),
    STR("relay", "table", table, "outbox", check_ident, RESTART, "name of the outbox table"),
    BOOL("relay", "tombstone_on_empty_payload", tombstone_on_empty_payload, "false", RESTART,
         "debezium: a NULL or blank payload is a tombstone whatever the converter (the Event "
         "Router's route.tombstone.on.empty.payload)"),
    STR("relay", "transactional_id", transactional_id, "", NULL, RESTART,
        "Kafka transactional.id of relay.fencing=transactional (\"\" = outbox-relay.<schema>.<table>; "
        "also used with .spare appended)"),
    STR("relay", "topic", topic, "outbox.${aggregate_type}", event_topic_template_check, RESTART,
        "topic template for rows without a topic (${aggregate_type} or ${routedByValue}, "
        "${event_type})"),
    ENUM("relay", "value_converter", value_converter, "string", converters, RESTART,
         "debezium: the value as Connect's value.converter writes it: string (StringConverter), "
         "json (JsonConverter, schemas.enable=false) or json_with_schema"),

    STR("http", "listen", http_listen, "127.0.0.1:8423", listen_addr_check, RESTART,
        "IPv4:port or [IPv6]:port of the status endpoint (\"\" = disabled)"),

    ENUM("log", "format", log_format, "logfmt", log_formats, RESTART, "logfmt or json"),
    LEVEL("log", "level", log_level, "info", RELOAD, "error, warn, info or debug"),
    DUR("log", "stats_interval", log_stats_interval_ms, "10s", RELOAD,
        "while rows are pending or being published, log a progress line this often (0 = never)"),

    DUR("verify", "interval", verify_interval_ms, "0", RESTART,
        "run verify on a trailing window this often (0 = never)"),
    DUR("verify", "lag", verify_lag_ms, "5m", RESTART,
        "the window ends this long ago: rows younger than this are not checked yet"),
    DUR("verify", "settle", verify_settle_ms, "30s", RESTART,
        "capture=wal: how long verify waits for the relay to confirm the slot past verify's "
        "fence before it counts every row pending (the default of verify --settle)"),
    DUR("verify", "window", verify_window_ms, "1h", RESTART,
        "how far back from its end the periodic verify window reaches"),
};

const size_t config_n_params = sizeof config_params / sizeof config_params[0];
_Static_assert(sizeof config_params / sizeof config_params[0] <= CONFIG_MAX_PARAMS,
               "relay_config.explicit_set must have a flag per row");

/* What relay.profile = debezium sets, unless the key is set itself. */
static const struct { const char *key, *value; } debezium_profile[] = {
    {"capture", "wal"},
    {"column_aggregate_id", "aggregateid"},
    {"column_aggregate_type", "aggregatetype"},
    {"column_created_at", ""},
    {"column_event_id", "id"},
    {"column_event_type", "type"},
    {"column_payload", "payload"},
    {"id_header", "id"},
    {"relay_headers", "false"},
    {"retention", "0"},
    {"topic", "outbox.event.${routedByValue}"},
};

int config_apply_profile(struct relay_config *cfg, char *errbuf, size_t errlen)
{
    if (cfg->profile != RELAY_PROFILE_DEBEZIUM)
        return 0;
    for (size_t i = 0; i < sizeof debezium_profile / sizeof debezium_profile[0]; i++) {
        const struct param *p = config_param_find("relay", debezium_profile[i].key);
        if (!p)
            return -EINVAL;
        if (cfg->explicit_set[p - config_params])
            continue;
        int rc = config_param_set(cfg, p, debezium_profile[i].value, errbuf, errlen);
        if (rc < 0)
            return rc;
    }
    /* Streamed, Debezium's table has no column to keep a dead row in nor a
     * claim to hold an aggregate back: an event that cannot be produced
     * halts the relay, and the configuration says so rather than a policy
     * it cannot follow. */
    const struct param *poison = config_param_find("relay", "on_poison");
    if (cfg->capture != RELAY_CAPTURE_WAL || !poison)
        return 0;
    if (cfg->explicit_set[poison - config_params] && cfg->on_poison != POISON_HALT)
        return errbuf_fail(errbuf, errlen,
                           "relay.on_poison = %s is not possible with relay.profile = debezium "
                           "and relay.capture = wal: Debezium's table has no column to keep a "
                           "dead row in, so an event that cannot be produced halts relaying; "
                           "set relay.on_poison = halt or leave it unset",
                           poison_policy_names[cfg->on_poison]);
    return config_param_set(cfg, poison, "halt", errbuf, errlen);
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

static int check_ident(const char *value, char *errbuf, size_t errlen)
{
    if (sql_ident_valid(value))
        return 0;
    return errbuf_fail(errbuf, errlen,
                "\"%s\" is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*, at most 48 "
                "bytes)",
                value);
}

static int check_ident_or_empty(const char *value, char *errbuf, size_t errlen)
{
    return *value ? check_ident(value, errbuf, errlen) : 0;
}

/* PostgreSQL's rule for slot names (ReplicationSlotValidateName). */
static int check_slot(const char *value, char *errbuf, size_t errlen)
{
    if (sql_capture_slot_valid(value))
        return 0;
    return errbuf_fail(errbuf, errlen,
                       "\"%s\" is not a replication slot name ([a-z0-9_], 1 to 63 bytes)", value);
}

void config_format_duration(int64_t ms, char *buf, size_t len)
{
    static const struct { int64_t ms; const char *suffix; } units[] = {
        {86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"},
    };
    if (ms == 0) {
        snprintf(buf, len, "0");
        return;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (ms % units[i].ms == 0) {
            snprintf(buf, len, "%" PRId64 "%s", ms / units[i].ms, units[i].suffix);
            return;
        }
    }
    snprintf(buf, len, "%" PRId64 "ms", ms);
}

/* ---- one row's field ------------------------------------------------------ */

static void *slot(const struct relay_config *cfg, const struct param *p)
{
    return (char *)cfg + p->offset;
}

static char **str_slot(const struct relay_config *cfg, const struct param *p)
{
    return slot(cfg, p);
}

/* PARAM_INT, PARAM_BOOL, PARAM_ENUM and PARAM_LOG_LEVEL: an int or an enum,
 * which is an int here (_Static_assert below). */
static int *int_slot(const struct relay_config *cfg, const struct param *p)
{
    return slot(cfg, p);
}
_Static_assert(sizeof(enum relay_on_sent) == sizeof(int) && sizeof(enum poison_policy) == sizeof(int) &&
                   sizeof(enum log_format) == sizeof(int) && sizeof(enum log_level) == sizeof(int),
               "enum fields are set through int");

static int64_t *ms_slot(const struct relay_config *cfg, const struct param *p)
{
    return slot(cfg, p);
}

bool config_param_is_default(const struct relay_config *cfg, const struct param *p)
{
    if (p->type == PARAM_STRING) {
        const char *v = *str_slot(cfg, p);
        return !strcmp(v ? v : "", p->def);
    }
    char *text = config_param_text(cfg, p);
    bool same = text && !strcmp(text, p->def);
    free(text);
    return same;
}

int config_param_int(const struct relay_config *cfg, const struct param *p)
{
    return *int_slot(cfg, p);
}

const struct param *config_param_find(const char *section, const char *key)
{
    for (size_t i = 0; i < config_n_params; i++) {
        if (!strcmp(config_params[i].section, section) && !strcmp(config_params[i].key, key))
            return &config_params[i];
    }
    return NULL;
}

bool config_section_known(const char *section)
{
    for (size_t i = 0; i < config_n_sections; i++) {
        if (!strcmp(config_section_names[i], section))
            return true;
    }
    return false;
}

static int replace_str(char **dst, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        return -ENOMEM;
    free(*dst);
    *dst = copy;
    return 0;
}

static const char *const *choices_of(const struct param *p)
{
    return p->type == PARAM_LOG_LEVEL ? log_level_names
           : p->type == PARAM_BOOL    ? bool_names
                                      : p->choices;
}

/* A choice's index, or -EINVAL with what is allowed. */
static int choice_parse(const struct param *p, const char *value, char *errbuf, size_t errlen)
{
    char allowed[128] = "";
    const char *const *c = choices_of(p);
    for (int i = 0; c[i]; i++) {
        if (!strcmp(c[i], value))
            return i;
        size_t used = strlen(allowed);
        snprintf(allowed + used, sizeof allowed - used, "%s%s", used ? ", " : "", c[i]);
    }
    return errbuf_fail(errbuf, errlen, "%s.%s: unknown value \"%s\" (allowed: %s)", p->section,
                       p->key, value, allowed);
}

static int int_parse(const struct param *p, const char *value, int *out, char *errbuf,
                     size_t errlen)
{
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (end == value || *end != '\0')
        return errbuf_fail(errbuf, errlen, "%s.%s: \"%s\" is not an integer (allowed %ld..%ld)",
                           p->section, p->key, value, p->min, p->max);
    if (errno == ERANGE || v < p->min || v > p->max)
        return errbuf_fail(errbuf, errlen, "%s.%s: %s is out of range (allowed %ld..%ld)",
                           p->section, p->key, value, p->min, p->max);
    *out = (int)v;
    return 0;
}

int config_param_set(struct relay_config *cfg, const struct param *p, const char *value,
                     char *errbuf, size_t errlen)
{
    char why[256];
    switch (p->type) {
    case PARAM_STRING:
        if (p->check && p->check(value, why, sizeof why) < 0)
            return errbuf_fail(errbuf, errlen, "%s.%s: %s", p->section, p->key, why);
        return replace_str(str_slot(cfg, p), value);
    case PARAM_ENUM:
    case PARAM_LOG_LEVEL:
    case PARAM_BOOL: {
        int i = choice_parse(p, value, errbuf, errlen);
        if (i < 0)
            return i;
        /* Booleans are listed "true", "false". */
        *int_slot(cfg, p) = p->type == PARAM_BOOL ? i == 0 : i;
        return 0;
    }
    case PARAM_INT: {
        int v = 0, rc = int_parse(p, value, &v, errbuf, errlen);
        if (rc < 0)
            return rc;
        *int_slot(cfg, p) = v;
        return 0;
    }
    case PARAM_DURATION: {
        long secs = config_parse_duration(value);
        if (secs < 0)
            return errbuf_fail(errbuf, errlen,
                               "%s.%s: \"%s\" is not a duration (N, Ns, Nm, Nh or Nd, up to 100 "
                               "years)",
                               p->section, p->key, value);
        *ms_slot(cfg, p) = (int64_t)secs * 1000;
        return 0;
    }
    }
    return -EINVAL;
}

bool config_param_equal(const struct relay_config *a, const struct relay_config *b,
                        const struct param *p)
{
    switch (p->type) {
    case PARAM_STRING: {
        const char *x = *str_slot(a, p), *y = *str_slot(b, p);
        return !strcmp(x ? x : "", y ? y : "");
    }
    case PARAM_DURATION:
        return *ms_slot(a, p) == *ms_slot(b, p);
    default:
        return *int_slot(a, p) == *int_slot(b, p);
    }
}

int config_param_copy(struct relay_config *dst, const struct relay_config *src,
                      const struct param *p)
{
    switch (p->type) {
    case PARAM_STRING:
        return replace_str(str_slot(dst, p), *str_slot(src, p) ? *str_slot(src, p) : "");
    case PARAM_DURATION:
        *ms_slot(dst, p) = *ms_slot(src, p);
        return 0;
    default:
        *int_slot(dst, p) = *int_slot(src, p);
        return 0;
    }
}

void config_param_free(struct relay_config *cfg, const struct param *p)
{
    if (p->type == PARAM_STRING) {
        free(*str_slot(cfg, p));
        *str_slot(cfg, p) = NULL;
    }
}

char *config_param_text(const struct relay_config *cfg, const struct param *p)
{
    char buf[32];
    switch (p->type) {
    case PARAM_STRING: {
        const char *v = *str_slot(cfg, p) ? *str_slot(cfg, p) : "";
        if (!strcmp(p->section, "postgres") && !strcmp(p->key, "conninfo"))
            return config_redact_conninfo(v);
        return strdup(config_key_is_secret(p->key) ? REDACTED : v);
    }
    case PARAM_INT:
        snprintf(buf, sizeof buf, "%d", *int_slot(cfg, p));
        return strdup(buf);
    case PARAM_BOOL:
        return strdup(*int_slot(cfg, p) ? "true" : "false");
    case PARAM_ENUM:
    case PARAM_LOG_LEVEL: {
        const char *const *c = choices_of(p);
        int v = *int_slot(cfg, p), n = 0;
        while (c[n])
            n++;
        return strdup(v >= 0 && v < n ? c[v] : c[0]);
    }
    case PARAM_DURATION:
        config_format_duration(*ms_slot(cfg, p), buf, sizeof buf);
        return strdup(buf);
    }
    return NULL;
}

/* ---- the table, for the documentation -------------------------------------- */

bool config_param_info(size_t i, struct config_param_info *info)
{
    if (i >= config_n_params)
        return false;
    const struct param *p = &config_params[i];
    static const char *const type_names[] = {
        [PARAM_STRING] = "string", [PARAM_INT] = "integer", [PARAM_ENUM] = "choice",
        [PARAM_LOG_LEVEL] = "choice", [PARAM_BOOL] = "boolean", [PARAM_DURATION] = "duration",
    };
    *info = (struct config_param_info){
        .section = p->section,
        .key = p->key,
        .def = p->def,
        .desc = p->desc,
        .type = type_names[p->type],
        .unit = p->unit ? p->unit : "",
        .is_int = p->type == PARAM_INT,
        .min = p->min,
        .max = p->max,
        .choices = p->type == PARAM_STRING || p->type == PARAM_INT || p->type == PARAM_DURATION
                       ? NULL
                       : choices_of(p),
        .reloadable = p->reloadable,
        .secret = config_key_is_secret(p->key),
    };
    return true;
}

const char *const *config_sections(size_t *n)
{
    *n = config_n_sections;
    return config_section_names;
}
