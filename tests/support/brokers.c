/* brokers.c — driving a real Kafka broker from the tests: faults on the
 * stack's own nodes (tests/support/kafka.sh), a node started on another
 * version and the cluster's feature levels (an upgrade), topics deleted,
 * partition leaders looked up. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

/* kafka.sh CMD DIR [NODE]; asserts exit 0. Its output goes to the test's stderr. */
static void kafka_sh(const struct e2e_ctx *t, const char *cmd, const char *dir, const char *arg)
{
    cr_assert(t->env->kafka_sh, "OUTBOX_RELAY_TEST_KAFKA_SH is not set");
    const char *argv[] = {t->env->kafka_sh, cmd, dir, arg, NULL};
    char *err = NULL;
    int rc = e2e_run_cmd(argv, 180000, NULL, &err);
    cr_assert(rc == 0, "kafka.sh %s %s %s: exit %d\n%s", cmd, dir, arg ? arg : "", rc, err ? err : "");
    free(err);
}

/* The number in a file of the stack's own Kafka cluster (0: none). */
static int kafka_dir_int(const struct e2e_ctx *t, const char *file)
{
    char path[700];
    int n = 0;
    snprintf(path, sizeof path, "%s/%s", t->env->kafka_dir ? t->env->kafka_dir : "", file);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%d", &n) != 1)
            n = 0;
        fclose(f);
    }
    return n;
}

int e2e_kafka_node_count(const struct e2e_ctx *t)
{
    return kafka_dir_int(t, "nodes");
}

int e2e_kafka_node_pid(const struct e2e_ctx *t, int node)
{
    char file[32];
    snprintf(file, sizeof file, "node-%d/pid", node);
    return kafka_dir_int(t, file);
}

bool e2e_kafka_node(const struct e2e_ctx *t, const char *cmd, int node)
{
    if (!t->env->kafka_dir)
        return false;
    char n[16];
    snprintf(n, sizeof(n), "%d", node);
    kafka_sh(t, cmd, t->env->kafka_dir, n);
    return true;
}

void e2e_kafka_node_upgrade(const struct e2e_ctx *t, int node, const char *version)
{
    cr_assert(t->env->kafka_dir && t->env->kafka_sh, "no Kafka cluster of the stack's own");
    char n[16];
    snprintf(n, sizeof(n), "%d", node);
    const char *argv[] = {t->env->kafka_sh, "restart", t->env->kafka_dir, n, version, NULL};
    char *err = NULL;
    int rc = e2e_run_cmd(argv, 180000, NULL, &err);
    cr_assert(rc == 0, "kafka.sh restart %s %s %s: exit %d\n%s", t->env->kafka_dir, n, version, rc,
              err ? err : "");
    free(err);
}

char *e2e_kafka_features(const struct e2e_ctx *t, const char *version, const char *const args[])
{
    cr_assert(t->env->kafka_dir && t->env->kafka_sh, "no Kafka cluster of the stack's own");
    const char *argv[E2E_MAX_ARGS + 4] = {t->env->kafka_sh, "features", t->env->kafka_dir, version};
    int n = 4;
    for (int i = 0; args[i]; i++) {
        cr_assert(n < E2E_MAX_ARGS + 3, "too many arguments");
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = e2e_run_cmd(argv, 120000, &out, &err);
    cr_assert(rc == 0, "kafka.sh features %s: exit %d\n%s%s", args[0], rc, out ? out : "", err ? err : "");
    free(err);
    return out ? out : strdup("");
}

bool e2e_kafka_scram_refused(const struct e2e_ctx *t)
{
    if (!t->env->kafka_dir)
        return false;
    char path[700], v[32] = "";
    snprintf(path, sizeof path, "%s/version", t->env->kafka_dir);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(v, sizeof v, f))
            v[0] = '\0';
        fclose(f);
    }
    return atoi(v) >= 4 && rd_kafka_version() < 0x02060100;
}

