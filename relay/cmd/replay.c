/* replay.c — `outbox-relay replay`: sent rows published again.
 *
 * With relay.capture = wal the relay marks no row: every row that is not
 * dead may be replayed (whether the relay already published it is the slot's
 * to know, and `verify` tells), dead ones stay refused.
 *
 * Blocking libpq and a producer flushed page by page: a one-shot command.
 * Rows are read in id order, one page at a time, and produced in that order
 * by the relay's own idempotent producer settings (producer_conf_new): one
 * request in flight per broker keeps each aggregate's order, as for the
 * relay. Each page is flushed before the next is read, so on SIGINT
 * everything up to a known id was acknowledged and the run can resume there. */
#include "cmd/replay.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/cli_args.h"
#include "base/errors.h"
#include "core/event.h"
#include "base/log.h"
#include "base/strbuf.h"
#include "core/connect_json.h"
#include "io/pg.h"
#include "io/producer.h"
#include "core/pg_binary.h"
#include "io/producer.h"
#include "core/sql.h"
#include "base/stats.h"
#include "cmd/pg_session.h"
#include "cmd/verify.h"

#define SQLSTATE_UNDEFINED_TABLE "42P01"
#define PAGE_ROWS 1000
#define REFUSED_SHOWN 10

struct replay_args {
    const char *from_id, *to_id, *since, *until;
    const char *aggregate_type, *aggregate_id, *event_type, *topic;
    long long rate;              /* messages per second, 0 = unlimited */
    bool dry_run;
};

struct delivery {
    uint64_t acked, failed;
    char first_error[256];
    int64_t first_failed_id;
};

static atomic_int interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    atomic_store(&interrupted, 1);
}

void replay_usage(FILE *out)
{
    fprintf(out,
            "Usage: outbox-relay replay SELECTION [--topic NAME] [--rate N] [--dry-run]\n"
            "  SELECTION, at least one of (combined with AND):\n"
            "    --from-id N, --to-id N      rows with N <= id <= N\n"
            "    --since T, --until T        created_at >= T and < T (a timestamp, or a\n"
            "                                duration ago: 90s, 15m, 2h, 7d)\n"
            "    --aggregate TYPE:ID         one aggregate (split at the first ':')\n"
            "    --event-type TYPE           one event type\n"
            "  --topic NAME   publish to NAME instead of each row's topic\n"
            "  --rate N       at most N messages per second\n"
            "  --dry-run      print what would be published; publish nothing\n"
            "       (plus the -c FILE and -X section.key=value options of every command)\n"
            "\n"
            "Publishes rows that were already sent once more, in id order, with the same\n"
            "key, value, timestamp and headers (event_id included) and one more header,\n"
            "replay=<when>. Rows not sent yet are refused: they belong to the relay (with\n"
            "relay.capture = wal no row is marked: every row that is not dead is replayed,\n"
            "e.g. those `verify` reports missing). The table is only read: safe next to a\n"
            "running relay. Interrupted, it says up to which id everything was\n"
            "acknowledged; running it again publishes the same messages again (consumers\n"
            "drop repeated event_ids).\n"
            "Exit status: 0 ok, 64 usage, 69 PostgreSQL or Kafka unreachable, 70 a message\n"
            "failed, 78 no such table, 130 interrupted.\n");
}

