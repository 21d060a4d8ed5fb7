/* bench_scenarios.c — start-up with a backlog waiting, and fresh events behind a backlog. */
#include "bench.h"

/* ---- scenario 3: start-up ------------------------------------------------ */

/* Creates @p topic on the broker (one message the relay's consumers ignore:
 * it has no outbox_id), so a consumer can wait at its end before the relay
 * starts. */
void ensure_topic(const char *topic)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", kafka_servers, err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk)
        die("producer: %s", err);
    if (rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_VALUE("bench", 5),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END))
        die("cannot produce to %s", topic);
    if (rd_kafka_flush(rk, 15000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        die("cannot create topic %s", topic);
    rd_kafka_destroy(rk);
}


static void *first_message_thread(void *arg)
{
    struct first_message *F = arg;
    while (!F->stop && F->at == 0) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(F->consumer, 20);
        if (!m)
            continue;
        if (!m->err)
            F->at = now_s();
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

/* The time of the relay's "became leader" log line (its ts= field, UTC with
 * milliseconds), or 0 while it has not been written. */
static double leader_time(const char *log)
{
    FILE *f = fopen(log, "r");
    char line[2048];
    double t = 0;
    while (f && fgets(line, sizeof(line), f)) {
        if (!strstr(line, "msg=\"became leader\""))
            continue;
        struct tm tm = { 0 };
        int ms = 0;
        if (sscanf(line, "ts=%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) == 7) {
            tm.tm_year -= 1900;
            tm.tm_mon -= 1;
            t = (double)timegm(&tm) + ms / 1000.0;
        }
        break;
    }
    if (f)
        fclose(f);
    return t;
}


double median(const double *v, int n)
{
    double tmp[8];
    memcpy(tmp, v, sizeof(double) * (size_t)n);
    qsort(tmp, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

double maximum(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* A relay starts with @p backlog rows waiting: how long from its start, and
 * from its "became leader", to the first message a consumer receives and to
 * the first row marked. @p runs times on the same table, the rows it sent
 * made unsent again in between. */
struct startup_result startup(PGconn *c, const char *table, long backlog, int aggregates,
                                     int runs)
{
    struct startup_result res = { .backlog = backlog, .runs = runs };
    drop(c, table);
    migrate(table, NULL);
    seed(c, table, backlog, aggregates);
    char topic[160], log[512];
    snprintf(topic, sizeof(topic), "%s.order", table);
    snprintf(log, sizeof(log), "%s/relay-%s.log", workdir, table);
    ensure_topic(topic);
    long long first_id = pg_int(c, "SELECT min(\"id\") FROM \"public\".\"%s\"", table);
    for (int k = 0; k < runs; k++) {
        pg_exec(c, "UPDATE \"public\".\"%s\" SET \"sent_at\" = NULL WHERE \"sent_at\" IS NOT NULL",
                table);
        /* Rows made unsent by hand below the saved floor are not claimed
         * again (docs/operations.md): the floor goes back to the start. */
        pg_exec(c, "UPDATE \"public\".\"%s_floor\" SET \"floor_id\" = 0", table);
        pg_exec(c, "VACUUM ANALYZE \"public\".\"%s\"", table);
        struct first_message F = { .consumer = consumer_at_end(topic) };
        pthread_t th;
        pthread_create(&th, NULL, first_message_thread, &F);
        sleep_s(1.0); /* let the consumer reach the end of every partition */
        unlink(log);
        struct relay_proc p = relay_start(table, NULL);
        double leader = 0, marked = 0;
        for (int i = 0; i < 1500 && (F.at == 0 || marked == 0); i++) {
            sleep_s(0.01);
            if (leader == 0)
                leader = leader_time(log);
            /* The first claim starts from the lowest id (the floor is 0): that
             * row is marked with the first batch. One index lookup: a scan
             * of the table every 10 ms would take the CPU the start needs. */
            if (marked == 0)
                marked = (double)pg_int(c, "SELECT coalesce(floor(extract(epoch FROM \"sent_at\") "
                                           "* 1e6), 0)::bigint FROM \"public\".\"%s\" WHERE \"id\" "
                                           "= %lld", table, first_id) / 1e6;
        }
        F.stop = true;
        pthread_join(th, NULL);
        rd_kafka_consumer_close(F.consumer);
        rd_kafka_destroy(F.consumer);
        relay_stop(&p);
        if (leader == 0)
            leader = leader_time(log);
        if (leader == 0 || F.at == 0 || marked == 0)
            die("start-up of %s: no leader, message or mark within 15 s (see %s)", table, log);
        res.start_to_leader_ms[k] = (leader - p.started) * 1000.0;
        res.leader_to_received_ms[k] = (F.at - leader) * 1000.0;
        res.leader_to_marked_ms[k] = (marked - leader) * 1000.0;
    }
    return res;
}

/* ---- scenario 4: fresh events behind a backlog --------------------------- */


/* While a relay drains @p backlog rows, events are committed at @p rate on
 * their own topic; their commit → consumer latency says how long a new
 * event waits behind the backlog (claims go in id order). */
struct fresh_result fresh_behind_backlog(PGconn *c, const char *table, long backlog,
                                                int aggregates, int rate)
{
    struct fresh_result res = { .backlog = backlog, .rate = rate };
    drop(c, table);
    migrate(table, NULL);
    seed(c, table, backlog, aggregates);
    char topic[160];
    snprintf(topic, sizeof(topic), "%s.fresh", table);
    ensure_topic(topic);

    struct latency_run L = { .table = table, .rate = rate, .seconds = 1800 };
    long base_id = pg_int(c, "SELECT max(\"id\") FROM \"public\".\"%s\"", table);
    pthread_t th = latency_listen(&L, topic);
    long cap = L.n;

    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT \"public\".\"%s_enqueue\"('fresh', ($1::int %% 50)::text, 'Fresh', "
             "jsonb_build_object('fresh', true, 'seq', $1::int))",
             table);
    struct relay_proc p = relay_start(table, NULL);
    double t0 = now_s();
    long n = 0;
    for (; n < cap - 16; n++) {
        sleep_s(t0 + (double)n / rate - now_s());
        /* Until the backlog (ids up to base_id) is sent. */
        if (n % 10 == 0 && pg_int(c, "SELECT count(*) FROM (SELECT 1 FROM \"public\".\"%s\" WHERE "
                                     "\"sent_at\" IS NULL AND \"id\" <= %ld LIMIT 1) s",
                                  table, base_id) == 0)
            break;
        L.commit[n] = enqueue_seq(c, sql, n);
    }
    res.drain_seconds = now_s() - p.started;
    latency_collect(&L, th, n, 30.0);
    relay_stop(&p);
    latency_take(&res.lat, &L, n);
    res.lat.rate = rate;
    res.lat.events = n;
    res.lat.achieved_rate = (double)n / res.drain_seconds;
    return res;
}
