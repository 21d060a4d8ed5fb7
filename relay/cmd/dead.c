/* dead.c — `outbox-relay dead list | requeue | drop`.
 *
 * Blocking libpq is fine here: like migrate, this is a one-shot command, not
 * the loop. Each action is one statement (see struct sql_dead) whose WHERE
 * clause only matches rows that still need an operator, which is what makes
 * every action idempotent and safe to run next to a live relay: the relay's
 * own statements are conditional too, so whichever writes second changes
 * nothing the other relied on. */
#include "cmd/dead.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "base/errors.h"
#include "base/log.h"
#include "cmd/pg_session.h"
#include "core/sql.h"
#include "base/strbuf.h"

#define SQLSTATE_UNDEFINED_TABLE "42P01"
#define LAST_ERROR_WIDTH 100     /* the table view cuts last_error here; --json has it all */

void dead_usage(FILE *out)
{
    fprintf(out,
            "Usage: outbox-relay dead list [--json]\n"
            "       outbox-relay dead requeue ID...|--all [--ids]\n"
            "       outbox-relay dead drop ID... --yes [--ids]\n"
            "       (plus the -c FILE and -X section.key=value options of every command)\n"
            "\n"
            "Rows that need an operator: not sent, and either dead (dead_at set: the\n"
            "relay skips them, and under on_poison=hold_aggregate holds the later rows of\n"
            "their aggregate) or failing (attempts > 0 without dead_at: under\n"
            "on_poison=halt the relay stops at such a row once its attempts are used up).\n"
            "\n"
            "  list      show them, oldest first; --json prints a JSON array\n"
            "  requeue   clear dead_at and reset attempts to 0 (last_error is kept as\n"
            "            history), so the relay tries them again; fix the row first\n"
            "  drop      delete them; their events are never published (needs --yes)\n"
            "\n"
            "requeue and drop print how many rows they changed and how many of the ids\n"
            "given they left alone; --ids also lists those ids.\n"
            "\n"
            "Each action only touches such rows and is idempotent: run twice, the second\n"
            "run changes nothing and reports 0 rows.\n"
            "Exit status: 0 ok, 64 usage, 69 PostgreSQL unreachable, 70 error,\n"
            "78 the configured outbox table does not exist.\n");
}

/* ---- shared helpers ------------------------------------------------------ */

struct dead_args {
    const char *action;
    bool json, all, yes, list_ids;
    struct strbuf ids;          /* "{1,2,3}": a bigint[] literal */
    int n_ids;
};

/* @return 0, or EXIT_USAGE after saying what is wrong. */
static int parse_args(int argc, char **argv, struct dead_args *a)
{
    bool operands_only = false;
    strbuf_printf(&a->ids, "{");
    for (int i = 0; i < argc; i++) {
        const char *w = argv[i];
        if (!operands_only && w[0] == '-' && w[1] != '\0') {
            if (strcmp(w, "--") == 0)
                operands_only = true;
            else if (strcmp(w, "--json") == 0)
                a->json = true;
            else if (strcmp(w, "--all") == 0)
                a->all = true;
            else if (strcmp(w, "--yes") == 0)
                a->yes = true;
            else if (strcmp(w, "--ids") == 0)
                a->list_ids = true;
            else {
                fprintf(stderr, "outbox-relay dead: unknown option \"%s\"\n", w);
                return EXIT_USAGE;
            }
            continue;
        }
        if (!a->action) {
            a->action = w;
            continue;
        }
        char *end;
        errno = 0;
        long long id = strtoll(w, &end, 10);
        if (errno || end == w || *end || id <= 0) {
            fprintf(stderr, "outbox-relay dead: \"%s\" is not a row id (a positive integer)\n", w);
            return EXIT_USAGE;
        }
        strbuf_printf(&a->ids, "%s%lld", a->n_ids++ ? "," : "", id);
    }
    strbuf_printf(&a->ids, "}");

    const char *act = a->action ? a->action : "";
    const char *why = NULL;
    if (!a->action)
        why = "no action given";
    else if (strcmp(act, "list") == 0) {
        if (a->n_ids || a->all || a->yes || a->list_ids)
            why = "list takes no ids, --all, --yes or --ids";
    } else if (strcmp(act, "requeue") == 0) {
        if (a->json || a->yes)
            why = "requeue takes ids or --all, and --ids, nothing else";
        else if (a->all == (a->n_ids > 0))
            why = "requeue needs row ids or --all (not both)";
    } else if (strcmp(act, "drop") == 0) {
        if (a->json || a->all)
            why = "drop takes row ids and --yes (there is no drop --all)";
        else if (a->n_ids == 0)
            why = "drop needs the ids of the rows to delete";
        else if (!a->yes)
            why = "drop deletes rows for good: their events are never published; "
                  "add --yes to confirm";
    } else {
        fprintf(stderr, "outbox-relay dead: unknown action \"%s\"\n", act);
        dead_usage(stderr);
        return EXIT_USAGE;
    }
    if (why) {
        fprintf(stderr, "outbox-relay dead%s%s: %s\n", *act ? " " : "", act, why);
        if (!a->action)
            dead_usage(stderr);
        return EXIT_USAGE;
    }
    if (a->ids.oom) {
        fprintf(stderr, "outbox-relay dead: out of memory\n");
        return EXIT_SOFTWARE;
    }
    return 0;
}

