/* bench_latency.c — scenario 2: commit -> consumer latency at a rate, and
 * Kafka’s own floor of it. */
#include "bench.h"

/* ---- scenario 2: latency ------------------------------------------------- */


/* The sequence number a latency event carries in its payload. */
static long latency_seq(const rd_kafka_message_t *m)
{
    static const char tag[] = "\"seq\": ";
    const char *v = m->payload;
    size_t len = m->len;
    for (size_t i = 0; v && i + sizeof(tag) - 1 < len; i++)
        if (!memcmp(v + i, tag, sizeof(tag) - 1))
            return strtol(v + i + sizeof(tag) - 1, NULL, 10);
    return -1;
}

static void *consume_thread(void *arg)
{
    struct latency_run *L = arg;
    while (!L->stop) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(L->consumer, 50);
        if (!m)
            continue;
        double t = now_s();
        long idx = m->err ? -1 : latency_seq(m);
        if (idx >= 0 && idx < L->n && L->recv[idx] == 0)
            L->recv[idx] = t;
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

/* A read_committed consumer at the end of every partition of @p topic,
 * whose fetches wait at most @p fetch_wait_ms for data on the broker. */
rd_kafka_t *consumer_at(const char *topic, const char *fetch_wait_ms)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", kafka_servers, err, sizeof(err));
    rd_kafka_conf_set(conf, "group.id", "outbox-relay-bench", err, sizeof(err));
    rd_kafka_conf_set(conf, "fetch.wait.max.ms", fetch_wait_ms, err, sizeof(err));
    rd_kafka_conf_set(conf, "fetch.error.backoff.ms", "5", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (!rk)
        die("consumer: %s", err);
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
    if (rd_kafka_metadata(rk, 0, t, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        md->topic_cnt != 1 || md->topics[0].partition_cnt == 0)
        die("no metadata for %s", topic);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(4);
    for (int i = 0; i < md->topics[0].partition_cnt; i++)
        rd_kafka_topic_partition_list_add(parts, topic, md->topics[0].partitions[i].id)->offset =
            RD_KAFKA_OFFSET_END;
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
    rd_kafka_assign(rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    return rk;
}

/* The latency runs' consumer: its fetches wait 1 ms at most. */
rd_kafka_t *consumer_at_end(const char *topic)
{
    return consumer_at(topic, "1");
}

int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}


/* Commit → received percentiles of the first @p n events of @p L. */
static struct latency_result latency_figures(const struct latency_run *L, long n)
{
    struct latency_result res = { .events = n };
    double *lat = calloc((size_t)n + 1, sizeof(double));
    long m = 0;
    for (long k = 0; k < n; k++) {
        if (L->recv[k] > 0 && L->commit[k] > 0) {
            double d = L->recv[k] - L->commit[k];
            lat[m++] = d < 0 ? 0 : d * 1000.0; /* received before the COMMIT reply reached us */
        }
    }
    res.received = m;
    if (m > 0) {
        qsort(lat, (size_t)m, sizeof(double), cmp_double);
        res.p50_ms = lat[(m - 1) * 50 / 100];
        res.p99_ms = lat[(m - 1) * 99 / 100];
        res.max_ms = lat[m - 1];
    }
    free(lat);
    return res;
}

/* Room for @p L's events, and a consumer at the end of @p topic reading
 * them on a thread of its own (returned). */
pthread_t latency_listen(struct latency_run *L, const char *topic)
{
    L->n = (long)(L->rate * L->seconds) + 16;
    L->commit = calloc((size_t)L->n, sizeof(double));
    L->recv = calloc((size_t)L->n, sizeof(double));
    if (!L->commit || !L->recv)
        die("out of memory");
    L->consumer = consumer_at_end(topic);
    pthread_t th;
    pthread_create(&th, NULL, consume_thread, L);
    sleep_s(1.0); /* let the consumer reach the end of every partition */
    return th;
}

/* Every event of @p L, when it was committed (or produced) and received, in
 * seconds from the first one's due time, into latency-<table>.tsv of the run's
 * directory: the outliers' times show what they line up with (a timer, a
 * backlog count, the relay's debug log). */
static void latency_dump(const struct latency_run *L, long n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/latency-%s.tsv", workdir, L->table);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "# times in seconds after %.6f (the Unix time event 0 was due)\n", L->t0);
    fprintf(f, "seq\tcommitted_s\treceived_s\tms\n");
    for (long k = 0; k < n; k++) {
        if (L->commit[k] <= 0)
            continue;
        double ms = L->recv[k] > 0 ? (L->recv[k] - L->commit[k]) * 1000.0 : -1;
        fprintf(f, "%ld\t%.6f\t%.6f\t%.3f\n", k, L->commit[k] - L->t0,
                L->recv[k] > 0 ? L->recv[k] - L->t0 : -1.0, ms);
    }
    fclose(f);
}

/* The percentiles of the first @p n events of @p L into @p res; frees @p L's room. */
void latency_take(struct latency_result *res, struct latency_run *L, long n)
{
    latency_dump(L, n);
    struct latency_result f = latency_figures(L, n);
    res->received = f.received;
    res->p50_ms = f.p50_ms;
    res->p99_ms = f.p99_ms;
    res->max_ms = f.max_ms;
    free(L->commit);
    free(L->recv);
}

/* Waits up to @p wait_s for the first @p n events of @p L to arrive, then
 * stops its consumer (thread @p th) and closes it. */
void latency_collect(struct latency_run *L, pthread_t th, long n, double wait_s)
{
    for (double waited = 0; waited < wait_s; waited += 0.05) {
        long got = 0;
        for (long k = 0; k < n; k++)
            got += L->recv[k] > 0;
        if (got == n)
            break;
        sleep_s(0.05);
    }
    L->stop = true;
    pthread_join(th, NULL);
    rd_kafka_consumer_close(L->consumer);
    rd_kafka_destroy(L->consumer);
}

/* When event @p n of @p L is due: the writers commit it, Kafka's floor produces it. */
static double latency_due(const struct latency_run *L, long n)
{
    return L->t0 + (double)n / L->rate;
}

/* Runs @p sql, an enqueue taking the event's sequence number @p n as $1, in
 * its own transaction. @return when it committed. */
double enqueue_seq(PGconn *c, const char *sql, long n)
{
    char arg[24];
    snprintf(arg, sizeof(arg), "%ld", n);
    const char *params[] = { arg };
    PGresult *r = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        die("enqueue: %s", PQresultErrorMessage(r));
    PQclear(r);
    return now_s(); /* autocommit: the row is committed when this returns */
}




/* The writers a latency run at @p rate needs. */
static int latency_writers(int rate)
{
    int w = (rate + LATENCY_RATE_PER_WRITER - 1) / LATENCY_RATE_PER_WRITER;
    return w > LATENCY_WRITERS_MAX ? LATENCY_WRITERS_MAX : w;
}

static void *latency_writer_thread(void *opaque)
{
    struct latency_writer *w = opaque;
    struct latency_run *L = w->L;
    PGconn *c = pg_open();
    /* PostgreSQL's default, as applications commit: the test stack turns it
     * off, and then a commit reaches the WAL on disk, and a slot's reader
     * (relay.capture = wal), only when the WAL writer next flushes (up to
     * wal_writer_delay, 200 ms, later). The same for every latency run. */
    pg_exec(c, "SET synchronous_commit = on");
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT \"public\".\"%s_enqueue\"('order', ($1::int %% 500)::text, 'Ping', "
             "jsonb_build_object('ping', true, 'seq', $1::int))",
             L->table);
    for (long n = w->k; n < L->n - 16; n += L->writers) {
        double due = latency_due(L, n);
        if (due > L->t0 + L->seconds)
            break;
        sleep_s(due - now_s());
        L->commit[n] = enqueue_seq(c, sql, n);
        w->written++;
    }
    w->last = now_s();
    PQfinish(c);
    return NULL;
}


/* Starts @p L's writers (L->writers of them) from @p L's t0 on. */
static void writers_start(struct latency_writers *ws, struct latency_run *L)
{
    for (int k = 0; k < L->writers; k++) {
        ws->w[k] = (struct latency_writer){ .L = L, .k = k };
        pthread_create(&ws->t[k], NULL, latency_writer_thread, &ws->w[k]);
    }
}

/* Waits for the writers of @p L. @return the events they wrote; *@p last:
 * when the last of them finished. */
static long writers_join(struct latency_writers *ws, const struct latency_run *L, double *last)
{
    long n = 0;
    *last = L->t0;
    for (int k = 0; k < L->writers; k++) {
        pthread_join(ws->t[k], NULL);
        n += ws->w[k].written;
        *last = ws->w[k].last > *last ? ws->w[k].last : *last;
    }
    return n;
}


static void *listener_thread(void *arg)
{
    struct listener *l = arg;
    struct pollfd pfd = { .fd = PQsocket(l->conn), .events = POLLIN };
    while (!*l->stop) {
        if (poll(&pfd, 1, 50) > 0 && !PQconsumeInput(l->conn))
            die("listener: %s", PQerrorMessage(l->conn));
        for (PGnotify *nf; (nf = PQnotifies(l->conn)) != NULL; PQfreemem(nf))
            l->count++;
    }
    return NULL;
}

/* Whether the warm-up event of @p table is through: marked (polling), or
 * its transaction confirmed on the slot (capture = wal: the relay confirms
 * only what Kafka committed). */
static bool warmup_sent(PGconn *c, const char *table, bool wal, long long lsn)
{
    if (wal)
        return pg_int(c, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '%s' "
                         "AND pg_wal_lsn_diff(confirmed_flush_lsn, '0/0') > %lld",
                      table, lsn) > 0;
    return pg_int(c, "SELECT count(*) FROM \"public\".\"%s\" WHERE \"sent_at\" IS NULL",
                  table) == 0;
}

struct latency_result latency(PGconn *c, const char *table, int rate, double seconds, bool wal)
{
    struct latency_result res = { .rate = rate, .wal = wal };
    struct wal_opts wo;
    wal_opts_init(&wo, table);
    drop(c, table);
    migrate(table, wal ? wo.v : NULL);
    struct relay_proc p = relay_start(table, wal ? wo.v : NULL);

    /* A first event creates the topic and proves the relay is leading. */
    pg_exec(c, "BEGIN");
    pg_exec(c, "SELECT \"public\".\"%s_enqueue\"('order', 'warmup', 'Warmup', '{}')", table);
    /* Before its commit record: the transaction's end, which the slot confirms, is past it. */
    long long lsn = pg_int(c, "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint");
    pg_exec(c, "COMMIT");
    for (int i = 0; !warmup_sent(c, table, wal, lsn); i++) {
        if (i > 600)
            die("latency relay for %s never sent the warm-up event", table);
        sleep_s(0.05);
    }
    char topic[160];
    snprintf(topic, sizeof(topic), "%s.order", table);

    struct latency_run L = { .table = table, .rate = rate, .seconds = seconds };
    L.writers = latency_writers(rate);
    pthread_t th = latency_listen(&L, topic);

    struct latency_writers ws;
    /* Counts the writers' NOTIFYs on the relay's default channel, reading
     * them as they come: unread, they would fill the socket and stall. */
    struct listener ln = { .conn = pg_open(), .stop = &L.stop };
    pg_exec(ln.conn, "LISTEN \"outbox_relay\"");
    pthread_t lt;
    pthread_create(&lt, NULL, listener_thread, &ln);
    L.t0 = now_s() + 0.05;
    struct machine_cpu m0 = machine_cpu_now();
    double cpu0 = proc_cpu_s(p.pid);
    struct thread_switches by0, by1;
    long sw0 = proc_switches_by_thread(p.pid, &by0);
    writers_start(&ws, &L);
    double t1;
    long n = writers_join(&ws, &L, &t1);
    res.machine_busy = machine_busy(m0, machine_cpu_now());
    res.relay_cpu_s_per_100k = n > 0 ? (proc_cpu_s(p.pid) - cpu0) * 100000.0 / (double)n : -1;
    long sw1 = proc_switches_by_thread(p.pid, &by1);
    res.switches_per_event = n > 0 && sw0 >= 0 && sw1 >= 0 ? (double)(sw1 - sw0) / (double)n : -1;
    if (n > 0)
        thread_switches_line(&by0, &by1, (double)n, res.switches_by_thread,
                             sizeof res.switches_by_thread);
    res.events = n;
    res.writers = L.writers;
    res.achieved_rate = (double)n / (t1 - L.t0);

    latency_collect(&L, th, n, 10.0); /* the stragglers, bounded */
    pthread_join(lt, NULL);
    res.notifies = ln.count;
    PQfinish(ln.conn);
    double cpu_s;
    relay_cost(p.pid, &res.peak_rss_mb, &cpu_s);
    relay_stop(&p);
    if (wal)
        drop(c, table); /* its slot */

    latency_take(&res, &L, n);
    return res;
}


/* ---- the Kafka floor of latency ------------------------------------------- */


static void floor_delivered(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    struct kafka_floor *F = opaque;
    if (m->err)
        die("floor: delivery failed: %s", rd_kafka_err2str(m->err));
    F->unacked--;
}

/* Waits for every delivery report, as the relay does before it commits (a
 * commit with messages in flight would wait inside librdkafka's flush). */
static void floor_acked(struct kafka_floor *F)
{
    while (F->unacked > 0)
        rd_kafka_poll(F->rk, 100);
}

static rd_kafka_t *floor_producer(struct kafka_floor *F)
{
    bool txn = F->txn;
    char err[512], id[64];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_dr_msg_cb(conf, floor_delivered);
    rd_kafka_conf_set_opaque(conf, F);
    size_t n;
    const struct kafka_setting *s = kafka_producer_settings(&n);
    for (size_t i = 0; i < n; i++)
        if (rd_kafka_conf_set(conf, s[i].key, s[i].value, err, sizeof(err)) != RD_KAFKA_CONF_OK)
            die("floor producer: %s", err);
    if (txn) {
        snprintf(id, sizeof(id), "outbox-relay-bench-floor-%d", (int)getpid());
        s = kafka_transaction_settings(&n);
        for (size_t i = 0; i < n; i++)
            if (rd_kafka_conf_set(conf, s[i].key, s[i].value ? s[i].value : id, err,
                                  sizeof(err)) != RD_KAFKA_CONF_OK)
                die("floor producer: %s", err);
    }
    rd_kafka_conf_set(conf, "bootstrap.servers", kafka_servers, err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk)
        die("floor producer: %s", err);
    if (txn) {
        rd_kafka_error_t *e = rd_kafka_init_transactions(rk, 30000);
        if (e)
            die("floor producer: init_transactions: %s", rd_kafka_error_string(e));
    }
    return rk;
}

static void floor_produce(struct kafka_floor *F, const char *topic, long k)
{
    char key[16], value[64];
    int klen = snprintf(key, sizeof(key), "%ld", k < 0 ? 0 : k % 500);
    int vlen = snprintf(value, sizeof(value), "{\"ping\": true, \"seq\": %ld}", k);
    rd_kafka_resp_err_t e;
    while ((e = rd_kafka_producev(F->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, (size_t)klen),
                                  RD_KAFKA_V_VALUE(value, (size_t)vlen),
                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END)) ==
           RD_KAFKA_RESP_ERR__QUEUE_FULL)
        rd_kafka_poll(F->rk, 1);
    if (e)
        die("floor produce: %s", rd_kafka_err2str(e));
    F->unacked++;
}

