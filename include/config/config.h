/* config.h — the relay's configuration: one table of parameters, an INI file,
 * OUTBOX_RELAY_* environment variables, `-X section.key=value` overrides,
 * validation and redaction.
 *
 * Errors follow the project convention: 0 on success, a negative errno value on
 * failure, with a human message (naming the offending key) written to errbuf. */
#ifndef OUTBOX_CONFIG_H
#define OUTBOX_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/log.h"
#include "core/engine.h"
#include "core/connect_json.h"
#include "core/event.h"

#define CONFIG_DEFAULT_PATH "/etc/outbox-relay/outbox-relay.conf"

/** Batches the relay keeps in flight at once: while Kafka acknowledges one,
 *  PostgreSQL claims or marks another. The producer queue must hold them all. */
#define RELAY_BATCHES_IN_FLIGHT 2

/** Batch slots: with Kafka transactions and a backlog, one more than in
 *  flight, whose claim waits for the next transaction (plan_txn_holds) so
 *  that Kafka works on it while PostgreSQL marks the transaction before. */
#define RELAY_BATCH_SLOTS (RELAY_BATCHES_IN_FLIGHT + 1)

/** librdkafka's default of queue.buffering.max.messages. */
#define PRODUCER_QUEUE_MESSAGES_DEFAULT 100000

/** One librdkafka producer property from the [kafka] section, in file order. */
struct config_kv {
    char *key;
    char *value;
};

/** How a leader that lost its leadership is kept from publishing (relay.fencing). */
enum relay_fencing {
    /* Batches are Kafka transactions under one transactional.id: a new
     * leader's init_transactions fences the old one, whose writes stay
     * invisible to read_committed consumers. */
    RELAY_FENCING_TRANSACTIONAL = 0,
    /* The idempotent producer alone: a paused old leader may still publish
     * what it had queued after the new leader took over. */
    RELAY_FENCING_NONE,
};

/** What happens to a row once Kafka acknowledged it (relay.on_sent). */
enum relay_on_sent {
    RELAY_ON_SENT_MARK = 0,     /* sent_at set by the conditional UPDATE */
    RELAY_ON_SENT_DELETE,       /* the row deleted by the conditional DELETE */
};

/** Where the relay reads the outbox from (relay.capture). */
enum relay_capture {
    RELAY_CAPTURE_POLL = 0,     /* claim rows with SELECT ... FOR UPDATE SKIP LOCKED, mark them */
    RELAY_CAPTURE_WAL,          /* a pgoutput logical replication slot: rows are only read */
};

/** Whether the slot is made a failover slot, kept by standbys (relay.slot_failover). */
enum relay_slot_failover {
    RELAY_SLOT_FAILOVER_OFF = 0,
    RELAY_SLOT_FAILOVER_ON,     /* PostgreSQL 17+: created with failover => true */
};

/** What the relay does when a failover left its slot behind (relay.slot_recovery). */
enum relay_slot_recovery {
    /* The slot made again if missing, the rows Kafka lacks published from
     * the table, then the stream: only where the table keeps every event. */
    RELAY_SLOT_RECOVERY_RECONCILE = 0,
    RELAY_SLOT_RECOVERY_STOP,   /* not ready, the gap named, until an operator closes it */
};

/** Which table contract and message format the relay follows (relay.profile). */
enum relay_profile {
    RELAY_PROFILE_OUTBOX = 0,   /* the relay's own table (migrate) and headers */
    RELAY_PROFILE_DEBEZIUM,     /* Debezium's outbox table and its Outbox Event Router's messages */
};

/** Rows of the parameter table at most (relay_config.explicit_set). */
#define CONFIG_MAX_PARAMS 64

/* Every choice is an enum and every duration milliseconds here: the table of
 * config_table.c parses the text once, at load, and nothing at run time
 * looks at a configuration string again. */
struct relay_config {
    /* [postgres] */
    char *pg_conninfo;          /* handed to libpq as is; "" = PG* environment */
    char *pg_conninfo_file;     /* "" or a file whose content is the conninfo (read at load) */

    /* [kafka]: every key is a librdkafka producer property */
    struct config_kv *kafka;
    size_t n_kafka;
    /* The `_file` twins of secret properties ("sasl.password_file" -> a
     * path), read into kafka[] at load; never handed to librdkafka. */
    struct config_kv *kafka_files;
    size_t n_kafka_files;

