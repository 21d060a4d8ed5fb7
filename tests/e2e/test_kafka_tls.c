/* test_kafka_tls.c — the relay over TLS with client certificates (mTLS) to a
 * real Kafka node (the SSL listener of tests/support/kafka.sh: client
 * certificates required, the principal the certificate's CN, ACLs): rows
 * arrive with the right certificate; each wrong setting an operator can
 * make is named within 20 s in a few log lines, with /readyz false and
 * nothing marked sent; a topic right granted while the relay waits lets it
 * deliver everything, in order; a secret file that does not exist is
 * refused with exit 78. The negatives run side by side, each on a table of
 * its own, so that their 20 s are spent once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>

#include "testlib.h"

enum { N_CTX = 7 };
static struct e2e_ctx C[N_CTX];

static void fini(void)
{
    for (int i = 0; i < N_CTX; i++)
        if (C[i].env)
            e2e_teardown(&C[i]);
}

/* The first line of DIR/@p file of the stack's Kafka node into @p out. */
static void read_line(const struct e2e_ctx *t, const char *file, char *out, size_t len)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", t->env->kafka_dir, file);
    FILE *f = fopen(path, "r");
    if (!f)
        cr_skip_test("no TLS listeners: %s", path);
    cr_assert_not_null(fgets(out, (int)len, f));
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

/* @p wal: relay.capture=wal, the slot made by migrate. */
static void setup_capture(struct e2e_ctx *t, const char *name, bool wal)
{
    e2e_setup(t, name);
    if (!t->env->kafka_dir)
        cr_skip_test("needs the stack's own Kafka node (kafka.sh)");
    if (wal)
        e2e_wal_enable(t);
    e2e_migrate(t);
}

static void setup(struct e2e_ctx *t, const char *name)
{
    setup_capture(t, name, false);
}

/* How a relay reaches Kafka: the -X settings of one case. */
struct way {
    const char *what;      /* the case, in failure messages */
    const char *listener;  /* ssl_bootstrap or sasl_bootstrap */
    const char *host;      /* replaces 127.0.0.1 in the bootstrap when set */
    const char *client;    /* client certificate DIR/tls/client-NAME.{crt,key}, or NULL */
    const char *user;      /* SASL user (password from a 0600 file), or NULL */
    const char *says;      /* what the log must name within 20 s */
    const char *says_too;  /* and this */
};

static struct e2e_relay *start(struct e2e_ctx *t, const struct way *w, const char *fencing)
{
    char bs[512], *colon;
    static char x[N_CTX][8][800];
    static int next;
    char (*o)[800] = x[next++ % N_CTX];
    read_line(t, w->listener, bs, sizeof bs);
    colon = strchr(bs, ':');
    snprintf(o[0], 800, "kafka.bootstrap.servers=%s%s", w->host ? w->host : "127.0.0.1", colon);
    snprintf(o[1], 800, "kafka.security.protocol=%s", w->user ? "SASL_SSL" : "SSL");
    snprintf(o[2], 800, "kafka.ssl.ca.location=%s/tls/ca.pem", t->env->kafka_dir);
    snprintf(o[3], 800, "relay.fencing=%s", fencing);
    const char *extra[10] = {o[0], o[1], o[2], o[3]};
    int n = 4;
    if (w->client) {
        snprintf(o[4], 800, "kafka.ssl.certificate.location=%s/tls/client-%s.crt",
                 t->env->kafka_dir, w->client);
        snprintf(o[5], 800, "kafka.ssl.key.location=%s/tls/client-%s.key", t->env->kafka_dir,
                 w->client);
        extra[n++] = o[4];
        extra[n++] = o[5];
    }
    if (w->user) {
        char path[700];
        snprintf(path, sizeof path, "%s/password-%s", t->logdir, w->user);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f, "%s: %s", path, strerror(errno));
        fprintf(f, "some-password-9\n");
        fclose(f);
        cr_assert_eq(chmod(path, 0600), 0);
        snprintf(o[4], 800, "kafka.sasl.username=%s", w->user);
        snprintf(o[5], 800, "kafka.sasl.password_file=%s", path);
        extra[n++] = "kafka.sasl.mechanism=SCRAM-SHA-512";
        extra[n++] = o[4];
        extra[n++] = o[5];
    }
    extra[n] = NULL;
    return e2e_relay_start(t, extra);
}

