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

int sql_floor_claim(char **out, const char *q, const char *fq, const char *columns,
                    const char *range, const char *hold)
{
    char id[512], xmax[512];
    snprintf(id, sizeof id, "COALESCE($5::bigint, (SELECT f.\"floor_id\" FROM %s AS f), 0)", fq);
    snprintf(xmax, sizeof xmax,
             "COALESCE($6::xid8, (SELECT f.\"floor_xmin\" FROM %s AS f), '0'::xid8)", fq);
    /* Two scans, each of at most $1 rows, merged: one OR would lose the
     * primary key's order and sort the whole backlog. The rows below the
     * floor of the transactions since its snapshot are read through the xid
     * index alone, which holds the id too: the rows of those transactions
     * above the floor (all of a backlog written since) are never read there.
     * Open transactions and later ones are two index scans, not one OR (the
     * session has no bitmap scans: build_session_check). OFFSET 0 keeps the
     * other conditions out of those scans (the statement's generic plan
     * would otherwise read every row below the floor by the primary key),
     * and the range is bounded above by the claim's own snapshot, as a later
     * transaction is not visible to it anyway and a bounded range is planned
     * as the few rows it is. The snapshot is the next claim's floor. */
    return sql_build(out,
                     "SELECT %s, s.snapshot FROM ("
                     "(SELECT o.* FROM %s AS o WHERE o.\"id\" >= %s AND " UNSENT("o") " AND %s%s "
                     "ORDER BY o.\"id\" LIMIT $1) UNION ALL "
                     "(SELECT o.* FROM (SELECT x.* FROM %s AS x WHERE x.\"xid\" = ANY($7::xid8[]) "
                     "AND x.\"id\" < %s UNION ALL SELECT x.* FROM %s AS x WHERE x.\"xid\" >= %s "
                     "AND x.\"xid\" < pg_snapshot_xmax(pg_current_snapshot()) AND x.\"id\" < %s "
                     "OFFSET 0) AS o WHERE " UNSENT("o") " AND %s%s ORDER BY o.\"id\" LIMIT $1)"
                     ") AS o, (SELECT pg_current_snapshot()::text AS snapshot) AS s "
                     "ORDER BY o.\"id\" LIMIT $1",
                     columns, q, id, range, hold, q, id, q, xmax, id, range, hold);
}

/* The unsent rows by the floor of @p id and @p xmax (SQL expressions), and
 * open transactions @p xip (an xid8[] expression), as a derived table of id
 * and created_at. */
static int unsent_rows(char **out, const char *q, const char *id, const char *xmax,
                       const char *xip)
{
    return sql_build(out,
                     "(SELECT o.\"id\", o.\"created_at\" FROM %s AS o WHERE o.\"id\" >= %s AND "
                     UNSENT("o") " UNION ALL SELECT o.\"id\", o.\"created_at\" FROM %s AS o "
                     "WHERE (o.\"xid\" = ANY(%s) OR o.\"xid\" >= %s) AND o.\"id\" < %s AND "
                     UNSENT("o") ")",
                     q, id, q, xip, xmax, id);
}

int sql_floor_backlog(char **out, const char *q, const char *fq)
{
    char id[512], xmax[512];
    snprintf(id, sizeof id, "COALESCE($1::bigint, (SELECT f.\"floor_id\" FROM %s AS f), 0)", fq);
    snprintf(xmax, sizeof xmax,
             "COALESCE($3::xid8, (SELECT f.\"floor_xmin\" FROM %s AS f), '0'::xid8)", fq);
    char *rows = NULL;
    if (unsent_rows(&rows, q, id, xmax, "COALESCE($4::xid8[], '{}')") < 0)
        return -ENOMEM;
    /* The relay's floor is saved on the way ($2, its snapshot's xmin), so a
     * relay that starts again, a standby and `status` start from it. */
    int rc = sql_build(out,
                       "WITH saved AS (UPDATE %s SET \"floor_id\" = $1::bigint, "
                       "\"floor_xmin\" = $2::xid8, \"saved_at\" = clock_timestamp() "
                       "WHERE $1::bigint IS NOT NULL AND $2::xid8 IS NOT NULL RETURNING 1), "
                       "u AS (SELECT count(*) AS n, min(p.\"id\") AS first FROM %s AS p) "
                       "SELECT u.n, COALESCE((SELECT extract(epoch FROM clock_timestamp() - "
                       "o.\"created_at\")::float8 FROM %s AS o WHERE o.\"id\" = u.first), 0), "
                       "(SELECT count(*) FROM %s AS d WHERE d.\"dead_at\" IS NOT NULL "
                       "AND d.\"sent_at\" IS NULL) FROM u",
                       fq, rows, q, q);
    free(rows);
    return rc;
}

int sql_floor_oldest(char **out, const char *q, const char *fq)
{
    char id[512], xmax[512];
    snprintf(id, sizeof id, "COALESCE((SELECT f.\"floor_id\" FROM %s AS f), 0)", fq);
    snprintf(xmax, sizeof xmax, "COALESCE((SELECT f.\"floor_xmin\" FROM %s AS f), '0'::xid8)",
             fq);
    return sql_build(out,
                     "(SELECT extract(epoch FROM clock_timestamp() - p.\"created_at\")::float8 "
                     "FROM ((SELECT o.\"id\", o.\"created_at\" FROM %s AS o WHERE o.\"id\" >= %s "
                     "AND " UNSENT("o") " ORDER BY o.\"id\" LIMIT 1) UNION ALL "
                     "(SELECT o.\"id\", o.\"created_at\" FROM %s AS o WHERE o.\"xid\" >= %s "
                     "AND o.\"id\" < %s AND " UNSENT("o") " ORDER BY o.\"id\" LIMIT 1)) AS p "
                     "ORDER BY p.\"id\" LIMIT 1)",
                     q, id, q, xmax, id);
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
