/* sql.c — the relay's SQL text: identifier checks, quoting, the migration
 * template renderer and the statements the relay runs. No SQL is built
 * anywhere else, and nothing here accepts an identifier it has not checked. */
#include "core/sql.h"
#include "core/sql_floor.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PostgreSQL truncates identifiers to NAMEDATALEN-1 bytes; a derived name
 * ("<table>_<suffix>") longer than that would silently collide. */
#define PG_IDENT_MAX 63
#define CONFIG_IDENT_MAX 48

static bool ident_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool ident_char(char c)
{
    return ident_start(c) || (c >= '0' && c <= '9');
}

int sql_ident_valid(const char *name)
{
    if (!name || !ident_start(name[0]))
        return 0;
    size_t n = 1;
    for (; name[n]; n++) {
        if (!ident_char(name[n]) || n >= CONFIG_IDENT_MAX)
            return 0;
    }
    return 1;
}

static int quote_with(char q, const char *s, char *out, size_t outlen)
{
    size_t need = 2;
    for (const char *p = s; *p; p++)
        need += (*p == q) ? 2 : 1;
    if (need + 1 > outlen)
        return -ENOSPC;

    char *o = out;
    *o++ = q;
    for (const char *p = s; *p; p++) {
        if (*p == q)
            *o++ = q;
        *o++ = *p;
    }
    *o++ = q;
    *o = '\0';
    return (int)(o - out);
}

int sql_quote_ident(const char *name, char *out, size_t outlen)
{
    if (!name)
        return -EINVAL;
    return quote_with('"', name, out, outlen);
}

/* Like PQescapeLiteral: a string with a backslash is written in the E'' form
 * with backslashes doubled, which means the same thing whether the server has
 * standard_conforming_strings on (the default since 9.1) or off. Without a
 * backslash the plain form is unambiguous under both settings. */
int sql_quote_literal(const char *s, char *out, size_t outlen)
{
    if (!s)
        return -EINVAL;
    if (!strchr(s, '\\'))
        return quote_with('\'', s, out, outlen);

    size_t need = 3;
    for (const char *p = s; *p; p++)
        need += (*p == '\'' || *p == '\\') ? 2 : 1;
    if (need + 1 > outlen)
        return -ENOSPC;

    char *o = out;
    *o++ = 'E';
    *o++ = '\'';
    for (const char *p = s; *p; p++) {
        if (*p == '\'' || *p == '\\')
            *o++ = *p;
        *o++ = *p;
    }
    *o++ = '\'';
    *o = '\0';
    return (int)(o - out);
}

static bool suffix_valid(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    return true;
}

/* The key of one of a table's advisory locks, a bigint SQL expression: the
 * relay's statements and the migrations' trigger must name the same lock. */
static void lock_key(const char *role, const char *schema, const char *table, char *out,
                     size_t len)
{
    /* Valid identifiers contain no quotes, so these cannot overflow. */
    char plain[2 * CONFIG_IDENT_MAX + 2], literal[2 * sizeof plain + 4];
    snprintf(plain, sizeof plain, "%s.%s", schema, table);
    sql_quote_literal(plain, literal, sizeof literal);
    snprintf(out, len, "hashtextextended('outbox-relay:%s:' || %s, 0)", role, literal);
}
#define LOCK_KEY_MAX (2 * (2 * CONFIG_IDENT_MAX + 2) + 4 + 80)

/* Writes the replacement of one {{name}} to @p out; false if the name is unknown. */
static bool render_placeholder(FILE *out, const char *name, size_t n, const char *schema,
                               const char *table, const char *source, const char *channel)
{
    char buf[2 * PG_IDENT_MAX + 4];
    char key[LOCK_KEY_MAX];

    if ((n == 10 && !memcmp(name, "lock:quiet", 10)) || (n == 9 && !memcmp(name, "lock:skip", 9))) {
        lock_key(n == 10 ? "quiet" : "skip", schema, table, key, sizeof key);
        return fputs(key, out) >= 0;
    }

    if (n == 6 && !memcmp(name, "schema", 6))
        return sql_quote_ident(schema, buf, sizeof buf) >= 0 && fputs(buf, out) >= 0;
    if (n == 5 && !memcmp(name, "table", 5))
        return sql_quote_ident(table, buf, sizeof buf) >= 0 && fputs(buf, out) >= 0;
    if (n == 6 && !memcmp(name, "source", 6))
        return sql_quote_ident(source, buf, sizeof buf) >= 0 && fputs(buf, out) >= 0;
    if (n == 7 && !memcmp(name, "channel", 7))
        return sql_quote_literal(channel, buf, sizeof buf) >= 0 && fputs(buf, out) >= 0;
    if (n > 6 && !memcmp(name, "table:", 6)) {
        const char *suffix = name + 6;
        size_t slen = n - 6;
        char ident[PG_IDENT_MAX + 1];
        if (!suffix_valid(suffix, slen) || strlen(table) + 1 + slen > PG_IDENT_MAX)
            return false;
        snprintf(ident, sizeof ident, "%s_%.*s", table, (int)slen, suffix);
        return sql_quote_ident(ident, buf, sizeof buf) >= 0 && fputs(buf, out) >= 0;
    }
    return false;
}

