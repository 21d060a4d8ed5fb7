/* sql_floor.h — the statements that find the unsent rows of the relay's own
 * table from its floor (schema/005), not from an index of unsent rows. */
#ifndef OUTBOX_SQL_FLOOR_H
#define OUTBOX_SQL_FLOOR_H

#include <stdbool.h>
#include <stddef.h>

/** A claim's snapshot, as the next claim passes it: xmin and xmax as
 *  decimal text, the open transactions as an xid8[] literal. */
struct sql_floor_snap {
    char xmin[24];
    char xmax[24];
    char xip[4096];
};

/** The quoted, qualified name of the table that holds the saved floor. */
int sql_floor_table(const char *schema, const char *table, char *out, size_t len);

/** The claim: the claim's @p columns of the rows "o", then the snapshot as
 *  text. $1 limit, $2..$4 the range in flight and its gaps (@p range, a
 *  condition on "o"), $5 floor id, $6 the floor snapshot's xmax, $7 its open
 *  transactions (xid8[]); $5 and $6 NULL: the saved floor. @p hold: " AND …"
 *  or "". */
#define SQL_FLOOR_CLAIM_NPARAMS 7
int sql_floor_claim(char **out, const char *q, const char *fq, const char *columns,
                    const char *range, const char *hold);

/** The backlog: unsent rows, the oldest one's age in seconds, dead rows.
 *  $1 floor id, $2 its snapshot's xmax, $3 open transactions, $4 its xmin
 *  (the claim's order, then what is saved); all NULL: the saved floor. With
 *  $1 and $4, saves them as the floor. */
int sql_floor_backlog(char **out, const char *q, const char *fq);

/** A scalar subquery: the age in seconds of the oldest unsent row, by the
 *  saved floor (NULL when none). */
int sql_floor_oldest(char **out, const char *q, const char *fq);

/** Retention: $1 seconds, $2 limit; sent rows older than that, oldest first. */
int sql_floor_retention(char **out, const char *q);

/** How full the pages of the relay's own table are kept, as one statement:
 *  with @p marked (rows are marked when sent) room for a second version of
 *  every row, so that a mark is a HOT update; else full, as no row is ever
 *  updated. Applies to pages written from then on.
 *  @return the statement (caller frees), or NULL (an identifier not valid,
 *  or no memory). */
char *sql_floor_fill_pages(const char *schema, const char *table, bool marked);

/** Drops the index of the rows' transaction ids, which only the floor's
 *  claim reads (schema/005 makes it), and fills the pages full
 *  (sql_floor_fill_pages): for log-based capture, which marks no row.
 *  @return the statements (caller frees), or NULL. */
char *sql_floor_drop_claim_index(const char *schema, const char *table);

/** Parses pg_current_snapshot()'s text. @return 0, -EINVAL, or -ENOSPC (too
 *  many open transactions to pass: the caller keeps its older floor). */
int sql_floor_parse(const char *snapshot, struct sql_floor_snap *s);

#endif