void e2e_kafka_feature_level(const struct e2e_ctx *t, const char *version, const char *feature, char *level,
                             size_t len)
{
    const char *args[] = {"describe", NULL};
    char *out = e2e_kafka_features(t, version, args);
    fprintf(stderr, "kafka-features.sh describe (Kafka %s's tool):\n%s", version, out);
    /* One line a feature: "Feature: NAME<tab>...<tab>FinalizedVersionLevel: LEVEL<tab>Epoch: N". */
    char key[96];
    int klen = snprintf(key, sizeof(key), "Feature: %s", feature);
    const char *line = out;
    level[0] = '\0';
    while ((line = strstr(line, key)) && !isspace((unsigned char)line[klen]))
        line += klen;
    const char *eol = line ? strchr(line, '\n') : NULL;
    const char *v = line ? strstr(line, "FinalizedVersionLevel:") : NULL;
    if (v && (!eol || v < eol)) {
        v += strlen("FinalizedVersionLevel:");
        v += strspn(v, " \t");
        size_t n = strcspn(v, " \t\r\n");
        snprintf(level, len, "%.*s", (int)n, v);
    }
    free(out);
}

int e2e_partition_leader(const char *bootstrap, const char *topic, int partition)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, errstr, sizeof(errstr));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    cr_assert(rk, "rd_kafka_new: %s", errstr);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    int leader = -1;
    if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1)
        for (int p = 0; p < md->topics[0].partition_cnt; p++)
            if (md->topics[0].partitions[p].id == partition)
                leader = md->topics[0].partitions[p].leader;
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return leader;
}

int e2e_txn_coordinator(const char *bootstrap, const char *txn_id)
{
    int32_t h = 0; /* Java's String.hashCode and Kafka's Utils.abs */
    for (const char *c = txn_id; *c; c++)
        h = (int32_t)((uint32_t)h * 31u + (uint32_t)(unsigned char)*c);
    int32_t a = h == INT32_MIN ? 0 : (h < 0 ? -h : h);
    return e2e_partition_leader(bootstrap, "__transaction_state", a % 4);
}

/* Whether the cluster's metadata (all topics: asking for one could create it) lists @p topic. */
static bool topic_listed(rd_kafka_t *rk, const char *topic)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, &md, 10000);
    cr_assert_eq(e, RD_KAFKA_RESP_ERR_NO_ERROR, "metadata: %s", rd_kafka_err2str(e));
    bool found = false;
    for (int i = 0; i < md->topic_cnt && !found; i++)
        found = strcmp(md->topics[i].topic, topic) == 0 && md->topics[i].err == 0;
    rd_kafka_metadata_destroy(md);
    return found;
}

void e2e_kafka_delete_topic(const struct e2e_ctx *t, const char *topic, int timeout_ms)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", t->kafka, errstr, sizeof(errstr));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    cr_assert(rk, "rd_kafka_new: %s", errstr);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_DeleteTopic_t *del = rd_kafka_DeleteTopic_new(topic);
    rd_kafka_DeleteTopics(rk, &del, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, timeout_ms);
    cr_assert_not_null(ev, "DeleteTopics %s: no answer within %d ms", topic, timeout_ms);
    const rd_kafka_DeleteTopics_result_t *res = rd_kafka_event_DeleteTopics_result(ev);
    cr_assert_not_null(res, "DeleteTopics %s: %s", topic, rd_kafka_event_error_string(ev));
    size_t n = 0;
    const rd_kafka_topic_result_t **tr = rd_kafka_DeleteTopics_result_topics(res, &n);
    cr_assert(n == 1 && rd_kafka_topic_result_error(tr[0]) == RD_KAFKA_RESP_ERR_NO_ERROR,
              "DeleteTopics %s: %s", topic, n ? rd_kafka_topic_result_error_string(tr[0]) : "no result");
    rd_kafka_event_destroy(ev);
    rd_kafka_DeleteTopic_destroy(del);
    /* Deletion finishes in the background: wait until the metadata no longer lists it. */
    int64_t deadline = e2e_now_ms() + timeout_ms;
    while (topic_listed(rk, topic)) {
        cr_assert(e2e_now_ms() < deadline, "topic %s still listed %d ms after its deletion", topic,
                  timeout_ms);
        e2e_sleep_ms(200);
    }
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
}