char *sql_render_template(const char *tmpl, const char *schema, const char *table,
                          const char *channel)
{
    return sql_render_template_on(tmpl, schema, table, table, channel);
}

char *sql_render_template_on(const char *tmpl, const char *schema, const char *table,
                             const char *source, const char *channel)
{
    if (!tmpl || !sql_ident_valid(schema) || !sql_ident_valid(table) ||
        !sql_ident_valid(source) || !sql_ident_valid(channel))
        return NULL;

    char *res = NULL;
    size_t reslen = 0;
    FILE *out = open_memstream(&res, &reslen);
    if (!out)
        return NULL;

    bool ok = true;
    const char *p = tmpl;
    while (ok) {
        const char *open = strstr(p, "{{");
        if (!open) {
            ok = fputs(p, out) >= 0;
            break;
        }
        const char *close = strstr(open + 2, "}}");
        if (!close) {
            ok = false;
            break;
        }
        ok = fwrite(p, 1, (size_t)(open - p), out) == (size_t)(open - p) &&
             render_placeholder(out, open + 2, (size_t)(close - open - 2), schema, table,
                                source, channel);
        p = close + 2;
    }

    if (fclose(out) != 0)
        ok = false;
    if (!ok) {
        free(res);
        return NULL;
    }
    return res;
}

/* asprintf into *dst; leaves *dst NULL on failure (asprintf leaves it undefined). */
int sql_build(char **dst, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vasprintf(dst, fmt, ap);
    va_end(ap);
    if (rc < 0) {
        *dst = NULL;
        return -ENOMEM;
    }
    return 0;
}

/* The highest migration recorded for $1 = "schema.table" (0: none), in the
 * bookkeeping table of @p qschema (quoted): read by migrate and by run. */
static int build_newest(char **dst, const char *qschema)
{
    return sql_build(dst,
                 "SELECT coalesce(max(\"version\"), 0) FROM %s.\"outbox_relay_migrations\" "
                 "WHERE \"table_name\" = $1",
                 qschema);
}

#define QUALIFIED_MAX (4 * CONFIG_IDENT_MAX + 10)
int sql_quote_qualified(const char *schema, const char *name, char *out, size_t len)
{
    char qschema[2 * PG_IDENT_MAX + 4], qname[2 * PG_IDENT_MAX + 4];
    if (!sql_ident_valid(schema) || sql_quote_ident(schema, qschema, sizeof qschema) < 0 ||
        sql_quote_ident(name, qname, sizeof qname) < 0)
        return -EINVAL;
    int n = snprintf(out, len, "%s.%s", qschema, qname);
    return n > 0 && (size_t)n < len ? n : -ENOSPC;
}

/* What a claim reads of a row, in the order of enum sql_claim_col, read in
 * binary format: the id, event_id and created_at as the server holds them
 * (pg_binary.c formats them; the server's own formatting of them, to_char()
 * above all, cost more than the rest of a claim), the text the message carries
 * as text (the JSON columns' text is the server's, as PostgreSQL prints it). */
#define CLAIM_COLUMNS                                                                              \
    "o.\"id\"::bigint, o.\"event_id\", o.\"aggregate_type\"::text, o.\"aggregate_id\"::text, "     \
    "o.\"event_type\"::text, o.\"topic\"::text, o.\"payload\"::text, o.\"headers\"::text, "         \
    "o.\"created_at\"::timestamptz"

/* The placed columns after the others: ", o.\"placed_1\", ..." (the view
 * over Debezium's table names them so; read in binary, by their types). */
static void placed_columns(size_t n, char *out, size_t len)
{
    out[0] = '\0';
    for (size_t k = 0; k < n; k++) {
        size_t used = strlen(out);
        snprintf(out + used, len - used, ", o.\"placed_%zu\"", k + 1);
    }
}
#define PLACED_COLUMNS_MAX (8 * 20)