static void enqueue(struct e2e_ctx *t, int n)
{
    for (int i = 0; i < n; i++)
        e2e_exec(t->conn, "SELECT %s('order', '%d', 'Created', '{}', NULL, NULL)", t->qenqueue,
                 i % 5);
}

Test(e2e, mtls_with_a_valid_client_certificate_delivers_every_row, .fini = fini, .timeout = 120)
{
    setup(&C[0], "mtlsok");
    enqueue(&C[0], 50);
    static const struct way ok = {"valid client certificate", "ssl_bootstrap", NULL, "relay",
                                  NULL, NULL, NULL};
    struct e2e_relay *relay = start(&C[0], &ok, "transactional");
    e2e_wait_all_sent(&C[0], 60000);
    e2e_verify_sent_once(&C[0], "over mTLS");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0);
}

/* The topic named by the test's template for aggregate type "order". */
static void topic_of(const struct e2e_ctx *t, char *topic, size_t len)
{
    snprintf(topic, len, "%s.order", t->table);
}

/* An admin client over PLAINTEXT (ANONYMOUS, a super user), as an operator's. */
static rd_kafka_t *admin_client(const struct e2e_ctx *t)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", t->kafka, errstr, sizeof errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    cr_assert(rk, "rd_kafka_new: %s", errstr);
    return rk;
}

/* The test's topic, created as an operator creates it before granting a
 * right on it. */
static void create_topic(const struct e2e_ctx *t)
{
    char topic[200], errstr[256];
    topic_of(t, topic, sizeof topic);
    rd_kafka_t *rk = admin_client(t);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, 4, 1, errstr, sizeof errstr);
    rd_kafka_CreateTopics(rk, &nt, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    cr_assert(ev && !rd_kafka_event_error(ev), "CreateTopics %s", topic);
    size_t n = 0;
    const rd_kafka_topic_result_t **tr =
        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
    cr_assert(n == 1 && !rd_kafka_topic_result_error(tr[0]), "CreateTopics %s: %s", topic,
              n ? rd_kafka_topic_result_error_string(tr[0]) : "no result");
    rd_kafka_NewTopic_destroy(nt);
    rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
}

/* Grants @p principal Write on the resource @p type named @p name (the
 * test's topic when NULL; "*" is every one of its kind). */
