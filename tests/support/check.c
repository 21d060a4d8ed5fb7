/* check.c — checking what arrived in Kafka against the outbox rows (see testlib.h). */
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

/* ---- checking what arrived ---------------------------------------------- */

bool e2e_check(struct e2e_report *r, bool ok, const char *fmt, ...)
{
    if (ok)
        return true;
    r->n_fail++;
    if (r->n_fail <= 15 && r->len < sizeof(r->text) - 2) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(r->text + r->len, sizeof(r->text) - r->len - 1, fmt, ap);
        va_end(ap);
        if (n > 0)
            r->len += (size_t)n < sizeof(r->text) - r->len - 1 ? (size_t)n : sizeof(r->text) - r->len - 2;
        r->text[r->len++] = '\n';
        r->text[r->len] = '\0';
    }
    return false;
}

void e2e_report_assert(const struct e2e_report *r, const char *what)
{
    cr_assert(r->n_fail == 0, "%s: %zu check(s) failed; the first ones:\n%s", what, r->n_fail, r->text);
}

static char *dup_or_null(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : strdup(PQgetvalue(res, row, col));
}

void e2e_rows_load(struct e2e_ctx *t, struct e2e_rows *rows)
{
    PGresult *res = e2e_query(t->conn,
        "SELECT id, event_id::text, aggregate_type, aggregate_id, event_type, topic, payload::text,"
        "       (extract(epoch FROM created_at) * 1000000)::bigint,"
        "       to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
        "       (SELECT string_agg(key || '=' || value, E'\\n' ORDER BY key COLLATE \"C\")"
        "          FROM jsonb_each_text(CASE WHEN jsonb_typeof(headers) = 'object' THEN headers END)),"
        "       sent_at IS NOT NULL"
        "  FROM %s ORDER BY id", t->qtable);
    int n = PQntuples(res);
    rows->n = (size_t)n;
    rows->v = calloc((size_t)n + 1, sizeof(*rows->v));
    if (!rows->v)
        abort();
    for (int i = 0; i < n; i++) {
        struct e2e_row *r = &rows->v[i];
        r->id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        r->event_id = dup_or_null(res, i, 1);
        r->aggregate_type = dup_or_null(res, i, 2);
        r->aggregate_id = dup_or_null(res, i, 3);
        r->event_type = dup_or_null(res, i, 4);
        r->topic = dup_or_null(res, i, 5);
        r->payload = dup_or_null(res, i, 6);
        r->created_us = strtoll(PQgetvalue(res, i, 7), NULL, 10);
        r->created_at = dup_or_null(res, i, 8);
        r->custom_headers = dup_or_null(res, i, 9);
        r->sent = PQgetvalue(res, i, 10)[0] == 't';
    }
    PQclear(res);
}

void e2e_rows_free(struct e2e_rows *rows)
{
    for (size_t i = 0; i < rows->n; i++) {
        struct e2e_row *r = &rows->v[i];
        free(r->event_id);
        free(r->aggregate_type);
        free(r->aggregate_id);
        free(r->event_type);
        free(r->topic);
        free(r->payload);
        free(r->created_at);
        free(r->custom_headers);
    }
    free(rows->v);
    memset(rows, 0, sizeof(*rows));
}

