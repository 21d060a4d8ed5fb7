/* sql.h — every SQL statement the relay sends, in one place, built from
 * validated and quoted identifiers. */
#ifndef OUTBOX_SQL_H
#define OUTBOX_SQL_H

#include <stddef.h>

/** @return true if @p name is a plain identifier we accept from config:
 *  [A-Za-z_][A-Za-z0-9_]*, 1..48 bytes (room for the suffixes the schema adds). */
int sql_ident_valid(const char *name);

/** Writes @p name as a double-quoted SQL identifier ("a""b") into @p out.
 *  @return the length written, or -ENOSPC if @p outlen is too small. */
int sql_quote_ident(const char *name, char *out, size_t outlen);

/** "schema"."name", each quoted (@p name may be longer than a configured
 *  identifier: a derived one, up to PostgreSQL's 63 bytes).
 *  @return the length written, -EINVAL or -ENOSPC. */
int sql_quote_qualified(const char *schema, const char *name, char *out, size_t len);

/** Writes @p s as a single-quoted SQL literal ('it''s') into @p out.
 *  @return the length written, or -ENOSPC. */
int sql_quote_literal(const char *s, char *out, size_t outlen);

/** The relay's statements for one outbox table (all text, all identifiers quoted). */
struct sql_statements {
    char *claim;        /* $1 = limit, $2..$3 = an id range to skip (the batches in flight;
                           empty when $2 > $3), $4 = bigint[] of the range's ids no batch
                           holds (NULL: unknown): oldest unsent, not dead rows in id order
                           (with SQL_HOLD_AGGREGATE: none behind a dead row of their
                           aggregate); none above the range while $4 is NULL */
    int claim_nparams;  /* how many parameters the claim takes: 4, 7 with SQL_FLOOR */
    char *mark_sent;    /* $1 = bigint[] of ids: conditional UPDATE … AND sent_at IS NULL
                           (with SQL_DELETE_SENT: conditional DELETE) */
    char *record_failures; /* $1 = bigint[] ids, $2 = text[] errors, $3 = int[] max attempts,
                           $4 = bool may dead-letter: attempts+1, last_error; dead_at once a
                           row reaches its max. Returns id, attempts, dead. */
    char *listen;       /* LISTEN on the notify channel */
    char *retention;    /* $1 = seconds, $2 = limit: delete that many sent rows older than it */
    char *backlog;      /* unsent rows, age of the oldest in seconds, dead rows */
};

/** Options of sql_statements_init(). */
#define SQL_HOLD_AGGREGATE 0x1u  /* claim skips rows behind a dead row of their aggregate */
#define SQL_DELETE_SENT    0x2u  /* acknowledged rows are deleted, not marked */
/* The relay's own table, polled (schema/005): unsent rows are found from the
 * relay's floor (sql_floor.h), not an index of them. The claim then takes
 * $5..$7 and returns the snapshot after its columns (CLAIM_SNAPSHOT); the
 * backlog takes $1..$4. */
#define SQL_FLOOR          0x4u
/* The claim reads @p n columns placed_1..placed_n after its own (at most 8):
 * relay.additional_placement through the view over Debezium's table. */
#define SQL_PLACED(n)      ((unsigned)(n) << 8)
#define SQL_PLACED_OF(f)   (((f) >> 8) & 0xfu)

/** Column order of the claim result, which is read in binary format
 *  (pg_binary.h): bigint, uuid, text ×6, timestamptz. */
enum sql_claim_col {
    CLAIM_ID = 0, CLAIM_EVENT_ID, CLAIM_AGGREGATE_TYPE, CLAIM_AGGREGATE_ID, CLAIM_EVENT_TYPE,
    CLAIM_TOPIC, CLAIM_PAYLOAD, CLAIM_HEADERS, CLAIM_CREATED_AT, CLAIM_NCOLS,
    CLAIM_SNAPSHOT = CLAIM_NCOLS /* SQL_FLOOR: pg_current_snapshot() as text */
};

/** Builds the statements. @return 0 or -ENOMEM / -EINVAL (identifier not valid). */
int sql_statements_init(struct sql_statements *s, const char *schema, const char *table,
                        const char *channel, unsigned flags);
void sql_statements_free(struct sql_statements *s);

