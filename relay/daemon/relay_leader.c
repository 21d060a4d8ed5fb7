/* relay_leader.c — is the connection a session of its own and fit to relay
 * (session check, schema version), the leader lock taken, verified and
 * released, refusals, and a standby naming what it waits for. */
#include "daemon/relay_int.h"

#include "core/sql_debezium.h"

/* ---- leadership -------------------------------------------------------- */

/* The leader lock is a session-level advisory lock: it elects one leader
 * only while each relay's connection is a server session of its own. A
 * pooler in transaction or statement mode breaks that without an error:
 * one connection's statements run in several server sessions, and one server
 * session serves several relays (which then all "hold" the lock). So every
 * statement about the lock also says which backend answered and whether the
 * marker this relay set at connect is still there, and any sign of a shared
 * session refuses relaying for good. Session pooling keeps a server session
 * per connection and passes these checks. */

#define POOLED                                                                              \
    "the connection to PostgreSQL is pooled per transaction or statement (e.g. PgBouncer " \
    "pool_mode=transaction), where the leader lock cannot elect one leader: "
#define POOLED_FIX "; connect directly or through session pooling, then restart"

/* A live leader runs a statement at least every 20 s (the backlog query,
 * PLAN_BACKLOG_AT_MOST_EVERY_MS) and on every tick; a standby behind a holder idle for longer than this, or
 * behind something that is not a relay, says so in its readiness. */
#define STANDBY_STUCK_S 30.0

#define RELEASE_TRIES 5

void relay_set_role(struct relay *r, enum stats_role role)
{
    if (r->st.role != role)
        r->st.role_since = role == STATS_ROLE_UNKNOWN ? 0 : stats_now();
    if (role == STATS_ROLE_LEADER && r->st.role != STATS_ROLE_LEADER) {
        r->spare = PRODUCER_SPARE_UNTRIED; /* an older leader may have used either id */
        r->ops->leading(r);
    }
    r->st.role = role;
    if (role != STATS_ROLE_LEADER)
        r->st.kafka_owed = false; /* no rows of its own to publish */
    if (role != STATS_ROLE_STANDBY) {
        r->st.holder.known = false;
        r->st.standby_stuck = false;
        r->st.standby_stalled = false;
        r->st.standby_stalled_s = 0;
        standby_watch_reset(&r->watch);
    }
}

/* A new connection: a new marker, nothing checked yet. */
void relay_session_reset(struct relay *r)
{
    snprintf(r->token, sizeof(r->token), "%d-%016" PRIx64, (int)getpid(),
             uv_hrtime() ^ ((uint64_t)rand() << 32) ^ (uint64_t)rand());
    r->session_checked = false;
    r->schema_checked = false;
    r->holder_due = false;
    r->may_hold_lock = false;
    r->release_tries = 0;
    r->st.backend_pid = 0;
    r->st.via_proxy = false;
}

/* Relaying stops for good: no claim from now on; the batches in flight are
 * still marked (a mark records a fact), then the lock is given back and the
 * connection closed. Readiness, /status and the log say why. */
static void refuse(struct relay *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void refuse(struct relay *r, const char *fmt, ...)
{
    if (r->st.refused)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->st.refused_reason, sizeof(r->st.refused_reason), fmt, ap);
    va_end(ap);
    r->st.refused = true;
    r->st.refused_time = stats_now();
    r->refuse_deadline_ms = relay_now_ms(r) + (uint64_t)r->cfg->shutdown_timeout_ms;
    log_error("refusing to relay", "reason=%s", log_quote(r->st.refused_reason));
    relay_notify_status(r);
    if (!r->ready_sent) {
        /* Started, and staying up to say why: systemd must not wait for a
         * role that will never come (and restart us into the same refusal). */
        r->ready_sent = true;
        notify_send("READY=1");
    }
}

/* What a failed statement says about the session. A prepared statement that
 * already exists on a new connection, or that vanished from the connection
 * that prepared it, is another client's server session answering: refused.
 * A privilege error may be a policy that appeared since the check (with
 * row_security off it fails the claim): check the session again.
 * @return true when relaying was refused. */
