/* sql_floor.c — finding the unsent rows of the relay's own table without an
 * index of them (schema/005), so that a mark is a HOT update.
 *
 * The floor is a pair (id, snapshot): every row that was unsent and visible in
 * the snapshot has an id at or above the floor id; a row that was not visible
 * then (its transaction was open, or began later) has an "xid" the snapshot
 * does not see as done: one of its open transactions, or one at or after its
 * xmax. A row made claimable again later (a requeue, or the end of the hold
 * of a dead row ahead of it) gets such an "xid" from `outbox-relay dead`
 * (sql_dead_init), in the statement that makes it claimable.
 * Such a pair stays true for ever, however old: an older pair only makes the
 * statements read more rows. So unsent rows are those at or above the floor
 * id (the primary key, in order) and those below it with such an "xid" (the
 * xid index; few, and usually none). A saved pair keeps only the snapshot's
 * xmin, which stands for "open then or later".
 *
 * Never an id cursor: a row whose transaction commits late, below rows
 * already relayed, is found by its transaction id. */
#include "core/sql_floor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sql.h"

#define UNSENT(a) a ".\"sent_at\" IS NULL AND " a ".\"dead_at\" IS NULL"

int sql_floor_table(const char *schema, const char *table, char *out, size_t len)
{
    char name[96];
    if (snprintf(name, sizeof name, "%s_floor", table) >= (int)sizeof name)
        return -EINVAL;
    return sql_quote_qualified(schema, name, out, len);
}

/* The floor a statement starts from, as SQL expressions into @p id and
 * @p xmax: the relay's own (parameters @p id_param and @p xmax_param) when it
 * passes one, else the saved one; with no saved one (deleted by hand), every
 * row: correct, only slower. NULL params: the saved floor only. */
static void floor_bounds(const char *fq, const char *id_param, const char *xmax_param, char *id,
                         char *xmax, size_t len)
{
    snprintf(id, len, "COALESCE(%s%s(SELECT f.\"floor_id\" FROM %s AS f), 0)",
             id_param ? id_param : "", id_param ? ", " : "", fq);
    snprintf(xmax, len, "COALESCE(%s%s(SELECT f.\"floor_xmin\" FROM %s AS f), '0'::xid8)",
             xmax_param ? xmax_param : "", xmax_param ? ", " : "", fq);
}
#define BOUND_MAX 512

/* The rows below the floor @p id of the transactions its snapshot did not
 * see as done: open then (@p xip, an xid8[] expression) or begun since (from
 * @p xmax), read through the xid index alone, which holds the id too, so
 * the rows of those transactions above the floor (all of a backlog written
 * since) are never read there. Two index scans, not one OR (the session has
 * no bitmap scans: build_session_check in sql.c); OFFSET 0 keeps the
 * caller's other conditions out of them (a generic plan would otherwise read
 * every row below the floor by the primary key); the range is bounded above
 * by the statement's own snapshot, as a later transaction is not visible to
 * it anyway and a bounded range is planned as the few rows it is. A derived
 * table of @p cols of "x", to be aliased by the caller. */
static int below_floor(char **out, const char *q, const char *cols, const char *id,
                       const char *xmax, const char *xip)
{
    return sql_build(out,
                     "(SELECT %s FROM %s AS x WHERE x.\"xid\" = ANY(%s) AND x.\"id\" < %s "
                     "UNION ALL SELECT %s FROM %s AS x WHERE x.\"xid\" >= %s "
                     "AND x.\"xid\" < pg_snapshot_xmax(pg_current_snapshot()) AND x.\"id\" < %s "
                     "OFFSET 0)",
                     cols, q, xip, id, cols, q, xmax, id);
}

int sql_floor_claim(char **out, const char *q, const char *fq, const char *columns,
                    const char *range, const char *hold)
{
    char id[BOUND_MAX], xmax[BOUND_MAX], *below = NULL;
    floor_bounds(fq, "$5::bigint", "$6::xid8", id, xmax, sizeof id);
    if (below_floor(&below, q, "x.*", id, xmax, "$7::xid8[]") < 0)
        return -ENOMEM;
    /* Two scans, each of at most $1 rows, merged: one OR would lose the
     * primary key's order and sort the whole backlog. The snapshot is the
     * next claim's floor. */
    int rc = sql_build(out,
                       "SELECT %s, s.snapshot FROM ("
                       "(SELECT o.* FROM %s AS o WHERE o.\"id\" >= %s AND " UNSENT("o") " AND %s%s "
                       "ORDER BY o.\"id\" LIMIT $1) UNION ALL "
                       "(SELECT o.* FROM %s AS o WHERE " UNSENT("o") " AND %s%s "
                       "ORDER BY o.\"id\" LIMIT $1)"
                       ") AS o, (SELECT pg_current_snapshot()::text AS snapshot) AS s "
                       "ORDER BY o.\"id\" LIMIT $1",
                       columns, q, id, range, hold, below, range, hold);
    free(below);
    return rc;
}