/* The hot path: the claim and the mark (or delete) of what Kafka acknowledged. */
static int build_claim_and_mark(struct sql_statements *s, const char *schema, const char *table,
                                const char *q, unsigned flags)
{
    char placed[PLACED_COLUMNS_MAX];
    placed_columns(SQL_PLACED_OF(flags), placed, sizeof placed);
    /* Under hold_aggregate a dead row blocks the later rows of its aggregate
     * until an operator requeues or drops it; the dead-row index keeps the
     * anti-join cheap (dead rows are few). That index holds a hash of the
     * aggregate_id, not the text (schema/003), so the hash is compared too. */
    char holdbuf[640] = "";
    if (flags & SQL_HOLD_AGGREGATE)
        snprintf(holdbuf, sizeof holdbuf,
                 " AND NOT EXISTS (SELECT 1 FROM %s AS d WHERE d.\"dead_at\" IS NOT NULL"
                 " AND d.\"sent_at\" IS NULL"
                 " AND hashtextextended(d.\"aggregate_id\", 0) ="
                 " hashtextextended(o.\"aggregate_id\", 0)"
                 " AND d.\"aggregate_type\" = o.\"aggregate_type\""
                 " AND d.\"aggregate_id\" = o.\"aggregate_id\" AND d.\"id\" < o.\"id\")",
                 q);

    /* The batches in flight are skipped by their id range ($2..$3): their
     * rows are still unsent. A row inside the range that is in no batch
     * committed after their claims; its id is one of the range's gaps ($4,
     * the ids no batch holds), and it is claimed with the rows above the
     * range, in id order, so that no later row of its aggregate overtakes it.
     * With the gaps unknown ($4 NULL, too many to pass) nothing inside or
     * above the range is claimed until the batches are marked. */
#define IN_FLIGHT_SKIPPED                                                                          \
    "(o.\"id\" NOT BETWEEN $2::bigint AND $3::bigint OR o.\"id\" = ANY($4::bigint[])) "           \
    "AND (o.\"id\" < $2::bigint OR $4::bigint[] IS NOT NULL)"
    int rc;
    if (flags & SQL_FLOOR) {
        char fq[QUALIFIED_MAX + 8];
        if (sql_floor_table(schema, table, fq, sizeof fq) < 0)
            return -EINVAL;
        rc = sql_floor_claim(&s->claim, q, fq, CLAIM_COLUMNS, IN_FLIGHT_SKIPPED, holdbuf);
        s->claim_nparams = SQL_FLOOR_CLAIM_NPARAMS;
    } else {
        s->claim_nparams = 4;
        rc = sql_build(&s->claim,
                    "SELECT " CLAIM_COLUMNS "%s "
                    "FROM %s AS o WHERE o.\"sent_at\" IS NULL AND o.\"dead_at\" IS NULL "
                    "AND " IN_FLIGHT_SKIPPED "%s ORDER BY o.\"id\" LIMIT $1",
                    placed, q, holdbuf);
    }
    if (flags & SQL_DELETE_SENT)
        rc |= sql_build(&s->mark_sent,
                    "DELETE FROM %s WHERE \"id\" = ANY($1::bigint[]) AND \"sent_at\" IS NULL", q);
    else
        rc |= sql_build(&s->mark_sent,
                    "UPDATE %s SET \"sent_at\" = clock_timestamp() "
                    "WHERE \"id\" = ANY($1::bigint[]) AND \"sent_at\" IS NULL",
                    q);
    return rc;
}