    /* [relay] */
    char *schema;               /* default "public" */
    char *table;                /* default "outbox" */
    char *topic;                /* template, default "outbox.${aggregate_type}" */
    char *notify_channel;       /* default "outbox_relay" */
    int batch_size;             /* default 2000, 1..100000 */
    int poll_interval_ms;       /* default 1000, 10..3600000 */
    int shutdown_timeout_ms;    /* default 10000, 0..600000 */
    int reconnect_interval_ms;  /* default 1000, 10..600000: first wait before reconnecting */
    int reconnect_max_ms;       /* default 30000: the exponential back-off stops growing here */
    enum poison_policy on_poison; /* default hold_aggregate */
    int max_attempts;           /* default 10: retriable failures before on_poison applies */
    enum relay_on_sent on_sent; /* default mark */
    int64_t retention_ms;       /* default 7 days; 0 = keep: sent rows deleted after it */
    int ack_timeout_ms;         /* default 10000: /readyz fails when messages wait this long for
                                   an acknowledgement; 0 = never */
    int allow_row_security;     /* bool, default false: relay although row-level security hides
                                   rows from the relay's role (backlog then unknown) */
    enum relay_fencing fencing; /* default transactional */
    int64_t standby_stall_timeout_ms; /* default 60 s: a standby reports a leader that makes no
                                         progress while rows wait; 0 = never */
    char *transactional_id;     /* "" (default) = derived from schema and table */
    enum relay_capture capture; /* default poll */
    char *slot;                 /* relay.capture=wal: the logical replication slot, "outbox_relay" */
    char *publication;          /* relay.capture=wal: the publication, "outbox_relay" */
    char *message_prefix;       /* relay.capture=wal: prefix of pg_logical_emit_message events */
    enum relay_slot_recovery slot_recovery; /* relay.capture=wal: default reconcile */
    enum relay_slot_failover slot_failover; /* relay.capture=wal: default off */
    int64_t heartbeat_ms;       /* relay.capture=wal: default 10 s; 0 = never */
    enum relay_profile profile; /* default outbox; debezium changes the defaults of the keys below */
    char *column_event_id;      /* capture=wal: the columns an Insert is read from */
    char *column_aggregate_type;
    char *column_aggregate_id;  /* the Kafka key */
    char *column_event_type;    /* "" = none */
    char *column_payload;
    char *column_created_at;    /* the message timestamp; "" = the commit time */
    char *additional_placement; /* "column:header|envelope[:name],..." */
    char *id_header;            /* header carrying the event id; "" = none */
    int relay_headers;          /* bool: the relay's own headers (event_id, event_type, ...) */
    enum event_converter key_converter;   /* default string */
    enum event_converter value_converter; /* default string */
    int expand_json_payload;    /* bool: value_converter json, the payload expanded */
    int tombstone_on_empty_payload; /* bool: a NULL or blank payload is a tombstone */
    char *connect_topic_prefix; /* the connector's topic.prefix: the envelope's schema name */
    /* Not a key: the debezium profile's key and payload columns as the
     * catalog describes them, read at start (profile_check) for
     * JsonConverter's schemas. */
    struct connect_columns connect_columns;

    /* [http] */
    char *http_listen;          /* status endpoint, default "127.0.0.1:8423"; "" = disabled */

    /* [log] */
    enum log_level log_level;   /* default info */
    enum log_format log_format; /* default logfmt */
    int64_t log_stats_interval_ms; /* default 10 s: the progress line; 0 = off */

    /* [verify]: the daemon's periodic verify */
    int64_t verify_interval_ms; /* default 0: off */
    int64_t verify_lag_ms;      /* default 5 min: the window ends this long ago */
    int64_t verify_window_ms;   /* default 1 h: and starts this long before its end */
    int64_t verify_settle_ms;   /* default 30 s: capture=wal, the wait for the slot to pass the
                                   fence (verify_wal.c) */

    /* Which rows of the parameter table a file, the environment or -X set:
     * relay.profile changes only the defaults of the others. */
    bool explicit_set[CONFIG_MAX_PARAMS];
};


/** Writes the transactional.id the relay uses into @p buf: relay.transactional_id,
 *  or "outbox-relay.<schema>.<table>" when that is empty. */
void config_transactional_id(const struct relay_config *cfg, char *buf, size_t len);
/** The relay's two transactional ids: @p slot 0 is config_transactional_id,
 *  1 the same with ".spare" appended, taken while a commit of the first
 *  cannot complete at its coordinator (core/kafka_stall.h). */
void config_transactional_id_slot(const struct relay_config *cfg, unsigned slot, char *buf, size_t len);

