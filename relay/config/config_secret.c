/* config_secret.c — secrets read from files: every secret key has a `_file`
 * twin (postgres.conninfo_file, kafka.sasl.password_file, ...) whose value
 * is a path; the file's content becomes the key's value at load, and a
 * Kafka secret's is read again for every new producer. A relative path is
 * read from systemd's $CREDENTIALS_DIRECTORY when it is set
 * (LoadCredential=), so the unit names a credential and not a path. Also
 * the [kafka] security properties' check: their combinations
 * (core/kafka_security.c) and the files they name. */
#include "config/config_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include "base/errors.h"
#include "core/kafka_security.h"

/* A PEM key with its chain fits; anything larger is not a secret file. */
#define SECRET_FILE_MAX (64 * 1024)

bool config_key_is_file_twin(const char *key, char *base, size_t baselen)
{
    size_t n = strlen(key);
    if (n <= 5 || strcmp(key + n - 5, "_file") != 0 || n - 5 >= baselen)
        return false;
    memcpy(base, key, n - 5);
    base[n - 5] = '\0';
    return config_key_is_secret(base);
}

/* The path a twin names: absolute as written, relative from
 * $CREDENTIALS_DIRECTORY when systemd set it, else from the working
 * directory. */
static void secret_path(const char *path, char *buf, size_t len)
{
    const char *creds = getenv("CREDENTIALS_DIRECTORY");
    if (path[0] != '/' && creds && *creds)
        snprintf(buf, len, "%s/%s", creds, path);
    else
        snprintf(buf, len, "%s", path);
}

/* Reads all of @p fd (at most SECRET_FILE_MAX bytes) into a new string. */
static ssize_t read_all(int fd, char **out)
{
    char *buf = malloc(SECRET_FILE_MAX + 1);
    if (!buf)
        return -ENOMEM;
    size_t used = 0;
    for (;;) {
        ssize_t n = read(fd, buf + used, SECRET_FILE_MAX + 1 - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int err = errno;
            free(buf);
            return -err;
        }
        if (n == 0 || (used += (size_t)n) > SECRET_FILE_MAX)
            break;
    }
    if (used > SECRET_FILE_MAX) {
        free(buf);
        return -EFBIG;
    }
    buf[used] = '\0';
    *out = buf;
    return (ssize_t)used;
}