int sql_statements_init(struct sql_statements *s, const char *schema, const char *table,
                        const char *channel, unsigned flags)
{
    memset(s, 0, sizeof *s);
    if (!sql_ident_valid(schema) || !sql_ident_valid(table) || !sql_ident_valid(channel) ||
        SQL_PLACED_OF(flags) > 8)
        return -EINVAL;

    char qchannel[2 * CONFIG_IDENT_MAX + 4], q[QUALIFIED_MAX];

    /* Valid identifiers contain no quotes, so these cannot overflow. */
    sql_quote_qualified(schema, table, q, sizeof q);
    sql_quote_ident(channel, qchannel, sizeof qchannel);

    int rc = build_claim_and_mark(s, schema, table, q, flags);
    rc |= sql_build(&s->record_failures,
                "UPDATE %s AS t SET \"attempts\" = t.\"attempts\" + 1, \"last_error\" = f.err, "
                "\"dead_at\" = CASE WHEN $4::bool AND t.\"attempts\" + 1 >= f.max "
                "THEN clock_timestamp() END "
                "FROM unnest($1::bigint[], $2::text[], $3::int[]) AS f(id, err, max) "
                "WHERE t.\"id\" = f.id AND t.\"sent_at\" IS NULL AND t.\"dead_at\" IS NULL "
                "RETURNING t.\"id\", t.\"attempts\", t.\"dead_at\" IS NOT NULL, "
                "t.\"attempts\" >= f.max",
                q);
    rc |= sql_build(&s->listen, "LISTEN %s", qchannel);
    if (flags & SQL_FLOOR) {
        char fq[QUALIFIED_MAX + 8];
        rc |= sql_floor_table(schema, table, fq, sizeof fq) < 0;
        rc |= sql_floor_retention(&s->retention, q);
        rc |= sql_floor_backlog(&s->backlog, q, fq);
        return rc ? (sql_statements_free(s), -ENOMEM) : 0;
    }
    /* Small batches through the sent-row index: each DELETE holds its row
     * locks briefly and never scans the table. */
    rc |= sql_build(&s->retention,
                "DELETE FROM %s WHERE \"id\" IN (SELECT \"id\" FROM %s "
                "WHERE \"sent_at\" < clock_timestamp() - make_interval(secs => $1::bigint) "
                "ORDER BY \"sent_at\" LIMIT $2::int)",
                q, q);
    /* Both counts ride on the partial indexes; the oldest row is the first
     * pending id. */
    rc |= sql_build(&s->backlog,
                "SELECT (SELECT count(*) FROM %s WHERE \"sent_at\" IS NULL AND \"dead_at\" IS NULL), "
                "COALESCE((SELECT extract(epoch FROM clock_timestamp() - \"created_at\")::float8 "
                "FROM %s WHERE \"sent_at\" IS NULL AND \"dead_at\" IS NULL ORDER BY \"id\" "
                "LIMIT 1), 0), "
                "(SELECT count(*) FROM %s WHERE \"dead_at\" IS NOT NULL AND \"sent_at\" IS NULL)",
                q, q, q);
    if (rc != 0) {
        sql_statements_free(s);
        return -ENOMEM;
    }
    return 0;
}

void sql_statements_free(struct sql_statements *s)
{
    free(s->claim);
    free(s->mark_sent);
    free(s->record_failures);
    free(s->listen);
    free(s->retention);
    free(s->backlog);
    memset(s, 0, sizeof *s);
}

/* ---- the session and the leader lock ----------------------------------- */

/* The marker a relay sets in its session at connect: a custom setting, which
 * poolers do not carry from one server session to another. */
#define SESSION_MARKER "outbox_relay.session"

/* The leader lock in SQL, for the statements that take, check, release and
 * look at it. The lock key is derived from the table, so relays for
 * different outbox tables in one database elect their leaders independently. */
struct leader_lock_sql {
    char key[LOCK_KEY_MAX];          /* the advisory lock's bigint key, an expression */
    char match[LOCK_KEY_MAX + 400];  /* a pg_locks row "l" that is the lock, granted */
    char held[LOCK_KEY_MAX + 500];   /* true when this backend holds it */
};

static void leader_lock_sql(const char *schema, const char *table, struct leader_lock_sql *l)
{
    lock_key("leader", schema, table, l->key, sizeof l->key);
    /* pg_locks shows a bigint advisory key as classid (high half), objid (low
     * half) and objsubid 1; advisory locks belong to one database. */
    snprintf(l->match, sizeof l->match,
             "l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted "
             "AND l.database = (SELECT oid FROM pg_catalog.pg_database "
             "WHERE datname = current_database()) "
             "AND ((l.classid::int8 << 32) | l.objid::int8) = %s",
             l->key);
    snprintf(l->held, sizeof l->held,
             "EXISTS (SELECT 1 FROM pg_catalog.pg_locks AS l WHERE %s "
             "AND l.pid = pg_backend_pid())",
             l->match);
}

/* The check at connect: marks the session, reads what decides whether it
 * may relay (row security, the table, the migrations ledger). */