static int parse_args(int argc, char **argv, struct replay_args *a, char *since, char *until,
                      size_t tlen)
{
    double now = stats_now();
    for (int i = 0; i < argc; i++) {
        const char *w = argv[i];
        if (strcmp(w, "--dry-run") == 0) {
            a->dry_run = true;
            continue;
        }
        static const char *const valued[] = {"--from-id", "--to-id", "--since", "--until",
                                             "--aggregate", "--event-type", "--topic", "--rate",
                                             NULL};
        bool known = false;
        for (const char *const *v = valued; *v; v++)
            known |= strcmp(w, *v) == 0;
        if (!known) {
            fprintf(stderr, "outbox-relay replay: unknown argument \"%s\"\n", w);
            replay_usage(stderr);
            return EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "outbox-relay replay: %s needs a value\n", w);
            return EXIT_USAGE;
        }
        const char *val = argv[++i];
        long long n;
        if (strcmp(w, "--from-id") == 0 || strcmp(w, "--to-id") == 0 ||
            strcmp(w, "--rate") == 0) {
            if (cli_parse_int64(val, strcmp(w, "--rate") == 0 ? 1 : 0, &n) < 0) {
                fprintf(stderr, "outbox-relay replay: %s: \"%s\" is not a %s integer\n", w, val,
                        strcmp(w, "--rate") == 0 ? "positive" : "non-negative");
                return EXIT_USAGE;
            }
            if (strcmp(w, "--from-id") == 0)
                a->from_id = val;
            else if (strcmp(w, "--to-id") == 0)
                a->to_id = val;
            else
                a->rate = n;
        } else if (strcmp(w, "--since") == 0) {
            verify_time_arg(val, now, since, tlen);
            a->since = since;
        } else if (strcmp(w, "--until") == 0) {
            verify_time_arg(val, now, until, tlen);
            a->until = until;
        } else if (strcmp(w, "--aggregate") == 0) {
            const char *colon = strchr(val, ':');
            if (!colon || colon == val) {
                fprintf(stderr, "outbox-relay replay: --aggregate takes TYPE:ID (got \"%s\")\n", val);
                return EXIT_USAGE;
            }
            a->aggregate_type = strndup(val, (size_t)(colon - val));
            a->aggregate_id = colon + 1;
        } else if (strcmp(w, "--event-type") == 0) {
            a->event_type = val;
        } else {
            char why[512];
            if (event_topic_check(val, why, sizeof why) < 0) {
                fprintf(stderr, "outbox-relay replay: --topic: %s\n", why);
                return EXIT_USAGE;
            }
            a->topic = val;
        }
    }
    if (!a->from_id && !a->to_id && !a->since && !a->until && !a->aggregate_type &&
        !a->event_type) {
        fprintf(stderr, "outbox-relay replay: say which rows: --from-id/--to-id, "
                        "--since/--until, --aggregate or --event-type (there is no replay of "
                        "everything by default)\n");
        return EXIT_USAGE;
    }
    return 0;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    struct delivery *d = opaque;
    if (!m->err) {
        d->acked++;
        return;
    }
    if (d->failed++ == 0) {
        snprintf(d->first_error, sizeof d->first_error, "%s", rd_kafka_err2str(m->err));
        d->first_failed_id = (int64_t)(intptr_t)m->_private;
    }
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    /* "enable.gapless.guarantee is experimental": said once per relay start
     * already, noise on every replay. */
    enum log_level l = strcmp(fac, "CONFWARN") == 0 ? LOG_LVL_DEBUG
                     : level <= 3 ? LOG_LVL_ERROR : level <= 5 ? LOG_LVL_WARN
                     : level == 6 ? LOG_LVL_INFO : LOG_LVL_DEBUG;
    log_write(l, "librdkafka", "facility=%s detail=%s", fac, log_quote(buf));
}

static rd_kafka_t *producer_new(const struct relay_config *cfg, struct delivery *d, char *err,
                                size_t errlen)
{
    /* The relay's producer settings: idempotence, acks=all, one request in
     * flight, the same partitioner (so a key lands where it did). Not its
     * transactional.id: initialising it would fence the running leader, and
     * a replay is a deliberate republication that needs no fencing. */
    rd_kafka_conf_t *conf = producer_conf_new_untransactional(cfg, err, errlen);
    if (!conf)
        return NULL;
    char why[512];
    if (rd_kafka_conf_set(conf, "client.id", "outbox-relay-replay", why, sizeof why) ||
        rd_kafka_conf_set(conf, "statistics.interval.ms", "0", why, sizeof why)) {
        snprintf(err, errlen, "kafka: %s", why);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_opaque(conf, d);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_log_cb(conf, on_log);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        snprintf(err, errlen, "kafka: %s", why);
    }
    return rk;
}

static void row_of(PGresult *res, int i, struct event_row *e)
{
    pg_claim_row(res, i, e);
    pg_claim_placed(res, i, ROWS_NCOLS, e);
}

/* Waits for every message produced so far; SIGINT does not cut this short:
 * what is in flight is acknowledged or failed before we say where we are. */
static void drain(rd_kafka_t *rk)
{
    while (rd_kafka_outq_len(rk) > 0)
        rd_kafka_flush(rk, 100);
}

/* One replay: what it reads, where it publishes, and how far it got. */
struct run {
    const struct relay_config *cfg;
    const struct replay_args *a;
    struct sql_window q;
    PGconn *conn;
    rd_kafka_t *rk;                  /* NULL with --dry-run */
    struct delivery d;
    char replayed_at[40];            /* the replay header's value */
    bool progress;                   /* a progress line on the terminal */
    double started, last_progress;
    uint64_t produced, refused;
    int64_t refused_ids[REFUSED_SHOWN];
    int64_t first_id, done_through; /* the first row published; all acknowledged up to */
    struct message_style ms;         /* the producer's: what a row's message is */
    struct strbuf key, value;        /* a row's key and value, json converters */
    int64_t after;                   /* the next page starts after this id */
    bool stopped;                    /* SIGINT or SIGTERM */
    const int64_t *only;             /* replay_ids: these rows alone, ascending; no replay header */
    size_t n_only;
};