struct e2e_row *e2e_rows_find(const struct e2e_rows *rows, int64_t id)
{
    size_t lo = 0, hi = rows->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rows->v[mid].id == id)
            return &rows->v[mid];
        if (rows->v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Renders ${aggregate_type} / ${event_type} the way the contract says. */
static void render_topic(const char *tmpl, const struct e2e_row *row, char *out, size_t outlen)
{
    size_t o = 0;
    for (const char *p = tmpl; *p && o + 1 < outlen;) {
        const char *sub = NULL;
        size_t skip = 0;
        if (!strncmp(p, "${aggregate_type}", 17)) {
            sub = row->aggregate_type;
            skip = 17;
        } else if (!strncmp(p, "${event_type}", 13)) {
            sub = row->event_type;
            skip = 13;
        }
        if (sub) {
            o += (size_t)snprintf(out + o, outlen - o, "%s", sub);
            if (o >= outlen)
                o = outlen - 1;
            p += skip;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
}

static const char *expected_topic(const struct e2e_ctx *t, const struct e2e_row *row, char *buf, size_t len)
{
    if (row->topic && *row->topic)
        return row->topic;
    render_topic(t->topic_template, row, buf, len);
    return buf;
}

/* Orders headers by name, then value, as the SQL side does (COLLATE "C"). */
static int header_cmp(const void *a, const void *b)
{
    const struct e2e_header *x = *(const struct e2e_header *const *)a, *y = *(const struct e2e_header *const *)b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return strcmp(x->value ? x->value : "", y->value ? y->value : "");
}

/* The message's headers after the six fixed ones, as "k=v\n…" sorted; NULL if none. */
static char *custom_headers_of(const struct e2e_msg *m)
{
    if (m->n_headers <= 6)
        return NULL;
    size_t n = m->n_headers - 6, total = 1;
    const struct e2e_header **items = tl_xmalloc(n * sizeof(*items));
    for (size_t i = 0; i < n; i++) {
        items[i] = &m->headers[6 + i];
        total += strlen(items[i]->name) + (items[i]->value ? items[i]->value_len : 6) + 2;
    }
    qsort(items, n, sizeof(*items), header_cmp);
    char *s = tl_xmalloc(total);
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(s + o, total - o, "%s%s=%s", i ? "\n" : "", items[i]->name,
                              items[i]->value ? items[i]->value : "(null)");
    free(items);
    return s;
}

struct key_order {
    char *topic;
    char *key;
    int32_t partition;
    int64_t last_id;            /* the last first delivery: ids must grow */
    int64_t last_offset;
    int64_t max_id;             /* the highest id delivered for this key */
    int64_t tail_id;            /* the id of the key's latest message: must be max_id at the end */
    int64_t tail_offset;
};

static bool streq_n(const char *a, const char *b)
{
    if (!a || !b)
        return a == b;
    return !strcmp(a, b);
}

bool e2e_check_order = true;
bool e2e_keys_may_move = false;
bool (*e2e_unmatched_ok)(const struct e2e_msg *m);

void e2e_verify(const struct e2e_ctx *t, struct e2e_rows *rows, const struct e2e_msgs *msgs,
                struct e2e_report *rep)
{
    static const char *const fixed[6] = {"event_id", "event_type", "aggregate_type",
                                         "aggregate_id", "outbox_id", "created_at"};
    size_t n_keys = 0, cap_keys = 256;
    struct key_order *keys = tl_xmalloc(cap_keys * sizeof(*keys));

    for (size_t i = 0; i < rows->n; i++)
        rows->v[i].deliveries = 0;

    for (size_t i = 0; i < msgs->n; i++) {
        const struct e2e_msg *m = &msgs->v[i];
        const char *oid = e2e_msg_header(m, "outbox_id");
        char where[300];
        snprintf(where, sizeof(where), "%s[%d]@%" PRId64, m->topic, m->partition, m->offset);
        if (!e2e_check(rep, oid != NULL, "%s: no outbox_id header", where))
            continue;
        char *end;
        long long id = strtoll(oid, &end, 10);
        struct e2e_row *row = *end ? NULL : e2e_rows_find(rows, id);
        if (!row && e2e_unmatched_ok && e2e_unmatched_ok(m)) {
            fprintf(stderr, "e2e: %s: outbox_id %s matches no row, as the test allows\n", where, oid);
            continue;
        }
        if (!e2e_check(rep, row != NULL, "%s: outbox_id %s matches no row of the table", where, oid))
            continue;
        bool first = row->deliveries == 0;
        row->deliveries++;

        char tbuf[300];
        const char *want_topic = expected_topic(t, row, tbuf, sizeof(tbuf));
        e2e_check(rep, !strcmp(m->topic, want_topic), "%s: row %lld went to topic %s, expected %s", where, id,
                  m->topic, want_topic);
        e2e_check(rep, streq_n(m->key, row->aggregate_id), "%s: row %lld key %s, expected %s", where, id,
                  m->key ? m->key : "(null)", row->aggregate_id);
        if (row->payload)
            e2e_check(rep, m->value && !strcmp(m->value, row->payload),
                      "%s: row %lld value %.200s, expected %.200s", where, id, m->value ? m->value : "(null)",
                      row->payload);
        else
            e2e_check(rep, m->value == NULL, "%s: row %lld has payload NULL but the message value is %.200s "
                      "(expected a tombstone)", where, id, m->value ? m->value : "");
        e2e_check(rep, m->tstype == RD_KAFKA_TIMESTAMP_CREATE_TIME,
                  "%s: row %lld timestamp type %d, expected CreateTime", where, id, (int)m->tstype);
        int64_t ms_floor = row->created_us / 1000, ms_round = (row->created_us + 500) / 1000;
        e2e_check(rep, m->timestamp == ms_floor || m->timestamp == ms_round,
                  "%s: row %lld timestamp %" PRId64 ", expected %" PRId64 " (created_at %s)", where, id,
                  m->timestamp, ms_floor, row->created_at);

        /* Headers: the six fixed ones first, in order, then the row's own. */
        const char *want[6] = {row->event_id, row->event_type, row->aggregate_type, row->aggregate_id, oid,
                               row->created_at};
        char idbuf[32];
        snprintf(idbuf, sizeof(idbuf), "%lld", id);
        want[4] = idbuf;
        bool headers_ok = m->n_headers >= 6;
        for (size_t h = 0; headers_ok && h < 6; h++)
            headers_ok = !strcmp(m->headers[h].name, fixed[h]) && m->headers[h].value &&
                         !strcmp(m->headers[h].value, want[h]);
        if (!headers_ok) {
            char got[600] = "";
            size_t o = 0;
            for (size_t h = 0; h < m->n_headers && o < sizeof(got) - 50; h++)
                o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%s=%s", h ? ", " : "", m->headers[h].name,
                                      m->headers[h].value ? m->headers[h].value : "(null)");
            e2e_check(rep, false,
                      "%s: row %lld headers [%s], expected first event_id=%s, event_type=%s, "
                      "aggregate_type=%s, aggregate_id=%s, outbox_id=%s, created_at=%s",
                      where, id, got, want[0], want[1], want[2], want[3], want[4], want[5]);
        } else {
            char *custom = custom_headers_of(m);
            e2e_check(rep, streq_n(custom, row->custom_headers),
                      "%s: row %lld custom headers {%s}, expected {%s}", where, id, custom ? custom : "",
                      row->custom_headers ? row->custom_headers : "");
            free(custom);
        }

        /* Order per topic+key: first deliveries in id order (redeliveries after a
         * crash legitimately come later), and the key's latest message is its
         * newest row, which is what latest-per-key consumers and compaction keep. */
        if (!m->key)
            continue;
        struct key_order *k = NULL;
        for (size_t j = n_keys; j-- > 0;)
            if (!strcmp(keys[j].key, m->key) && !strcmp(keys[j].topic, m->topic) &&
                (!e2e_keys_may_move || keys[j].partition == m->partition)) {
                k = &keys[j];
                break;
            }
        if (!k) {
            if (n_keys == cap_keys) {
                cap_keys *= 2;
                keys = realloc(keys, cap_keys * sizeof(*keys));
                if (!keys)
                    abort();
            }
            k = &keys[n_keys++];
            *k = (struct key_order){.topic = m->topic, .key = m->key, .partition = m->partition,
                                    .last_id = id, .last_offset = m->offset, .max_id = id,
                                    .tail_id = id, .tail_offset = m->offset};
            continue;
        }
        if (!e2e_check(rep, k->partition == m->partition,
                       "topic %s key %s is in partitions %d and %d (row %lld at %s)", m->topic, m->key,
                       k->partition, m->partition, id, where))
            continue;
        k->tail_id = id;
        k->tail_offset = m->offset;
        if (id > k->max_id)
            k->max_id = id;
        if (!first)
            continue;
        e2e_check(rep, !e2e_check_order || id > k->last_id,
                  "%s: key %s order broken: outbox_id %lld at offset %" PRId64 " after outbox_id %" PRId64
                  " at offset %" PRId64, where, m->key, id, m->offset, k->last_id, k->last_offset);
        k->last_id = id;
        k->last_offset = m->offset;
    }
    for (size_t j = 0; e2e_check_order && j < n_keys; j++)
        e2e_check(rep, keys[j].tail_id == keys[j].max_id,
                  "topic %s key %s ends with outbox_id %" PRId64 " at offset %" PRId64
                  ", an older event than its newest delivered row %" PRId64,
                  keys[j].topic, keys[j].key, keys[j].tail_id, keys[j].tail_offset, keys[j].max_id);
    free(keys);
}

char **e2e_topics_of(const struct e2e_ctx *t, const struct e2e_rows *rows, size_t *n)
{
    size_t cap = 8, cnt = 0;
    char **v = tl_xmalloc(cap * sizeof(*v));
    for (size_t i = 0; i < rows->n; i++) {
        char buf[300];
        const char *topic = expected_topic(t, &rows->v[i], buf, sizeof(buf));
        bool seen = false;
        for (size_t j = 0; j < cnt && !seen; j++)
            seen = !strcmp(v[j], topic);
        if (seen)
            continue;
        if (cnt + 1 >= cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof(*v));
            if (!v)
                abort();
        }
        v[cnt++] = strdup(topic);
    }
    v[cnt] = NULL;
    if (n)
        *n = cnt;
    return v;
}

void e2e_topics_free(char **topics)
{
    for (size_t i = 0; topics && topics[i]; i++)
        free(topics[i]);
    free(topics);
}

void e2e_read_back(struct e2e_ctx *t, int timeout_ms, struct e2e_rows *rows, struct e2e_msgs *msgs,
                   struct e2e_report *rep)
{
    e2e_rows_load(t, rows);
    size_t n_topics;
    char **topics = e2e_topics_of(t, rows, &n_topics);
    /* As the relay's consumers must read (docs/consumers.md): aborted
     * transactions and a fenced leader's writes are not theirs to see. */
    e2e_consume_from(t->kafka, true, (const char *const *)topics, n_topics, timeout_ms, msgs);
    e2e_topics_free(topics);
    e2e_check(rep, msgs->n_missing_topics == 0, "%zu topic(s) missing", msgs->n_missing_topics);
    e2e_verify(t, rows, msgs, rep);
}

size_t e2e_check_delivered(struct e2e_ctx *t, const char *what, bool marked, bool exactly_once,
                           int64_t dups_from_us)
{
    struct e2e_dups dups = {.from_us = dups_from_us, .max = exactly_once ? 0 : SIZE_MAX};
    return e2e_check_delivered_dups(t, what, marked, dups);
}

size_t e2e_check_delivered_dups(struct e2e_ctx *t, const char *what, bool marked,
                                struct e2e_dups d)
{
    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(t, 120000, &rows, &msgs, &rep);
    size_t dups = 0;
    for (size_t i = 0; i < rows.n; i++) {
        const struct e2e_row *row = &rows.v[i];
        e2e_check(&rep, row->deliveries >= 1, "row %lld lost", (long long)row->id);
        e2e_check(&rep, !marked || row->sent, "row %lld has sent_at NULL", (long long)row->id);
        e2e_check(&rep, d.max > 0 || row->deliveries <= 1, "row %lld published %d times",
                  (long long)row->id, row->deliveries);
        e2e_check(&rep, d.max == 0 || row->deliveries < 2 || !d.from_us || row->created_us >= d.from_us,
                  "row %lld, created before the fault, delivered %d times", (long long)row->id,
                  row->deliveries);
        e2e_check(&rep, d.max == 0 || row->deliveries < 2 || !d.until_us || row->created_us < d.until_us,
                  "row %lld, created after the switch, delivered %d times", (long long)row->id,
                  row->deliveries);
        dups += row->deliveries > 1;
    }
    e2e_check(&rep, d.max == SIZE_MAX || d.max == 0 || dups <= d.max,
              "%zu rows delivered more than once (in flight: %zu at most)", dups, d.max);
    fprintf(stderr, "e2e: %s: %zu messages for %zu rows, %zu rows delivered more than once\n", what,
            msgs.n, rows.n, dups);
    e2e_report_assert(&rep, what);
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
    return dups;
}

void e2e_verify_sent_once(struct e2e_ctx *t, const char *what)
{
    struct e2e_rows all, sent = {0};
    e2e_rows_load(t, &all);
    sent.v = calloc(all.n + 1, sizeof(*sent.v));
    cr_assert(sent.v);
    for (size_t i = 0; i < all.n; i++)
        if (all.v[i].sent)
            sent.v[sent.n++] = all.v[i]; /* shallow: all owns the strings */
    size_t n_topics;
    char **topics = e2e_topics_of(t, &sent, &n_topics);
    struct e2e_msgs msgs;
    e2e_consume((const char *const *)topics, n_topics, 60000, &msgs);
    struct e2e_report rep = {0};
    e2e_check(&rep, msgs.n_missing_topics == 0, "%zu topic(s) missing", msgs.n_missing_topics);
    e2e_verify(t, &sent, &msgs, &rep); /* a message of an unsent row "matches no row" */
    for (size_t i = 0; i < sent.n; i++)
        e2e_check(&rep, sent.v[i].deliveries == 1, "row %lld (%s) delivered %d times, expected once",
                  (long long)sent.v[i].id, sent.v[i].aggregate_id, sent.v[i].deliveries);
    static const char *const own[] = {"event_id", "event_type", "aggregate_type", "aggregate_id",
                                      "outbox_id", "created_at"};
    for (size_t i = 0; i < msgs.n; i++)
        for (size_t h = 0; h < sizeof(own) / sizeof(own[0]); h++)
            e2e_check(&rep, e2e_msg_header_count(&msgs.v[i], own[h]) == 1,
                      "message at %s/%d@%lld has %zu %s headers, expected 1", msgs.v[i].topic,
                      msgs.v[i].partition, (long long)msgs.v[i].offset,
                      e2e_msg_header_count(&msgs.v[i], own[h]), own[h]);
    e2e_check(&rep, msgs.n == sent.n, "%zu messages in Kafka for %zu sent rows", msgs.n, sent.n);
    fprintf(stderr, "e2e: %s: %zu of %zu rows sent, %zu messages\n", what, sent.n, all.n, msgs.n);
    e2e_report_assert(&rep, what);
    e2e_msgs_free(&msgs);
    e2e_topics_free(topics);
    free(sent.v);
    e2e_rows_free(&all);
}
