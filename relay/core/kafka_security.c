/* kafka_security.c — security properties that cannot work together, refused
 * before the producer starts: librdkafka would otherwise fail at its first
 * connection, or fall back on a default nobody meant (GSSAPI), and the
 * relay would retry forever without naming the key at fault. */
#include "core/kafka_security.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "base/errors.h"

/* What librdkafka 2.0 (Debian 12) builds in; a name is compared as
 * librdkafka compares it, case and all. AWS_MSK_IAM is not among them. */
static const char *const mechanisms[] = {
    "GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", NULL,
};

const char *const kafka_security_files[] = {
    "ssl.ca.location",      "ssl.certificate.location", "ssl.key.location",
    "ssl.crl.location",     "ssl.keystore.location",    "sasl.kerberos.keytab",
    NULL,
};

static bool set(kafka_prop_fn get, void *arg, const char *key)
{
    const char *v = get(key, arg);
    return v && *v;
}

/* A mechanism's credentials: PLAIN and SCRAM a user and a password, OIDC
 * its client and token endpoint. Without a refresh callback (the relay sets
 * none) OAUTHBEARER has nothing else to get a token from. */
static int check_credentials(kafka_prop_fn get, void *arg, const char *mkey, const char *mech,
                             char *errbuf, size_t errlen)
{
    static const char *const user_pass[] = {"sasl.username", "sasl.password", NULL};
    static const char *const oidc[] = {"sasl.oauthbearer.client.id",
                                       "sasl.oauthbearer.client.secret",
                                       "sasl.oauthbearer.token.endpoint.url", NULL};
    const char *const *need = NULL;
    if (!strcmp(mech, "PLAIN") || !strncmp(mech, "SCRAM-", 6))
        need = user_pass;
    if (!strcmp(mech, "OAUTHBEARER")) {
        const char *method = get("sasl.oauthbearer.method", arg);
        const char *unsecure = get("enable.sasl.oauthbearer.unsecure.jwt", arg);
        if (method && !strcasecmp(method, "oidc"))
            need = oidc;
        else if (!unsecure || strcasecmp(unsecure, "true") != 0)
            return errbuf_fail(errbuf, errlen,
                               "kafka.%s=OAUTHBEARER needs a way to get a token, and the relay "
                               "sets no token callback: kafka.sasl.oauthbearer.method=oidc with "
                               "its client id, secret and token endpoint (a librdkafka built "
                               "with libcurl; Debian 12's 2.0.2 is not), or "
                               "kafka.enable.sasl.oauthbearer.unsecure.jwt=true (tests only)",
                               mkey);
    }
    for (size_t i = 0; need && need[i]; i++) {
        if (!set(get, arg, need[i]))
            return errbuf_fail(errbuf, errlen, "kafka.%s=%s needs kafka.%s%s", mkey, mech,
                               need[i], strstr(need[i], "secret") || strstr(need[i], "password")
                                            ? " (or its _file twin)" : "");
    }
    return 0;
}

/* The SASL mechanism, under either of librdkafka's names (set in @p *mkey). */
static const char *sasl_mechanism(kafka_prop_fn get, void *arg, const char **mkey)
{
    *mkey = "sasl.mechanism";
    const char *mech = get(*mkey, arg);
    if (!mech || !*mech) {
        *mkey = "sasl.mechanisms";
        mech = get(*mkey, arg);
    }
    return mech;
}

static int check_sasl(kafka_prop_fn get, void *arg, char *errbuf, size_t errlen)
{
    const char *proto = get("security.protocol", arg);
    bool sasl_proto = proto && !strncasecmp(proto, "sasl_", 5);
    const char *mkey;
    const char *mech = sasl_mechanism(get, arg, &mkey);
    if (!mech || !*mech) {
        if (sasl_proto)
            return errbuf_fail(errbuf, errlen,
                               "kafka.security.protocol=%s needs kafka.sasl.mechanism (PLAIN, "
                               "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or GSSAPI)",
                               proto);
        return 0;
    }
    size_t i = 0;
    while (mechanisms[i] && strcmp(mechanisms[i], mech) != 0)
        i++;
    if (!mechanisms[i])
        return errbuf_fail(errbuf, errlen,
                           "kafka.%s: unknown mechanism \"%s\" (librdkafka has GSSAPI, PLAIN, "
                           "SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER, in upper case)",
                           mkey, mech);
    if (!sasl_proto)
        return errbuf_fail(errbuf, errlen,
                           "kafka.%s=%s is never used: kafka.security.protocol is %s, not "
                           "SASL_SSL or SASL_PLAINTEXT",
                           mkey, mech, proto ? proto : "plaintext (the default)");
    return check_credentials(get, arg, mkey, mech, errbuf, errlen);
}

/* TLS settings under a protocol without TLS: librdkafka ignores them, and an
 * operator who set them believes the connection is encrypted (or proves
 * who it is) when it is neither. */