static int build_session_check(char **out, const char *schema, const char *table, unsigned flags)
{
    char qualified[QUALIFIED_MAX], regclass[2 * sizeof qualified + 4];
    char qschema[2 * CONFIG_IDENT_MAX + 4], ledger[sizeof qschema + 30];
    char ledger_regclass[2 * sizeof ledger + 4];
    /* Valid identifiers contain no quotes, so these cannot overflow. */
    sql_quote_ident(schema, qschema, sizeof qschema);
    snprintf(ledger, sizeof ledger, "%s.\"outbox_relay_migrations\"", qschema);
    sql_quote_literal(ledger, ledger_regclass, sizeof ledger_regclass);
    sql_quote_qualified(schema, table, qualified, sizeof qualified);
    sql_quote_literal(qualified, regclass, sizeof regclass);

    /* row_security_active() answers for this role as the planner will:
     * superuser, BYPASSRLS, ownership and FORCE ROW LEVEL SECURITY included.
     * With row_security off, a policy added later makes the claim fail
     * loudly instead of hiding rows. */
    /* Claims from the floor (SQL_FLOOR) read rows in id order by the primary
     * key. With the statistics of a new table, or of one whose backlog grew
     * since its last ANALYZE, the planner expects a few unsent rows, and
     * would rather collect every row above the floor into a bitmap and sort
     * them, at every claim. No claim of this session needs a bitmap scan
     * (sql_floor.c) or a sort it could avoid. A disabled path counts as a
     * huge cost, which would have every claim compiled by JIT (0.4 s): no
     * JIT either; the session's statements are short. */
    const char *planner = (flags & SQL_FLOOR)
        ? " || left(set_config('enable_bitmapscan', 'off', false) || "
          "set_config('enable_sort', 'off', false) || set_config('jit', 'off', false), 0)"
        : "";
    return sql_build(out,
                 "SELECT pg_backend_pid(), set_config('" SESSION_MARKER "', $1, false)%s, "
                 "CASE WHEN $2::bool THEN set_config('row_security', 'off', false) "
                 "ELSE current_setting('row_security') END, "
                 "c.oid IS NOT NULL, COALESCE(row_security_active(c.oid), false), "
                 "COALESCE(c.relrowsecurity, false), COALESCE(c.relforcerowsecurity, false), "
                 "r.rolbypassrls, r.rolsuper, COALESCE(pg_has_role(c.relowner, 'USAGE'), false), "
                 "current_user::text, to_regclass(%s) IS NOT NULL, "
                 "COALESCE(has_table_privilege(to_regclass(%s), 'SELECT'), false), "
                 "(SELECT system_identifier::text FROM pg_catalog.pg_control_system()), "
                 "CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL "
                 "ELSE pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()) END "
                 "FROM pg_catalog.pg_roles AS r "
                 "LEFT JOIN pg_catalog.pg_class AS c ON c.oid = to_regclass(%s) "
                 "WHERE r.rolname = current_user",
                 planner, ledger_regclass, ledger_regclass, regclass);
}

/* Taking, checking and releasing the leader lock, and who holds it. */
static int build_lock_statements(struct sql_session *q, const struct leader_lock_sql *l)
{
    int rc = 0;
    /* MATERIALIZED: pg_locks is read before the lock is tried, so a backend
     * that already held it (another client's, behind a pooler) is seen, and
     * is not handed the lock a second time. */
    rc |= sql_build(&q->lock,
                "WITH mine AS MATERIALIZED (SELECT %s AS held, "
                "current_setting('" SESSION_MARKER "', true) IS NOT DISTINCT FROM $1 AS ours) "
                "SELECT pg_backend_pid(), mine.ours, mine.held, "
                "CASE WHEN mine.ours AND NOT mine.held THEN pg_try_advisory_lock(%s) "
                "ELSE false END FROM mine",
                l->held, l->key);
    rc |= sql_build(&q->verify,
                "SELECT pg_backend_pid(), "
                "current_setting('" SESSION_MARKER "', true) IS NOT DISTINCT FROM $1, %s",
                l->held);
    rc |= sql_build(&q->release,
                "SELECT CASE WHEN pg_backend_pid() = $1::int AND %s "
                "THEN pg_advisory_unlock(%s) ELSE false END",
                l->held, l->key);
    return rc;
}

/* Who holds the leader lock, and whether it relays: the oldest waiting row's
 * age and the table's count of updated and deleted rows, which every mark or
 * delete of a sent row raises (the standby's view of the leader's progress).
 * One row even when nobody holds the lock. The server's clock for the idle
 * time and the age: the relay's may differ. */