int sql_floor_backlog(char **out, const char *q, const char *fq)
{
    char id[BOUND_MAX], xmax[BOUND_MAX], *below = NULL;
    floor_bounds(fq, "$1::bigint", "$2::xid8", id, xmax, sizeof id);
    if (below_floor(&below, q, "x.\"id\", x.\"sent_at\", x.\"dead_at\"", id, xmax,
                    "COALESCE($3::xid8[], '{}')") < 0)
        return -ENOMEM;
    /* The relay's floor is saved on the way ($4, its snapshot's xmin), so a
     * relay that starts again, a standby and `status` start from it. */
    int rc = sql_build(out,
                       "WITH saved AS (UPDATE %s SET \"floor_id\" = $1::bigint, "
                       "\"floor_xmin\" = $4::xid8, \"saved_at\" = clock_timestamp() "
                       "WHERE $1::bigint IS NOT NULL AND $4::xid8 IS NOT NULL RETURNING 1), "
                       "u AS (SELECT count(*) AS n, min(p.\"id\") AS first FROM "
                       "(SELECT o.\"id\" FROM %s AS o WHERE o.\"id\" >= %s AND " UNSENT("o")
                       " UNION ALL SELECT o.\"id\" FROM %s AS o WHERE " UNSENT("o") ") AS p) "
                       "SELECT u.n, COALESCE((SELECT extract(epoch FROM clock_timestamp() - "
                       "o.\"created_at\")::float8 FROM %s AS o WHERE o.\"id\" = u.first), 0), "
                       "(SELECT count(*) FROM %s AS d WHERE d.\"dead_at\" IS NOT NULL "
                       "AND d.\"sent_at\" IS NULL) FROM u",
                       fq, q, id, below, q, q);
    free(below);
    return rc;
}

int sql_floor_oldest(char **out, const char *q, const char *fq)
{
    char id[BOUND_MAX], xmax[BOUND_MAX], *below = NULL;
    floor_bounds(fq, NULL, NULL, id, xmax, sizeof id);
    if (below_floor(&below, q, "x.\"id\", x.\"created_at\", x.\"sent_at\", x.\"dead_at\"", id,
                    xmax, "'{}'::xid8[]") < 0)
        return -ENOMEM;
    int rc = sql_build(out,
                       "(SELECT extract(epoch FROM clock_timestamp() - p.\"created_at\")::float8 "
                       "FROM ((SELECT o.\"id\", o.\"created_at\" FROM %s AS o WHERE o.\"id\" >= %s "
                       "AND " UNSENT("o") " ORDER BY o.\"id\" LIMIT 1) UNION ALL "
                       "(SELECT o.\"id\", o.\"created_at\" FROM %s AS o WHERE " UNSENT("o")
                       " ORDER BY o.\"id\" LIMIT 1)) AS p ORDER BY p.\"id\" LIMIT 1)",
                       q, id, below);
    free(below);
    return rc;
}

int sql_floor_retention(char **out, const char *q)
{
    /* A row is sent after it is created: the creation index bounds the rows
     * old enough, in small batches, each DELETE holding its locks briefly. */
    return sql_build(out,
                     "DELETE FROM %s WHERE \"id\" IN (SELECT \"id\" FROM %s "
                     "WHERE \"created_at\" < clock_timestamp() - make_interval(secs => $1::bigint) "
                     "AND \"sent_at\" < clock_timestamp() - make_interval(secs => $1::bigint) "
                     "ORDER BY \"created_at\" LIMIT $2::int)",
                     q, q);
}

int sql_floor_parse(const char *snapshot, struct sql_floor_snap *s)
{
    unsigned long long xmin, xmax;
    int used = 0;
    if (!snapshot || sscanf(snapshot, "%llu:%llu:%n", &xmin, &xmax, &used) != 2 || used == 0)
        return -EINVAL;
    const char *xip = snapshot + used;
    size_t n = strlen(xip);
    if (n + 3 > sizeof s->xip || strspn(xip, "0123456789,") != n)
        return -ENOSPC; /* too many open transactions to pass: keep the older floor */
    snprintf(s->xmin, sizeof s->xmin, "%llu", xmin);
    snprintf(s->xmax, sizeof s->xmax, "%llu", xmax);
    snprintf(s->xip, sizeof s->xip, "{%s}", xip);
    return 0;
}

/* A batch marks the rows of a page in one statement: each needs room for its
 * second version on the same page (schema/005 sets the same). */
#define FILL_MARKED 45
#define FILL_UNMARKED 100
#define QUALIFIED_LEN 300

char *sql_floor_fill_pages(const char *schema, const char *table, bool marked)
{
    char q[QUALIFIED_LEN];
    char *out;
    if (!sql_ident_valid(table) || sql_quote_qualified(schema, table, q, sizeof q) < 0 ||
        asprintf(&out, "ALTER TABLE %s SET (fillfactor = %d)", q,
                 marked ? FILL_MARKED : FILL_UNMARKED) < 0)
        return NULL;
    return out;
}

char *sql_floor_drop_claim_index(const char *schema, const char *table)
{
    char name[96], idx[QUALIFIED_LEN];
    if (snprintf(name, sizeof name, "%s_xid_idx", table) >= (int)sizeof name ||
        sql_quote_qualified(schema, name, idx, sizeof idx) < 0)
        return NULL;
    char *fill = sql_floor_fill_pages(schema, table, false);
    char *out = NULL;
    if (fill && asprintf(&out, "DROP INDEX IF EXISTS %s; %s", idx, fill) < 0)
        out = NULL;
    free(fill);
    return out;
}
