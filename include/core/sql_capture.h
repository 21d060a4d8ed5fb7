/* sql_capture.h — the SQL of log-based capture (relay.capture = wal), every
 * identifier quoted, every value a parameter: the publication and the slot
 * migrate creates, the slot's status, its removal, the heartbeat and the
 * retention of rows the relay only reads. */
#ifndef OUTBOX_SQL_CAPTURE_H
#define OUTBOX_SQL_CAPTURE_H

#include <stdbool.h>
#include <stdint.h>

/** Columns of sql_capture.slot_status, one row, whether the slot exists or not. */
enum slot_col {
    SLOT_EXISTS = 0,      /* bool */
    SLOT_PLUGIN,          /* text, NULL when absent */
    SLOT_DATABASE_OK,     /* bool: the slot is this database's */
    SLOT_ACTIVE,          /* bool */
    SLOT_ACTIVE_PID,      /* int, NULL */
    SLOT_WAL_STATUS,      /* text: reserved, extended, unreserved, lost; NULL */
    SLOT_CONFIRMED_LSN,   /* pg_lsn as text, NULL */
    SLOT_RESTART_LSN,     /* pg_lsn as text, NULL */
    SLOT_RETAINED_BYTES,  /* bigint: current WAL LSN - restart_lsn, NULL */
    SLOT_LAG_BYTES,       /* bigint: current WAL LSN - confirmed_flush_lsn, NULL */
    SLOT_PUBLICATION_OK,  /* bool: the publication exists and publishes the outbox table's
                             inserts (pg_publication_tables, pg_publication.pubinsert) */
    SLOT_WALFILE,         /* text: the WAL file of the current position (its timeline first),
                             NULL in recovery */
    SLOT_NCOLS
};

struct sql_capture {
    char *slot_status;        /* $1 slot name, $2 publication name: one row of enum slot_col */
    char *create_publication; /* idempotent: a DO block; no parameter */
    char *create_slot;        /* $1 slot name: creates it with pgoutput unless it exists;
                                 returns one row: created (bool) */
    char *create_failover_slot; /* the same, with failover => true (PostgreSQL 17+) */
    char *failover_state;     /* $1 slot name: one row of enum failover_col */
    char *drop_slot;          /* $1 slot name: pg_drop_replication_slot, one row (bool dropped) */
    char *take_over;          /* $1 slot name: ends the walsender of another session reading
                                 the slot; rows: pid, application_name, terminated */
    char *record_dead;        /* an event that can never be produced, kept as a dead row: $1
                                 event_id (uuid), $2 aggregate_type, $3 aggregate_id, $4
                                 event_type, $5 topic, $6 payload (json text), $7 headers (json
                                 text), $8 created_at, $9 last_error; the row of that event_id
                                 if it still exists, else a copy (with dead_at set: not relayed) */
    char *heartbeat;          /* $1 prefix: a transactional logical message, empty content */
    char *retention;          /* $1 created_at bound (timestamptz text), $2 limit: deletes at most
                                 $2 rows created before $1 */
    char *requirements;       /* no parameter: one row of enum capture_req_col */
    char *publication_state;  /* no parameter: one row: the publication exists (bool), it
                                 publishes the outbox table (bool), it publishes inserts (bool) */
};

/** Columns of sql_capture.requirements: what creating and streaming a slot need. */
enum capture_req_col {
    REQ_WAL_LEVEL = 0,    /* text: must be logical */
    REQ_ROLE,             /* text: current_user */
    REQ_SUPERUSER,        /* bool */
    REQ_REPLICATION,      /* bool: the role has REPLICATION */
    REQ_NCOLS
};

/** Columns of sql_capture.failover_state: what a failover slot needs of the primary. */
enum failover_col {
    FO_SERVER_VERSION = 0, /* int: server_version_num */
    FO_STANDBY_SLOTS,      /* text: synchronized_standby_slots, "" when unset or unknown (< 17) */
    FO_SLOT_FAILOVER,      /* bool: the slot is a failover slot; NULL when absent or < 17 */
    FO_STANDBY_MISSING,    /* text: names in synchronized_standby_slots that are no physical
                              slot here, comma-separated; NULL when none */
    FO_STANDBY_INACTIVE,   /* text: those that exist but no standby streams from; NULL */
    FO_NCOLS
};

/** The parameters of sql_capture.record_dead. */
#define SQL_CAPTURE_DEAD_NPARAMS 9

struct event_row;

/** Fills @p params, in the order of sql_capture.record_dead, with copies of
 *  what is known of an event that can never be produced: @p row (NULL for a
 *  logical message that is not one), its @p event_id and @p why.
 *  @return 0, or -ENOMEM with nothing left allocated. */
int sql_capture_dead_params(char *params[SQL_CAPTURE_DEAD_NPARAMS], const struct event_row *row,
                            const char *event_id, const char *why);

/** Frees what sql_capture_dead_params allocated; every entry becomes NULL. */
void sql_capture_dead_params_free(char *params[SQL_CAPTURE_DEAD_NPARAMS]);

/** The prefix of the relay's heartbeat messages (never relayed). */
#define SQL_CAPTURE_HEARTBEAT_PREFIX "outbox-relay-heartbeat"

/** Builds the statements for the table @p schema.@p table and @p publication.
 *  @return 0, -EINVAL (an identifier that is not plain), -ENOMEM. */
int sql_capture_init(struct sql_capture *s, const char *schema, const char *table,
                     const char *publication);

/** @return true if @p name is a replication slot name PostgreSQL accepts:
 *  [a-z0-9_], 1 to 63 bytes. */
int sql_capture_slot_valid(const char *name);

/** The START_REPLICATION command that streams slot @p slot from @p lsn with
 *  pgoutput, publication @p publication and logical messages; the slot is a
 *  quoted identifier, the publication a quoted identifier inside the option's
 *  literal. A start LSN past the slot's skips what the relay knows Kafka
 *  holds but could not confirm before a stream broke. @return a newly
 *  allocated command, or NULL (a name that is not valid, no memory). */
char *sql_capture_start_replication(const char *slot, const char *publication, uint64_t lsn);

/** The replication command (a replication=database connection) that makes
 *  slot @p slot with pgoutput and exports the snapshot it was made in, for a
 *  server of @p server_version (server_version_num, 14 on), a failover slot
 *  when @p failover. Its row's snapshot_name column names the snapshot; the
 *  connection must then run nothing until another session has imported it.
 *  @return a newly allocated command, or NULL (a name that is not valid,
 *  @p failover before PostgreSQL 17, no memory). */
char *sql_capture_create_slot_export(const char *slot, int server_version, bool failover);

/** The capture part of `migrate --print-sql`: the publication's DO block, then
 *  the slot's creation with @p slot written as a literal (its own statement),
 *  a failover slot when @p failover. @return a newly allocated script, or NULL
 *  (slot name not valid, no memory). */
char *sql_capture_script(const struct sql_capture *s, const char *slot, bool failover);

void sql_capture_free(struct sql_capture *s);

/** The columns of table $1 (text, "schema"."table" quoted): rows of its
 *  column's name and its type's name (typname), none when it does not exist. */
extern const char sql_table_columns[];

#endif