static int build_holder(char **out, const struct leader_lock_sql *l, const char *regclass,
                        const char *oldest)
{
    return sql_build(out,
                 "SELECT h.pid, h.application_name, h.client_addr, h.backend_start, h.state, "
                 "h.idle, "
                 "%s, "
                 "(SELECT s.n_tup_upd + s.n_tup_del FROM pg_catalog.pg_stat_user_tables AS s "
                 "WHERE s.relid = to_regclass(%s)) "
                 "FROM (SELECT 1) AS one LEFT JOIN LATERAL ("
                 "SELECT l.pid, a.application_name, host(a.client_addr) AS client_addr, "
                 "extract(epoch FROM a.backend_start)::float8 AS backend_start, a.state, "
                 "extract(epoch FROM clock_timestamp() - a.state_change)::float8 AS idle "
                 "FROM pg_catalog.pg_locks AS l "
                 "LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid "
                 "WHERE %s LIMIT 1) AS h ON true",
                 oldest, regclass, l->match);
}

int sql_session_init(struct sql_session *q, const char *schema, const char *table,
                     const char *source, unsigned flags)
{
    memset(q, 0, sizeof *q);
    if (!sql_ident_valid(schema) || !sql_ident_valid(table) || !sql_ident_valid(source))
        return -EINVAL;

    char qschema[2 * CONFIG_IDENT_MAX + 4];
    sql_quote_ident(schema, qschema, sizeof qschema);
    struct leader_lock_sql lock;
    leader_lock_sql(schema, table, &lock);

    char quiet[LOCK_KEY_MAX], skip[LOCK_KEY_MAX];
    lock_key("quiet", schema, table, quiet, sizeof quiet);
    lock_key("skip", schema, table, skip, sizeof skip);

    int rc = build_session_check(&q->check, schema, table, flags);
    rc |= build_newest(&q->version, qschema);
    rc |= build_lock_statements(q, &lock);
    char qualified[QUALIFIED_MAX], qsource[QUALIFIED_MAX], regclass[2 * sizeof qsource + 4];
    sql_quote_qualified(schema, table, qualified, sizeof qualified);
    sql_quote_qualified(schema, source, qsource, sizeof qsource);
    sql_quote_literal(qsource, regclass, sizeof regclass);
    char *oldest = NULL, fq[QUALIFIED_MAX + 8];
    if (flags & SQL_FLOOR)
        rc |= sql_floor_table(schema, table, fq, sizeof fq) < 0 ||
              sql_floor_oldest(&oldest, qualified, fq) < 0;
    else
        rc |= sql_build(&oldest,
                    "(SELECT extract(epoch FROM clock_timestamp() - o.\"created_at\")::float8 "
                    "FROM %s AS o WHERE o.\"sent_at\" IS NULL AND o.\"dead_at\" IS NULL "
                    "ORDER BY o.\"id\" LIMIT 1)",
                    qualified);
    rc |= !oldest || build_holder(&q->holder, &lock, regclass, oldest) < 0;
    free(oldest);
    rc |= sql_build(&q->quiet_on, "SELECT pg_try_advisory_lock(%s)", quiet);
    rc |= sql_build(&q->quiet_off, "SELECT pg_advisory_unlock(%s)", quiet);
    /* Taken and given back at once: only whether it could be taken matters. */
    rc |= sql_build(&q->quiet_check,
                "SELECT CASE WHEN pg_try_advisory_lock(%s) THEN pg_advisory_unlock(%s) "
                "ELSE false END",
                skip, skip);
    if (rc != 0) {
        sql_session_free(q);
        return -ENOMEM;
    }
    return 0;
}

void sql_session_free(struct sql_session *q)
{
    free(q->check);
    free(q->lock);
    free(q->verify);
    free(q->release);
    free(q->holder);
    free(q->version);
    free(q->quiet_on);
    free(q->quiet_off);
    free(q->quiet_check);
    memset(q, 0, sizeof *q);
}

int sql_migrate_init(struct sql_migrate *q, const char *schema)
{
    memset(q, 0, sizeof *q);
    if (!sql_ident_valid(schema))
        return -EINVAL;

    char qschema[2 * CONFIG_IDENT_MAX + 4];
    sql_quote_ident(schema, qschema, sizeof qschema);

    /* One key for all tables: migrations of different tables may share the
     * schema and its bookkeeping table, so they serialise too. */
    q->lock = strdup("SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay:migrate', 0))");
    if (!q->lock)
        goto nomem;
    if (asprintf(&q->create_schema, "CREATE SCHEMA IF NOT EXISTS %s", qschema) < 0) {
        q->create_schema = NULL;
        goto nomem;
    }
    if (asprintf(&q->create_table,
                 "CREATE TABLE IF NOT EXISTS %s.\"outbox_relay_migrations\" ("
                 "\"table_name\" text NOT NULL, "
                 "\"version\" int NOT NULL, "
                 "\"name\" text NOT NULL, "
                 "\"applied_at\" timestamptz NOT NULL DEFAULT clock_timestamp(), "
                 "PRIMARY KEY (\"table_name\", \"version\"))",
                 qschema) < 0) {
        q->create_table = NULL;
        goto nomem;
    }
    if (asprintf(&q->applied,
                 "SELECT 1 FROM %s.\"outbox_relay_migrations\" "
                 "WHERE \"table_name\" = $1 AND \"version\" = $2::int",
                 qschema) < 0) {
        q->applied = NULL;
        goto nomem;
    }
    if (build_newest(&q->newest, qschema) < 0)
        goto nomem;
    if (asprintf(&q->record,
                 "INSERT INTO %s.\"outbox_relay_migrations\" (\"table_name\", \"version\", "
                 "\"name\") VALUES ($1, $2::int, $3)",
                 qschema) < 0) {
        q->record = NULL;
        goto nomem;
    }
    return 0;

nomem:
    sql_migrate_free(q);
    return -ENOMEM;
}

