/* verify.c — `outbox-relay verify`: the table and Kafka, side by side.
 *
 * Blocking libpq and a blocking consumer: this is a one-shot command (and,
 * in the daemon, a worker thread's job, never the loop's). The window's rows
 * are read in id-ordered pages into slices of at most slice_rows rows; for
 * each slice, every partition of the topics its rows map to is read from the
 * first offset whose timestamp is at or after the slice's oldest created_at
 * (CreateTime = created_at) to its end, one partition at a time, and each
 * message is handed to verify_check.c, which keeps 64 bytes or so per row and
 * nothing per message. With relay.capture = wal the rows are read in one
 * snapshot, and the slot says which are sent (verify_wal.c). */
#include "cmd/verify.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <limits.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
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
#include "core/sql.h"
#include "base/stats.h"
#include "cmd/pg_session.h"

#define SQLSTATE_UNDEFINED_TABLE "42P01"
#define PAGE_ROWS 10000
#define KAFKA_TIMEOUT_MS 15000
/* A partition that yields nothing for this long before its end is an outage. */
#define PARTITION_STALL_MS 30000
/* How long a partition's stable offset may trail its end before the rows past
 * it are counted: a commit's markers land a moment after the commit returned. */
#define TXN_SETTLE_MS 10000

void verify_time_arg(const char *arg, double now, char *out, size_t outlen)
{
    long secs = -1;
    size_t n = strlen(arg);
    /* "7d" is a duration; "2025-01-07" is a date: a duration is digits and one unit. */
    if (n >= 2 && strchr("smhd", arg[n - 1]) && strspn(arg, "0123456789") == n - 1)
        secs = config_parse_duration(arg);
    if (secs < 0) {
        snprintf(out, outlen, "%s", arg);
        return;
    }
    time_t t = (time_t)now - secs;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* ---- Kafka ------------------------------------------------------------------ */

static void on_consumer_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    /* The [kafka] section is written for the producer: a consumer built from
     * it warns about every producer property, which says nothing here. */
    bool noise = strcmp(fac, "CONFWARN") == 0 || strcmp(fac, "AUTOCREATE") == 0;
    enum log_level l = noise ? LOG_LVL_DEBUG
                       : level <= 3 ? LOG_LVL_ERROR
                       : level <= 5 ? LOG_LVL_WARN
                       : level == 6 ? LOG_LVL_INFO : LOG_LVL_DEBUG;
    log_write(l, "librdkafka", "facility=%s detail=%s", fac, log_quote(buf));
}

static rd_kafka_t *consumer_new(const struct relay_config *cfg, const char *isolation, char *err,
                                size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char why[512];
    /* Connection and security settings come from [kafka] as for the relay. */
    for (size_t i = 0; i < cfg->n_kafka; i++)
        rd_kafka_conf_set(conf, cfg->kafka[i].key, cfg->kafka[i].value, why, sizeof why);
    const char *const settings[][2] = {
        {"isolation.level", isolation},
        /* Partitions are assigned by hand; no group is joined, nothing committed. */
        {"group.id", "outbox-relay-verify"},
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        {"enable.partition.eof", "true"},
        {"auto.offset.reset", "earliest"},
        {"allow.auto.create.topics", "false"},
        /* Bounded prefetch: verify's memory must not grow with Kafka. */
        {"queued.max.messages.kbytes", "8192"},
        {"fetch.max.bytes", "8388608"},
        {"statistics.interval.ms", "0"},
        /* Each partition is read to its end and then let go: a fetch parked at
         * the end (500 ms by default) would delay the next partition's first. */
        {"fetch.wait.max.ms", "10"},
        {"client.id", "outbox-relay-verify"},
    };
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        if (rd_kafka_conf_set(conf, settings[i][0], settings[i][1], why, sizeof why) !=
            RD_KAFKA_CONF_OK) {
            snprintf(err, errlen, "kafka consumer: %s: %s", settings[i][0], why);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    rd_kafka_conf_set_log_cb(conf, on_consumer_log);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof why);
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        snprintf(err, errlen, "kafka consumer: %s", why);
        return NULL;
    }
    rd_kafka_poll_set_consumer(rk);
    return rk;
}