/* Maps a failed statement to an exit status, after logging it. */
static int sql_failure(PGconn *conn, PGresult *res, const struct relay_config *cfg,
                       const char *action)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (PQstatus(conn) == CONNECTION_BAD) {
        log_error("lost the connection to postgres", "action=%s error=%s", action,
                  log_quote(PQerrorMessage(conn)));
        return EXIT_UNAVAILABLE;
    }
    if (state && strcmp(state, SQLSTATE_UNDEFINED_TABLE) == 0) {
        log_error("the outbox table does not exist (check relay.schema and relay.table, "
                  "or run outbox-relay migrate)",
                  "schema=%s table=%s", cfg->schema, cfg->table);
        return EXIT_CONFIG;
    }
    log_error("dead statement failed", "action=%s error=%s", action,
              log_quote(res ? PQresultErrorMessage(res) : PQerrorMessage(conn)));
    return EXIT_SOFTWARE;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* Prints "<verb> N row(s)" for a RETURNING "id" result and how many of the
 * requested ids it did not touch; with --ids, the ids of both. A bulk action
 * changes thousands of rows: a list of them is asked for, not the default. */
static int print_changed(PGresult *res, const char *verb, const struct dead_args *a)
{
    int n = PQntuples(res);
    long long *ids = malloc(((size_t)n + 1) * sizeof(*ids));
    if (!ids) {
        fprintf(stderr, "outbox-relay dead: out of memory\n");
        return EXIT_SOFTWARE;
    }
    for (int i = 0; i < n; i++)
        ids[i] = strtoll(PQgetvalue(res, i, 0), NULL, 10);
    qsort(ids, (size_t)n, sizeof(*ids), cmp_ll);
    printf("%s %d row%s", verb, n, n == 1 ? "" : "s");
    for (int i = 0; a->list_ids && i < n; i++)
        printf("%s%lld", i ? ", " : ": ", ids[i]);
    printf("\n");

    /* Requested but not changed: already requeued/dropped, sent, pending, or no such row. */
    int missing = 0;
    struct strbuf left = {0};
    const char *p = a->n_ids > 0 ? strbuf_str(&a->ids) + 1 : "";
    while (*p && *p != '}') {
        char *end;
        long long id = strtoll(p, &end, 10);
        if (!bsearch(&id, ids, (size_t)n, sizeof(*ids), cmp_ll)) {
            missing++;
            if (a->list_ids)
                strbuf_printf(&left, "%s%lld", missing > 1 ? ", " : ": ", id);
        }
        p = *end == ',' ? end + 1 : end;
    }
    if (missing)
        printf("%d of the ids given %s not dead or failing (already done, sent, never "
               "failed, or no such row)%s\n",
               missing, missing == 1 ? "was" : "were", left.oom ? "" : strbuf_str(&left));
    strbuf_free(&left);
    free(ids);
    return EXIT_OK;
}

/* ---- list ------------------------------------------------------------------ */