void sql_migrate_free(struct sql_migrate *q)
{
    free(q->lock);
    free(q->create_schema);
    free(q->create_table);
    free(q->applied);
    free(q->newest);
    free(q->record);
    memset(q, 0, sizeof *q);
}


/* The rows an operator acts on, for table alias @p a: dead (dead_at set) or
 * failing (not dead but attempts > 0), never sent ones. Each arm repeats the
 * predicate of a partial index (dead_hash_idx and failed_idx of schema/005,
 * or the view's dead_key_idx and pending_idx), so the planner can answer it
 * from the indexes instead of scanning every sent row. */
#define NEEDS_OPERATOR(a)                                                                   \
    "((" a ".\"dead_at\" IS NOT NULL AND " a ".\"sent_at\" IS NULL) OR (" a                \
    ".\"sent_at\" IS NULL AND " a ".\"dead_at\" IS NULL AND " a ".\"attempts\" > 0))"

/* With SQL_FLOOR, a requeued row and the rows its aggregate held behind a
 * dead row (requeued or dropped) get this transaction's id in the same
 * statement: the relay's floor may have passed them, and they must be
 * claimed before any later row of their aggregate (sql_floor.h). */
#define RELEASE_HELD(t)                                                                            \
    ", held AS (UPDATE " t " AS l SET \"xid\" = pg_current_xact_id() FROM r "                     \
    "WHERE l.\"aggregate_type\" = r.\"aggregate_type\" AND l.\"aggregate_id\" = r.\"aggregate_id\" " \
    "AND l.\"id\" > r.\"id\" AND l.\"sent_at\" IS NULL AND l.\"dead_at\" IS NULL) "

#define RELEASED ", o.\"aggregate_type\", o.\"aggregate_id\""

int sql_dead_init(struct sql_dead *q, const char *schema, const char *table, unsigned flags)
{
    memset(q, 0, sizeof *q);
    if (!sql_ident_valid(schema) || !sql_ident_valid(table))
        return -EINVAL;

    char t[QUALIFIED_MAX];
    sql_quote_qualified(schema, table, t, sizeof t);

    int rc = 0;
    /* "waiting" counts the later rows of the aggregate that are neither sent
     * nor dead: under hold_aggregate they wait for this row. One join over
     * the pending rows, not one scan per listed row. Grouped by every column
     * it lists: through the view over Debezium's table no primary key makes
     * them follow from the id. */
    rc |= sql_build(&q->list,
                "SELECT o.\"id\", o.\"event_id\"::text, o.\"aggregate_type\", o.\"aggregate_id\", "
                "o.\"event_type\", "
                "CASE WHEN o.\"dead_at\" IS NOT NULL THEN 'dead' ELSE 'failing' END, "
                "o.\"attempts\", "
                "to_char(o.\"dead_at\" AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
                "o.\"last_error\", count(l.\"id\") "
                "FROM %s AS o LEFT JOIN %s AS l ON l.\"sent_at\" IS NULL AND l.\"dead_at\" IS NULL "
                "AND l.\"aggregate_type\" = o.\"aggregate_type\" "
                "AND l.\"aggregate_id\" = o.\"aggregate_id\" AND l.\"id\" > o.\"id\" "
                "WHERE " NEEDS_OPERATOR("o") " GROUP BY o.\"id\", o.\"event_id\", o.\"aggregate_type\", "
                "o.\"aggregate_id\", o.\"event_type\", o.\"dead_at\", o.\"attempts\", "
                "o.\"last_error\" ORDER BY o.\"id\"",
                t, t);
    /* attempts back to 0 gives the row its full max_attempts again;
     * last_error stays, so the history of why it failed is not lost. */
    bool floor = flags & SQL_FLOOR;
    char *requeue = NULL, *drop = NULL;
    rc |= sql_build(&requeue,
                "UPDATE %s AS o SET \"dead_at\" = NULL, \"attempts\" = 0%s "
                "WHERE ($1::bigint[] IS NULL OR o.\"id\" = ANY($1::bigint[])) "
                "AND " NEEDS_OPERATOR("o") " RETURNING o.\"id\"%s",
                t, floor ? ", \"xid\" = pg_current_xact_id()" : "", floor ? RELEASED : "");
    rc |= sql_build(&drop,
                "DELETE FROM %s AS o WHERE o.\"id\" = ANY($1::bigint[]) "
                "AND " NEEDS_OPERATOR("o") " RETURNING o.\"id\"%s",
                t, floor ? RELEASED : "");
    if (floor) {
        rc |= sql_build(&q->requeue, "WITH r AS (%s)" RELEASE_HELD("%s") "SELECT r.\"id\" FROM r",
                        requeue ? requeue : "", t);
        rc |= sql_build(&q->drop, "WITH r AS (%s)" RELEASE_HELD("%s") "SELECT r.\"id\" FROM r",
                        drop ? drop : "", t);
        free(requeue);
        free(drop);
    } else {
        q->requeue = requeue;
        q->drop = drop;
    }
    if (rc != 0) {
        sql_dead_free(q);
        return -ENOMEM;
    }
    return 0;
}

