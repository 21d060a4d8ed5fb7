/* consume.c — reading topics back with a real Kafka consumer (see testlib.h). */
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

/* ---- Kafka consumer ----------------------------------------------------- */

static void msgs_push(struct e2e_msgs *m, const rd_kafka_message_t *km)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 1024;
        m->v = realloc(m->v, m->cap * sizeof(*m->v));
        if (!m->v)
            abort();
    }
    struct e2e_msg *e = &m->v[m->n++];
    memset(e, 0, sizeof(*e));
    e->topic = strdup(rd_kafka_topic_name(km->rkt));
    e->partition = km->partition;
    e->offset = km->offset;
    if (km->key) {
        e->key = tl_xstrndup(km->key, km->key_len);
        e->key_len = km->key_len;
    }
    if (km->payload) {
        e->value = tl_xstrndup(km->payload, km->len);
        e->value_len = km->len;
    }
    e->timestamp = rd_kafka_message_timestamp(km, &e->tstype);

    rd_kafka_headers_t *hdrs = NULL;
    if (rd_kafka_message_headers(km, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR && hdrs) {
        size_t cnt = rd_kafka_header_cnt(hdrs);
        e->headers = tl_xmalloc(cnt * sizeof(*e->headers));
        for (size_t i = 0; i < cnt; i++) {
            const char *name;
            const void *val;
            size_t size;
            if (rd_kafka_header_get_all(hdrs, i, &name, &val, &size))
                break;
            e->headers[i].name = strdup(name);
            e->headers[i].value = val ? tl_xstrndup(val, size) : NULL;
            e->headers[i].value_len = size;
            e->n_headers++;
        }
    }
}

struct part_state {
    const char *topic;
    int topic_idx;
    int32_t partition;
    int64_t hi;
    bool eof;
    int64_t last_offset;
};

static const char *const *sort_topics;
static size_t sort_n_topics;

static int topic_index(const char *topic)
{
    for (size_t i = 0; i < sort_n_topics; i++)
        if (!strcmp(sort_topics[i], topic))
            return (int)i;
    return (int)sort_n_topics;
}

static int msg_cmp(const void *a, const void *b)
{
    const struct e2e_msg *x = a, *y = b;
    int tx = topic_index(x->topic), ty = topic_index(y->topic);
    if (tx != ty)
        return tx < ty ? -1 : 1;
    if (tx == (int)sort_n_topics) {
        int c = strcmp(x->topic, y->topic);
        if (c)
            return c;
    }
    if (x->partition != y->partition)
        return x->partition < y->partition ? -1 : 1;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return 0;
}

static void msg_free(struct e2e_msg *e)
{
    free(e->topic);
    free(e->key);
    free(e->value);
    for (size_t h = 0; h < e->n_headers; h++) {
        free(e->headers[h].name);
        free(e->headers[h].value);
    }
    free(e->headers);
}

static void conf_set(rd_kafka_conf_t *conf, const char *k, const char *v)
{
    char errstr[512];
    cr_assert(rd_kafka_conf_set(conf, k, v, errstr, sizeof(errstr)) == RD_KAFKA_CONF_OK,
              "consumer config %s=%s: %s", k, v, errstr);
}

/* A client whose ListOffsets asks for the high watermark (read_uncommitted). */
static rd_kafka_t *watermark_client(const char *bootstrap)
{
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", bootstrap);
    conf_set(conf, "client.id", "e2e-reader-watermarks");
    conf_set(conf, "isolation.level", "read_uncommitted");
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    cr_assert(rk, "rd_kafka_new(watermarks): %s", errstr);
    return rk;
}

void e2e_consume(const char *const *topics, size_t n_topics, int timeout_ms, struct e2e_msgs *out)
{
    e2e_consume_from(e2e_env()->kafka, false, topics, n_topics, timeout_ms, out);
}