/* Display width of UTF-8 text (code points; every one counted as one column). */
static size_t text_width(const char *s)
{
    size_t w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xC0) != 0x80;
    return w;
}

/* Writes @p s for the table view: control characters (a newline in
 * last_error would break the layout) become spaces, at most @p max columns,
 * never cutting a UTF-8 sequence, "…" when cut, padded to @p pad columns. */
static void put_cell(const char *s, size_t max, size_t pad)
{
    size_t w = 0;
    bool cut = text_width(s) > max;
    size_t limit = cut ? max - 1 : max;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        bool starts = (*p & 0xC0) != 0x80;
        if (starts && w == limit)
            break;
        w += starts;
        putchar(*p < 0x20 || *p == 0x7f ? ' ' : *p);
    }
    if (cut) {
        fputs("\xe2\x80\xa6", stdout);
        w++;
    }
    for (; w < pad; w++)
        putchar(' ');
}

static const char *cell(PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? "-" : PQgetvalue(res, row, col);
}

enum { TABLE_NCOLS = 9 };

/* The cells of one row of the table view; @p agg is "type/id". */
static void row_cells(PGresult *res, int i, const char *agg, const char *v[TABLE_NCOLS])
{
    const char *cells[TABLE_NCOLS] = {
        cell(res, i, DEAD_ID),        cell(res, i, DEAD_EVENT_ID),   agg,
        cell(res, i, DEAD_EVENT_TYPE), cell(res, i, DEAD_STATUS),    cell(res, i, DEAD_ATTEMPTS),
        cell(res, i, DEAD_WAITING),   cell(res, i, DEAD_DEAD_AT),    cell(res, i, DEAD_LAST_ERROR),
    };
    memcpy(v, cells, sizeof(cells));
}

static void list_table(PGresult *res, const struct relay_config *cfg)
{
    int n = PQntuples(res);
    if (n == 0) {
        printf("no dead or failing rows in %s.%s\n", cfg->schema, cfg->table);
        return;
    }
    enum { NC = TABLE_NCOLS };
    static const char *const head[NC] = {"ID", "EVENT_ID", "AGGREGATE", "EVENT_TYPE", "STATUS",
                                         "ATTEMPTS", "WAITING", "DEAD_AT", "LAST_ERROR"};
    static const size_t cap[NC] = {20, 36, 40, 30, 7, 10, 10, 20, LAST_ERROR_WIDTH};
    size_t width[NC];
    for (int c = 0; c < NC; c++)
        width[c] = strlen(head[c]);

    char **agg = calloc((size_t)n, sizeof(*agg));
    int n_dead = 0;
    for (int i = 0; i < n; i++) {
        if (agg && asprintf(&agg[i], "%s/%s", PQgetvalue(res, i, DEAD_AGGREGATE_TYPE),
                            PQgetvalue(res, i, DEAD_AGGREGATE_ID)) < 0)
            agg[i] = NULL;
        const char *v[NC];
        row_cells(res, i, agg && agg[i] ? agg[i] : "?", v);
        for (int c = 0; c < NC; c++) {
            size_t w = text_width(v[c]);
            if (w > cap[c])
                w = cap[c];
            if (w > width[c])
                width[c] = w;
        }
        n_dead += strcmp(PQgetvalue(res, i, DEAD_STATUS), "dead") == 0;
    }

    for (int c = 0; c < NC; c++)
        put_cell(head[c], cap[c], c + 1 < NC ? width[c] + 2 : 0);
    putchar('\n');
    for (int i = 0; i < n; i++) {
        const char *v[NC];
        row_cells(res, i, agg && agg[i] ? agg[i] : "?", v);
        for (int c = 0; c < NC; c++)
            put_cell(v[c], cap[c], c + 1 < NC ? width[c] + 2 : 0);
        putchar('\n');
    }
    printf("%d row%s in %s.%s: %d dead, %d failing (on_poison=%s, max_attempts=%d)\n", n,
           n == 1 ? "" : "s", cfg->schema, cfg->table, n_dead, n - n_dead, poison_policy_names[cfg->on_poison],
           cfg->max_attempts);
    if (poison_rules_of(cfg->on_poison)->hold_claim)
        printf("WAITING rows are held until their dead row is requeued or dropped.\n");
    if (agg)
        for (int i = 0; i < n; i++)
            free(agg[i]);
    free(agg);
}

