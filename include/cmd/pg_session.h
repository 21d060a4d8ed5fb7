/* pg_session.h — the one blocking PostgreSQL connection of a command. */
#ifndef OUTBOX_PG_SESSION_H
#define OUTBOX_PG_SESSION_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"

/** Connects to postgres.conninfo of @p cfg and waits for the outcome. The
 *  session is named "outbox-relay @p command" in pg_stat_activity unless
 *  the conninfo sets application_name. A conninfo libpq cannot parse fails
 *  with libpq's syntax error, as the relay's own connection does.
 *  @return the connection, or NULL: then "cannot connect to postgres" and
 *  libpq's message, the conninfo's secrets redacted, are written to @p err
 *  when it is not NULL, otherwise logged as an error. */
PGconn *pg_session_open(const struct relay_config *cfg, const char *command, char *err,
                        size_t errlen);

/** pg_session_open with replication=database: a walsender that takes
 *  replication commands (CREATE_REPLICATION_SLOT) besides simple queries. */
PGconn *pg_session_open_replication(const struct relay_config *cfg, const char *command,
                                    char *err, size_t errlen);

#endif