/* ---- one run ---------------------------------------------------------------- */

struct run {
    const struct relay_config *cfg;
    const struct verify_opts *o;
    struct vcheck *v;
    struct verify_meta *meta;
    PGconn *conn;
    rd_kafka_t *rk;
    rd_kafka_t *rk_end;          /* read_uncommitted: where each partition really ends */
    struct sql_window q;
    const char *params[6];
    char page_after[24], page_limit[16];
    uint8_t *topic_used;         /* per vcheck topic: rows of this slice map to it */
    size_t topic_used_cap;
    double started;
    double last_progress;
    uint64_t rows_done;          /* rows of finished slices */
    bool warned_times;
    bool wal_sent;               /* capture = wal, the slot passed the fence: rows not dead are sent */
    struct message_style ms;     /* the producer's: what each row's message is */
    struct strbuf key, value;    /* a row's key and value, json converters */
    const char *id_header;       /* the header carrying the event id */
    bool skip_value;             /* json_with_schema envelopes: named by what the relay saw first */
    char *err;
    size_t errlen;
};

static bool stopped(const struct run *r)
{
    return r->o->stop && atomic_load(r->o->stop);
}

static void progress(struct run *r, size_t slice_rows, double fraction, bool final)
{
    if (!r->o->progress)
        return;
    double now = stats_now();
    if (!final && now - r->last_progress < 0.25)
        return;
    r->last_progress = now;
    double done = (double)r->rows_done + (double)slice_rows * fraction;
    double total = (double)r->meta->window_rows;
    double elapsed = now - r->started;
    double rate = elapsed > 0 ? done / elapsed : 0;
    double eta = rate > 0 && total > done ? (total - done) / rate : 0;
    fprintf(stderr, "\r\033[Kverify: %.0f of %.0f rows checked (%.0f%%), %.0f rows/s, ETA %.0f s",
            done, total, total > 0 ? 100.0 * done / total : 100.0, rate, eta);
    if (final)
        fputc('\n', stderr);
    fflush(stderr);
}

static int pg_fail(struct run *r, PGresult *res, const char *what)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (PQstatus(r->conn) == CONNECTION_BAD) {
        snprintf(r->err, r->errlen, "lost the connection to postgres: %s", PQerrorMessage(r->conn));
        return -EHOSTUNREACH;
    }
    snprintf(r->err, r->errlen, "%s: %s", what,
             res ? PQresultErrorMessage(res) : PQerrorMessage(r->conn));
    if (state && strcmp(state, SQLSTATE_UNDEFINED_TABLE) == 0)
        return -ENOENT;
    /* invalid_datetime_format and friends: a --since PostgreSQL cannot read */
    if (state && strncmp(state, "22", 2) == 0)
        return -EINVAL;
    return -EIO;
}