static cJSON *json_text_or_null(PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? cJSON_CreateNull()
                                      : cJSON_CreateString(PQgetvalue(res, row, col));
}

/* Integers go out as raw digits: bigint ids above 2^53 would lose precision
 * as the double that cJSON numbers are. */
static cJSON *json_int(PGresult *res, int row, int col)
{
    return cJSON_CreateRaw(PQgetvalue(res, row, col));
}

static int list_json(PGresult *res)
{
    cJSON *arr = cJSON_CreateArray();
    bool ok = arr != NULL;
    for (int i = 0; ok && i < PQntuples(res); i++) {
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(arr, o);
        if (!ok) {
            cJSON_Delete(o);
            break;
        }
        static const struct {
            const char *name;
            int col;
            bool integer;
        } fields[] = {
            {"id", DEAD_ID, true},
            {"event_id", DEAD_EVENT_ID, false},
            {"aggregate_type", DEAD_AGGREGATE_TYPE, false},
            {"aggregate_id", DEAD_AGGREGATE_ID, false},
            {"event_type", DEAD_EVENT_TYPE, false},
            {"status", DEAD_STATUS, false},
            {"attempts", DEAD_ATTEMPTS, true},
            {"dead_at", DEAD_DEAD_AT, false},
            {"last_error", DEAD_LAST_ERROR, false},
            {"waiting", DEAD_WAITING, true},
        };
        for (size_t f = 0; ok && f < sizeof(fields) / sizeof(fields[0]); f++) {
            cJSON *v = fields[f].integer ? json_int(res, i, fields[f].col)
                                         : json_text_or_null(res, i, fields[f].col);
            ok = v && cJSON_AddItemToObject(o, fields[f].name, v);
            if (!ok)
                cJSON_Delete(v);
        }
    }
    char *text = ok ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    if (!text) {
        log_error("out of memory building JSON", "rows=%d", PQntuples(res));
        return EXIT_SOFTWARE;
    }
    printf("%s\n", text);
    cJSON_free(text);
    return EXIT_OK;
}

/* ---- the command ----------------------------------------------------------- */

int dead_main(const struct relay_config *cfg, int argc, char **argv)
{
    struct dead_args a = {0};
    int status = parse_args(argc, argv, &a);
    if (status != 0) {
        strbuf_free(&a.ids);
        return status;
    }

    struct sql_dead q;
    char view[CONFIG_RELATION_MAX];
    const char *relation = config_claim_relation(cfg, view);
    if (sql_dead_init(&q, cfg->schema, relation,
                      strcmp(relation, cfg->table) == 0 ? SQL_FLOOR : 0) < 0) {
        log_error("cannot build the dead statements", "schema=%s table=%s", cfg->schema,
                  cfg->table);
        strbuf_free(&a.ids);
        return EXIT_SOFTWARE;
    }

    PGconn *conn = pg_session_open(cfg, "dead", NULL, 0);
    if (!conn) {
        sql_dead_free(&q);
        strbuf_free(&a.ids);
        return EXIT_UNAVAILABLE;
    }

    PGresult *res;
    if (strcmp(a.action, "list") == 0) {
        res = PQexec(conn, q.list);
        if (PQresultStatus(res) != PGRES_TUPLES_OK)
            status = sql_failure(conn, res, cfg, a.action);
        else if (a.json)
            status = list_json(res);
        else
            list_table(res, cfg);
    } else {
        bool requeue = strcmp(a.action, "requeue") == 0;
        const char *params[] = {a.all ? NULL : strbuf_str(&a.ids)};
        res = PQexecParams(conn, requeue ? q.requeue : q.drop, 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK)
            status = sql_failure(conn, res, cfg, a.action);
        else
            status = print_changed(res, requeue ? "requeued" : "dropped", &a);
    }
    PQclear(res);
    if (fflush(stdout) != 0 && status == EXIT_OK)
        status = EXIT_SOFTWARE; /* a full disk or closed pipe: the output is incomplete */
    PQfinish(conn);
    sql_dead_free(&q);
    strbuf_free(&a.ids);
    return status;
}