static void grant(const struct e2e_ctx *t, rd_kafka_ResourceType_t type, const char *name,
                  const char *principal)
{
    char topic[200], errstr[256];
    topic_of(t, topic, sizeof topic);
    rd_kafka_t *rk = admin_client(t);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AclBinding_t *acl = rd_kafka_AclBinding_new(
        type, name ? name : topic, RD_KAFKA_RESOURCE_PATTERN_LITERAL, principal, "*",
        RD_KAFKA_ACL_OPERATION_WRITE, RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW, errstr, sizeof errstr);
    cr_assert(acl, "AclBinding: %s", errstr);
    rd_kafka_CreateAcls(rk, &acl, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    cr_assert(ev && !rd_kafka_event_error(ev), "CreateAcls for %s", principal);
    size_t n = 0;
    const rd_kafka_acl_result_t **ar =
        rd_kafka_CreateAcls_result_acls(rd_kafka_event_CreateAcls_result(ev), &n);
    cr_assert(n == 1 && !rd_kafka_acl_result_error(ar[0]), "CreateAcls for %s", principal);
    rd_kafka_AclBinding_destroy(acl);
    rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
}

/* TLS failures: OpenSSL's words, and the settings the relay says to check. */
static const struct way negatives[] = {
    {"unknown SCRAM user", "sasl_bootstrap", NULL, NULL, "ghost", "error=_AUTHENTICATION",
     "invalid credentials with SASL mechanism SCRAM-SHA-512"},
    {"server certificate for another host name", "ssl_bootstrap", "localhost", "relay", NULL,
     "certificate verify failed", "does not name the host the relay connected to"},
    {"expired client certificate", "ssl_bootstrap", NULL, "expired", NULL,
     "alert certificate unknown", "refuses the client certificate of "
     "kafka.ssl.certificate.location: expired"},
    /* The broker's alert for these two depends on the TLS libraries: a
     * foreign CA's certificate is "certificate unknown" where librdkafka sends
     * it and "certificate required" where it sends none (Debian 13), and no
     * certificate is "bad certificate" or "certificate required". */
    {"client certificate from a foreign CA", "ssl_bootstrap", NULL, "foreign", NULL,
     "SSL alert number", "not from a CA the broker trusts"},
    {"no client certificate", "ssl_bootstrap", NULL, NULL, NULL, "SSL alert number",
     "requires a client certificate"},
    /* an idempotent producer: the principal has IdempotentWrite and no topic right */
    {"missing topic Write ACL", "ssl_bootstrap", NULL, "notopic", NULL, "denied=topic_write",
     "needs=\"Write and Describe on the topic\""},
};
#define N_NEG (sizeof negatives / sizeof negatives[0])

/* How each negative is reported, as a refused ACL is: its series of
 * outbox_relay_kafka_denied, and what /readyz says it needs. */
static const char *const reported[N_NEG][2] = {
    {"authentication", "credentials the brokers accept"},
    {"tls", "certificates both sides accept"},
    {"tls", "certificates both sides accept"},
    {"tls", "certificates both sides accept"},
    {"tls", "certificates both sides accept"},
    {"topic_write", "Write and Describe on the topic"},
};

/* What the relay reports while a right is refused: /readyz 503 naming what
 * it needs, and the series of that right (one of @p rights, "a|b") at 1 in
 * outbox_relay_kafka_denied. */
static void check_reported(struct e2e_relay *r, const char *what, const char *rights,
                           const char *needs)
{
    char *body = NULL, series[200];
    int code = e2e_relay_http_get(r, "/readyz?verbose", &body);
    cr_expect_eq(code, 503, "%s: /readyz %d %s", what, code, body ? body : "");
    cr_expect(body && strstr(body, needs), "%s: /readyz does not say \"%s\": %s", what, needs,
              body ? body : "");
    free(body);
    body = NULL;
    code = e2e_relay_http_get(r, "/metrics", &body);
    bool found = false;
    for (const char *p = rights; *p && !found; p += strcspn(p, "|"), p += *p == '|') {
        snprintf(series, sizeof series, "outbox_relay_kafka_denied{right=\"%.*s\"} 1",
                 (int)strcspn(p, "|"), p);
        found = code == 200 && body && strstr(body, series);
    }
    cr_expect(found, "%s: /metrics has none of %s at 1", what, rights);
    free(body);
}

/* Each case's relay: named within 20 s, at most 60 log lines by then,
 * /readyz 503, nothing marked. */
static void check_named(struct e2e_ctx *t, struct e2e_relay *r, const struct way *w,
                        int64_t deadline)
{
    int64_t left = deadline - e2e_now_ms();
    bool named = e2e_relay_wait_log(r, w->says, left > 0 ? (int)left : 0);
    cr_expect(named, "%s: \"%s\" not in the log within 20 s: %s", w->what, w->says, r->log_path);
    cr_expect(e2e_relay_log_contains(r, w->says_too), "%s: \"%s\" not in the log: %s", w->what,
              w->says_too, r->log_path);
    char *body = NULL;
    int code = e2e_relay_http_get(r, "/readyz?verbose", &body);
    cr_expect_eq(code, 503, "%s: /readyz %d %s", w->what, code, body ? body : "");
    free(body);
    cr_expect_eq(e2e_count_where(t, "sent_at IS NOT NULL"), 0, "%s: rows marked sent", w->what);
}

Test(e2e, mtls_and_sasl_mistakes_are_named_and_a_granted_topic_right_recovers, .fini = fini,
     .timeout = 240)
{
    static const char *const names[N_NEG] = {"tlsuser", "tlshost", "tlsexp", "tlsforeign",
                                             "tlsnocert", "tlsnotopic"};
    struct e2e_relay *relay[N_NEG];
    for (size_t i = 0; i < N_NEG; i++) {
        setup(&C[i], names[i]);
        enqueue(&C[i], i == N_NEG - 1 ? 40 : 3);
    }
    create_topic(&C[N_NEG - 1]);
    int64_t t0 = e2e_now_ms();
    for (size_t i = 0; i < N_NEG; i++)
        relay[i] = start(&C[i], &negatives[i], i == N_NEG - 1 ? "none" : "transactional");
    for (size_t i = 0; i < N_NEG; i++) {
        check_named(&C[i], relay[i], &negatives[i], t0 + 20000);
        check_reported(relay[i], negatives[i].what, reported[i][0], reported[i][1]);
    }
    int64_t wait = t0 + 20000 - e2e_now_ms();
    if (wait > 0)
        e2e_sleep_ms((int)wait);
    int lines[N_NEG];
    for (size_t i = 0; i < N_NEG; i++) {
        lines[i] = e2e_relay_log_count(relay[i], "\n");
        cr_expect_leq(lines[i], 60, "%s: %d log lines in 20 s: %s", negatives[i].what, lines[i],
                      relay[i]->log_path);
    }

    /* The topic right: named once, no row charged, and granted, every row
     * delivered in order with nothing lost. */
    struct e2e_ctx *t = &C[N_NEG - 1];
    struct e2e_relay *r = relay[N_NEG - 1];
    cr_expect_eq(e2e_relay_log_count(r, "msg=\"kafka refuses the relay's principal a right"), 1,
                 "named once: %s", r->log_path);
    cr_expect_eq(e2e_count_where(t, "attempts > 0 OR last_error IS NOT NULL"), 0,
                 "rows charged for a missing ACL: %s", r->log_path);
    char *body = NULL;
    cr_expect_eq(e2e_relay_http_get(r, "/readyz?verbose", &body), 503);
    cr_expect(body && strstr(body, "Write and Describe on the topic"), "/readyz: %s",
              body ? body : "");
    free(body);
    grant(t, RD_KAFKA_RESOURCE_TOPIC, NULL, "User:notopic");
    cr_assert(e2e_relay_wait_log(r, "msg=\"kafka grants the relay's principal its rights again\"",
                                 75000),
              "log %s", r->log_path);
    e2e_wait_all_sent(t, 30000);
    e2e_verify_sent_once(t, "after the topic ACL was granted");
    cr_expect_eq(e2e_count_where(t, "attempts > 0"), 0, "rows charged: %s", r->log_path);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
    /* The other mistakes meanwhile (librdkafka retries the handshake every
     * second): a line every 5 s at most, still refused and reported. */
    int64_t later_s = (e2e_now_ms() - t0) / 1000 - 20;
    for (size_t i = 0; i + 1 < N_NEG; i++) {
        int more = e2e_relay_log_count(relay[i], "\n") - lines[i];
        cr_expect_leq(more, 2 + later_s / 5, "%s: %d log lines in the %lld s after the first 20: %s",
                      negatives[i].what, more, (long long)later_s, relay[i]->log_path);
        check_reported(relay[i], negatives[i].what, reported[i][0], reported[i][1]);
        e2e_relay_kill(relay[i]);
    }
}

/* Write on every TransactionalId for @p principal, with Kafka's own tool
 * (librdkafka 2.0's admin API has no such resource type). */
static void grant_txn_id(const struct e2e_ctx *t, const char *principal)
{
    const char *argv[] = {t->env->kafka_sh, "grant", t->env->kafka_dir, principal, "Write",
                          "--transactional-id", "*", NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_cmd(argv, 60000, &out, &err);
    cr_assert_eq(rc, 0, "kafka.sh grant: exit %d: %s", rc, err ? err : "");
    free(out);
    free(err);
}

/* relay.capture=wal marks nothing: the slot confirmed past the last commit,
 * each of the @p n rows read back once, in order per key. */
static void read_back_wal(struct e2e_ctx *t, struct e2e_relay *r, int n)
{
    cr_assert(e2e_wal_wait_confirmed(t, 30000), "the slot was not confirmed: %s", r->log_path);
    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(t, 60000, &rows, &msgs, &rep);
    e2e_check(&rep, rows.n == (size_t)n, "%zu rows in the table, expected %d", rows.n, n);
    for (size_t i = 0; i < rows.n; i++)
        e2e_check(&rep, rows.v[i].deliveries == 1, "row %lld delivered %d times",
                  (long long)rows.v[i].id, rows.v[i].deliveries);
    e2e_report_assert(&rep, "wal capture after the topic right was granted");
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
}

/* Rights of the producer itself, and the topic's with log-based capture.
 * A transactional producer needs Write on its TransactionalId. An idempotent
 * one (relay.fencing=none) gets its producer id, on Kafka 3.9 (KIP-679), for
 * IdempotentWrite on the cluster or for Write on any topic: a principal with
 * no right at all is refused the topic (TOPIC_AUTHORIZATION_FAILED) and, as
 * the timing falls, the producer id (CLUSTER_AUTHORIZATION_FAILED) too; both
 * say that Write on the topic is missing, and granting it alone, without
 * IdempotentWrite, lets every row through. */
struct right_case {
    struct way way;
    const char *fencing;
    bool wal;
    const char *rights;   /* its series of outbox_relay_kafka_denied, "a|b" for either */
    int named;            /* how many times it may be named at most (each right once) */
    bool grant_txn_id;    /* granted while it runs: Write on every TransactionalId, else on
                             the topic */
};

static const struct right_case rights[] = {
    {{"missing TransactionalId Write ACL", "ssl_bootstrap", NULL, "notxn", NULL,
      "denied=transactional_id_write", "Write and Describe on the TransactionalId"},
     "transactional", false, "transactional_id_write", 1, true},
    {{"no right at all, fencing=none (no IdempotentWrite)", "ssl_bootstrap", NULL, "noidem",
      NULL, "msg=\"kafka refuses the relay's principal a right",
      "Write and Describe on the topic"},
     "none", false, "topic_write|idempotent_write", 2, false},
    {{"missing topic Write ACL, relay.capture=wal", "ssl_bootstrap", NULL, "notopic", NULL,
      "denied=topic_write", "Write and Describe on the topic"},
     "none", true, "topic_write", 1, false},
};
#define N_RIGHTS (sizeof rights / sizeof rights[0])

Test(e2e, missing_producer_rights_and_wal_topic_rights_are_named_and_recover, .fini = fini,
     .timeout = 240)
{
    static const char *const names[N_RIGHTS] = {"aclnotxn", "aclnoidem", "aclwal"};
    struct e2e_relay *relay[N_RIGHTS];
    int lines20[N_RIGHTS];
    for (size_t i = 0; i < N_RIGHTS; i++) {
        setup_capture(&C[i], names[i], rights[i].wal);
        enqueue(&C[i], 40);
        create_topic(&C[i]);
    }
    /* the case of the TransactionalId lacks only that right */
    grant(&C[0], RD_KAFKA_RESOURCE_TOPIC, NULL, "User:notxn");
    int64_t t0 = e2e_now_ms();
    for (size_t i = 0; i < N_RIGHTS; i++)
        relay[i] = start(&C[i], &rights[i].way, rights[i].fencing);
    for (size_t i = 0; i < N_RIGHTS; i++) {
        const struct way *w = &rights[i].way;
        check_named(&C[i], relay[i], w, t0 + 20000);
        check_reported(relay[i], w->what, rights[i].rights, w->says_too);
    }
    int64_t wait = t0 + 20000 - e2e_now_ms();
    if (wait > 0)
        e2e_sleep_ms((int)wait);
    for (size_t i = 0; i < N_RIGHTS; i++) {
        lines20[i] = e2e_relay_log_count(relay[i], "\n");
        cr_expect_leq(lines20[i], 60, "%s: %d log lines in 20 s: %s", rights[i].way.what,
                      lines20[i], relay[i]->log_path);
    }
    /* and later, while the back-off grows: a line every few seconds at most */
    e2e_sleep_ms(20000);
    for (size_t i = 0; i < N_RIGHTS; i++) {
        struct e2e_relay *r = relay[i];
        const char *what = rights[i].way.what;
        int more = e2e_relay_log_count(r, "\n") - lines20[i];
        cr_expect_leq(more, 10, "%s: %d log lines in the next 20 s: %s", what, more, r->log_path);
        int named = e2e_relay_log_count(r, "msg=\"kafka refuses the relay's principal a right");
        cr_expect(named >= 1 && named <= rights[i].named, "%s: named %d times: %s", what, named,
                  r->log_path);
        check_reported(r, what, rights[i].rights, rights[i].way.says_too);
        cr_expect_eq(e2e_count_where(&C[i], "sent_at IS NOT NULL"), 0, "%s: rows marked", what);
        cr_expect_eq(e2e_count_where(&C[i], "attempts > 0 OR last_error IS NOT NULL"), 0,
                     "%s: rows charged for a missing ACL: %s", what, r->log_path);
    }
    char principal[64];
    for (size_t i = 0; i < N_RIGHTS; i++) {
        snprintf(principal, sizeof principal, "User:%s", rights[i].way.client);
        if (rights[i].grant_txn_id)
            grant_txn_id(&C[i], principal);
        else
            grant(&C[i], RD_KAFKA_RESOURCE_TOPIC, NULL, principal);
    }
    for (size_t i = 0; i < N_RIGHTS; i++) {
        struct e2e_relay *r = relay[i];
        cr_assert(e2e_relay_wait_log(
                      r, "msg=\"kafka grants the relay's principal its rights again\"", 75000),
                  "%s: log %s", rights[i].way.what, r->log_path);
        if (rights[i].wal)
            read_back_wal(&C[i], r, 40);
        else {
            /* at once: the back-off ends with the refusal */
            e2e_wait_all_sent(&C[i], 15000);
            e2e_verify_sent_once(&C[i], rights[i].way.what);
        }
        cr_expect_eq(e2e_count_where(&C[i], "attempts > 0"), 0, "rows charged: %s", r->log_path);
        cr_assert_eq(e2e_relay_stop(r, 30000), 0);
    }
}

Test(e2e, a_secret_file_that_does_not_exist_is_refused_with_exit_78, .fini = fini,
     .timeout = 60)
{
    setup(&C[0], "tlsnofile");
    char twin[800];
    snprintf(twin, sizeof twin, "kafka.sasl.password_file=%s/no-such-secret", C[0].logdir);
    static const char *const words[] = {"check-config", "run"};
    for (int w = 0; w < 2; w++) {
        const char *args[E2E_MAX_ARGS] = {words[w]};
        int n = 1;
        e2e_base_args(&C[0], args, &n);
        const char *extra[] = {"kafka.security.protocol=SASL_SSL",
                               "kafka.sasl.mechanism=SCRAM-SHA-512", "kafka.sasl.username=relay",
                               twin};
        for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
            args[n++] = "-X";
            args[n++] = extra[i];
        }
        args[n] = NULL;
        char *out = NULL, *err = NULL;
        int rc = e2e_run_relay(args, 30000, &out, &err);
        cr_expect_eq(rc, 78, "%s: exit %d: %s", words[w], rc, err);
        cr_expect(err && strstr(err, "kafka.sasl.password_file"), "%s: %s", words[w], err);
        free(out);
        free(err);
    }
}

/* ---- refused connections: the back-off, and recovery once fixed ---------- */

/* Writes @p len bytes of @p text to @p path, mode 0600 (a secret's). */
static void write_secret(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(text, 1, len, f), len, "%s", path);
    fclose(f);
    cr_assert_eq(chmod(path, 0600), 0, "%s", path);
}

