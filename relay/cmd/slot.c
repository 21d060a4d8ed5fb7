/* slot.c — `outbox-relay slot status | drop`.
 *
 * Blocking libpq, like the other one-shot commands. The slot's row comes from
 * sql_capture.slot_status, one row whether the slot exists or not; drop reads
 * it first so that it can say why it refuses (in use, another database's)
 * instead of relaying PostgreSQL's error. */
#include "cmd/slot.h"

#include <cjson/cJSON.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errors.h"
#include "base/log.h"
#include "cmd/pg_session.h"
#include "core/sql_capture.h"

#define SQLSTATE_OBJECT_IN_USE "55006"
#define EXIT_SLOT_PROBLEM 1

void slot_usage(FILE *out)
{
    fprintf(out,
            "Usage: outbox-relay slot status [--json]\n"
            "       outbox-relay slot drop --yes\n"
            "       (plus the -c FILE and -X section.key=value options of every command)\n"
            "\n"
            "The logical replication slot of relay.capture = wal (relay.slot), which\n"
            "outbox-relay migrate creates with the publication (relay.publication).\n"
            "PostgreSQL keeps every WAL segment the slot's reader has not confirmed.\n"
            "\n"
            "  status   whether it exists and can serve the relay, who streams from it,\n"
            "           the WAL it holds back and how far the relay is behind; --json\n"
            "           prints a JSON object\n"
            "  drop     drop it (needs --yes); refused while a process streams from it;\n"
            "           nothing to do when it does not exist\n"
            "\n"
            "Exit status: 0 ok, 1 (status) the slot is missing, lost or cannot serve,\n"
            "(drop) it is in use or another database's, 64 usage, 69 PostgreSQL\n"
            "unreachable, 70 error.\n");
}

/* ---- the slot's row -------------------------------------------------------- */

static bool col_true(const PGresult *res, int col)
{
    return !PQgetisnull(res, 0, col) && PQgetvalue(res, 0, col)[0] == 't';
}

static const char *col_text(const PGresult *res, int col)
{
    return PQgetisnull(res, 0, col) ? NULL : PQgetvalue(res, 0, col);
}

/* What keeps the slot from serving the relay, as advice; NULL when it can. */
static const char *slot_problem(const PGresult *res)
{
    const char *plugin = col_text(res, SLOT_PLUGIN), *wal = col_text(res, SLOT_WAL_STATUS);
    if (!col_true(res, SLOT_EXISTS))
        return "the slot does not exist: outbox-relay migrate creates it (with relay.capture = "
               "wal), together with the publication";
    if (wal && strcmp(wal, "lost") == 0)
        return "the slot is lost: PostgreSQL removed WAL it still needed (max_slot_wal_keep_size), "
               "so events written meanwhile were never read from it. It must be dropped and "
               "created again (outbox-relay slot drop --yes, then outbox-relay migrate); then "
               "outbox-relay verify over the window since the relay last published finds what "
               "was skipped, and outbox-relay replay resends it";
    if (!plugin || strcmp(plugin, "pgoutput") != 0)
        return "the slot is not a logical slot of the pgoutput plugin: name another in "
               "relay.slot, or drop this one if nothing else uses it";
    if (!col_true(res, SLOT_DATABASE_OK))
        return "the slot belongs to another database of the cluster (slot names are "
               "cluster-wide): name another in relay.slot";
    if (!col_true(res, SLOT_PUBLICATION_OK))
        return "the publication does not publish the outbox table's inserts: run "
               "outbox-relay migrate, which creates it or adds the table";
    return NULL;
}

/* A note on wal_status that is no problem yet. */
static const char *wal_note(const char *wal)
{
    if (!wal)
        return NULL;
    if (strcmp(wal, "unreserved") == 0)
        return "WAL the slot needs is due for removal at the next checkpoint: unless the relay "
               "catches up first, the slot will be lost";
    if (strcmp(wal, "extended") == 0)
        return "the slot holds more WAL than max_wal_size";
    return NULL;
}

/* @p n bytes in binary units: "512 B", "12.3 MiB". */
static void human_bytes(long long n, char *buf, size_t len)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)n;
    size_t u = 0;
    while ((v >= 1024.0 || v <= -1024.0) && u + 1 < sizeof unit / sizeof unit[0]) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%lld B", n);
    else
        snprintf(buf, len, "%.1f %s", v, unit[u]);
}

/* "N bytes (H)" of a bigint column, or "-". */
static void bytes_cell(const PGresult *res, int col, char *buf, size_t len)
{
    const char *v = col_text(res, col);
    if (!v) {
        snprintf(buf, len, "-");
        return;
    }
    char human[32];
    long long n = strtoll(v, NULL, 10);
    human_bytes(n, human, sizeof human);
    snprintf(buf, len, "%lld bytes (%s)", n, human);
}

/* ---- status ----------------------------------------------------------------- */

