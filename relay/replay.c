/* replay.c — `outbox-relay replay`: sent rows published again.
 *
 * Blocking libpq and a producer flushed page by page: a one-shot command.
 * Rows are read in id order, one page at a time, and produced in that order
 * by the relay's own idempotent producer settings (producer_conf_new): one
 * request in flight per broker keeps each aggregate's order, as for the
 * relay. Each page is flushed before the next is read, so on SIGINT
 * everything up to a known id was acknowledged and the run can resume there. */
#include "replay.h"

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

#include "cli_args.h"
#include "errors.h"
#include "event.h"
#include "log.h"
#include "pg.h"
#include "producer.h"
#include "sql.h"
#include "stats.h"
#include "verify.h"

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
            "replay=<when>. Rows not sent yet are refused: they belong to the relay. The\n"
            "table is only read: safe next to a running relay. Interrupted, it says up to\n"
            "which id everything was acknowledged; running it again publishes the same\n"
            "messages again (consumers drop repeated event_ids).\n"
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
}

/* Waits for every message produced so far; SIGINT does not cut this short:
 * what is in flight is acknowledged or failed before we say where we are. */
static void drain(rd_kafka_t *rk)
{
    while (rd_kafka_outq_len(rk) > 0)
        rd_kafka_flush(rk, 100);
}

