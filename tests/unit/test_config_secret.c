/* Unit tests of secrets read from files (relay/config/config_secret.c): the
 * `_file` twins, $CREDENTIALS_DIRECTORY, files others can read refused by
 * name and never quoted, and the dumps that show the path, not the secret. */
#include <sys/stat.h>

#include "config_fixture.h"

static char dir[64];
static char secret_path[128];

static void secret_setup(void)
{
    setup();
    strcpy(dir, "/tmp/outbox-relay-cred-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    secret_path[0] = '\0';
    unsetenv("CREDENTIALS_DIRECTORY");
}

static void secret_teardown(void)
{
    teardown();
    if (secret_path[0])
        unlink(secret_path);
    rmdir(dir);
    unsetenv("CREDENTIALS_DIRECTORY");
}

TestSuite(config_secret, .init = secret_setup, .fini = secret_teardown);

/* Writes @p text as DIR/@p name with @p mode; the path in secret_path. */
static void write_secret(const char *name, const char *text, mode_t mode)
{
    snprintf(secret_path, sizeof secret_path, "%s/%s", dir, name);
    FILE *f = fopen(secret_path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    cr_assert_eq(chmod(secret_path, mode), 0);
}

static const char *kafka_value(const char *key)
{
    for (size_t i = 0; i < cfg.n_kafka; i++) {
        if (!strcmp(cfg.kafka[i].key, key))
            return cfg.kafka[i].value;
    }
    return NULL;
}

static char *dump_text(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    config_dump(&cfg, out);
    fclose(out);
    return buf;
}

Test(config_secret, twins_of_secret_keys_only)
{
    char base[64];
    cr_assert(config_key_is_file_twin("sasl.password_file", base, sizeof base));
    cr_assert_str_eq(base, "sasl.password");
    cr_assert(config_key_is_file_twin("ssl.key.password_file", base, sizeof base));
    cr_assert(config_key_is_file_twin("sasl.oauthbearer.client.secret_file", base, sizeof base));
    cr_assert(config_key_is_file_twin("ssl.key.pem_file", base, sizeof base));
    cr_assert_not(config_key_is_file_twin("sasl.username_file", base, sizeof base));
    cr_assert_not(config_key_is_file_twin("_file", base, sizeof base));
    /* a twin holds a path, which dumps show */
    cr_assert_not(config_key_is_secret("sasl.password_file"));
}

Test(config_secret, kafka_password_read_from_its_file)
{
    write_secret("pw", "FileSecret1\n", 0600);
    char ov[256];
    snprintf(ov, sizeof ov, "kafka.sasl.password_file=%s", secret_path);
    cr_assert_eq(load_override(ov), 0, "%s", err);
    cr_assert_str_eq(kafka_value("sasl.password"), "FileSecret1");
    char *text = dump_text();
    cr_assert_null(strstr(text, "FileSecret1"), "%s", text);
    cr_assert_not_null(strstr(text, "sasl.password_file = "), "%s", text);
    cr_assert_not_null(strstr(text, "sasl.password = ********"), "%s", text);
    free(text);
    char *lf = config_to_logfmt(&cfg);
    cr_assert_null(strstr(lf, "FileSecret1"), "%s", lf);
    free(lf);
}

Test(config_secret, relative_path_from_the_credentials_directory)
{
    write_secret("kafka-password", "CredSecret2", 0400);
    setenv("CREDENTIALS_DIRECTORY", dir, 1);
    cr_assert_eq(load_override("kafka.sasl.password_file=kafka-password"), 0, "%s", err);
    cr_assert_str_eq(kafka_value("sasl.password"), "CredSecret2");
}

Test(config_secret, a_file_others_can_read_is_refused_by_key)
{
    write_secret("pw", "GroupSecret3\n", 0640);
    char ov[256];
    snprintf(ov, sizeof ov, "kafka.sasl.password_file=%s", secret_path);
    cr_assert_eq(load_override(ov), -EINVAL);
    cr_assert_not_null(strstr(err, "kafka.sasl.password_file"), "%s", err);
    cr_assert_not_null(strstr(err, "readable by group or others"), "%s", err);
    cr_assert_null(strstr(err, "GroupSecret3"), "%s", err);
}

Test(config_secret, missing_empty_and_doubled)
{
    cr_assert_eq(load_override("kafka.sasl.password_file=/nonexistent/pw"), -EINVAL);
    cr_assert_not_null(strstr(err, "kafka.sasl.password_file: cannot read"), "%s", err);

    write_secret("empty", "\n", 0600);
    char ov[256];
    snprintf(ov, sizeof ov, "kafka.sasl.password_file=%s", secret_path);
    config_free(&cfg);
    config_init(&cfg);
    cr_assert_eq(load_override(ov), -EINVAL);
    cr_assert_not_null(strstr(err, "is empty"), "%s", err);

    write_secret("empty", "x", 0600);
    char *const both[] = {ov, "kafka.sasl.password=Inline"};
    config_free(&cfg);
    config_init(&cfg);
    cr_assert_eq(config_load(&cfg, NULL, false, both, 2, err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "both set"), "%s", err);
}

Test(config_secret, conninfo_from_its_file)
{
    write_secret("conninfo", "host=db password=PgSecret4\n", 0600);
    char ov[256];
    snprintf(ov, sizeof ov, "postgres.conninfo_file=%s", secret_path);
    cr_assert_eq(load_override(ov), 0, "%s", err);
    cr_assert_str_eq(cfg.pg_conninfo, "host=db password=PgSecret4");
    char *text = dump_text();
    cr_assert_null(strstr(text, "PgSecret4"), "%s", text);
    cr_assert_not_null(strstr(text, "conninfo_file = "), "%s", text);
    free(text);
}

Test(config_secret, environment_twin_keeps_its_underscore)
{
    write_secret("pw", "EnvSecret5", 0600);
    char var[256];
    snprintf(var, sizeof var, "OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE=%s", secret_path);
    char *const envp[] = {var, NULL};
    cr_assert_eq(config_load_layered(&cfg, NULL, false, envp, NULL, 0, err, sizeof err), 0,
                 "%s", err);
    cr_assert_str_eq(kafka_value("sasl.password"), "EnvSecret5");
}

/* --- Kafka security combinations (core/kafka_security.c, config_validate) --- */

/* Loads the overrides; @return the result, the message in err. */
static int load_kafka(char *const *ov, size_t n)
{
    config_free(&cfg);
    config_init(&cfg);
    return config_load(&cfg, NULL, false, ov, n, err, sizeof err);
}

#define LOAD(...)                                                                          \
    ({                                                                                     \
        char *const ov_[] = {__VA_ARGS__};                                                 \
        load_kafka(ov_, sizeof ov_ / sizeof ov_[0]);                                       \
    })

Test(config_secret, sasl_protocol_needs_a_mechanism)
{
    cr_assert_eq(LOAD("kafka.security.protocol=SASL_SSL"), -EINVAL);
    cr_assert_not_null(strstr(err, "kafka.security.protocol=SASL_SSL needs kafka.sasl.mechanism"),
                       "%s", err);
}

Test(config_secret, unknown_mechanism_is_named)
{
    cr_assert_eq(LOAD("kafka.security.protocol=SASL_SSL", "kafka.sasl.mechanism=AWS_MSK_IAM"),
                 -EINVAL);
    cr_assert_not_null(strstr(err, "kafka.sasl.mechanism: unknown mechanism \"AWS_MSK_IAM\""),
                       "%s", err);
    cr_assert_eq(LOAD("kafka.security.protocol=SASL_SSL", "kafka.sasl.mechanisms=scram-sha-512"),
                 -EINVAL);
    cr_assert_not_null(strstr(err, "kafka.sasl.mechanisms: unknown"), "%s", err);
}

Test(config_secret, mechanism_without_credentials_names_the_missing_key)
{
    cr_assert_eq(LOAD("kafka.security.protocol=SASL_SSL", "kafka.sasl.mechanism=SCRAM-SHA-512"),
                 -EINVAL);
    cr_assert_not_null(strstr(err, "needs kafka.sasl.username"), "%s", err);
    cr_assert_eq(LOAD("kafka.security.protocol=SASL_SSL", "kafka.sasl.mechanism=PLAIN",
                      "kafka.sasl.username=relay"),
                 -EINVAL);
    cr_assert_not_null(strstr(err, "kafka.sasl.mechanism=PLAIN needs kafka.sasl.password"),
                       "%s", err);
    cr_assert_eq(LOAD("kafka.security.protocol=SASL_SSL", "kafka.sasl.mechanism=OAUTHBEARER"),
                 -EINVAL);
    cr_assert_not_null(strstr(err, "sasl.oauthbearer.method=oidc"), "%s", err);
    cr_assert_eq(LOAD("kafka.security.protocol=SASL_SSL", "kafka.sasl.mechanism=OAUTHBEARER",
                      "kafka.sasl.oauthbearer.method=oidc",
                      "kafka.sasl.oauthbearer.client.id=relay"),
                 -EINVAL);
    /* OIDC needs a librdkafka built with libcurl, which refuses the key otherwise */
    cr_assert(strstr(err, "needs kafka.sasl.oauthbearer.client.secret") ||
                  strstr(err, "not supported in this build"),
              "%s", err);
    cr_assert_eq(LOAD("kafka.security.protocol=SASL_SSL", "kafka.sasl.mechanism=SCRAM-SHA-512",
                      "kafka.sasl.username=relay", "kafka.sasl.password=Pw1"),
                 0, "%s", err);
    cr_assert_eq(LOAD("kafka.security.protocol=sasl_plaintext", "kafka.sasl.mechanism=GSSAPI"), 0,
                 "%s", err);
}

Test(config_secret, mechanism_without_a_sasl_protocol_is_never_used)
{
    cr_assert_eq(LOAD("kafka.sasl.mechanism=PLAIN", "kafka.sasl.username=relay",
                      "kafka.sasl.password=Pw2"),
                 -EINVAL);
    cr_assert_not_null(strstr(err, "kafka.sasl.mechanism=PLAIN is never used"), "%s", err);
    cr_assert_null(strstr(err, "Pw2"), "%s", err);
}

Test(config_secret, client_key_needs_its_certificate)
{
    write_secret("client.key", "key", 0600);
    char key[256];
    snprintf(key, sizeof key, "kafka.ssl.key.location=%s", secret_path);
    cr_assert_eq(LOAD("kafka.security.protocol=SSL", key), -EINVAL);
    cr_assert_not_null(strstr(err, "kafka.ssl.key.location needs kafka.ssl.certificate.location"),
                       "%s", err);
}

/* TLS files under a protocol without TLS, which librdkafka would silently
 * ignore, are named with the protocol in use. */
Test(config_secret, tls_settings_without_a_tls_protocol_are_named)
{
    cr_assert_eq(LOAD("kafka.ssl.ca.location=probe"), -EINVAL);
    cr_assert_not_null(strstr(err, "kafka.ssl.ca.location is never used: kafka.security.protocol "
                                   "is plaintext (the default)"), "%s", err);
    write_secret("client.crt", "crt", 0644);
    char crt[256];
    snprintf(crt, sizeof crt, "kafka.ssl.certificate.location=%s", secret_path);
    cr_assert_eq(LOAD("kafka.security.protocol=SASL_PLAINTEXT", "kafka.sasl.mechanism=PLAIN",
                      "kafka.sasl.username=relay", "kafka.sasl.password=Pw3", crt),
                 -EINVAL);
    cr_assert_not_null(strstr(err, "kafka.ssl.certificate.location is never used: "
                                   "kafka.security.protocol is SASL_PLAINTEXT"), "%s", err);
    cr_assert_null(strstr(err, "Pw3"), "%s", err);
    cr_assert_eq(LOAD("kafka.security.protocol=SSL", "kafka.ssl.ca.location=probe"), 0, "%s", err);
    cr_assert_eq(LOAD("kafka.security.protocol=sasl_ssl", "kafka.sasl.mechanism=PLAIN",
                      "kafka.sasl.username=relay", "kafka.sasl.password=Pw3",
                      "kafka.ssl.ca.location=probe"),
                 0, "%s", err);
}

Test(config_secret, unreadable_tls_files_are_named)
{
    cr_assert_eq(LOAD("kafka.security.protocol=SSL", "kafka.ssl.ca.location=/nonexistent/ca.pem"),
                 -EINVAL);
    cr_assert_not_null(strstr(err, "kafka.ssl.ca.location: cannot read /nonexistent/ca.pem"), "%s",
                       err);
    write_secret("ca.pem", "ca", 0644);
    char ca[256];
    snprintf(ca, sizeof ca, "kafka.ssl.ca.location=%s", secret_path);
    cr_assert_eq(LOAD("kafka.security.protocol=SSL", ca), 0, "%s", err);
    /* librdkafka's own word for the system's store */
    cr_assert_eq(LOAD("kafka.security.protocol=SSL", "kafka.ssl.ca.location=probe"), 0, "%s", err);
    if (geteuid() != 0) {
        cr_assert_eq(chmod(secret_path, 0), 0);
        cr_assert_eq(LOAD("kafka.security.protocol=SSL", ca), -EINVAL);
        cr_assert_not_null(strstr(err, "kafka.ssl.ca.location: cannot read"), "%s", err);
    }
}

/* -X postgres.conninfo=@p head@p file; @return config_load's status. */
static int load_conninfo(const char *head, const char *file)
{
    char ov[512];
    snprintf(ov, sizeof ov, "postgres.conninfo=%s%s", head, file);
    return load_override(ov);
}

Test(config_secret, postgres_tls_files_are_named)
{
    cr_assert_eq(load_conninfo("host=db password=PgSecret5 sslmode=verify-full "
                               "sslrootcert=", "/nonexistent/ca.pem"), -EINVAL);
    assert_err_has("postgres.conninfo: sslrootcert: cannot read /nonexistent/ca.pem");
    cr_assert_null(strstr(err, "PgSecret5"), "%s", err);
    cr_assert_eq(load_conninfo("postgresql://db/app?sslmode=verify-full&"
                               "sslcert=", "/nonexistent/client.pem"), -EINVAL);
    assert_err_has("postgres.conninfo: sslcert: cannot read /nonexistent/client.pem");
    /* libpq 16's word for the system's CA store; an OpenSSL engine's key */
    cr_assert_eq(load_conninfo("host=db sslrootcert=", "system"), 0, "%s", err);
    cr_assert_eq(load_conninfo("host=db sslkey=", "pkcs11:id"), 0, "%s", err);
    write_secret("ca.pem", "ca", 0644);
    cr_assert_eq(load_conninfo("host=db sslmode=verify-full sslrootcert=",
                               secret_path), 0, "%s", err);
}

Test(config_secret, postgres_key_and_passfile_others_may_read_are_refused)
{
    write_secret("client.key", "key", 0644);
    cr_assert_eq(load_conninfo("host=db sslcert=/dev/null sslkey=", secret_path),
                 -EINVAL);
    assert_err_has("postgres.conninfo: sslkey: ");
    assert_err_has("may be read by group or others (mode 0644)");
    cr_assert_eq(chmod(secret_path, 0600), 0);
    cr_assert_eq(load_conninfo("host=db sslcert=/dev/null sslkey=", secret_path),
                 0, "%s", err);
    unlink(secret_path);

    write_secret("pgpass", "*:*:*:relay:PassSecret6\n", 0640);
    cr_assert_eq(load_conninfo("host=db passfile=", secret_path), -EINVAL);
    assert_err_has("postgres.conninfo: passfile: ");
    assert_err_has("(mode 0640): libpq ignores such a file");
    cr_assert_null(strstr(err, "PassSecret6"), "%s", err);
    cr_assert_eq(chmod(secret_path, 0600), 0);
    cr_assert_eq(load_conninfo("host=db passfile=", secret_path), 0, "%s", err);
}
