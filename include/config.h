/* config.h — the relay's configuration: one table of parameters, an INI file,
 * `-X section.key=value` overrides, validation and redaction.
 *
 * Errors follow the project convention: 0 on success, a negative errno value on
 * failure, with a human message (naming the offending key) written to errbuf. */
#ifndef OUTBOX_CONFIG_H
#define OUTBOX_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define CONFIG_DEFAULT_PATH "/etc/outbox-relay/outbox-relay.conf"

/** One librdkafka producer property from the [kafka] section, in file order. */
struct config_kv {
    char *key;
    char *value;
};

struct relay_config {
    /* [postgres] */
    char *pg_conninfo;          /* handed to libpq as is; "" = PG* environment */

    /* [kafka]: every key is a librdkafka producer property */
    struct config_kv *kafka;
    size_t n_kafka;

    /* [relay] */
    char *schema;               /* default "public" */
    char *table;                /* default "outbox" */
    char *topic;                /* template, default "outbox.${aggregate_type}" */
    char *notify_channel;       /* default "outbox_relay" */
    int batch_size;             /* default 1000, 1..100000 */
    int poll_interval_ms;       /* default 1000, 10..3600000 */
    int shutdown_timeout_ms;    /* default 10000, 0..600000 */
    int reconnect_interval_ms;  /* default 1000, 10..600000: wait before reconnecting */

    /* [http] (reserved for the status endpoint) */
    char *http_listen;          /* default "" (disabled) */

    /* [log] */
    int log_level;              /* enum log_level, default info */
    char *log_format;           /* "logfmt" (default) or "json" */
};

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

/** @return true if @p key (a librdkafka property or "conninfo") holds a secret. */
bool config_key_is_secret(const char *key);

/** @return a newly allocated copy of a libpq conninfo (key=value or URI form)
 *  with its password replaced by "********". */
char *config_redact_conninfo(const char *conninfo);

/** Writes the effective configuration as INI, secrets redacted. */
void config_dump(const struct relay_config *cfg, FILE *out);

#endif
