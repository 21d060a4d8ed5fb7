/* brokers.c — driving a real Kafka broker from the tests: faults on the
 * stack's own node and clusters of a test's own (tests/support/kafka.sh). */
#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>
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

bool e2e_kafka_node(const struct e2e_ctx *t, const char *cmd, int node)
{
    if (!t->env->kafka_dir)
        return false;
    char n[16];
    snprintf(n, sizeof(n), "%d", node);
    kafka_sh(t, cmd, t->env->kafka_dir, n);
    return true;
}

void e2e_kafka_cluster_start(const struct e2e_ctx *t, struct e2e_kafka_cluster *c, int n)
{
    memset(c, 0, sizeof(*c));
    if (!t->env->kafka_sh)
        cr_skip_test("needs tests/support/kafka.sh (OUTBOX_RELAY_TEST_KAFKA_SH) to start a cluster");
    snprintf(c->dir, sizeof(c->dir), "%s/kafka%d", t->logdir, n);
    char nodes[16];
    snprintf(nodes, sizeof(nodes), "%d", n);
    const char *argv[] = {t->env->kafka_sh, "start", c->dir, nodes, NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_cmd(argv, 240000, &out, &err);
    cr_assert(rc == 0, "kafka.sh start %s %d: exit %d\n%s", c->dir, n, rc, err ? err : "");
    fprintf(stderr, "%s", err ? err : "");
    size_t len = out ? strcspn(out, "\n") : 0;
    cr_assert(len > 0 && len < sizeof(c->bootstrap), "kafka.sh start printed no bootstrap servers");
    memcpy(c->bootstrap, out, len);
    c->bootstrap[len] = '\0';
    c->n = n;
    free(out);
    free(err);
}

void e2e_kafka_cluster_node(const struct e2e_kafka_cluster *c, const char *cmd, int node)
{
    const struct e2e_env *env = e2e_env();
    const char *argv[] = {env->kafka_sh, cmd, c->dir, NULL, NULL};
    char n[16];
    snprintf(n, sizeof(n), "%d", node);
    argv[3] = n;
    char *err = NULL;
    int rc = e2e_run_cmd(argv, 180000, NULL, &err);
    cr_assert(rc == 0, "kafka.sh %s %s %d: exit %d\n%s", cmd, c->dir, node, rc, err ? err : "");
    free(err);
}

void e2e_kafka_cluster_stop(struct e2e_kafka_cluster *c)
{
    if (!c->n)
        return;
    const struct e2e_env *env = e2e_env();
    const char *argv[] = {env->kafka_sh, "stop", c->dir, NULL};
    e2e_run_cmd(argv, 120000, NULL, NULL);
    c->n = 0;
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