static void status_text(const PGresult *res, const struct relay_config *cfg)
{
    char retained[64], lag[64];
    bytes_cell(res, SLOT_RETAINED_BYTES, retained, sizeof retained);
    bytes_cell(res, SLOT_LAG_BYTES, lag, sizeof lag);
    bool exists = col_true(res, SLOT_EXISTS);
    const char *pid = col_text(res, SLOT_ACTIVE_PID);
#define ROW(name, value) printf("%-20s %s\n", name, value)
#define OR_DASH(col) (col_text(res, col) ? col_text(res, col) : "-")
    ROW("slot", cfg->slot);
    ROW("exists", exists ? "yes" : "no");
    ROW("plugin", OR_DASH(SLOT_PLUGIN));
    ROW("database", !exists ? "-" : col_true(res, SLOT_DATABASE_OK) ? "this one" : "another");
    ROW("active", !exists ? "-" : col_true(res, SLOT_ACTIVE) ? "yes" : "no");
    ROW("active_pid", pid ? pid : "-");
    ROW("wal_status", OR_DASH(SLOT_WAL_STATUS));
    ROW("confirmed_flush_lsn", OR_DASH(SLOT_CONFIRMED_LSN));
    ROW("restart_lsn", OR_DASH(SLOT_RESTART_LSN));
    ROW("retained_wal", retained);
    ROW("lag", lag);
    printf("%-20s %s (%s.%s): %s\n", "publication", cfg->publication, cfg->schema, cfg->table,
           col_true(res, SLOT_PUBLICATION_OK) ? "ok" : "does not publish the table's inserts");
#undef OR_DASH
#undef ROW
}

static cJSON *json_text(const PGresult *res, int col)
{
    const char *v = col_text(res, col);
    return v ? cJSON_CreateString(v) : cJSON_CreateNull();
}

/* Integers as raw digits: a bigint byte count may exceed 2^53. */
static cJSON *json_int(const PGresult *res, int col)
{
    const char *v = col_text(res, col);
    return v ? cJSON_CreateRaw(v) : cJSON_CreateNull();
}

static int status_json(const PGresult *res, const struct relay_config *cfg, const char *problem)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL;
    struct { const char *name; cJSON *v; } f[] = {
        {"slot", cJSON_CreateString(cfg->slot)},
        {"exists", cJSON_CreateBool(col_true(res, SLOT_EXISTS))},
        {"plugin", json_text(res, SLOT_PLUGIN)},
        {"database_ok", cJSON_CreateBool(col_true(res, SLOT_DATABASE_OK))},
        {"active", cJSON_CreateBool(col_true(res, SLOT_ACTIVE))},
        {"active_pid", json_int(res, SLOT_ACTIVE_PID)},
        {"wal_status", json_text(res, SLOT_WAL_STATUS)},
        {"confirmed_flush_lsn", json_text(res, SLOT_CONFIRMED_LSN)},
        {"restart_lsn", json_text(res, SLOT_RESTART_LSN)},
        {"retained_bytes", json_int(res, SLOT_RETAINED_BYTES)},
        {"lag_bytes", json_int(res, SLOT_LAG_BYTES)},
        {"publication", cJSON_CreateString(cfg->publication)},
        {"publication_ok", cJSON_CreateBool(col_true(res, SLOT_PUBLICATION_OK))},
        {"usable", cJSON_CreateBool(problem == NULL)},
        {"problem", problem ? cJSON_CreateString(problem) : cJSON_CreateNull()},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (ok && f[i].v && cJSON_AddItemToObject(o, f[i].name, f[i].v))
            continue;
        ok = false;
        cJSON_Delete(f[i].v);
    }
    char *text = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!text) {
        log_error("out of memory building JSON", "slot=%s", cfg->slot);
        return EXIT_SOFTWARE;
    }
    printf("%s\n", text);
    cJSON_free(text);
    return EXIT_OK;
}

static int slot_status(const PGresult *res, const struct relay_config *cfg, bool json)
{
    const char *problem = slot_problem(res);
    int status = EXIT_OK;
    if (json)
        status = status_json(res, cfg, problem);
    else
        status_text(res, cfg);
    const char *note = problem ? NULL : wal_note(col_text(res, SLOT_WAL_STATUS));
    if (note)
        fprintf(stderr, "outbox-relay slot status: %s: %s\n", cfg->slot, note);
    if (cfg->capture != RELAY_CAPTURE_WAL)
        fprintf(stderr, "outbox-relay slot status: relay.capture = poll: the relay does not "
                        "read this slot\n");
    if (!problem)
        return status;
    fprintf(stderr, "outbox-relay slot status: %s: %s\n", cfg->slot, problem);
    return status == EXIT_OK ? EXIT_SLOT_PROBLEM : status;
}

/* ---- drop -------------------------------------------------------------------- */