bool relay_session_evidence(struct relay *r, const PGresult *res, const char *statement)
{
    const char *state = pg_sqlstate(res);
    if (strcmp(state, "42501") == 0) { /* insufficient_privilege */
        r->session_checked = false;
        return false;
    }
    if (strcmp(state, "42P05") == 0) /* duplicate_prepared_statement */
        refuse(r, POOLED "prepared statement \"%s\" already existed on a connection that never "
                         "prepared it" POOLED_FIX,
               statement);
    else if (strcmp(state, "26000") == 0) /* invalid_sql_statement_name */
        refuse(r, POOLED "prepared statement \"%s\" vanished from the connection that prepared "
                         "it" POOLED_FIX,
               statement);
    else
        return false;
    return true;
}

/* @return true (and refuses) when another server session answered. */
static bool session_shared(struct relay *r, int pid, bool ours)
{
    if (pid != r->st.backend_pid) {
        refuse(r, POOLED "pg_backend_pid() was %d when this connection started and is %d now"
                         POOLED_FIX,
               r->st.backend_pid, pid);
        return true;
    }
    if (!ours) {
        refuse(r, POOLED "the marker this connection set in its session at start is gone from "
                         "backend %d (another client's session state)" POOLED_FIX,
               pid);
        return true;
    }
    return false;
}

static bool col_true(const PGresult *res, int col)
{
    return !PQgetisnull(res, 0, col) && PQgetvalue(res, 0, col)[0] == 't';
}

/* Which server answered: a failover is counted, a stale primary refused
 * (the check runs again next tick, in case the server changes). */
static bool server_identified(struct relay *r, const PGresult *res)
{
    const char *sys = PQgetisnull(res, 0, SESSION_SYSTEM_ID) ? NULL : PQgetvalue(res, 0, SESSION_SYSTEM_ID);
    const char *wal = PQgetisnull(res, 0, SESSION_WALFILE) ? NULL : PQgetvalue(res, 0, SESSION_WALFILE);
    struct server_news n = server_watch_identified(&r->server, &r->st.server, sys, wal, stats_now());
    const struct stats_server *s = &r->st.server;
    if (n.say)
        log_write((enum log_level)n.level, n.say, "host=%s port=%s system_identifier=%s timeline=%u%s%s", s->host,
                  s->port, s->system_id, s->timeline, n.refuse ? " error=" : "",
                  n.refuse ? log_quote(s->problem) : "");
    if (!n.refuse)
        return true;
    r->backoff = true;
    return false;
}

static void on_session_checked(struct pg_conn *pg, PGresult *res, void *arg)
{
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
        PQnfields(res) != SESSION_NCOLS) {
        log_error("session check failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        r->backoff = true;
        return;
    }
    if (!server_identified(r, res))
        return;
    r->session_checked = true;
    r->table_exists = col_true(res, SESSION_TABLE_EXISTS);
    r->ledger_exists = col_true(res, SESSION_LEDGER_EXISTS);
    r->ledger_readable = col_true(res, SESSION_LEDGER_READABLE);
    r->st.backend_pid = atoi(PQgetvalue(res, 0, SESSION_PID));
    /* A pooler or proxy answers the startup with a pid of its own. Session
     * pooling is fine, so this alone refuses nothing; the lock's checks decide. */
    int announced = pg_announced_pid(pg);
    r->st.via_proxy = announced != r->st.backend_pid;
    if (r->st.via_proxy)
        log_info("connected through a pooler or proxy; checking that the session is its own",
                 "backend_pid=%d announced_pid=%d", r->st.backend_pid, announced);

    r->st.row_security = false;
    if (col_true(res, SESSION_RLS_ACTIVE)) {
        char what[400];
        snprintf(what, sizeof(what),
                 "row-level security filters \"%s\".\"%s\" for role \"%s\" (relrowsecurity=%s, "
                 "relforcerowsecurity=%s, rolbypassrls=%s, table owner=%s)",
                 r->cfg->schema, r->cfg->table, PQgetvalue(res, 0, SESSION_USER),
                 col_true(res, SESSION_RELROWSECURITY) ? "on" : "off",
                 col_true(res, SESSION_RELFORCEROWSECURITY) ? "on" : "off",
                 col_true(res, SESSION_ROLBYPASSRLS) ? "on" : "off",
                 col_true(res, SESSION_OWNER) ? "yes" : "no");
        if (!r->cfg->allow_row_security) {
            refuse(r, "%s: rows a policy hides would never be published, and the backlog would "
                      "not count them; give the role BYPASSRLS, disable row-level security on "
                      "the table, or set relay.allow_row_security = true",
                   what);
        } else {
            r->st.row_security = true;
            r->st.backlog_known = false;
            log_warn("relaying only the rows row-level security lets this role see "
                     "(relay.allow_row_security = true); the backlog is unknown",
                     "detail=%s", log_quote(what));
        }
    }
    relay_step(r);
}