static int check_tls_unused(kafka_prop_fn get, void *arg, char *errbuf, size_t errlen)
{
    static const char *const tls_keys[] = {
        "ssl.certificate.location", "ssl.key.location", "ssl.certificate.pem", "ssl.key.pem",
        "ssl.keystore.location", "ssl.ca.location", "ssl.ca.pem", NULL,
    };
    const char *proto = get("security.protocol", arg);
    if (proto && (!strcasecmp(proto, "ssl") || !strcasecmp(proto, "sasl_ssl")))
        return 0;
    for (size_t i = 0; tls_keys[i]; i++)
        if (set(get, arg, tls_keys[i]))
            return errbuf_fail(errbuf, errlen,
                               "kafka.%s is never used: kafka.security.protocol is %s, not SSL "
                               "or SASL_SSL",
                               tls_keys[i], proto && *proto ? proto : "plaintext (the default)");
    return 0;
}

int kafka_check_security(kafka_prop_fn get, void *arg, char *errbuf, size_t errlen)
{
    int rc = check_sasl(get, arg, errbuf, errlen);
    if (rc == 0)
        rc = check_tls_unused(get, arg, errbuf, errlen);
    if (rc < 0)
        return rc;
    /* A client certificate and its key go together, as files or as PEM. */
    static const char *const pairs[][2] = {
        {"ssl.key.location", "ssl.certificate.location"},
        {"ssl.certificate.location", "ssl.key.location"},
        {"ssl.key.pem", "ssl.certificate.pem"},
        {"ssl.certificate.pem", "ssl.key.pem"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        if (set(get, arg, pairs[i][0]) && !set(get, arg, pairs[i][1]))
            return errbuf_fail(errbuf, errlen, "kafka.%s needs kafka.%s: a client key and its "
                               "certificate go together", pairs[i][0], pairs[i][1]);
    }
    return 0;
}

const char *kafka_tls_hint(const char *reason)
{
    static const struct {
        const char *says, *hint;
    } hints[] = {
        {"certificate verify failed",
         "the brokers' certificate is not from a CA of kafka.ssl.ca.location (or of the system's "
         "store without it), has expired, or does not name the host the relay connected to (the "
         "name in kafka.bootstrap.servers or the broker's advertised listener)"},
        /* The broker's answers to a client certificate it refuses: Java
         * sends "certificate unknown" for an expired one and for one of a
         * CA it does not trust alike, "bad certificate" for none at all. */
        {"alert certificate unknown",
         "the broker refuses the client certificate of kafka.ssl.certificate.location: expired, "
         "or not from a CA the broker trusts"},
        {"alert certificate expired",
         "the client certificate of kafka.ssl.certificate.location has expired"},
        {"alert unknown ca",
         "the broker does not trust the CA of the client certificate of "
         "kafka.ssl.certificate.location"},
        {"alert bad certificate",
         "the broker requires a client certificate: kafka.ssl.certificate.location and "
         "kafka.ssl.key.location, or the one given is not acceptable"},
        /* librdkafka 2.8 (Debian 13; 2.0 did not) sends no client
         * certificate whose CA the broker did not name in its request: one
         * of a foreign CA then looks like none at all. */
        {"certificate required",
         "the broker requires a client certificate: kafka.ssl.certificate.location and "
         "kafka.ssl.key.location, or the one given is not from a CA the broker trusts"},
    };
    for (size_t i = 0; reason && i < sizeof hints / sizeof hints[0]; i++)
        if (strstr(reason, hints[i].says))
            return hints[i].hint;
    return NULL;
}

enum kafka_denial kafka_denial_of_event(int err, const char *reason)
{
    enum kafka_denial d = kafka_denial_of(err);
    /* With TLS 1.3 the client's side of the handshake is over before the
     * broker checks the client certificate: the broker's alert arrives as a
     * failed receive (_TRANSPORT), a refusal all the same. */
    if (d == KAFKA_DENIAL_NONE && kafka_tls_hint(reason))
        d = KAFKA_DENIAL_TLS;
    return d;
}

/* librdkafka before 2.6.1 puts the client's nonce into SCRAM's final message
 * twice; Kafka 4 brokers compare the nonce strictly (RFC 5802) and answer
 * "invalid credentials", as for a wrong password. Debian 12 ships 2.0.2. */
#define SCRAM_NONCE_FIXED 0x02060100

const char *kafka_scram_hint(kafka_prop_fn get, void *arg, int rdkafka_version)
{
    const char *mkey;
    const char *mech = sasl_mechanism(get, arg, &mkey);
    if (!mech || strncasecmp(mech, "SCRAM-", 6) != 0 || rdkafka_version >= SCRAM_NONCE_FIXED)
        return NULL;
    return "librdkafka before 2.6.1 cannot authenticate by SCRAM to Kafka 4 brokers, which refuse "
           "its proof as invalid credentials; with Kafka 4, use librdkafka 2.6.1 or later (Debian "
           "13 has 2.8), or PLAIN over SASL_SSL, OAUTHBEARER or mutual TLS";
}
