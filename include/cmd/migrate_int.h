/* migrate_int.h — private to migrate.c and migrate_capture.c: the part of
 * migrate that log-based capture (relay.capture = wal) adds. */
#ifndef OUTBOX_MIGRATE_INT_H
#define OUTBOX_MIGRATE_INT_H

#include <libpq-fe.h>
#include <stdio.h>

#include "config/config.h"

/** Runs @p sql (@p what names it in the log) in a transaction of its own
 *  under migrate's lock (@p lock_sql); a failed statement is logged and the
 *  transaction rolled back. @return 0 or -EIO. */
int migrate_locked(PGconn *conn, const char *lock_sql, const char *what, const char *sql);

/** Before any migration: wal_level is logical, and the role may create and
 *  stream a slot (REPLICATION or superuser). Says what to change when not.
 *  @return 0, or -EIO (logged). */
int migrate_capture_check(PGconn *conn, const struct relay_config *cfg);

/** After the migrations: creates the publication of the outbox table, then
 *  the slot, each unless it is there, and checks that the slot can serve
 *  (pgoutput, this database, not lost, the publication publishing the
 *  table's inserts). Logs what it did or that nothing was needed.
 *  @return 0, or -EIO (logged). */
int migrate_capture_apply(PGconn *conn, const struct relay_config *cfg, const char *lock_sql);

/** Writes the publication and the slot's statements, names rendered, to @p out.
 *  @return 0 or -EINVAL. */
int migrate_capture_print(const struct relay_config *cfg, FILE *out);

/** relay.capture = poll in the debezium profile: in one transaction (under
 *  @p lock_sql), adds the relay's columns, indexes and trigger to Debezium's
 *  table (schema/debezium_poll.sql) and makes the view over it; then logs
 *  the WAL position after which the relay owns the rows.
 *  @return 0, or -EIO (logged). */
int migrate_debezium_apply(PGconn *conn, const struct relay_config *cfg, const char *lock_sql);

/** The same statements, rendered, to @p out. @return 0 or -EINVAL. */
int migrate_debezium_print(const struct relay_config *cfg, FILE *out);

#endif