/* ---- the schema -------------------------------------------------------- */

/* How often a schema that stays unfit is named again in the log; it is
 * checked again every poll interval, so a migrate run later is picked up. */
#define SCHEMA_LOG_EVERY_MS 60000

/* Relaying waits for `outbox-relay migrate`: said once (and every minute),
 * not once per poll; readiness and /status say it meanwhile. */
static void schema_wait(struct relay *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void schema_wait(struct relay *r, const char *fmt, ...)
{
    char why[sizeof r->st.schema_problem];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    bool changed = strcmp(why, r->st.schema_problem) != 0;
    if (changed || relay_now_ms(r) - r->schema_logged_ms >= SCHEMA_LOG_EVERY_MS) {
        log_error("waiting for the outbox table's schema; nothing is relayed until then",
                  "reason=%s", log_quote(why));
        r->schema_logged_ms = relay_now_ms(r);
    }
    memcpy(r->st.schema_problem, why, sizeof why);
    /* Checked afresh next tick: the session check sees a table created since. */
    r->session_checked = false;
    r->backoff = true;
    if (!r->ready_sent) {
        /* Started, and staying up to say why (as for a refusal). */
        r->ready_sent = true;
        notify_send("READY=1");
    }
}

static void on_schema_version(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        log_error("reading the schema version failed", "error=%s",
                  log_quote(PQresultErrorMessage(res)));
        r->backoff = true;
        return;
    }
    int version = atoi(PQgetvalue(res, 0, 0)), known = migrate_known_version();
    r->st.schema_version = version;
    if (version < known) {
        schema_wait(r, "\"%s\".\"%s\" is at schema version %d and this outbox-relay needs %d: "
                       "run `outbox-relay migrate` with this configuration",
                    r->cfg->schema, r->cfg->table, version, known);
        return;
    }
    if (version > known) {
        /* A newer schema may have renamed or dropped what this binary's
         * statements name, or changed what a column means. */
        refuse(r, "\"%s\".\"%s\" is at schema version %d, newer than this outbox-relay knows "
                  "(%d): upgrade outbox-relay",
               r->cfg->schema, r->cfg->table, version, known);
        relay_step(r);
        return;
    }
    if (r->st.schema_problem[0])
        log_info("the outbox table's schema is fit; relaying", "schema_version=%d", version);
    r->st.schema_problem[0] = '\0';
    r->schema_checked = true;
    relay_step(r);
}

static void on_debezium_boundary(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        log_error("reading where the connector's rows end failed", "error=%s",
                  log_quote(PQresultErrorMessage(res)));
        r->backoff = true;
        return;
    }
    if (!strcmp(PQgetvalue(res, 0, 2), "t")) {
        /* A row that counts as sent may not be on Kafka yet. */
        schema_wait(r, "the connector's slot \"%s\" has confirmed %s, not yet the position %s "
                       "before which the rows of \"%s\".\"%s\" are the connector's: the relay "
                       "starts once it has (keep the connector running until then; drop the "
                       "slot only if every row before that position is on Kafka)",
                    r->cfg->slot, PQgetisnull(res, 0, 1) ? "nothing" : PQgetvalue(res, 0, 1),
                    PQgetvalue(res, 0, 0), r->cfg->schema, r->cfg->table);
        return;
    }
    if (r->st.schema_problem[0])
        log_info("the connector's slot is past the rows that are the connector's; relaying",
                 "slot=%s position=%s", r->cfg->slot, PQgetvalue(res, 0, 0));
    r->st.schema_problem[0] = '\0';
    r->schema_checked = true;
    relay_step(r);
}