/* Reduces row @p i of a rows result to what the comparison keeps. */
static int row_add(struct run *r, PGresult *res, int i)
{
    struct event_row e;
    pg_claim_row(res, i, &e);
    pg_claim_placed(res, i, ROWS_NCOLS, &e);
    struct vcheck_row row = {.id = e.id};
    bool dead = pgb_bool(PQgetvalue(res, i, ROWS_DEAD));
    bool sent = pgb_bool(PQgetvalue(res, i, ROWS_SENT)) || (r->wal_sent && !dead);
    row.state = sent ? VCHECK_SENT : dead ? VCHECK_DEAD : VCHECK_PENDING;
    vcheck_uuid_parse(e.event_id, strlen(e.event_id), row.event_id);

    /* The same topic the relay computes (relay_poll_pipeline.c): the row's own, else the template. */
    char topic[512];
    event_row_topic(r->cfg->topic, &e, topic, sizeof topic);
    row.topic = vcheck_topic(r->v, topic);
    if (row.topic == UINT32_MAX)
        return -ENOMEM;
    if (row.topic >= r->topic_used_cap) {
        size_t cap = r->topic_used_cap ? 2 * r->topic_used_cap : 16;
        while (cap <= row.topic)
            cap *= 2;
        uint8_t *u = realloc(r->topic_used, cap);
        if (!u)
            return -ENOMEM;
        memset(u + r->topic_used_cap, 0, cap - r->topic_used_cap);
        r->topic_used = u;
        r->topic_used_cap = cap;
    }
    r->topic_used[row.topic] = 1;

    /* The message the relay would write, built by the same code: a row it
     * never published (poison headers, a payload it cannot expand) matches
     * nothing. */
    struct connect_bytes m;
    if (connect_message(&e, &r->ms.style, &r->key, &r->value, &m, NULL, 0) < 0)
        return vcheck_row_add(r->v, &row);
    row.key = vcheck_digest_bytes(m.key, m.key_len);
    row.value = r->skip_value ? 0 : vcheck_digest_bytes(m.value, m.value_len);
    rd_kafka_headers_t *hdrs = NULL;
    if (event_headers_build_styled(&e, &r->ms.style, &hdrs, NULL, 0) == 0) {
        uint64_t h = VCHECK_SEED;
        const char *name;
        const void *val;
        size_t size;
        for (size_t k = 0; rd_kafka_header_get_all(hdrs, k, &name, &val, &size) ==
                           RD_KAFKA_RESP_ERR_NO_ERROR;
             k++)
            h = vcheck_digest_header(h, name, strlen(name), val, size);
        row.headers = vcheck_digest_timestamp(h, e.created_ms);
        rd_kafka_headers_destroy(hdrs);
    }
    return vcheck_row_add(r->v, &row);
}

static void msg_reduce(const struct run *r, const rd_kafka_message_t *m, uint32_t topic,
                       struct vcheck_msg *out)
{
    memset(out, 0, sizeof *out);
    out->topic = topic;
    out->partition = m->partition;
    out->offset = m->offset;
    out->timestamp = rd_kafka_message_timestamp(m, NULL);
    out->key = vcheck_digest_bytes(m->key, m->key_len);
    out->value = r->skip_value ? 0 : vcheck_digest_bytes(m->payload, m->len);
    uint64_t h = VCHECK_SEED;
    rd_kafka_headers_t *hdrs = NULL;
    if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char *name;
        const void *val;
        size_t size;
        for (size_t k = 0;
             rd_kafka_header_get_all(hdrs, k, &name, &val, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
             k++) {
            if (strcmp(name, EVENT_REPLAY_HEADER) == 0) {
                out->replay = true;
                continue; /* the one header a replay adds */
            }
            if (strcmp(name, r->id_header) == 0 && val && !out->has_event_id)
                out->has_event_id = vcheck_uuid_parse(val, size, out->event_id);
            if (strcmp(name, "outbox_id") == 0 && val && !out->has_outbox_id && size < 24) {
                char buf[24];
                memcpy(buf, val, size);
                buf[size] = '\0';
                char *end;
                long long id = strtoll(buf, &end, 10);
                out->has_outbox_id = end != buf && *end == '\0';
                out->outbox_id = id;
            }
            h = vcheck_digest_header(h, name, strlen(name), val, size);
        }
    }
    out->headers = vcheck_digest_timestamp(h, out->timestamp);
}