static void floor_begin(struct kafka_floor *F)
{
    rd_kafka_error_t *e = F->txn ? rd_kafka_begin_transaction(F->rk) : NULL;
    if (e)
        die("floor: begin_transaction: %s", rd_kafka_error_string(e));
}

static void floor_commit(struct kafka_floor *F)
{
    floor_acked(F);
    rd_kafka_error_t *e = F->txn ? rd_kafka_commit_transaction(F->rk, 30000) : NULL;
    if (e)
        die("floor: commit_transaction: %s", rd_kafka_error_string(e));
}

/* Produces every event of the run when it is due; with transactions, each
 * transaction holds the events due when it began. */
static void kafka_floor_run(struct kafka_floor *F)
{
    struct latency_run *L = F->L;
    long next = 0, last = L->n - 16;
    double end = L->t0 + L->seconds;
    while (next < last && latency_due(L, next) <= end) {
        sleep_s(latency_due(L, next) - now_s());
        floor_begin(F);
        double now = now_s();
        for (; next < last && latency_due(L, next) <= now; next++) {
            L->commit[next] = latency_due(L, next); /* available from its due time */
            floor_produce(F, F->topic, next);
            F->produced++;
        }
        if (F->txn)
            floor_commit(F);
        else
            rd_kafka_poll(F->rk, 0); /* serves the reports; no waiting for them */
    }
    F->last = now_s();
    floor_acked(F);
}