/** Fills @p cfg with the defaults of the parameter table. */
void config_init(struct relay_config *cfg);

/** Frees everything config_init/config_load allocated. Safe on a zeroed struct. */
void config_free(struct relay_config *cfg);

/** Loads @p path (INI) into @p cfg (which config_init prepared), then applies
 *  @p overrides ("section.key=value", in order; later wins), then validates.
 *  A missing file is an error only if @p path_required.
 *  @return 0, or -EINVAL (bad key/value; errbuf names the key), -ENOENT/-EACCES (file). */
int config_load(struct relay_config *cfg, const char *path, bool path_required,
                char *const *overrides, size_t n_overrides, char *errbuf, size_t errlen);

/** config_load() with the environment as a layer of its own. Precedence, lowest
 *  first: defaults (config_init) < the file at @p path < the OUTBOX_RELAY_*
 *  variables of @p envp (see config_load_env; NULL = none) < @p overrides;
 *  validation runs once, after the last layer.
 *  @return as config_load(). */
int config_load_layered(struct relay_config *cfg, const char *path, bool path_required,
                        char *const *envp, char *const *overrides, size_t n_overrides,
                        char *errbuf, size_t errlen);

/** Applies the configuration variables of @p envp (NULL-terminated "NAME=value"
 *  strings, as environ), in order, without validating the result:
 *  OUTBOX_RELAY_<SECTION>_<KEY> sets section.key, SECTION being POSTGRES, KAFKA,
 *  RELAY, HTTP or LOG and KEY the key in upper case. In KAFKA every '_' of KEY
 *  becomes '.' (OUTBOX_RELAY_KAFKA_BOOTSTRAP_SERVERS -> kafka.bootstrap.servers);
 *  elsewhere '_' stays (OUTBOX_RELAY_RELAY_BATCH_SIZE -> relay.batch_size).
 *  OUTBOX_RELAY_TEST_*, OUTBOX_RELAY_BIN and OUTBOX_RELAY_MOCK_BROKER belong to
 *  the project's test tools and are ignored; other variables are not touched.
 *  @return 0, or -EINVAL with errbuf naming the variable (an unknown
 *  OUTBOX_RELAY_* name is rejected like an unknown key), or -ENOMEM. */
int config_load_env(struct relay_config *cfg, char *const *envp, char *errbuf, size_t errlen);

/** Sets one key: @p section "postgres"|"kafka"|"relay"|"http"|"log".
 *  @return 0 or -EINVAL with errbuf naming "section.key". */
int config_set(struct relay_config *cfg, const char *section, const char *key,
               const char *value, char *errbuf, size_t errlen);

/** Checks cross-key rules (e.g. Kafka properties that break idempotence:
 *  acks other than all/-1, enable.idempotence=false). @return 0 or -EINVAL. */
int config_validate(const struct relay_config *cfg, char *errbuf, size_t errlen);

/** For SIGHUP: checks that @p next differs from @p cur only in reloadable
 *  parameters (log.level, relay.batch_size, relay.poll_interval_ms,
 *  relay.shutdown_timeout_ms, relay.reconnect_interval_ms).
 *  @return 0, or -EINVAL with errbuf naming the first parameter that needs a restart. */
int config_reload_check(const struct relay_config *cur, const struct relay_config *next,
                        char *errbuf, size_t errlen);

/** Copies into @p cur every reloadable value that differs in @p next and
 *  logs it; logs (and keeps) every other key that differs. @return how many
 *  keys changed. */
int config_reload_apply(struct relay_config *cur, const struct relay_config *next);

/** Parses a duration "N", "Ns", "Nm", "Nh" or "Nd" (N a whole number; bare = seconds).
 *  @return the seconds (0 = disabled), or -EINVAL. */
long config_parse_duration(const char *text);

/** Writes @p ms as the file would say it: "0", "Nd", "Nh", "Nm" or "Ns" (the
 *  largest unit that divides it). */
void config_format_duration(int64_t ms, char *buf, size_t len);

/** @return true if @p key (a librdkafka property or "conninfo") holds a secret. */
bool config_key_is_secret(const char *key);

/** @return true if @p key is "K_file" for a secret key K (which is copied
 *  into @p base): its value is the path of a file holding K's value. */
bool config_key_is_file_twin(const char *key, char *base, size_t baselen);

/** Reads the secret file @p path of key @p key (named in messages, the
 *  content never): a relative path from $CREDENTIALS_DIRECTORY when set;
 *  refused when group or others may read it, empty, or over 64 KiB; its
 *  trailing newlines dropped. @return 0 with *@p out allocated, -EINVAL or
 *  -ENOMEM. */