/* Debezium's table, polled: the rows that count as sent are the connector's,
 * so the relay claims nothing before its slot (relay.slot) has confirmed
 * past them, unless that slot is gone. */
static void debezium_boundary_check(struct relay *r)
{
    char qualified[260];
    sql_debezium_seq(r->cfg->schema, r->cfg->table, qualified, sizeof qualified);
    const char *params[] = { qualified, r->cfg->slot };
    pg_query(&r->pg, sql_debezium_boundary, 2, params, on_debezium_boundary, r);
}

void relay_schema_check(struct relay *r)
{
    if (!r->table_exists && r->claim_table[0]) {
        schema_wait(r, "the view \"%s\".\"%s\" over Debezium's table does not exist: run "
                       "`outbox-relay migrate` with this configuration",
                    r->cfg->schema, r->claim_table);
        return;
    }
    if (!r->table_exists) {
        schema_wait(r, "the outbox table \"%s\".\"%s\" does not exist: run `outbox-relay "
                       "migrate` with this configuration",
                    r->cfg->schema, r->cfg->table);
        return;
    }
    if (r->cfg->profile == RELAY_PROFILE_DEBEZIUM && r->claim_table[0]) {
        debezium_boundary_check(r);
        return;
    }
    if (r->cfg->profile == RELAY_PROFILE_DEBEZIUM) {
        /* The application's table: its columns were checked at start
         * (profile_check); no migration ledger belongs to it. */
        r->st.schema_problem[0] = '\0';
        r->schema_checked = true;
        relay_step(r);
        return;
    }
    if (!r->ledger_exists) {
        schema_wait(r, "\"%s\".\"%s\" was not made by `outbox-relay migrate` (no "
                       "\"%s\".\"outbox_relay_migrations\"): run it with this configuration",
                    r->cfg->schema, r->cfg->table, r->cfg->schema);
        return;
    }
    if (!r->ledger_readable) {
        /* A role granted only the outbox table (as deployments before this
         * check were told) still relays; the version is simply unknown. */
        if (!r->warned_ledger)
            log_warn("cannot read the outbox table's schema version: this role may not read "
                     "the migrations table; relaying on the table as it is",
                     "fix=%s", log_quote("GRANT SELECT ON \"outbox_relay_migrations\" (in relay.schema) "
                                         "to the relay's role"));
        r->warned_ledger = true;
        r->st.schema_problem[0] = '\0';
        r->schema_checked = true;
        relay_step(r);
        return;
    }
    /* Valid identifiers (sql_session_init checked them) are short. */
    char plain[256];
    snprintf(plain, sizeof plain, "%s.%s", r->cfg->schema, r->cfg->table);
    const char *params[] = { plain };
    pg_query(&r->pg, r->ssql.version, 1, params, on_schema_version, r);
}

void relay_session_check(struct relay *r)
{
    /* Unless allowed, row_security = off makes a policy that appears later
     * fail the claim loudly instead of hiding rows. */
    const char *params[] = { r->token, r->cfg->allow_row_security ? "f" : "t" };
    pg_query(&r->pg, r->ssql.check, 2, params, on_session_checked, r);
}

void relay_on_lock(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) != 4) {
        log_error("leader lock query failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        r->backoff = true;
        return;
    }
    int pid = atoi(PQgetvalue(res, 0, 0));
    if (session_shared(r, pid, col_true(res, 1)))
        return;
    if (col_true(res, 2)) {
        /* Our own session cannot hold a lock this relay never took. */
        refuse(r, POOLED "backend %d already held the leader lock before this relay asked for "
                         "it (another client shares that server session)" POOLED_FIX,
               pid);
        return;
    }
    if (col_true(res, 3)) {
        r->may_hold_lock = true;
        r->lead_unverified = false;
        relay_set_role(r, STATS_ROLE_LEADER); /* the mode's part: its leading() */
        log_info("became leader", "schema=%s table=%s backend_pid=%d", r->cfg->schema,
                 r->cfg->table, pid);
    } else {
        if (r->st.role != STATS_ROLE_STANDBY)
            log_info("standing by", "schema=%s table=%s reason=\"another session holds the leader lock\"",
                     r->cfg->schema, r->cfg->table);
        relay_set_role(r, STATS_ROLE_STANDBY);
        r->holder_due = true;
    }
    relay_step(r);
}