/* Connects read-only and, unless --dry-run, makes the producer.
 * @return EXIT_OK or the exit status of the failure (logged). */
static int open_run(struct run *r)
{
    r->conn = pg_session_open(r->cfg, "replay", NULL, 0);
    if (!r->conn)
        return EXIT_UNAVAILABLE;
    /* The relay's marks are not ours to touch: this session cannot write. */
    PQclear(PQexec(r->conn, "SET default_transaction_read_only = on"));
    char err[1024];
    if (!r->a->dry_run && !(r->rk = producer_new(r->cfg, &r->d, err, sizeof err))) {
        log_error("kafka producer rejected the configuration", "error=%s", log_quote(err));
        return EXIT_CONFIG;
    }
    return EXIT_OK;
}

static void close_run(struct run *r)
{
    if (r->rk) {
        drain(r->rk);
        rd_kafka_destroy(r->rk);
    }
    PQfinish(r->conn);
    sql_window_free(&r->q);
    producer_style_free(&r->ms);
    strbuf_free(&r->key);
    strbuf_free(&r->value);
}

/* The replay header's value: now, RFC 3339 UTC with milliseconds. */
static void stamp_now(char *out, size_t len)
{
    double now = stats_now();
    time_t secs = (time_t)now;
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, len - n, ".%03dZ", (int)((now - (double)secs) * 1000));
}

/* The next page of the selection, after r->after. @return EXIT_OK with
 * *res to PQclear, or the exit status of the failure (logged). */
static int read_page(struct run *r, PGresult **res)
{
    const struct replay_args *a = r->a;
    char after_s[24], limit_s[16];
    snprintf(after_s, sizeof after_s, "%" PRId64, r->after);
    snprintf(limit_s, sizeof limit_s, "%d", PAGE_ROWS);
    const char *params[] = {a->from_id, a->to_id,          a->since,        a->until,     after_s,
                            limit_s,    a->aggregate_type, a->aggregate_id, a->event_type};
    *res = PQexecParams(r->conn, r->q.replay, 9, NULL, params, NULL, NULL, 1);
    if (PQresultStatus(*res) == PGRES_TUPLES_OK)
        return EXIT_OK;
    const char *state = PQresultErrorField(*res, PG_DIAG_SQLSTATE);
    log_error("reading the outbox table failed", "error=%s",
              log_quote(PQresultErrorMessage(*res)));
    int status = PQstatus(r->conn) == CONNECTION_BAD ? EXIT_UNAVAILABLE
                 : state && strcmp(state, SQLSTATE_UNDEFINED_TABLE) == 0 ? EXIT_CONFIG
                 : state && strncmp(state, "22", 2) == 0                  ? EXIT_USAGE
                                                                          : EXIT_SOFTWARE;
    PQclear(*res);
    return status;
}

/* --topic, else the row's own topic, else the template's; "" when the
 * template cannot be rendered. */
static void row_topic(const struct run *r, const struct event_row *e, char *topic, size_t len)
{
    if (r->a->topic)
        snprintf(topic, len, "%s", r->a->topic);
    else
        event_row_topic(r->cfg->topic, e, topic, len);
}

/* --rate: paced from the start, so a slow page does not earn a burst. */
static void pace(const struct run *r)
{
    if (r->a->rate <= 0)
        return;
    double due = r->started + (double)r->produced / (double)r->a->rate;
    double wait = due - stats_now();
    if (wait > 0)
        usleep((useconds_t)(wait * 1e6));
}

/* Hands row @p e to the producer, to @p topic, with the replay header.
 * @return EXIT_OK or EXIT_SOFTWARE (logged). */