void sql_dead_free(struct sql_dead *q)
{
    free(q->list);
    free(q->requeue);
    free(q->drop);
    memset(q, 0, sizeof *q);
}

/* The claim's columns, so that verify and replay see a row exactly as the
 * relay published it (created_at text and milliseconds included). */
#define ROW_COLUMNS CLAIM_COLUMNS ", o.\"sent_at\" IS NOT NULL, o.\"dead_at\" IS NOT NULL"

/* Rows without an id (Debezium's, made before its table was migrated for
 * polling) are the connector's, never the relay's. */
#define WINDOW                                                                                     \
    "o.\"id\" IS NOT NULL AND ($1::bigint IS NULL OR o.\"id\" >= $1::bigint) "                    \
    "AND ($2::bigint IS NULL OR o.\"id\" <= $2::bigint) "                                          \
    "AND ($3::timestamptz IS NULL OR o.\"created_at\" >= $3::timestamptz) "                        \
    "AND ($4::timestamptz IS NULL OR o.\"created_at\" < $4::timestamptz)"

int sql_window_init(struct sql_window *q, const char *schema, const char *table,
                    size_t n_placed)
{
    memset(q, 0, sizeof *q);
    if (!sql_ident_valid(schema) || !sql_ident_valid(table) || n_placed > 8)
        return -EINVAL;
    char t[QUALIFIED_MAX], placed[PLACED_COLUMNS_MAX];
    sql_quote_qualified(schema, table, t, sizeof t);
    placed_columns(n_placed, placed, sizeof placed);

    int rc = 0;
    rc |= sql_build(&q->bounds,
                "SELECT count(*), min(o.\"id\"), max(o.\"id\"), "
                "floor(extract(epoch FROM $3::timestamptz) * 1000)::bigint, "
                "floor(extract(epoch FROM $4::timestamptz) * 1000)::bigint "
                "FROM %s AS o WHERE " WINDOW,
                t);
    /* Keyset pages through the primary key: each page is one index range. */
    rc |= sql_build(&q->rows,
                "SELECT " ROW_COLUMNS "%s FROM %s AS o WHERE o.\"id\" > $5::bigint AND " WINDOW
                " ORDER BY o.\"id\" LIMIT $6::int",
                placed, t);
    rc |= sql_build(&q->replay,
                "SELECT " ROW_COLUMNS "%s FROM %s AS o WHERE o.\"id\" > $5::bigint AND " WINDOW
                " AND ($7::text IS NULL OR o.\"aggregate_type\" = $7::text)"
                " AND ($8::text IS NULL OR o.\"aggregate_id\" = $8::text)"
                " AND ($9::text IS NULL OR o.\"event_type\" = $9::text)"
                " ORDER BY o.\"id\" LIMIT $6::int",
                placed, t);
    if (rc != 0) {
        sql_window_free(q);
        return -ENOMEM;
    }
    return 0;
}

void sql_window_free(struct sql_window *q)
{
    free(q->bounds);
    free(q->rows);
    free(q->replay);
    memset(q, 0, sizeof *q);
}