void e2e_consume_from(const char *bootstrap, bool read_committed, const char *const *topics, size_t n_topics,
                      int timeout_ms, struct e2e_msgs *out)
{
    char errstr[512], group[128];
    /* Waiting for topics that do not exist yet gets its own, shorter budget. */
    int64_t deadline = e2e_now_ms() + (timeout_ms < 30000 ? timeout_ms : 30000);

    memset(out, 0, sizeof(*out));
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    snprintf(group, sizeof(group), "e2e-reader-%ld-%" PRId64, (long)getpid(), e2e_now_ms());
    conf_set(conf, "bootstrap.servers", bootstrap);
    conf_set(conf, "group.id", group);
    conf_set(conf, "client.id", "e2e-reader");
    conf_set(conf, "enable.auto.commit", "false");
    conf_set(conf, "enable.auto.offset.store", "false");
    conf_set(conf, "enable.partition.eof", "true");
    conf_set(conf, "auto.offset.reset", "earliest");
    conf_set(conf, "fetch.wait.max.ms", "100");
    conf_set(conf, "isolation.level", read_committed ? "read_committed" : "read_uncommitted");
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    cr_assert(rk, "rd_kafka_new(consumer): %s", errstr);

    /* Partitions from metadata; a topic may still be being created. */
    size_t n_parts = 0, cap_parts = 64;
    struct part_state *parts = tl_xmalloc(cap_parts * sizeof(*parts));
    for (size_t ti = 0; ti < n_topics; ti++) {
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topics[ti], NULL);
        cr_assert(rkt, "rd_kafka_topic_new(%s)", topics[ti]);
        bool found = false;
        for (;;) {
            const struct rd_kafka_metadata *md = NULL;
            rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, 5000);
            if (!err && md->topic_cnt == 1 && !md->topics[0].err && md->topics[0].partition_cnt > 0) {
                for (int p = 0; p < md->topics[0].partition_cnt; p++) {
                    if (n_parts == cap_parts) {
                        cap_parts *= 2;
                        parts = realloc(parts, cap_parts * sizeof(*parts));
                        if (!parts)
                            abort();
                    }
                    parts[n_parts++] = (struct part_state){
                        .topic = topics[ti], .topic_idx = (int)ti,
                        .partition = md->topics[0].partitions[p].id, .last_offset = -1};
                }
                found = true;
            }
            if (md)
                rd_kafka_metadata_destroy(md);
            if (found || e2e_now_ms() >= deadline)
                break;
            e2e_sleep_ms(200);
        }
        rd_kafka_topic_destroy(rkt);
        if (!found) {
            fprintf(stderr, "e2e: topic %s does not exist\n", topics[ti]);
            out->n_missing_topics++;
        }
    }

    /* The end to read to is the high watermark, which only a read_uncommitted
     * ListOffsets returns: a read_committed one returns the last stable offset,
     * and that trails the end while a committed transaction's markers are still
     * being written (Kafka answers the commit before it writes them). Stopping
     * there skipped whole partitions whose rows were already marked sent. A
     * read_committed consumer reaches the end once the markers are written, and
     * librdkafka reports end-of-partition again at each new end. */
    rd_kafka_t *wm = read_committed ? watermark_client(bootstrap) : rk;
    rd_kafka_topic_partition_list_t *assign = rd_kafka_topic_partition_list_new((int)(n_parts ? n_parts : 1));
    for (size_t i = 0; i < n_parts; i++) {
        int64_t lo = -1, hi = -1;
        rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
        for (int attempt = 0; attempt < 20; attempt++) {
            err = rd_kafka_query_watermark_offsets(wm, parts[i].topic, parts[i].partition, &lo, &hi, 5000);
            if (!err || e2e_now_ms() >= deadline)
                break;
            e2e_sleep_ms(200);
        }
        cr_assert(!err, "watermarks of %s [%d]: %s", parts[i].topic, parts[i].partition, rd_kafka_err2str(err));
        cr_assert(lo == 0,
                  "%s [%d] starts at offset %" PRId64 ", not 0: the broker dropped old messages "
                  "(librdkafka's mock broker keeps 5 MB / 100000 batches per partition), "
                  "so the test cannot see everything that was produced",
                  parts[i].topic, parts[i].partition, lo);
        parts[i].hi = hi;
        parts[i].eof = hi == 0;
        rd_kafka_topic_partition_list_add(assign, parts[i].topic, parts[i].partition)->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    }
    if (wm != rk)
        rd_kafka_destroy(wm);
    if (n_parts) {
        rd_kafka_resp_err_t err = rd_kafka_assign(rk, assign);
        cr_assert(!err, "rd_kafka_assign: %s", rd_kafka_err2str(err));
    }
    rd_kafka_topic_partition_list_destroy(assign);

    deadline = e2e_now_ms() + timeout_ms;
    size_t n_eof = 0;
    for (size_t i = 0; i < n_parts; i++)
        n_eof += parts[i].eof;
    int errors_logged = 0;
    while (n_eof < n_parts && e2e_now_ms() < deadline) {
        rd_kafka_message_t *km = rd_kafka_consumer_poll(rk, 200);
        if (!km)
            continue;
        struct part_state *ps = NULL;
        if (km->rkt) {
            const char *tn = rd_kafka_topic_name(km->rkt);
            for (size_t i = 0; i < n_parts; i++)
                if (parts[i].partition == km->partition && !strcmp(parts[i].topic, tn)) {
                    ps = &parts[i];
                    break;
                }
        }
        if (km->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (ps && !ps->eof && km->offset >= ps->hi) {
                ps->eof = true;
                n_eof++;
            }
        } else if (km->err) {
            if (errors_logged++ < 20)
                fprintf(stderr, "e2e: consumer: %s\n", rd_kafka_message_errstr(km));
        } else if (ps) {
            msgs_push(out, km);
            ps->last_offset = km->offset;
            if (ps->eof) { /* more arrived after the end we had seen */
                ps->eof = false;
                n_eof--;
            }
        }
        rd_kafka_message_destroy(km);
    }

    if (n_eof < n_parts) {
        char detail[2048] = "";
        size_t off = 0;
        for (size_t i = 0; i < n_parts && off < sizeof(detail) - 100; i++)
            if (!parts[i].eof)
                off += (size_t)snprintf(detail + off, sizeof(detail) - off, " %s[%d] at %" PRId64 "/%" PRId64,
                                        parts[i].topic, parts[i].partition, parts[i].last_offset + 1,
                                        parts[i].hi);
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
        free(parts);
        cr_assert_fail("consumer did not reach the end of every partition within %d ms:%s", timeout_ms, detail);
    }

    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    free(parts);

    sort_topics = topics;
    sort_n_topics = n_topics;
    qsort(out->v, out->n, sizeof(*out->v), msg_cmp);
    /* A refetch could hand us an offset twice: that is the consumer, not the relay. */
    size_t w = 0;
    for (size_t i = 0; i < out->n; i++) {
        if (w > 0 && !msg_cmp(&out->v[w - 1], &out->v[i])) {
            msg_free(&out->v[i]);
            continue;
        }
        out->v[w++] = out->v[i];
    }
    out->n = w;
}

void e2e_msgs_free(struct e2e_msgs *m)
{
    for (size_t i = 0; i < m->n; i++)
        msg_free(&m->v[i]);
    free(m->v);
    memset(m, 0, sizeof(*m));
}

const char *e2e_msg_header(const struct e2e_msg *m, const char *name)
{
    for (size_t i = 0; i < m->n_headers; i++)
        if (!strcmp(m->headers[i].name, name))
            return m->headers[i].value;
    return NULL;
}

size_t e2e_msg_header_count(const struct e2e_msg *m, const char *name)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n_headers; i++)
        n += !strcmp(m->headers[i].name, name);
    return n;
}