static void load_start(struct writer_load *ld, PGconn *c, const char *table, int rate,
                       double seconds, double t0)
{
    drop(c, table);
    migrate(table, NULL);
    ld->W = (struct latency_run){ .table = table, .rate = rate, .seconds = seconds, .t0 = t0,
                                  .writers = latency_writers(rate) };
    ld->W.n = (long)(rate * seconds) + 16;
    ld->W.commit = calloc((size_t)ld->W.n, sizeof(double));
    if (!ld->W.commit)
        die("out of memory");
    writers_start(&ld->ws, &ld->W);
}

static void load_stop(struct writer_load *ld, PGconn *c)
{
    double last;
    (void)writers_join(&ld->ws, &ld->W, &last);
    free(ld->W.commit);
    drop(c, ld->W.table);
}

/* Kafka's floor at @p rate into the topic of @p table; with @p load_table,
 * while the writers of the relay's run write into that table (@p c). */
struct latency_result kafka_floor(const char *table, int rate, double seconds, bool txn,
                                         PGconn *c, const char *load_table)
{
    struct latency_result res = { .rate = rate, .notifies = -1 };
    char topic[160];
    snprintf(topic, sizeof(topic), "%s.order", table);
    ensure_topic(topic);
    struct latency_run L = { .table = table, .rate = rate, .seconds = seconds };
    struct kafka_floor F = { .L = &L, .topic = topic, .txn = txn };
    F.rk = floor_producer(&F);
    /* The topic's metadata and a first transaction before the clock starts,
     * as the relay's warm-up event gives it. */
    floor_begin(&F);
    floor_produce(&F, topic, -1);
    floor_commit(&F);
    pthread_t th = latency_listen(&L, topic);
    struct writer_load ld;
    if (load_table) /* its table made before the clock starts */
        load_start(&ld, c, load_table, rate, seconds, now_s() + 0.25);
    L.t0 = load_table ? ld.W.t0 : now_s() + 0.05;
    struct machine_cpu m0 = machine_cpu_now();
    kafka_floor_run(&F);
    res.machine_busy = machine_busy(m0, machine_cpu_now());
    if (load_table)
        load_stop(&ld, c);
    res.events = F.produced;
    res.achieved_rate = (double)F.produced / (F.last - L.t0);
    latency_collect(&L, th, F.produced, 10.0);
    rd_kafka_destroy(F.rk);
    latency_take(&res, &L, F.produced);
    return res;
}