/** Replaces the placeholders of a schema/ migration template:
 *  {{schema}} {{table}} → quoted identifiers; {{table:SUFFIX}} → quoted identifier
 *  "<table>_SUFFIX"; {{channel}} → quoted literal.
 *  @return a newly allocated string, or NULL (unknown placeholder or no memory). */
char *sql_render_template(const char *tmpl, const char *schema, const char *table,
                          const char *channel);

/** sql_render_template() with {{source}} as well: the quoted identifier
 *  @p source, the table that {{table}} (a view) reads. */
char *sql_render_template_on(const char *tmpl, const char *schema, const char *table,
                             const char *source, const char *channel);

/** The statements that check the relay's database session and elect the
 *  leader. A session-level advisory lock elects the leader, and only works
 *  when the connection is a session of its own: through a pooler in
 *  transaction or statement mode every statement may run in another server
 *  session, shared with other clients. So each statement that takes or relies
 *  on the lock also says which backend answered and whether the marker this
 *  relay set at connect ($1 = its token) is still there. */
struct sql_session {
    char *check;        /* $1 = token, $2 = bool: turn row_security off (queries that a policy
                           would filter fail instead). Sets the marker; returns the columns of
                           enum sql_session_col */
    char *lock;         /* $1 = token: backend pid, marker ours, lock already held by this
                           backend before asking, lock taken (never taken by a backend that
                           already held it or lacks the marker) */
    char *verify;       /* $1 = token: backend pid, marker ours, lock held by this backend */
    char *release;      /* $1 = backend pid: unlocks when that backend answers and holds it */
    char *holder;       /* who holds the lock: columns of enum sql_holder_col; no row if nobody */
    char *version;      /* $1 = "schema.table": the newest migration recorded for it (0: none);
                           only once the check saw the bookkeeping table */
    /* The quiet lock: held by the leader while it claims one batch after
     * another, so that the table's trigger sends no NOTIFY (schema/004). */
    char *quiet_on;     /* true when taken */
    char *quiet_off;    /* releases it: true when it was held */
    char *quiet_check;  /* true when no transaction that left its NOTIFY out is still open */
};

/** Column order of sql_session.check. */
enum sql_session_col {
    SESSION_PID = 0, SESSION_MARKER, SESSION_ROW_SECURITY_GUC,
    SESSION_TABLE_EXISTS,     /* to_regclass found the table */
    SESSION_RLS_ACTIVE,       /* row_security_active(): policies filter what this role sees */
    SESSION_RELROWSECURITY, SESSION_RELFORCEROWSECURITY, SESSION_ROLBYPASSRLS, SESSION_ROLSUPER,
    SESSION_OWNER,            /* the role has the privileges of the table's owner */
    SESSION_USER,
    SESSION_LEDGER_EXISTS,    /* the schema's "outbox_relay_migrations" exists */
    SESSION_LEDGER_READABLE,  /* and this role may read it */
    SESSION_SYSTEM_ID,        /* pg_control_system().system_identifier, as text */
    SESSION_WALFILE,          /* the current WAL file's name (its timeline); NULL in recovery */
    SESSION_NCOLS
};

/** Column order of sql_session.holder: one row; the holder's columns NULL when
 *  nobody holds the lock (or pg_stat_activity hides them). */
enum sql_holder_col {
    HOLDER_PID = 0, HOLDER_APPLICATION_NAME, HOLDER_CLIENT_ADDR,
    HOLDER_BACKEND_START,     /* unix seconds */
    HOLDER_STATE,             /* active, idle, idle in transaction, … */
    HOLDER_IDLE_SECONDS,      /* since its last state change, by the server's clock */
    HOLDER_OLDEST_AGE,        /* seconds the oldest waiting row has waited; NULL: none waits */
    HOLDER_PROGRESS,          /* the table's updated + deleted rows (pg_stat_user_tables) */
    HOLDER_NCOLS
};

/** @p table is what the relay claims from, @p source the table whose
 *  statistics show the leader's progress (the same, or the table under the
 *  view over Debezium's table); @p flags: SQL_FLOOR or 0.
 *  @return 0, -EINVAL (an identifier not valid) or -ENOMEM. */
int sql_session_init(struct sql_session *q, const char *schema, const char *table,
                     const char *source, unsigned flags);
void sql_session_free(struct sql_session *q);