/* The leader, every tick: same backend, our marker, the lock still ours. */
void relay_on_verified(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) != 3) {
        log_error("leader lock check failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        r->backoff = true;
        return;
    }
    int pid = atoi(PQgetvalue(res, 0, 0));
    if (session_shared(r, pid, col_true(res, 1)))
        return;
    if (!col_true(res, 2)) {
        refuse(r, "the leader lock is no longer held by this relay's session (backend %d); "
                  "relaying stopped so that two relays never lead at once; restart the relay",
               pid);
        return;
    }
    r->lead_unverified = false;
    relay_step(r);
}

/* "2025-01-07T09:12:01Z", or "unknown" for 0. */
static const char *utc_text(double t, char *buf, size_t len)
{
    time_t secs = (time_t)t;
    struct tm tm;
    if (t <= 0 || !gmtime_r(&secs, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, len, "unknown");
    return buf;
}

/* A standby long behind a holder that is not a relay, or that has been idle
 * longer than any live relay is, may wait for ever: say who it is. */
static void judge_holder(struct relay *r)
{
    const struct stats_lock_holder *h = &r->st.holder;
    double waited = stats_now() - r->st.role_since;
    bool not_relay = h->application_name[0] && !h->looks_like_relay;
    bool idle = h->idle_seconds >= STANDBY_STUCK_S && strcmp(h->state, "active") != 0;
    bool was = r->st.standby_stuck;
    r->st.standby_stuck = h->known && waited >= STANDBY_STUCK_S && (not_relay || idle);
    if (!r->st.standby_stuck)
        return;
    char started[32], idle_text[48] = "";
    if (h->idle_seconds >= 0)
        snprintf(idle_text, sizeof(idle_text), " for %.0f s", h->idle_seconds);
    char why[128];
    if (not_relay)
        snprintf(why, sizeof(why), "is not an outbox-relay");
    else
        snprintf(why, sizeof(why),
                 "has run no statement for %.0f s (a live relay runs one every few seconds)",
                 h->idle_seconds);
    snprintf(r->st.standby_reason, sizeof(r->st.standby_reason),
             "standby for %.0f s behind backend %d (application_name \"%s\", client_addr %s, "
             "backend_start %s, state %s%s), which %s; if it is stale, end it with "
             "SELECT pg_terminate_backend(%d)",
             waited, h->pid, h->application_name, h->client_addr[0] ? h->client_addr : "unknown",
             utc_text(h->backend_start, started, sizeof(started)),
             h->state[0] ? h->state : "unknown", idle_text, why, h->pid);
    if (!was)
        log_warn("standing by behind a leader lock holder that does not look like a relay",
                 "holder_pid=%d application_name=%s client_addr=%s state=%s idle_s=%.0f",
                 h->pid, log_quote(h->application_name), log_quote(h->client_addr),
                 log_quote(h->state), h->idle_seconds);
}

/* Rows that wait while no leader marks or deletes any: whoever holds the
 * lock relays nothing (a hung leader, a lock kept by a session that is no
 * relay, a pooled session). Said once when it starts and when it ends. */
static void judge_progress(struct relay *r)
{
    double now = (double)relay_now_ms(r) / 1000;
    double limit = (double)r->cfg->standby_stall_timeout_ms / 1000;
    bool was = r->st.standby_stalled;
    r->st.standby_stalled = standby_watch_stalled(&r->watch, now, limit);
    r->st.standby_stalled_s = standby_watch_stalled_for(&r->watch, now);
    const struct stats_lock_holder *h = &r->st.holder;
    if (r->st.standby_stalled && !r->st.standby_stuck)
        snprintf(r->st.standby_reason, sizeof(r->st.standby_reason),
                 "standby: rows have waited %.0f s (the oldest %.0f s) and no leader marked or "
                 "deleted any; the leader lock is held by backend %d (application_name \"%s\"): "
                 "see that relay's log and /readyz, or end a stale session with "
                 "SELECT pg_terminate_backend(%d)",
                 r->st.standby_stalled_s, r->watch.oldest_age, h->pid, h->application_name, h->pid);
    if (r->st.standby_stalled && !was)
        log_warn("no leader makes progress: rows wait and none was marked or deleted",
                 "waited_s=%.0f oldest_row_s=%.0f holder_pid=%d application_name=%s",
                 r->st.standby_stalled_s, r->watch.oldest_age, h->pid,
                 log_quote(h->application_name));
    else if (!r->st.standby_stalled && was)
        log_info("a leader makes progress again", "");
}

static void copy_col(char *dst, size_t len, const PGresult *res, int col)
{
    snprintf(dst, len, "%s", PQgetisnull(res, 0, col) ? "" : PQgetvalue(res, 0, col));
}

void relay_on_holder(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQnfields(res) != HOLDER_NCOLS) {
        log_warn("leader lock holder query failed", "error=%s",
                 log_quote(PQresultErrorMessage(res)));
        relay_step(r);
        return;
    }
    struct stats_lock_holder *h = &r->st.holder;
    memset(h, 0, sizeof(*h));
    h->idle_seconds = -1;
    if (PQntuples(res) == 1 && !PQgetisnull(res, 0, HOLDER_PID)) {
        h->known = true;
        h->pid = atoi(PQgetvalue(res, 0, HOLDER_PID));
        copy_col(h->application_name, sizeof(h->application_name), res, HOLDER_APPLICATION_NAME);
        copy_col(h->client_addr, sizeof(h->client_addr), res, HOLDER_CLIENT_ADDR);
        copy_col(h->state, sizeof(h->state), res, HOLDER_STATE);
        if (!PQgetisnull(res, 0, HOLDER_BACKEND_START))
            h->backend_start = strtod(PQgetvalue(res, 0, HOLDER_BACKEND_START), NULL);
        if (!PQgetisnull(res, 0, HOLDER_IDLE_SECONDS))
            h->idle_seconds = strtod(PQgetvalue(res, 0, HOLDER_IDLE_SECONDS), NULL);
        h->looks_like_relay = strncmp(h->application_name, "outbox-relay", 12) == 0;
    }
    judge_holder(r);
    if (PQntuples(res) == 1) {
        double oldest = PQgetisnull(res, 0, HOLDER_OLDEST_AGE)
                            ? -1 : strtod(PQgetvalue(res, 0, HOLDER_OLDEST_AGE), NULL);
        int64_t progress = PQgetisnull(res, 0, HOLDER_PROGRESS)
                               ? -1 : strtoll(PQgetvalue(res, 0, HOLDER_PROGRESS), NULL, 10);
        standby_watch_feed(&r->watch, (double)relay_now_ms(r) / 1000, oldest, progress);
        judge_progress(r);
    }
    relay_step(r);
}

