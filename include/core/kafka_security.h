/* kafka_security.h — the combinations of Kafka security properties that
 * cannot work, decided from the [kafka] section's text alone: a SASL
 * protocol without a mechanism, a mechanism librdkafka does not have or
 * without its credentials, a client key without its certificate. Reading
 * the files they name is the configuration's part (config_validate). */
#ifndef OUTBOX_KAFKA_SECURITY_H
#define OUTBOX_KAFKA_SECURITY_H

#include <stddef.h>

#include "core/kafka_rules.h"

/** Looks a [kafka] property up. @return its value, or NULL when unset. */
typedef const char *(*kafka_prop_fn)(const char *key, void *arg);

/** Checks the security properties of one [kafka] section, read through
 *  @p get. @return 0, or -EINVAL with @p errbuf naming the key at fault
 *  (as kafka.KEY) and what it needs; never a secret's value. */
int kafka_check_security(kafka_prop_fn get, void *arg, char *errbuf, size_t errlen);

/** What to check for a TLS failure librdkafka reports with OpenSSL's
 *  @p reason (a connection's error string): OpenSSL names the symptom, not
 *  the setting, and a host name the brokers' certificate lacks reads as an
 *  unknown CA. @return the keys to look at, or NULL when @p reason is no TLS
 *  failure the relay knows. */
const char *kafka_tls_hint(const char *reason);

/** The right an error event (@p err, an rd_kafka_resp_err_t, with its
 *  @p reason) says the brokers refuse: kafka_denial_of, and a TLS failure
 *  kafka_tls_hint knows, whatever its code. */
enum kafka_denial kafka_denial_of_event(int err, const char *reason);

/** What else to check when SCRAM credentials are refused: librdkafka older
 *  than 2.6.1 (@p rdkafka_version, as rd_kafka_version() gives it) cannot do
 *  SCRAM with Kafka 4 brokers. @return the advice, or NULL when the
 *  mechanism read through @p get is not SCRAM or the library has the fix. */
const char *kafka_scram_hint(kafka_prop_fn get, void *arg, int rdkafka_version);

/** The properties that name a file librdkafka reads at start (CA, client
 *  certificate and key, CRL, keystore, keytab); NULL-terminated. */
extern const char *const kafka_security_files[];

#endif
