/* migrate.h — applying the versioned schema/ migrations to one outbox table.
 *
 * Each migration runs once, in its own transaction, under a transaction-level
 * advisory lock, and is recorded in "<schema>"."outbox_relay_migrations";
 * running migrate twice, or twice at once, ends in the same state. */
#ifndef OUTBOX_MIGRATE_H
#define OUTBOX_MIGRATE_H

#include "config.h"

struct migration {
    int version;
    const char *name;
    const char *sql;   /* template, see sql_render_template() */
};

extern const struct migration migrations[];
extern const unsigned n_migrations;

/** schema/objects.sql: a template (like the migrations) of a query returning
 *  one row naming each object the migrations should have left and that is
 *  missing. */
extern const char migration_objects_check[];

/** Connects (blocking), applies the pending migrations, then checks that the
 *  objects they create exist and, when some are missing although recorded,
 *  applies every migration again (logged); what is still missing fails.
 *  @return 0, -EHOSTUNREACH when PostgreSQL cannot be reached, or -EIO when a
 *  migration failed (logged). */
int migrate_run(const struct relay_config *cfg);

#endif