static int in_use(const struct relay_config *cfg, const char *pid)
{
    fprintf(stderr,
            "outbox-relay slot drop: %s is active: process %s streams from it (a running "
            "relay?), and PostgreSQL does not drop a slot in use. Stop that process first "
            "(SELECT pg_terminate_backend(%s) ends its connection; a relay reconnects)\n",
            cfg->slot, pid ? pid : "?", pid ? pid : "PID");
    return EXIT_SLOT_PROBLEM;
}

static int slot_drop(PGconn *conn, const PGresult *st, const struct sql_capture *q,
                     const struct relay_config *cfg)
{
    if (!col_true(st, SLOT_EXISTS)) {
        printf("slot %s does not exist: nothing to drop\n", cfg->slot);
        return EXIT_OK;
    }
    if (!col_true(st, SLOT_DATABASE_OK)) {
        fprintf(stderr, "outbox-relay slot drop: %s is not a logical slot of this database; "
                        "not dropping it\n", cfg->slot);
        return EXIT_SLOT_PROBLEM;
    }
    if (col_true(st, SLOT_ACTIVE))
        return in_use(cfg, col_text(st, SLOT_ACTIVE_PID));

    const char *params[] = {cfg->slot};
    PGresult *res = PQexecParams(conn, q->drop_slot, 1, NULL, params, NULL, NULL, 0);
    int status = EXIT_OK;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (state && strcmp(state, SQLSTATE_OBJECT_IN_USE) == 0) {
            status = in_use(cfg, NULL); /* a relay connected since the check */
        } else {
            log_error("cannot drop the replication slot", "slot=%s error=%s", cfg->slot,
                      log_quote(PQresultErrorMessage(res)));
            status = PQstatus(conn) == CONNECTION_BAD ? EXIT_UNAVAILABLE : EXIT_SOFTWARE;
        }
    } else if (col_true(res, 0)) {
        printf("dropped slot %s; PostgreSQL no longer keeps WAL for it. A slot created again "
               "starts at its creation: outbox-relay verify finds what was written in between\n",
               cfg->slot);
    } else {
        printf("slot %s does not exist: nothing to drop\n", cfg->slot);
    }
    PQclear(res);
    return status;
}

/* ---- the command -------------------------------------------------------------- */

/* @return 0, or EXIT_USAGE after saying what is wrong. */
static int parse_args(int argc, char **argv, const char **action, bool *json, bool *yes)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            *json = true;
        else if (strcmp(argv[i], "--yes") == 0)
            *yes = true;
        else if (!*action && argv[i][0] != '-')
            *action = argv[i];
        else {
            fprintf(stderr, "outbox-relay slot: unexpected \"%s\"\n", argv[i]);
            return EXIT_USAGE;
        }
    }
    const char *why = NULL;
    if (!*action)
        why = "no action given (status or drop)";
    else if (strcmp(*action, "status") == 0)
        why = *yes ? "status takes --json, nothing else" : NULL;
    else if (strcmp(*action, "drop") == 0)
        why = *json ? "drop takes --yes, nothing else"
              : !*yes ? "drop removes the slot: the relay can no longer read what is written "
                        "until migrate creates it again, and what was written meanwhile is not "
                        "in the new one; add --yes to confirm"
                      : NULL;
    else
        why = "unknown action (status or drop)";
    if (why) {
        fprintf(stderr, "outbox-relay slot%s%s: %s\n", *action ? " " : "", *action ? *action : "",
                why);
        if (!*action || (strcmp(*action, "status") != 0 && strcmp(*action, "drop") != 0))
            slot_usage(stderr);
        return EXIT_USAGE;
    }
    return 0;
}

int slot_main(const struct relay_config *cfg, int argc, char **argv)
{
    const char *action = NULL;
    bool json = false, yes = false;
    int status = parse_args(argc, argv, &action, &json, &yes);
    if (status != 0)
        return status;
    struct sql_capture q;
    if (sql_capture_init(&q, cfg->schema, cfg->table, cfg->publication) < 0) {
        log_error("cannot build the slot statements", "schema=%s table=%s publication=%s",
                  cfg->schema, cfg->table, cfg->publication);
        return EXIT_SOFTWARE;
    }
    PGconn *conn = pg_session_open(cfg, "slot", NULL, 0);
    if (!conn) {
        sql_capture_free(&q);
        return EXIT_UNAVAILABLE;
    }
    const char *params[] = {cfg->slot, cfg->publication};
    PGresult *res = PQexecParams(conn, q.slot_status, 2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        log_error("cannot read the replication slot", "slot=%s error=%s", cfg->slot,
                  log_quote(PQresultErrorMessage(res)));
        status = PQstatus(conn) == CONNECTION_BAD ? EXIT_UNAVAILABLE : EXIT_SOFTWARE;
    } else if (strcmp(action, "status") == 0) {
        status = slot_status(res, cfg, json);
    } else {
        status = slot_drop(conn, res, &q, cfg);
    }
    PQclear(res);
    if (fflush(stdout) != 0 && status == EXIT_OK)
        status = EXIT_SOFTWARE;
    PQfinish(conn);
    sql_capture_free(&q);
    return status;
}