/* Copies DIR/tls/@p name (of the stack's Kafka node) to @p dst, mode 0600,
 * as an operator puts a new certificate where the old one was. */
static void copy_tls(const struct e2e_ctx *t, const char *name, const char *dst)
{
    char src[700], buf[65536];
    snprintf(src, sizeof src, "%s/tls/%s", t->env->kafka_dir, name);
    FILE *f = fopen(src, "r");
    cr_assert_not_null(f, "%s: %s", src, strerror(errno));
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    write_secret(dst, buf, n);
}

/* Connections the broker refused on the listener of DIR/@p listener, as its
 * log says (the Selector's "Failed authentication", logged at INFO by
 * tests/support/kafka/log4j.properties): every attempt that reached it. */
static int refused_at_broker(const struct e2e_ctx *t, const char *listener)
{
    char bs[512], path[700], line[4096], needle[600];
    read_line(t, listener, bs, sizeof bs);
    snprintf(needle, sizeof needle, "channelId=%.*s-", (int)strcspn(bs, ","), bs);
    snprintf(path, sizeof path, "%s/node-1/kafka.log", t->env->kafka_dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, "Failed authentication with") && strstr(line, needle);
    fclose(f);
    return n;
}

/* A mistake an operator fixes in a file the relay reads: the secret, the
 * client certificate, the CA. */
