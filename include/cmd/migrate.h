/* migrate.h — applying the versioned schema/ migrations to one outbox table.
 *
 * Each migration runs once, in its own transaction, under a transaction-level
 * advisory lock, and is recorded in "<schema>"."outbox_relay_migrations";
 * running migrate twice, or twice at once, ends in the same state. */
#ifndef OUTBOX_MIGRATE_H
#define OUTBOX_MIGRATE_H

#include <stdio.h>

#include "config/config.h"

struct migration {
    int version;
    const char *name;
    const char *sql;   /* template, see sql_render_template() */
};

extern const struct migration migrations[];
extern const unsigned n_migrations;

/** The newest schema version this binary knows (its last migration's). */
int migrate_known_version(void);

/** The consumer's event ledger (schema/ledger_*.sql): {{table}} is its name. */
extern const struct migration ledger_migrations[];
extern const unsigned n_ledger_migrations;

/** schema/objects.sql: a template (like the migrations) of a query returning
 *  one row naming each object the migrations should have left and that is
 *  missing. */
extern const char migration_objects_check[];

/** schema/debezium_poll.sql: what relay.capture = poll adds to Debezium's
 *  table (relay.profile = debezium), a template with {{source}} (the table)
 *  and {{table}} (the view over it, sql_debezium.h). */
extern const char migration_debezium_poll[];

/** Connects (blocking), applies the pending migrations, then checks that the
 *  objects they create exist and, when some are missing although recorded,
 *  applies every migration again (logged); what is still missing fails.
 *  With relay.capture = wal it first checks wal_level and the role's
 *  REPLICATION, and last creates the publication and the slot unless they
 *  exist (migrate_int.h).
 *  @return 0, -EHOSTUNREACH when PostgreSQL cannot be reached, or -EIO when a
 *  migration failed (logged). */
int migrate_run(const struct relay_config *cfg);

/** Applies the ledger migrations to the ledger table @p name in relay.schema,
 *  the same way (each once, recorded as "<schema>.<name> (ledger)").
 *  @return as migrate_run(); -EINVAL when @p name is not a plain identifier. */
int migrate_ledger(const struct relay_config *cfg, const char *name);

/** Writes every migration, rendered for the configured table (or, with
 *  @p ledger, for that ledger), to @p out as one SQL script, without
 *  connecting; with relay.capture = wal (and no ledger) the publication and
 *  the slot too. @return 0 or -EINVAL. */
int migrate_print_sql(const struct relay_config *cfg, const char *ledger, FILE *out);

/** Prints the command's usage (`migrate --help`) to @p out. */
void migrate_usage(FILE *out);

/** The command: `migrate [--ledger NAME] [--print-sql]`, @p argv its words.
 *  @return a process exit status (0, 64, 69, 70). */
int migrate_main(const struct relay_config *cfg, int argc, char **argv);

#endif