/** Bookkeeping statements of `migrate` for one schema. */
struct sql_migrate {
    char *lock;          /* pg_advisory_xact_lock shared by every migrate of every table */
    char *create_schema; /* CREATE SCHEMA IF NOT EXISTS */
    char *create_table;  /* CREATE TABLE IF NOT EXISTS "<schema>"."outbox_relay_migrations" */
    char *applied;       /* $1 = "schema.table", $2 = version: a row if applied */
    char *newest;        /* $1 = "schema.table": the highest version recorded (0: none) */
    char *record;        /* $1 = "schema.table", $2 = version, $3 = name */
};

/** @return 0, -EINVAL (schema not a valid identifier) or -ENOMEM. */
int sql_migrate_init(struct sql_migrate *q, const char *schema);
void sql_migrate_free(struct sql_migrate *q);

/** Statements of the `dead` operator command for one outbox table. They act on
 *  the rows that need an operator: not sent, and dead (dead_at set) or failing
 *  (attempts > 0: what on_poison=halt stops at). */
struct sql_dead {
    char *list;    /* those rows in id order, columns in enum sql_dead_col order */
    char *requeue; /* $1 = bigint[] ids, NULL = all of them: dead_at NULL, attempts 0
                      (last_error stays as history). Returns the ids changed. */
    char *drop;    /* $1 = bigint[] ids: deletes those of them that need an operator.
                      Returns the ids deleted. */
};

/** Column order of the `dead list` result. */
enum sql_dead_col {
    DEAD_ID = 0, DEAD_EVENT_ID, DEAD_AGGREGATE_TYPE, DEAD_AGGREGATE_ID, DEAD_EVENT_TYPE,
    DEAD_STATUS,      /* 'dead' or 'failing' */
    DEAD_ATTEMPTS,
    DEAD_DEAD_AT,     /* RFC 3339 UTC; NULL when failing */
    DEAD_LAST_ERROR,  /* may be NULL */
    DEAD_WAITING,     /* later rows of the same aggregate, neither sent nor dead */
    DEAD_NCOLS
};

/** @return 0, -EINVAL (schema or table not a valid identifier) or -ENOMEM. */
/** @p flags: SQL_FLOOR (the relay's own table) or 0. */
int sql_dead_init(struct sql_dead *q, const char *schema, const char *table, unsigned flags);
void sql_dead_free(struct sql_dead *q);

/** Read-only statements of `verify` and `replay` for one outbox table. Every
 *  window parameter may be NULL (open): $1 first id, $2 last id (inclusive),
 *  $3 created_at from (inclusive), $4 created_at until (exclusive), all text. */
struct sql_window {
    char *bounds;   /* count(*), min(id), max(id) of the window; then $3 and $4 as epoch ms
                       (NULL when open) */
    char *rows;     /* the window's rows with id > $5, in id order, LIMIT $6; columns in
                       enum sql_claim_col order, then ROWS_SENT, ROWS_DEAD */
    char *replay;   /* as rows, and $7 aggregate_type, $8 aggregate_id, $9 event_type
                       (each NULL = any): rows to replay, sent or not (ROWS_SENT tells) */
};

/** Columns after the claim's in the rows and replay results (booleans). */
enum sql_rows_col { ROWS_SENT = CLAIM_NCOLS, ROWS_DEAD, ROWS_NCOLS };

/** vasprintf into *@p dst, NULL on failure. @return 0 or -ENOMEM. The SQL
 *  files build every statement with it. */
int sql_build(char **dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** @p n_placed columns placed_1.. follow the others, as in the claim
 *  (SQL_PLACED). @return 0, -EINVAL (schema or table not a valid identifier)
 *  or -ENOMEM. */
int sql_window_init(struct sql_window *q, const char *schema, const char *table,
                    size_t n_placed);
void sql_window_free(struct sql_window *q);

/* The session probe before relaying (io/pool_probe.c): a session-level
 * setting and the backend that answers, set by one connection and read by
 * another; only a shared server session shows one connection's value to the other. */
#define SQL_POOL_PROBE_SET                                                        \
    "SELECT pg_backend_pid(), set_config('outbox_relay.pool_probe', $1, false)"
#define SQL_POOL_PROBE_READ                                                       \
    "SELECT pg_backend_pid(), current_setting('outbox_relay.pool_probe', true)"
/* Statement pooling refuses a transaction block; nothing runs inside it. */
#define SQL_POOL_PROBE_BEGIN "BEGIN"
#define SQL_POOL_PROBE_ROLLBACK "ROLLBACK"

#endif