struct fixable {
    const char *what;
    const char *listener;  /* sasl_bootstrap or ssl_bootstrap */
    const char *fencing;
    const char *right;     /* its series of outbox_relay_kafka_denied */
    const char *needs;     /* what /readyz says it needs */
};

static const struct fixable fixables[] = {
    {"wrong password", "sasl_bootstrap", "transactional", "authentication",
     "credentials the brokers accept"},
    {"expired client certificate", "ssl_bootstrap", "none", "tls",
     "certificates both sides accept"},
};
#define N_FIX (sizeof fixables / sizeof fixables[0])

/* Starts case @p i with its mistake in files under the test's logdir. */
static struct e2e_relay *start_fixable(struct e2e_ctx *t, size_t i)
{
    static char o[N_FIX][8][800];
    char bs[512], path[700];
    read_line(t, fixables[i].listener, bs, sizeof bs);
    snprintf(o[i][0], 800, "kafka.bootstrap.servers=%s", bs);
    snprintf(o[i][1], 800, "kafka.ssl.ca.location=%s/tls/ca.pem", t->env->kafka_dir);
    snprintf(o[i][2], 800, "relay.fencing=%s", fixables[i].fencing);
    const char *extra[10] = {o[i][0], o[i][1], o[i][2]};
    int n = 3;
    if (i == 0) {
        snprintf(path, sizeof path, "%.600s/password", t->logdir);
        write_secret(path, "not-the-password\n", strlen("not-the-password\n"));
        snprintf(o[i][3], 800, "kafka.sasl.password_file=%s", path);
        extra[n++] = "kafka.security.protocol=SASL_SSL";
        /* PLAIN where this librdkafka cannot do SCRAM with the node at all */
        extra[n++] = e2e_kafka_scram_refused(t) ? "kafka.sasl.mechanism=PLAIN"
                                                 : "kafka.sasl.mechanism=SCRAM-SHA-512";
        extra[n++] = "kafka.sasl.username=relay";
        extra[n++] = o[i][3];
    } else {
        snprintf(path, sizeof path, "%.600s/client.crt", t->logdir);
        copy_tls(t, "client-expired.crt", path);
        snprintf(o[i][3], 800, "kafka.ssl.certificate.location=%s", path);
        snprintf(path, sizeof path, "%.600s/client.key", t->logdir);
        copy_tls(t, "client-expired.key", path);
        snprintf(o[i][4], 800, "kafka.ssl.key.location=%s", path);
        extra[n++] = "kafka.security.protocol=SSL";
        extra[n++] = o[i][3];
        extra[n++] = o[i][4];
    }
    extra[n] = NULL;
    return e2e_relay_start(t, extra);
}

