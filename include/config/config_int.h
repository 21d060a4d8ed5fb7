/* config_int.h — the parameter table, shared by config.c (loading),
 * config_table.c (the table and its values) and config_export.c (dumps);
 * not for other modules, which read struct relay_config's typed fields. */
#ifndef OUTBOX_CONFIG_INT_H
#define OUTBOX_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"

#define REDACTED REDACT_PLACEHOLDER

enum param_type {
    PARAM_STRING,    /* char *; an optional check */
    PARAM_INT,       /* int within min..max, in unit */
    PARAM_ENUM,      /* an enum: the index of the value in choices */
    PARAM_LOG_LEVEL, /* enum log_level */
    PARAM_BOOL,      /* int 0 or 1; written true or false */
    PARAM_DURATION,  /* int64_t milliseconds; written N, Ns, Nm, Nh or Nd */
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
    const char *unit;                   /* PARAM_INT: "ms", "rows", ... */
    const char *const *choices;         /* PARAM_ENUM: names in enum order, NULL-terminated */
    param_check_fn check;               /* PARAM_STRING, optional */
    bool reloadable;                    /* takes effect on SIGHUP */
    const char *desc;
};

/** The table, sorted by section, then key, and its sections in file order. */
extern const struct param config_params[];
extern const size_t config_n_params;
extern const char *const config_section_names[];
extern const size_t config_n_sections;

/** @return the row of section.key, or NULL. */
const struct param *config_param_find(const char *section, const char *key);

/** relay.profile: sets the profile's values of the keys not set
 *  explicitly (cfg->explicit_set). @return 0 or -EINVAL / -ENOMEM. */
int config_apply_profile(struct relay_config *cfg, char *errbuf, size_t errlen);

/** Records kafka.@p key (a secret's `_file` twin) = @p path. @return 0,
 *  -EINVAL or -ENOMEM. */
int config_kafka_file_set(struct relay_config *cfg, const char *key, const char *path,
                          char *errbuf, size_t errlen);

/** Reads every `_file` twin that is set into its secret key; a twin set
 *  alongside its key is refused. @return 0, -EINVAL (errbuf names the key,
 *  not the content) or -ENOMEM. */
int config_resolve_secret_files(struct relay_config *cfg, char *errbuf, size_t errlen);

/** [kafka]'s security properties: combinations that cannot work
 *  (kafka_check_security) and the CA, certificate and key files they name,
 *  which must be readable. @return 0 or -EINVAL naming the key. */
int config_check_kafka_security(const struct relay_config *cfg, char *errbuf, size_t errlen);

/** The files postgres.conninfo names (sslrootcert, sslcert, sslkey, sslcrl,
 *  passfile) must be readable, and a key or password file not open to group
 *  or others, as libpq demands. @return 0 or -EINVAL naming the keyword and
 *  the file (never its content). */
int config_check_pg_files(const struct relay_config *cfg, char *errbuf, size_t errlen);

/** @return whether [@p section] exists. */
bool config_section_known(const char *section);

/** Parses @p value into @p cfg's field of @p p. @return 0, -EINVAL (errbuf
 *  names section.key and what is allowed) or -ENOMEM. */
int config_param_set(struct relay_config *cfg, const struct param *p, const char *value,
                     char *errbuf, size_t errlen);

/** @return whether @p a and @p b hold the same value of @p p. */
bool config_param_equal(const struct relay_config *a, const struct relay_config *b,
                        const struct param *p);

/** Copies @p src's value of @p p into @p dst. @return 0 or -ENOMEM. */
int config_param_copy(struct relay_config *dst, const struct relay_config *src,
                      const struct param *p);

/** Frees a string field of @p p (others own no memory). */
void config_param_free(struct relay_config *cfg, const struct param *p);

/** The value of @p p as the file would say it, secrets masked as config_dump()
 *  masks them. @return an allocated string, or NULL without memory. */
char *config_param_text(const struct relay_config *cfg, const struct param *p);

/** @return whether @p cfg holds the table's default of @p p (compared as
 *  the file would write it). */
bool config_param_is_default(const struct relay_config *cfg, const struct param *p);

/** The int of a PARAM_INT or PARAM_BOOL row. */
int config_param_int(const struct relay_config *cfg, const struct param *p);

#endif