int config_secret_file_read(const char *key, const char *path, char **out, char *errbuf,
                            size_t errlen);

struct rd_kafka_conf_s;

/** Sets on @p conf (an rd_kafka_conf_t) each secret of a [kafka] `_file`
 *  twin as its file holds it now, so that a producer made later (after
 *  refused credentials, say) uses a secret fixed or rotated since the
 *  start. A file that cannot be read now keeps the value read at start and
 *  is named in a warning. */
void config_kafka_secrets_again(const struct relay_config *cfg, struct rd_kafka_conf_s *conf);

/** @return a newly allocated copy of a libpq conninfo (key=value or URI form)
 *  with its password replaced by "********" (redact_conninfo()). */
char *config_redact_conninfo(const char *conninfo);

/** Overwrites, in place, the secret part of one "section.key=value" override
 *  as -X takes it: a conninfo's password (see redact_conninfo()), the whole
 *  value of a secret key. The text keeps its length (zero bytes pad it), so
 *  called on argv it hides the secret from ps and /proc/PID/cmdline. Other
 *  overrides are left as they are. */
void config_scrub_override(char *override);

/** Writes the effective configuration as INI, secrets redacted. */
void config_dump(const struct relay_config *cfg, FILE *out);

/** config_dump() that calls @p kafka_extra (unless NULL) at the end of the
 *  [kafka] section, for what the producer sets itself. */
void config_dump_ext(const struct relay_config *cfg, FILE *out,
                     void (*kafka_extra)(const struct relay_config *cfg, FILE *out));

/** `run` and `check-config` need brokers; migrate, dead and status do not.
 *  @return 0 if kafka.bootstrap.servers (or metadata.broker.list) names at
 *  least one, else -EINVAL with errbuf naming the key. */
int config_require_brokers(const struct relay_config *cfg, char *errbuf, size_t errlen);

/** kafka_scram_hint for the [kafka] section of @p cfg: advice when SCRAM
 *  credentials are refused, or NULL. */
const char *config_kafka_scram_hint(const struct relay_config *cfg, int rdkafka_version);

/** Room for config_claim_relation()'s name. */
#define CONFIG_RELATION_MAX 64

/** What the statements of capture = poll (claim, mark, dead, verify, replay)
 *  read: relay.table, or with relay.profile = debezium (and capture = poll)
 *  the view over it that
 *  migrate made ("<table>_relay"). @return @p buf, or relay.table when the
 *  view's name would not be valid (the statements then refuse it). */
const char *config_claim_relation(const struct relay_config *cfg,
                                  char buf[CONFIG_RELATION_MAX]);

/** How many placed columns (placed_1..) the view of config_claim_relation()
 *  shows: relay.additional_placement's, or 0 when the statements read
 *  relay.table itself (or the placement cannot be parsed: the
 *  configuration's check refused it). */
size_t config_placed_count(const struct relay_config *cfg);

/** One row of the parameter table, for generated documentation. */
struct config_param_info {
    const char *section, *key;
    const char *def;              /* as written in the file */
    const char *desc;             /* one line */
    const char *type;             /* "string", "integer", "duration", "choice" or "boolean" */
    const char *unit;             /* of an integer ("ms", "rows", ...); "" when none */
    bool is_int;                  /* then min..max apply */
    long min, max;
    const char *const *choices;   /* NULL-terminated, or NULL */
    bool reloadable;              /* takes effect on SIGHUP */
    bool secret;                  /* masked in dumps */
};

/** Fills @p info with row @p i of the table (sorted by section, then key).
 *  @return false past the last row. */
bool config_param_info(size_t i, struct config_param_info *info);

/** @return the sections in file order; *@p n receives their count. */
const char *const *config_sections(size_t *n);

struct cJSON;

/** The effective configuration as a JSON object {"postgres": {…}, "kafka":
 *  {…}, "relay": {…}, "http": {…}, "log": {…}}, secrets redacted as in
 *  config_dump(); integers are numbers. @return a new object (cJSON_Delete
 *  it), or NULL without memory. */
struct cJSON *config_to_json(const struct relay_config *cfg);

/** The effective configuration as one logfmt fragment
 *  (`postgres.conninfo="…" relay.batch_size=1000 …`), secrets redacted, for
 *  the start-up log line. @return an allocated string, or NULL without memory. */
char *config_to_logfmt(const struct relay_config *cfg);

#endif