/* Reads one partition from @p start to its end. @return 0 or negative. */
static int read_partition(struct run *r, const char *topic, uint32_t tidx, int32_t part,
                          int64_t start, int64_t end, size_t slice_rows, double *frac_done,
                          double frac_share)
{
    rd_kafka_topic_partition_list_t *a = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(a, topic, part)->offset = start;
    rd_kafka_resp_err_t e = rd_kafka_assign(r->rk, a);
    rd_kafka_topic_partition_list_destroy(a);
    if (e) {
        snprintf(r->err, r->errlen, "kafka: cannot read %s [%d]: %s", topic, (int)part,
                 rd_kafka_err2str(e));
        return -ENETUNREACH;
    }
    int rc = 0;
    double span = end > start ? (double)(end - start) : 1;
    double idle_since = stats_now();
    for (;;) {
        if (stopped(r)) {
            rc = -EINTR;
            break;
        }
        rd_kafka_message_t *m = rd_kafka_consumer_poll(r->rk, 100);
        if (!m) {
            if ((stats_now() - idle_since) * 1000 > PARTITION_STALL_MS) {
                snprintf(r->err, r->errlen,
                         "kafka: %s [%d] did not reach its end (offset %" PRId64 ") within %d s",
                         topic, (int)part, end, PARTITION_STALL_MS / 1000);
                rc = -ENETUNREACH;
                break;
            }
            continue;
        }
        idle_since = stats_now();
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            rd_kafka_message_destroy(m);
            break;
        }
        if (m->err) {
            /* Transport errors are retried by librdkafka; the stall timer ends a real outage. */
            log_debug("verify consumer error", "topic=%s partition=%d error=%s", topic, (int)part,
                      log_quote(rd_kafka_message_errstr(m)));
            rd_kafka_message_destroy(m);
            continue;
        }
        struct vcheck_msg vm;
        msg_reduce(r, m, tidx, &vm);
        int64_t off = m->offset;
        rd_kafka_message_destroy(m);
        vcheck_observe(r->v, &vm);
        r->meta->messages_read++;
        progress(r, slice_rows, *frac_done + frac_share * (double)(off - start + 1) / span, false);
        if (off >= end - 1)
            break;
    }
    *frac_done += frac_share;
    rd_kafka_assign(r->rk, NULL);
    return rc;
}

/* The timestamp of the message at @p offset, or INT64_MIN if it cannot be read. */
static int64_t timestamp_at(struct run *r, const char *topic, int32_t part, int64_t offset)
{
    rd_kafka_topic_partition_list_t *a = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(a, topic, part)->offset = offset;
    rd_kafka_resp_err_t e = rd_kafka_assign(r->rk, a);
    rd_kafka_topic_partition_list_destroy(a);
    int64_t ts = INT64_MIN;
    double until = stats_now() + KAFKA_TIMEOUT_MS / 1000.0;
    while (!e && ts == INT64_MIN && stats_now() < until && !stopped(r)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(r->rk, 100);
        if (!m)
            continue;
        if (!m->err && m->offset >= offset)
            ts = rd_kafka_message_timestamp(m, NULL);
        bool eof = m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF;
        rd_kafka_message_destroy(m);
        if (eof)
            break;
    }
    rd_kafka_assign(r->rk, NULL);
    return ts;
}

/* The partition's first offset and its stable offset, where reading
 * committed data ends. A transaction the relay committed becomes readable
 * only once the coordinator has written its markers, a moment after the
 * commit returned and the rows were marked: the stable offset is given that
 * moment, bounded, to catch up with the partition's end as it was on entry.
 * @return 0 or negative. */
static int stable_end(struct run *r, const char *topic, int32_t part, int64_t *lo, int64_t *lso)
{
    int64_t end_lo, end;
    rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(r->rk_end, topic, part, &end_lo, &end,
                                                             KAFKA_TIMEOUT_MS);
    if (!e)
        e = rd_kafka_query_watermark_offsets(r->rk, topic, part, lo, lso, KAFKA_TIMEOUT_MS);
    double until = stats_now() + TXN_SETTLE_MS / 1000.0;
    while (!e && *lso < end && stats_now() < until && !stopped(r)) {
        usleep(50 * 1000);
        e = rd_kafka_query_watermark_offsets(r->rk, topic, part, lo, lso, KAFKA_TIMEOUT_MS);
    }
    if (e) {
        snprintf(r->err, r->errlen, "kafka: watermarks of %s [%d]: %s", topic, (int)part,
                 rd_kafka_err2str(e));
        return -ENETUNREACH;
    }
    if (*lso < end)
        log_warn("verify: an open Kafka transaction holds the partition back; rows in it count "
                 "as missing", "topic=%s partition=%d stable_offset=%" PRId64 " end_offset=%" PRId64
                 " waited_ms=%d", topic, (int)part, *lso, end, TXN_SETTLE_MS);
    return 0;
}

/* The partitions of @p topic, from the cluster's metadata; none when the
 * topic does not exist (counted in missing_topics).
 * @return 0 with *ids (to free) and *n_parts, or negative. */
