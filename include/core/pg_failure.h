/* pg_failure.h — what an operator has to change when PostgreSQL refuses
 * the relay's connection for a reason libpq's message names only from its
 * own side: a certificate (the server's, or the client's as the server saw
 * it), the TLS the server demands, the role's password. Decided from the
 * message's text alone. */
#ifndef OUTBOX_PG_FAILURE_H
#define OUTBOX_PG_FAILURE_H

/** @return a one-line hint for a connection failure whose libpq message is
 *  @p msg, naming the conninfo keyword or server setting to change; NULL
 *  when the message is not one of these (a network error, say: libpq's own
 *  words say enough). */
const char *pg_failure_hint(const char *msg);

#endif
