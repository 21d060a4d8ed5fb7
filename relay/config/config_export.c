/* config_export.c — the effective configuration written out: INI (config
 * dump), JSON (/status), logfmt (the start-up line), with secrets redacted. */
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
    /* A twin holds a path: the secret is in the file. */
    size_t n = strlen(key);
    if (n > 5 && !strcmp(key + n - 5, "_file"))
        return false;
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
    char *text = config_param_text(cfg, p);
    fprintf(out, "%s = %s\n", p->key, text ? text : REDACTED);
    free(text);
}

void config_dump(const struct relay_config *cfg, FILE *out)
{
    config_dump_ext(cfg, out, NULL);
}

void config_dump_ext(const struct relay_config *cfg, FILE *out,
                     void (*kafka_extra)(const struct relay_config *cfg, FILE *out))
{
    fputs("# outbox-relay effective configuration (secrets redacted)\n", out);
    for (size_t s = 0; s < config_n_sections; s++) {
        fprintf(out, "\n[%s]\n", config_section_names[s]);
        if (!strcmp(config_section_names[s], "kafka")) {
            fputs("# librdkafka producer properties\n", out);
            for (size_t i = 0; i < cfg->n_kafka; i++) {
                const struct config_kv *kv = &cfg->kafka[i];
                fprintf(out, "%s = %s\n", kv->key,
                        config_key_is_secret(kv->key) ? REDACTED : kv->value);
            }
            for (size_t i = 0; i < cfg->n_kafka_files; i++)
                fprintf(out, "%s = %s\n", cfg->kafka_files[i].key, cfg->kafka_files[i].value);
            if (kafka_extra)
                kafka_extra(cfg, out);
            continue;
        }
        for (size_t i = 0; i < config_n_params; i++) {
            if (!strcmp(config_params[i].section, config_section_names[s]))
                dump_param(cfg, &config_params[i], out);
        }
    }
}

/* --- the effective configuration as data --------------------------------- */

struct cJSON *config_to_json(const struct relay_config *cfg)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    for (size_t s = 0; s < config_n_sections; s++) {
        cJSON *sec = cJSON_AddObjectToObject(root, config_section_names[s]);
        if (!sec)
            goto oom;
        if (!strcmp(config_section_names[s], "kafka")) {
            for (size_t i = 0; i < cfg->n_kafka; i++) {
                const struct config_kv *kv = &cfg->kafka[i];
                if (!cJSON_AddStringToObject(sec, kv->key,
                                             config_key_is_secret(kv->key) ? REDACTED : kv->value))
                    goto oom;
            }
            for (size_t i = 0; i < cfg->n_kafka_files; i++) {
                if (!cJSON_AddStringToObject(sec, cfg->kafka_files[i].key,
                                             cfg->kafka_files[i].value))
                    goto oom;
            }
            continue;
        }
        for (size_t i = 0; i < config_n_params; i++) {
            const struct param *p = &config_params[i];
            if (strcmp(p->section, config_section_names[s]) != 0)
                continue;
            /* Numbers stay numbers, so that a consumer can compare them. */
            if (p->type == PARAM_INT) {
                if (!cJSON_AddNumberToObject(sec, p->key, config_param_int(cfg, p)))
                    goto oom;
                continue;
            }
            if (p->type == PARAM_BOOL) {
                if (!cJSON_AddBoolToObject(sec, p->key, config_param_int(cfg, p)))
                    goto oom;
                continue;
            }
            char *text = config_param_text(cfg, p);
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
    for (size_t s = 0; s < config_n_sections; s++) {
        if (!strcmp(config_section_names[s], "kafka")) {
            for (size_t i = 0; i < cfg->n_kafka; i++) {
                const struct config_kv *kv = &cfg->kafka[i];
                fprintf(out, "%skafka.%s=%s", sep, kv->key,
                        log_quote(config_key_is_secret(kv->key) ? REDACTED : kv->value));
                sep = " ";
            }
            for (size_t i = 0; i < cfg->n_kafka_files; i++) {
                fprintf(out, "%skafka.%s=%s", sep, cfg->kafka_files[i].key,
                        log_quote(cfg->kafka_files[i].value));
                sep = " ";
            }
            continue;
        }
        for (size_t i = 0; i < config_n_params; i++) {
            const struct param *p = &config_params[i];
            if (strcmp(p->section, config_section_names[s]) != 0)
                continue;
            char *text = config_param_text(cfg, p);
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