static int topic_partitions(struct run *r, const char *topic, int32_t **ids, int *n_parts)
{
    *ids = NULL;
    *n_parts = 0;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(r->rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rkt ? rd_kafka_metadata(r->rk, 0, rkt, &md, KAFKA_TIMEOUT_MS)
                                : RD_KAFKA_RESP_ERR__FAIL;
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    if (e) {
        snprintf(r->err, r->errlen, "kafka: metadata of %s: %s", topic, rd_kafka_err2str(e));
        return -ENETUNREACH;
    }
    int n = 0;
    if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        n = md->topics[0].partition_cnt;
    else if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
        r->meta->missing_topics++;
        log_debug("verify: topic does not exist", "topic=%s", topic);
    } else if (md->topic_cnt == 1) {
        snprintf(r->err, r->errlen, "kafka: metadata of %s: %s", topic,
                 rd_kafka_err2str(md->topics[0].err));
        rd_kafka_metadata_destroy(md);
        return -ENETUNREACH;
    }
    int32_t *v = n ? calloc((size_t)n, sizeof *v) : NULL;
    for (int p = 0; p < n && v; p++)
        v[p] = md->topics[0].partitions[p].id;
    rd_kafka_metadata_destroy(md);
    if (n && !v)
        return -ENOMEM;
    *ids = v;
    *n_parts = n;
    return 0;
}

/* The first offset of each of the @p n partitions @p ids at or after the
 * slice's oldest created_at (@p from_ms): every message of the slice's rows
 * is there or later. @return 0 with *out (to destroy; a partition's own
 * error is in its element), or negative. */
static int offsets_at(struct run *r, const char *topic, const int32_t *ids, int n, int64_t from_ms,
                      rd_kafka_topic_partition_list_t **out)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
    for (int p = 0; p < n; p++)
        rd_kafka_topic_partition_list_add(l, topic, ids[p])->offset = from_ms;
    rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(r->rk, l, KAFKA_TIMEOUT_MS);
    if (e) {
        snprintf(r->err, r->errlen, "kafka: offsets for times of %s: %s", topic,
                 rd_kafka_err2str(e));
        rd_kafka_topic_partition_list_destroy(l);
        return -ENETUNREACH;
    }
    *out = l;
    return 0;
}

/* Where the slice's messages begin in a partition whose messages span
 * [@p lo, @p hi): the offset the lookup by time found (@p found), moved to
 * the first message still there. @return it, or -1 when the partition holds
 * nothing of the slice. */
static int64_t partition_start(struct run *r, const char *topic, int32_t part, int64_t found,
                               int64_t lo, int64_t hi, int64_t from_ms)
{
    /* -1: no message at or after that time (nothing of ours here). Unless the
     * broker cannot look offsets up by time (librdkafka's mock cluster
     * answers -1 to every such request): then the last message is newer than
     * asked, and the partition is read whole. */
    int64_t start = found;
    if (start < 0 && hi > lo && timestamp_at(r, topic, part, hi - 1) >= from_ms) {
        if (!r->warned_times)
            log_warn("verify: the broker does not look offsets up by time; reading "
                     "partitions from their first offset", "topic=%s", topic);
        r->warned_times = true;
        start = lo;
    }
    if (start < 0 || start >= hi)
        return -1;
    /* Reading from the first message still there, after deleted ones:
     * Kafka's retention may have removed some the window needs. */
    if (start <= lo && lo > 0)
        r->meta->truncated_partitions++;
    return start < lo ? lo : start;
}

/* Reads the partitions of topic @p t from the slice's oldest created_at
 * (@p from_ms) to their stable ends; *frac advances by @p share. */