/* Messages name the key and the path, never a byte of the content. */
int config_secret_file_read(const char *key, const char *path, char **out, char *errbuf,
                            size_t errlen)
{
    char full[4096];
    secret_path(path, full, sizeof full);
    int fd = open(full, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return errbuf_fail(errbuf, errlen, "%s: cannot read %s: %s", key, full, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return errbuf_fail(errbuf, errlen, "%s: %s is not a regular file", key, full);
    }
    /* A secret others can read is no longer one: refuse rather than use it,
     * so the mistake is fixed before the secret is relied on. */
    if (st.st_mode & (S_IRGRP | S_IROTH)) {
        close(fd);
        return errbuf_fail(errbuf, errlen,
                           "%s: %s is readable by group or others (mode %04o); make it "
                           "readable by the relay's user only (chmod 0600 or 0400)",
                           key, full, (unsigned)(st.st_mode & 07777));
    }
    char *text = NULL;
    ssize_t n = read_all(fd, &text);
    close(fd);
    if (n == -ENOMEM)
        return -ENOMEM;
    if (n < 0)
        return errbuf_fail(errbuf, errlen, "%s: cannot read %s: %s", key, full,
                           n == -EFBIG ? "larger than 64 KiB" : strerror((int)-n));
    /* Editors and `echo` end a file with a newline that is not part of the
     * secret. */
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        text[--n] = '\0';
    if (n == 0 || strlen(text) != (size_t)n) {
        free(text);
        return errbuf_fail(errbuf, errlen, "%s: %s %s", key, full,
                           n == 0 ? "is empty" : "contains a NUL byte");
    }
    *out = text;
    return 0;
}

int config_kafka_file_set(struct relay_config *cfg, const char *key, const char *path,
                          char *errbuf, size_t errlen)
{
    if (!*path)
        return errbuf_fail(errbuf, errlen, "kafka.%s: empty path", key);
    for (size_t i = 0; i < cfg->n_kafka_files; i++) {
        if (!strcmp(cfg->kafka_files[i].key, key)) {
            char *copy = strdup(path);
            if (!copy)
                return -ENOMEM;
            free(cfg->kafka_files[i].value);
            cfg->kafka_files[i].value = copy;
            return 0;
        }
    }
    struct config_kv *grown =
        realloc(cfg->kafka_files, (cfg->n_kafka_files + 1) * sizeof *grown);
    if (!grown)
        return -ENOMEM;
    cfg->kafka_files = grown;
    struct config_kv *kv = &cfg->kafka_files[cfg->n_kafka_files];
    kv->key = strdup(key);
    kv->value = strdup(path);
    if (!kv->key || !kv->value) {
        free(kv->key);
        free(kv->value);
        return -ENOMEM;
    }
    cfg->n_kafka_files++;
    return 0;
}

static bool kafka_has(const struct relay_config *cfg, const char *key)
{
    for (size_t i = 0; i < cfg->n_kafka; i++) {
        if (!strcmp(cfg->kafka[i].key, key))
            return true;
    }
    return false;
}

static int resolve_kafka(struct relay_config *cfg, char *errbuf, size_t errlen)
{
    for (size_t i = 0; i < cfg->n_kafka_files; i++) {
        const struct config_kv *f = &cfg->kafka_files[i];
        char base[128], name[160];
        if (!config_key_is_file_twin(f->key, base, sizeof base))
            return errbuf_fail(errbuf, errlen, "kafka.%s: not a secret's file", f->key);
        if (kafka_has(cfg, base))
            return errbuf_fail(errbuf, errlen,
                               "kafka.%s and kafka.%s are both set: keep one of them", base,
                               f->key);
        snprintf(name, sizeof name, "kafka.%s", f->key);
        char *secret = NULL;
        int rc = config_secret_file_read(name, f->value, &secret, errbuf, errlen);
        if (rc < 0)
            return rc;
        rc = config_set(cfg, "kafka", base, secret, errbuf, errlen);
        /* librdkafka's verdict on a bad value quotes it: say only which key. */
        if (rc == -EINVAL)
            errbuf_fail(errbuf, errlen, "%s: librdkafka refuses the file's content as kafka.%s",
                        name, base);
        memset(secret, 0, strlen(secret));
        free(secret);
        if (rc < 0)
            return rc;
    }
    return 0;
}

void config_kafka_secrets_again(const struct relay_config *cfg, struct rd_kafka_conf_s *conf)
{
    for (size_t i = 0; i < cfg->n_kafka_files; i++) {
        const struct config_kv *f = &cfg->kafka_files[i];
        char base[128], name[160], why[512];
        if (!config_key_is_file_twin(f->key, base, sizeof base))
            continue;
        snprintf(name, sizeof name, "kafka.%s", f->key);
        char *secret = NULL;
        if (config_secret_file_read(name, f->value, &secret, why, sizeof why) < 0) {
            log_warn("cannot read a secret file again; the producer uses what it held at start",
                     "error=%s", log_quote(why));
            continue;
        }
        /* Checked at load as the same key: librdkafka's verdict on another
         * content would quote it, so only the key is named. */
        if (rd_kafka_conf_set(conf, base, secret, why, sizeof why) != RD_KAFKA_CONF_OK)
            log_warn("librdkafka refuses a secret file's new content; the producer uses what "
                     "it held at start", "key=%s", name);
        memset(secret, 0, strlen(secret));
        free(secret);
    }
}

int config_resolve_secret_files(struct relay_config *cfg, char *errbuf, size_t errlen)
{
    if (cfg->pg_conninfo_file && *cfg->pg_conninfo_file) {
        if (cfg->pg_conninfo && *cfg->pg_conninfo)
            return errbuf_fail(errbuf, errlen,
                               "postgres.conninfo and postgres.conninfo_file are both set: keep "
                               "one of them");
        char *conninfo = NULL;
        int rc = config_secret_file_read("postgres.conninfo_file", cfg->pg_conninfo_file,
                                         &conninfo, errbuf, errlen);
        if (rc < 0)
            return rc;
        free(cfg->pg_conninfo);
        cfg->pg_conninfo = conninfo;
    }
    return resolve_kafka(cfg, errbuf, errlen);
}

/* ---- Kafka's security properties ----------------------------------------- */

static const char *kafka_prop(const char *key, void *arg)
{
    const struct relay_config *cfg = arg;
    for (size_t i = 0; i < cfg->n_kafka; i++) {
        if (!strcmp(cfg->kafka[i].key, key))
            return cfg->kafka[i].value;
    }
    return NULL;
}

int config_check_kafka_security(const struct relay_config *cfg, char *errbuf, size_t errlen)
{
    int rc = kafka_check_security(kafka_prop, (void *)cfg, errbuf, errlen);
    if (rc < 0)
        return rc;
    /* librdkafka reads these when the producer starts and, unreadable, fails
     * with a TLS error that does not say which file: say it now. */
    for (size_t i = 0; kafka_security_files[i]; i++) {
        const char *path = kafka_prop(kafka_security_files[i], (void *)cfg);
        if (!path || !*path || !strcmp(path, "probe"))
            continue;
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
            return errbuf_fail(errbuf, errlen, "kafka.%s: cannot read %s: %s",
                               kafka_security_files[i], path, strerror(errno));
        close(fd);
    }
    return 0;
}

const char *config_kafka_scram_hint(const struct relay_config *cfg, int rdkafka_version)
{
    return kafka_scram_hint(kafka_prop, (void *)cfg, rdkafka_version);
}

/* ---- the files PostgreSQL's conninfo names ------------------------------- */

/* libpq's own rule for a client key: anything more open and it refuses the
 * key at every connect, in an error that repeats for ever. */
static bool key_too_open(const struct stat *st)
{
    if (st->st_uid == geteuid())
        return st->st_mode & (S_IRWXG | S_IRWXO);
    if (st->st_uid == 0)
        return st->st_mode & (S_IWGRP | S_IXGRP | S_IRWXO);
    return false;
}

/* One file keyword of the conninfo: readable, and a secret one not open to
 * others (libpq would refuse a key and ignore a password file). */
static int check_pg_file(const char *key, const char *path, char *errbuf, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return errbuf_fail(errbuf, errlen, "postgres.conninfo: %s: cannot read %s: %s", key, path,
                           strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st);
    close(fd);
    if (rc == 0 && !strcmp(key, "sslkey") && key_too_open(&st))
        return errbuf_fail(errbuf, errlen, "postgres.conninfo: sslkey: %s may be read by group or "
                           "others (mode %04o): libpq refuses such a key; chmod 0600 (0640 if "
                           "root owns it)", path, (unsigned)(st.st_mode & 07777));
    if (rc == 0 && !strcmp(key, "passfile") && (st.st_mode & (S_IRWXG | S_IRWXO)))
        return errbuf_fail(errbuf, errlen, "postgres.conninfo: passfile: %s may be read by group "
                           "or others (mode %04o): libpq ignores such a file; chmod 0600", path,
                           (unsigned)(st.st_mode & 07777));
    return 0;
}

int config_check_pg_files(const struct relay_config *cfg, char *errbuf, size_t errlen)
{
    static const char *const keys[] = {"sslrootcert", "sslcert", "sslkey", "sslcrl", "passfile"};
    /* A conninfo libpq cannot parse is its own error, said at connect. */
    PQconninfoOption *opts = PQconninfoParse(cfg->pg_conninfo ? cfg->pg_conninfo : "", NULL);
    int rc = 0;
    for (PQconninfoOption *o = opts; o && o->keyword && rc == 0; o++) {
        for (size_t i = 0; i < sizeof keys / sizeof keys[0] && rc == 0; i++) {
            /* "system": libpq 16's system CA store; "engine:key": an OpenSSL engine's key. */
            if (strcmp(o->keyword, keys[i]) || !o->val || !*o->val ||
                (i == 0 && !strcmp(o->val, "system")) || (i == 2 && strchr(o->val, ':')))
                continue;
            rc = check_pg_file(keys[i], o->val, errbuf, errlen);
        }
    }
    PQconninfoFree(opts);
    return rc;
}