/* Fixes case @p i's mistake where it was made, the relay still running. */
static void fix(struct e2e_ctx *t, size_t i)
{
    char path[700];
    if (i == 0) {
        snprintf(path, sizeof path, "%.600s/password", t->logdir);
        write_secret(path, "relay-secret-1\n", strlen("relay-secret-1\n"));
        return;
    }
    snprintf(path, sizeof path, "%.600s/client.crt", t->logdir);
    copy_tls(t, "client-relay.crt", path);
    snprintf(path, sizeof path, "%.600s/client.key", t->logdir);
    copy_tls(t, "client-relay.key", path);
}

/* librdkafka tries a refused connection again every second on its own
 * (reconnect.backoff.max.ms): the relay stops the producer instead and
 * makes a new one after its back-off (doubling to a minute), which reads
 * the files again. Counted at the broker: each attempt that reached it. */
Test(e2e, refused_connections_back_off_and_recover_once_the_file_is_fixed, .fini = fini,
     .timeout = 300)
{
    static const char *const names[N_FIX] = {"fixpass", "fixcert"};
    struct e2e_relay *relay[N_FIX];
    int lines20[N_FIX], tried20[N_FIX];
    for (size_t i = 0; i < N_FIX; i++) {
        setup(&C[i], names[i]);
        enqueue(&C[i], 30);
        tried20[i] = refused_at_broker(&C[i], fixables[i].listener);
    }
    int64_t t0 = e2e_now_ms();
    for (size_t i = 0; i < N_FIX; i++)
        relay[i] = start_fixable(&C[i], i);
    e2e_sleep_ms(20000);
    for (size_t i = 0; i < N_FIX; i++) {
        const char *what = fixables[i].what;
        lines20[i] = e2e_relay_log_count(relay[i], "\n");
        int tried = refused_at_broker(&C[i], fixables[i].listener) - tried20[i];
        tried20[i] += tried;
        fprintf(stderr, "%s: %d attempts and %d log lines in the first 20 s\n", what, tried, lines20[i]);
        cr_expect_leq(lines20[i], 60, "%s: %d log lines in 20 s: %s", what, lines20[i],
                      relay[i]->log_path);
        /* the doubling's first steps; librdkafka alone: about 20 */
        cr_expect_leq(tried, 14, "%s: %d connections refused in 20 s: %s", what, tried,
                      relay[i]->log_path);
        cr_expect(tried >= 1, "%s: no attempt reached the broker", what);
    }
    /* the next 40 s: the back-off near its cap; librdkafka alone: about 40 */
    e2e_sleep_ms(40000);
    for (size_t i = 0; i < N_FIX; i++) {
        const char *what = fixables[i].what;
        struct e2e_relay *r = relay[i];
        int more = e2e_relay_log_count(r, "\n") - lines20[i];
        int tried = refused_at_broker(&C[i], fixables[i].listener) - tried20[i];
        fprintf(stderr, "%s: %d attempts and %d log lines in the 40 s after\n", what, tried, more);
        cr_expect_leq(more, 8, "%s: %d log lines in the 40 s after the first 20: %s", what, more,
                      r->log_path);
        cr_expect_leq(tried, 8, "%s: %d connections refused in the 40 s after the first 20: %s",
                      what, tried, r->log_path);
        cr_expect_eq(e2e_relay_log_count(r, "msg=\"kafka refuses the relay's principal a right"),
                     1, "%s: named once: %s", what, r->log_path);
        check_reported(r, what, fixables[i].right, fixables[i].needs);
        cr_expect_eq(e2e_count_where(&C[i], "sent_at IS NOT NULL"), 0, "%s: rows marked", what);
        cr_expect_eq(e2e_count_where(&C[i], "attempts > 0 OR last_error IS NOT NULL"), 0,
                     "%s: rows charged: %s", what, r->log_path);
    }
    /* Fixed: the next attempt, within the back-off's cap (a minute), delivers
     * every row in order. */
    int64_t fixed = e2e_now_ms();
    for (size_t i = 0; i < N_FIX; i++)
        fix(&C[i], i);
    for (size_t i = 0; i < N_FIX; i++) {
        e2e_wait_all_sent(&C[i], 90000);
        fprintf(stderr, "%s: every row sent %lld ms after the fix (%lld s after the start)\n",
                    fixables[i].what, (long long)(e2e_now_ms() - fixed),
                    (long long)((e2e_now_ms() - t0) / 1000));
        e2e_verify_sent_once(&C[i], fixables[i].what);
        cr_expect_eq(e2e_count_where(&C[i], "attempts > 0"), 0, "rows charged: %s",
                     relay[i]->log_path);
        char *body = NULL;
        int code = e2e_relay_http_get(relay[i], "/readyz?verbose", &body);
        cr_expect_eq(code, 200, "%s: /readyz after the fix: %d %s", fixables[i].what, code,
                     body ? body : "");
        free(body);
        cr_assert_eq(e2e_relay_stop(relay[i], 30000), 0);
    }
}