static int read_topic(struct run *r, uint32_t t, int64_t from_ms, size_t slice_rows, double *frac,
                      double share)
{
    const char *name = r->v->topics[t].name;
    int32_t *ids;
    int n_parts;
    int rc = topic_partitions(r, name, &ids, &n_parts);
    if (rc)
        return rc;
    if (n_parts == 0) {
        *frac += share; /* the topic does not exist: nothing to read */
        return 0;
    }
    int64_t *bounds = calloc((size_t)n_parts * 2, sizeof *bounds);
    if (!bounds) {
        free(ids);
        return -ENOMEM;
    }
    /* Before the lookup by time, which a read_committed reader is answered
     * only below the stable offset. */
    for (int p = 0; rc == 0 && p < n_parts; p++)
        rc = stable_end(r, name, ids[p], &bounds[2 * p], &bounds[2 * p + 1]);
    rd_kafka_topic_partition_list_t *l = NULL;
    if (rc == 0)
        rc = offsets_at(r, name, ids, n_parts, from_ms, &l);
    for (int p = 0; rc == 0 && p < l->cnt; p++) {
        const rd_kafka_topic_partition_t *tp = &l->elems[p];
        if (tp->err) {
            snprintf(r->err, r->errlen, "kafka: offsets for times of %s [%d]: %s", name,
                     (int)tp->partition, rd_kafka_err2str(tp->err));
            rc = -ENETUNREACH;
            break;
        }
        double part_share = share / (double)l->cnt;
        int64_t hi = bounds[2 * p + 1];
        int64_t start = partition_start(r, name, tp->partition, tp->offset, bounds[2 * p], hi,
                                        from_ms);
        if (start < 0)
            *frac += part_share;
        else
            rc = read_partition(r, name, t, tp->partition, start, hi, slice_rows, frac, part_share);
    }
    if (l)
        rd_kafka_topic_partition_list_destroy(l);
    free(ids);
    free(bounds);
    return rc;
}

/* Reads every partition of every topic of the slice from @p from_ms on. */
static int read_slice(struct run *r, int64_t from_ms, size_t slice_rows)
{
    size_t n_topics = 0;
    for (size_t t = 0; t < r->v->n_topics && t < r->topic_used_cap; t++)
        n_topics += r->topic_used[t];
    double frac = 0;
    for (size_t t = 0; t < r->v->n_topics && t < r->topic_used_cap; t++) {
        if (!r->topic_used[t])
            continue;
        double share = 1.0 / (double)n_topics;
        /* Rows that could never be published: the sent ones are missing. */
        if (!event_topic_valid(r->v->topics[t].name)) {
            frac += share;
            continue;
        }
        int rc = read_topic(r, (uint32_t)t, from_ms, slice_rows, &frac, share);
        if (rc)
            return rc;
    }
    return 0;
}

/* Reads the window's next rows (after *after) into a new slice, then Kafka.
 * @return 1 when the window is done, 0 to go on, negative on failure. */
static int one_slice(struct run *r, int64_t *after, int64_t own_lo, int64_t own_hi_last,
                     int64_t lo_ms, int64_t hi_ms, bool first, int64_t since_ms)
{
    size_t limit = r->o->slice_rows ? r->o->slice_rows : VERIFY_SLICE_ROWS_DEFAULT;
    if (r->topic_used_cap) /* topic_used is NULL until a row names a topic */
        memset(r->topic_used, 0, r->topic_used_cap);
    vcheck_slice_begin(r->v, 0, 0, false, lo_ms, hi_ms);
    size_t n = 0;
    int64_t min_ms = INT64_MAX;
    bool more = true;
    while (n < limit) {
        if (stopped(r))
            return -EINTR;
        size_t want = limit - n < PAGE_ROWS ? limit - n : PAGE_ROWS;
        snprintf(r->page_after, sizeof r->page_after, "%" PRId64, *after);
        snprintf(r->page_limit, sizeof r->page_limit, "%zu", want);
        const char *params[] = {r->params[0], r->params[1], r->params[2], r->params[3],
                                r->page_after, r->page_limit};
        PGresult *res = PQexecParams(r->conn, r->q.rows, 6, NULL, params, NULL, NULL, 1);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            int rc = pg_fail(r, res, "reading the outbox table");
            PQclear(res);
            return rc;
        }
        int got = PQntuples(res);
        for (int i = 0; i < got; i++) {
            int rc = row_add(r, res, i);
            if (rc < 0) {
                PQclear(res);
                snprintf(r->err, r->errlen, "out of memory");
                return rc;
            }
            int64_t ms = pg_claim_created_ms(res, i);
            if (ms < min_ms)
                min_ms = ms;
        }
        if (got > 0)
            *after = pg_claim_id(res, got - 1);
        PQclear(res);
        n += (size_t)got;
        if ((size_t)got < want) {
            more = false;
            break;
        }
    }
    if (n == 0 && !first) {
        vcheck_slice_end(r->v);
        return 1;
    }
    /* This slice judges unknown messages numbered up to its last row, or to
     * the end of the window when it is the last one. */
    r->v->own_lo = own_lo;
    r->v->own_hi = more ? *after : own_hi_last;
    r->v->own_unnumbered = first;
    int rc = vcheck_slice_index(r->v);
    if (rc < 0) {
        snprintf(r->err, r->errlen, "out of memory");
        return rc;
    }
    /* The first slice also reads from --since, for messages whose rows are
     * gone (retention) and are therefore reported unknown. */
    int64_t from_ms = first && since_ms != INT64_MIN && since_ms < min_ms ? since_ms : min_ms;
    if (n > 0 || (first && since_ms != INT64_MIN))
        rc = n > 0 ? read_slice(r, from_ms, n) : 0;
    r->meta->slices++;
    vcheck_slice_end(r->v);
    r->rows_done += n;
    progress(r, 0, 0, false);
    if (rc < 0)
        return rc;
    return more ? 0 : 1;
}