static int produce_row(struct run *r, const struct event_row *e, const char *topic)
{
    rd_kafka_headers_t *hdrs = NULL;
    struct connect_bytes m;
    char why[512];
    /* The message the relay writes (the same code), and the replay header. */
    if (connect_message(e, &r->ms.style, &r->key, &r->value, &m, why, sizeof why) < 0 ||
        event_headers_build_styled(e, &r->ms.style, &hdrs, why, sizeof why) < 0 ||
        (!r->only && rd_kafka_header_add(hdrs, EVENT_REPLAY_HEADER, -1, r->replayed_at, -1))) {
        /* A sent row whose message no longer builds was edited after it was sent. */
        log_error("cannot build the message of a sent row", "outbox_id=%" PRId64 " error=%s",
                  e->id, log_quote(why));
        if (hdrs)
            rd_kafka_headers_destroy(hdrs);
        return EXIT_SOFTWARE;
    }
    rd_kafka_resp_err_t pe;
    for (;;) {
        pe = rd_kafka_producev(
            r->rk, RD_KAFKA_V_TOPIC(topic),
            RD_KAFKA_V_PARTITION(event_row_partition(e, &r->ms.style)),
            RD_KAFKA_V_KEY(m.key, m.key_len), RD_KAFKA_V_VALUE((void *)m.value, m.value_len),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_TIMESTAMP(e->created_ms),
            RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE((void *)(intptr_t)e->id), RD_KAFKA_V_END);
        if (pe != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            break;
        rd_kafka_poll(r->rk, 100);
    }
    if (pe) {
        rd_kafka_headers_destroy(hdrs);
        log_error("cannot produce", "outbox_id=%" PRId64 " topic=%s error=%s", e->id, topic,
                  rd_kafka_err2str(pe));
        return EXIT_SOFTWARE;
    }
    return EXIT_OK;
}

static void show_progress(struct run *r, int64_t id)
{
    if (!r->progress || stats_now() - r->last_progress <= 0.25)
        return;
    r->last_progress = stats_now();
    double rate = (double)r->produced / (r->last_progress - r->started + 1e-9);
    fprintf(stderr, "\r\033[Kreplay: %" PRIu64 " rows published (id %" PRId64 "), %.0f rows/s",
            r->produced, id, rate);
}

/* One row of the selection: refused when not @p replayable (poll: not sent
 * yet; wal: dead), else printed (--dry-run) or published.
 * @return EXIT_OK or the failure's exit status. */
static int replay_row(struct run *r, const struct event_row *e, bool replayable)
{
    if (!replayable) {
        if (r->refused < REFUSED_SHOWN)
            r->refused_ids[r->refused] = e->id;
        r->refused++;
        return EXIT_OK;
    }
    char topic[512];
    row_topic(r, e, topic, sizeof topic);
    if (!r->first_id)
        r->first_id = e->id;
    if (r->a->dry_run) {
        printf("would replay id %" PRId64 " event_id %s to %s key %s event_type %s "
               "created_at %s (%zu bytes%s)\n",
               e->id, e->event_id, topic, e->aggregate_id ? log_quote(e->aggregate_id) : "(none)",
               log_quote(e->event_type),
               e->created_at, e->payload ? e->payload_len : 0, e->payload ? "" : ", tombstone");
        r->produced++;
        return EXIT_OK;
    }
    pace(r);
    int status = produce_row(r, e, topic);
    if (status != EXIT_OK)
        return status;
    r->produced++;
    rd_kafka_poll(r->rk, 0);
    show_progress(r, e->id);
    return EXIT_OK;
}

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Reads one page, replays its rows and waits for their acknowledgements.
 * @return EXIT_OK or the failure's exit status; *more is false after the
 * last page or an interruption. */
static int replay_page(struct run *r, bool *more)
{
    PGresult *res;
    int status = read_page(r, &res);
    if (status != EXIT_OK)
        return status;
    int n = PQntuples(res);
    *more = n == PAGE_ROWS;
    int64_t page_last = r->after;
    for (int i = 0; i < n && status == EXIT_OK; i++) {
        if (atomic_load(&interrupted)) {
            r->stopped = true;
            *more = false;
            break;
        }
        struct event_row e;
        row_of(res, i, &e);
        page_last = e.id;
        if (r->only && !bsearch(&e.id, r->only, r->n_only, sizeof e.id, cmp_id))
            continue;
        bool ok = r->cfg->capture == RELAY_CAPTURE_WAL ? !pgb_bool(PQgetvalue(res, i, ROWS_DEAD))
                                                       : pgb_bool(PQgetvalue(res, i, ROWS_SENT));
        status = replay_row(r, &e, ok);
    }
    PQclear(res);
    if (r->rk)
        drain(r->rk);
    if (r->d.failed) {
        log_error("replay failed: a message was not acknowledged", "outbox_id=%" PRId64
                  " error=%s failed=%" PRIu64, r->d.first_failed_id, log_quote(r->d.first_error),
                  r->d.failed);
        return EXIT_SOFTWARE;
    }
    /* Everything up to the last row handled is acknowledged now. */
    if (status == EXIT_OK)
        r->done_through = page_last;
    r->after = page_last;
    return status;
}

/* What was replayed, what was refused, and where to continue after an
 * interruption. @return @p status, 130 when interrupted. */
static int print_summary(const struct run *r, int status)
{
    if (status != EXIT_OK && !r->stopped)
        return status;
    printf("%s %" PRIu64 " row%s", r->a->dry_run ? "would replay" : "replayed", r->produced,
           r->produced == 1 ? "" : "s");
    if (r->produced)
        printf(" (ids %" PRId64 " to %" PRId64 ")", r->first_id, r->done_through);
    if (!r->a->dry_run)
        printf(" with %s=%s", EVENT_REPLAY_HEADER, r->replayed_at);
    printf("\n");
    if (r->refused) {
        if (r->cfg->capture == RELAY_CAPTURE_WAL)
            printf("refused %" PRIu64 " dead row%s (`outbox-relay dead` handles them):",
                   r->refused, r->refused == 1 ? "" : "s");
        else
            printf("refused %" PRIu64 " row%s not sent yet (they belong to the relay):",
                   r->refused, r->refused == 1 ? "" : "s");
        for (uint64_t i = 0; i < r->refused && i < REFUSED_SHOWN; i++)
            printf(" %" PRId64, r->refused_ids[i]);
        printf("%s\n", r->refused > REFUSED_SHOWN ? " …" : "");
    }
    if (r->stopped) {
        printf("interrupted: every row up to id %" PRId64 " was acknowledged; continue with "
               "--from-id %" PRId64 "\n", r->done_through, r->done_through + 1);
        status = 130;
    }
    return status;
}

/* Page after page until the selection ends, a row fails or a signal comes. */
static int replay_pages(struct run *r)
{
    struct sigaction sa = {.sa_handler = on_sigint};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    stamp_now(r->replayed_at, sizeof r->replayed_at);
    r->progress = !r->a->dry_run && isatty(STDERR_FILENO);
    r->started = stats_now();

    int status = EXIT_OK;
    bool more = true;
    while (more && status == EXIT_OK)
        status = replay_page(r, &more);
    if (r->progress)
        fputs("\r\033[K", stderr);
    status = print_summary(r, status);
    if (fflush(stdout) != 0 && status == EXIT_OK)
        status = EXIT_SOFTWARE;
    return status;
}

int replay_main(const struct relay_config *cfg, int argc, char **argv)
{
    struct replay_args a = {0};
    char since[64], until[64];
    int status = parse_args(argc, argv, &a, since, until, sizeof since);
    if (status)
        return status;

    if (cfg->profile == RELAY_PROFILE_DEBEZIUM && cfg->capture == RELAY_CAPTURE_WAL) {
        fprintf(stderr, "outbox-relay replay: relay.profile = debezium with relay.capture = wal: "
                        "Debezium's table keeps no row to replay\n");
        free((char *)a.aggregate_type);
        return EXIT_CONFIG;
    }
    struct run r = {.cfg = cfg, .a = &a, .after = INT64_MIN};
    producer_style_init(&r.ms, cfg);
    char view[CONFIG_RELATION_MAX];
    if (sql_window_init(&r.q, cfg->schema, config_claim_relation(cfg, view),
                        config_placed_count(cfg)) < 0) {
        log_error("cannot build the replay statement", "schema=%s table=%s", cfg->schema,
                  cfg->table);
        free((char *)a.aggregate_type);
        producer_style_free(&r.ms);
        return EXIT_SOFTWARE;
    }
    status = open_run(&r);
    if (status == EXIT_OK)
        status = replay_pages(&r);
    close_run(&r);
    free((char *)a.aggregate_type);
    return status;
}

int replay_ids(const struct relay_config *cfg, const int64_t *ids, size_t n, uint64_t *published)
{
    *published = 0;
    if (n == 0)
        return EXIT_OK;
    char from[24], to[24];
    snprintf(from, sizeof from, "%" PRId64, ids[0]);
    snprintf(to, sizeof to, "%" PRId64, ids[n - 1]);
    struct replay_args a = {.from_id = from, .to_id = to};
    struct run r = {.cfg = cfg, .a = &a, .after = INT64_MIN, .only = ids, .n_only = n};
    producer_style_init(&r.ms, cfg);
    char view[CONFIG_RELATION_MAX];
    int status = sql_window_init(&r.q, cfg->schema, config_claim_relation(cfg, view),
                                 config_placed_count(cfg)) < 0 ? EXIT_SOFTWARE : open_run(&r);
    r.started = stats_now();
    bool more = status == EXIT_OK;
    while (more && status == EXIT_OK)
        status = replay_page(&r, &more);
    *published = status == EXIT_OK ? r.produced : 0;
    close_run(&r);
    return status;
}