int replay_main(const struct relay_config *cfg, int argc, char **argv)
{
    struct replay_args a = {0};
    char since[64], until[64];
    int status = parse_args(argc, argv, &a, since, until, sizeof since);
    if (status)
        return status;

    struct sql_window q;
    if (sql_window_init(&q, cfg->schema, cfg->table) < 0) {
        log_error("cannot build the replay statement", "schema=%s table=%s", cfg->schema,
                  cfg->table);
        return EXIT_SOFTWARE;
    }
    const char *const keys[] = {"dbname", "fallback_application_name", NULL};
    const char *const values[] = {cfg->pg_conninfo, "outbox-relay replay", NULL};
    PGconn *conn = PQconnectdbParams(keys, values, 1);
    rd_kafka_t *rk = NULL;
    struct delivery d = {0};
    char err[1024];
    if (PQstatus(conn) != CONNECTION_OK) {
        log_error("cannot connect to postgres", "error=%s",
                  log_quote_pq(cfg->pg_conninfo, PQerrorMessage(conn)));
        status = EXIT_UNAVAILABLE;
        goto out;
    }
    /* The relay's marks are not ours to touch: this session cannot write. */
    PQclear(PQexec(conn, "SET default_transaction_read_only = on"));
    if (!a.dry_run && !(rk = producer_new(cfg, &d, err, sizeof err))) {
        log_error("kafka producer rejected the configuration", "error=%s", log_quote(err));
        status = EXIT_CONFIG;
        goto out;
    }

    struct sigaction sa = {.sa_handler = on_sigint};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    char replayed_at[40];
    {
        double now = stats_now();
        time_t secs = (time_t)now;
        struct tm tm;
        gmtime_r(&secs, &tm);
        size_t n = strftime(replayed_at, sizeof replayed_at, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(replayed_at + n, sizeof replayed_at - n, ".%03dZ", (int)((now - (double)secs) * 1000));
    }

    bool progress = !a.dry_run && isatty(STDERR_FILENO);
    double started = stats_now(), last_progress = 0;
    uint64_t produced = 0, refused = 0;
    int64_t refused_ids[REFUSED_SHOWN], first_id = 0, done_through = 0, after = INT64_MIN;
    bool more = true, stopped = false;
    while (more && status == EXIT_OK) {
        char after_s[24], limit_s[16];
        snprintf(after_s, sizeof after_s, "%" PRId64, after);
        snprintf(limit_s, sizeof limit_s, "%d", PAGE_ROWS);
        const char *params[] = {a.from_id, a.to_id,          a.since,         a.until,     after_s,
                                limit_s,   a.aggregate_type, a.aggregate_id,  a.event_type};
        PGresult *res = PQexecParams(conn, q.replay, 9, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
            log_error("reading the outbox table failed", "error=%s",
                      log_quote(PQresultErrorMessage(res)));
            status = PQstatus(conn) == CONNECTION_BAD ? EXIT_UNAVAILABLE
                     : state && strcmp(state, SQLSTATE_UNDEFINED_TABLE) == 0 ? EXIT_CONFIG
                     : state && strncmp(state, "22", 2) == 0                  ? EXIT_USAGE
                                                                              : EXIT_SOFTWARE;
            PQclear(res);
            break;
        }
        int n = PQntuples(res);
        more = n == PAGE_ROWS;
        int64_t page_last = after;
        for (int i = 0; i < n; i++) {
            if (atomic_load(&interrupted)) {
                stopped = true;
                more = false;
                break;
            }
            struct event_row e;
            row_of(res, i, &e);
            page_last = e.id;
            if (PQgetvalue(res, i, ROWS_SENT)[0] != 't') {
                if (refused < REFUSED_SHOWN)
                    refused_ids[refused] = e.id;
                refused++;
                continue;
            }
            char topic[512];
            if (a.topic)
                snprintf(topic, sizeof topic, "%s", a.topic);
            else if (e.topic && *e.topic)
                snprintf(topic, sizeof topic, "%s", e.topic);
            else if (event_topic_render(cfg->topic, e.aggregate_type, e.event_type, topic,
                                        sizeof topic) < 0)
                topic[0] = '\0';
            if (!first_id)
                first_id = e.id;
            if (a.dry_run) {
                printf("would replay id %" PRId64 " event_id %s to %s key %s event_type %s "
                       "created_at %s (%zu bytes%s)\n",
                       e.id, e.event_id, topic, log_quote(e.aggregate_id), log_quote(e.event_type),
                       e.created_at, e.payload ? e.payload_len : 0, e.payload ? "" : ", tombstone");
                produced++;
                continue;
            }
            if (a.rate > 0) {
                /* Paced from the start, so a slow page does not earn a burst. */
                double due = started + (double)produced / (double)a.rate;
                double wait = due - stats_now();
                if (wait > 0)
                    usleep((useconds_t)(wait * 1e6));
            }
            rd_kafka_headers_t *hdrs = NULL;
            char why[512];
            if (event_headers_build(&e, &hdrs, why, sizeof why) < 0 ||
                rd_kafka_header_add(hdrs, EVENT_REPLAY_HEADER, -1, replayed_at, -1)) {
                /* A sent row whose headers no longer build was edited after it was sent. */
                log_error("cannot build the headers of a sent row", "outbox_id=%" PRId64 " error=%s",
                          e.id, log_quote(why));
                if (hdrs)
                    rd_kafka_headers_destroy(hdrs);
                status = EXIT_SOFTWARE;
                more = false;
                break;
            }
            rd_kafka_resp_err_t pe;
            for (;;) {
                pe = rd_kafka_producev(
                    rk, RD_KAFKA_V_TOPIC(topic),
                    RD_KAFKA_V_KEY(e.aggregate_id, strlen(e.aggregate_id)),
                    RD_KAFKA_V_VALUE((void *)e.payload, e.payload ? e.payload_len : 0),
                    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_TIMESTAMP(e.created_ms),
                    RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE((void *)(intptr_t)e.id),
                    RD_KAFKA_V_END);
                if (pe != RD_KAFKA_RESP_ERR__QUEUE_FULL)
                    break;
                rd_kafka_poll(rk, 100);
            }
            if (pe) {
                rd_kafka_headers_destroy(hdrs);
                log_error("cannot produce", "outbox_id=%" PRId64 " topic=%s error=%s", e.id, topic,
                          rd_kafka_err2str(pe));
                status = EXIT_SOFTWARE;
                more = false;
                break;
            }
            produced++;
            rd_kafka_poll(rk, 0);
            if (progress && stats_now() - last_progress > 0.25) {
                last_progress = stats_now();
                double rate = (double)produced / (last_progress - started + 1e-9);
                fprintf(stderr, "\r\033[Kreplay: %" PRIu64 " rows published (id %" PRId64
                                "), %.0f rows/s",
                        produced, e.id, rate);
            }
        }
        PQclear(res);
        if (rk)
            drain(rk);
        if (d.failed) {
            log_error("replay failed: a message was not acknowledged", "outbox_id=%" PRId64
                      " error=%s failed=%" PRIu64, d.first_failed_id, log_quote(d.first_error),
                      d.failed);
            status = EXIT_SOFTWARE;
            break;
        }
        /* Everything up to the last row handled is acknowledged now. */
        if (status == EXIT_OK)
            done_through = page_last;
        after = page_last;
    }
    if (progress)
        fputs("\r\033[K", stderr);

    if (status == EXIT_OK || stopped) {
        printf("%s %" PRIu64 " row%s", a.dry_run ? "would replay" : "replayed", produced,
               produced == 1 ? "" : "s");
        if (produced)
            printf(" (ids %" PRId64 " to %" PRId64 ")", first_id, done_through);
        if (!a.dry_run)
            printf(" with %s=%s", EVENT_REPLAY_HEADER, replayed_at);
        printf("\n");
        if (refused) {
            printf("refused %" PRIu64 " row%s not sent yet (they belong to the relay):", refused,
                   refused == 1 ? "" : "s");
            for (uint64_t i = 0; i < refused && i < REFUSED_SHOWN; i++)
                printf(" %" PRId64, refused_ids[i]);
            printf("%s\n", refused > REFUSED_SHOWN ? " …" : "");
        }
        if (stopped) {
            printf("interrupted: every row up to id %" PRId64 " was acknowledged; continue with "
                   "--from-id %" PRId64 "\n", done_through, done_through + 1);
            status = 130;
        }
    }
    if (fflush(stdout) != 0 && status == EXIT_OK)
        status = EXIT_SOFTWARE;

out:
    if (rk) {
        drain(rk);
        rd_kafka_destroy(rk);
    }
    PQfinish(conn);
    sql_window_free(&q);
    free((char *)a.aggregate_type);
    return status;
}