static int begin_snapshot(struct run *r)
{
    PGresult *res = PQexec(r->conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    int rc = PQresultStatus(res) == PGRES_COMMAND_OK ? 0 : pg_fail(r, res, "beginning the snapshot");
    PQclear(res);
    return rc;
}

/* Connects to PostgreSQL, read-only. @return 0 or negative. */
static int connect_pg(struct run *r)
{
    r->conn = pg_session_open(r->cfg, "verify", r->err, r->errlen);
    if (!r->conn)
        return -EHOSTUNREACH;
    /* Reading only: a mistake here must not be able to change the table. */
    PQclear(PQexec(r->conn, "SET default_transaction_read_only = on"));
    if (r->cfg->capture != RELAY_CAPTURE_WAL)
        return 0;
    /* One snapshot for every page, taken by the first statement, before the
     * fence: the rows read are exactly those committed before it. Or the one
     * a slot exported as it was made: those committed before its stream. */
    int rc = begin_snapshot(r);
    if (rc < 0 || !r->o->snapshot)
        return rc;
    r->meta->snapshot_imported = verify_wal_snapshot(r->conn, r->o->snapshot);
    /* refused (and rolled back): once more, in a snapshot of its own */
    return r->meta->snapshot_imported ? 0 : begin_snapshot(r);
}

/* The window's rows and ids into meta, its time bounds as milliseconds
 * (INT64_MIN, INT64_MAX when open). @return 0 or negative. */
static int read_window(struct run *r, int64_t *since_ms, int64_t *until_ms)
{
    const struct verify_opts *o = r->o;
    r->params[0] = o->w.from_id;
    r->params[1] = o->w.to_id;
    r->params[2] = o->w.since;
    r->params[3] = o->w.until;
    PGresult *res = PQexecParams(r->conn, r->q.bounds, 4, NULL, r->params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        int rc = pg_fail(r, res, "reading the window");
        PQclear(res);
        return rc;
    }
    r->meta->window_rows = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    r->meta->first_id = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
    r->meta->last_id = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
    *since_ms = PQgetisnull(res, 0, 3) ? INT64_MIN : strtoll(PQgetvalue(res, 0, 3), NULL, 10);
    *until_ms = PQgetisnull(res, 0, 4) ? INT64_MAX : strtoll(PQgetvalue(res, 0, 4), NULL, 10);
    PQclear(res);
    return 0;
}

/* The reader, and a second one that sees where each partition really ends.
 * @return 0 or negative. */
static int open_consumers(struct run *r)
{
    /* What a consumer of the outbox must see: committed data only. */
    r->rk = consumer_new(r->cfg, "read_committed", r->err, r->errlen);
    if (r->rk)
        r->rk_end = consumer_new(r->cfg, "read_uncommitted", r->err, r->errlen);
    return r->rk && r->rk_end ? 0 : -EIO;
}

/* The window slice after slice. @return 0 or negative. */
static int check_slices(struct run *r, int64_t since_ms, int64_t until_ms)
{
    const struct verify_opts *o = r->o;
    /* Which message ids the window owns, for unknown messages: an explicit
     * id bound, else open on the side a time bound closes, else the table's. */
    long long from_id = 0, to_id = 0;
    bool has_from = o->w.from_id && cli_parse_int64(o->w.from_id, LLONG_MIN, &from_id) == 0;
    bool has_to = o->w.to_id && cli_parse_int64(o->w.to_id, LLONG_MIN, &to_id) == 0;
    int64_t own_lo = has_from ? from_id : o->w.since ? INT64_MIN : r->meta->first_id;
    int64_t own_hi = has_to ? to_id : o->w.until ? INT64_MAX : r->meta->last_id;
    int64_t lo_ms = since_ms, hi_ms = until_ms == INT64_MAX ? INT64_MAX : until_ms - 1;
    int64_t after = INT64_MIN;
    bool first = true;
    int rc = 0;
    while (rc == 0) {
        rc = one_slice(r, &after, own_lo, own_hi, lo_ms, hi_ms, first,
                       o->w.since ? since_ms : INT64_MIN);
        first = false;
        own_lo = after + 1;
        if (rc == 1)
            return 0;
    }
    return rc;
}

static void close_run(struct run *r)
{
    r->meta->duration = stats_now() - r->started;
    if (r->rk) {
        rd_kafka_consumer_close(r->rk);
        rd_kafka_destroy(r->rk);
    }
    if (r->rk_end)
        rd_kafka_destroy(r->rk_end);
    PQfinish(r->conn);
    sql_window_free(&r->q);
    free(r->topic_used);
    producer_style_free(&r->ms);
    strbuf_free(&r->key);
    strbuf_free(&r->value);
}

int verify_run(const struct relay_config *cfg, const struct verify_opts *o, struct vcheck *v,
               struct verify_meta *meta, char *err, size_t errlen)
{
    memset(meta, 0, sizeof *meta);
    struct run r = {.cfg = cfg, .o = o, .v = v, .meta = meta, .err = err, .errlen = errlen};
    r.started = stats_now();
    err[0] = '\0';
    if (cfg->profile == RELAY_PROFILE_DEBEZIUM && cfg->capture == RELAY_CAPTURE_WAL) {
        snprintf(err, errlen, "relay.profile = debezium with relay.capture = wal: Debezium's "
                              "table holds no row the relay marks (follow the slot with "
                              "`outbox-relay slot status`)");
        return -ENOTSUP;
    }
    producer_style_init(&r.ms, cfg);
    r.id_header = cfg->relay_headers || !*cfg->id_header ? "event_id" : cfg->id_header;
    r.skip_value = event_placement_has(&r.ms.placement, EVENT_PLACE_ENVELOPE) &&
                   cfg->value_converter == EVENT_CONVERTER_JSON_SCHEMA;
    char view[CONFIG_RELATION_MAX];
    if (sql_window_init(&r.q, cfg->schema, config_claim_relation(cfg, view),
                        config_placed_count(cfg)) < 0) {
        snprintf(err, errlen, "cannot build the statements for %s.%s", cfg->schema, cfg->table);
        return -EINVAL;
    }
    int64_t since_ms = INT64_MIN, until_ms = INT64_MAX;
    int rc = connect_pg(&r);
    if (rc == 0)
        rc = read_window(&r, &since_ms, &until_ms);
    if (rc == 0 && cfg->capture == RELAY_CAPTURE_WAL && !o->no_fence) {
        meta->wal = true;
        rc = verify_wal_fence(cfg, o->settle_ms, o->stop, &meta->fence, err, errlen);
        r.wal_sent = meta->fence.passed;
    }
    if (rc == 0)
        rc = open_consumers(&r);
    if (rc == 0) {
        rc = check_slices(&r, since_ms, until_ms);
        progress(&r, 0, 0, true);
    }
    close_run(&r);
    return rc;
}