/* A statement about the leader lock: it names this relay's session marker. */
void relay_lock_query(struct relay *r, const char *sql, pg_result_cb cb)
{
    const char *params[] = { r->token };
    pg_query(&r->pg, sql, 1, params, cb, r);
}

static void on_released(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && col_true(res, 0)) {
        log_info("leader lock released", "backend_pid=%d", r->st.backend_pid);
        r->may_hold_lock = false;
    }
    relay_step(r);
}

/* Refused: give the lock back where it was taken (behind a pooler the
 * statement may reach another server session: a few tries), then close. */
void relay_wind_down(struct relay *r)
{
    if (r->may_hold_lock && r->release_tries < RELEASE_TRIES) {
        char pid[16];
        snprintf(pid, sizeof(pid), "%d", r->st.backend_pid);
        const char *params[] = { pid };
        r->release_tries++;
        pg_query(&r->pg, r->ssql.release, 1, params, on_released, r);
        return;
    }
    log_info("postgres connection closed; relaying stays refused until a restart",
             "leader_lock=%s",
             r->may_hold_lock ? "\"may be kept by a pooled server session\"" : "not_held");
    pg_close(&r->pg);
    r->may_hold_lock = false;
    r->st.pg_up = false;
    relay_set_role(r, STATS_ROLE_UNKNOWN);
    relay_notify_status(r);
}
