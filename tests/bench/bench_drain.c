/* bench_drain.c — scenario 1: a backlog drained by the relay, a peer or a SQL
 * floor, on a fresh table. */
#include "bench.h"

/* ---- scenario 1: drain, next to the floors and the peer ------------------ */



/* A snapshot held open on another connection, as a long report or a
 * forgotten BEGIN would: the row versions the drain makes dead stay visible
 * to it, so neither VACUUM nor index scans can drop them. */
static PGconn *hold_snapshot(void)
{
    PGconn *h = pg_open();
    pg_exec(h, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    pg_exec(h, "SELECT 1");
    return h;
}

static void release_snapshot(PGconn *h)
{
    pg_exec(h, "COMMIT");
    PQfinish(h);
}


static struct claim_plan explain_claim(PGconn *c, const char *table, const char *label)
{
    struct sql_statements q;
    if (sql_statements_init(&q, "public", table, "outbox_relay",
                            SQL_HOLD_AGGREGATE | SQL_FLOOR) < 0)
        die("cannot build the claim for %s", table);
    char *sql;
    if (asprintf(&sql, "EXPLAIN (ANALYZE, BUFFERS) %s", q.claim) < 0)
        die("out of memory");
    sql_statements_free(&q);
    /* A full batch, nothing in flight, from the saved floor. */
    const char *params[] = { "1000", "1", "0", "{}", NULL, NULL, NULL };
    PGresult *r = PQexecParams(c, sql, 7, NULL, params, NULL, NULL, 0);
    free(sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        die("EXPLAIN of the claim: %s", PQresultErrorMessage(r));
    struct claim_plan plan = { -1, -1 };
    char path[512];
    snprintf(path, sizeof(path), "%s/claim-plan-%s-%s.txt", workdir, table, label);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < PQntuples(r); i++) {
        const char *line = PQgetvalue(r, i, 0);
        if (f)
            fprintf(f, "%s\n", line);
        const char *hit = strstr(line, "Buffers: shared hit=");
        if (hit && plan.buffers < 0) /* the first is the top node's: the whole plan */
            plan.buffers = strtol(hit + 20, NULL, 10);
        if (strncmp(line, "Execution Time: ", 16) == 0)
            plan.ms = strtod(line + 16, NULL);
    }
    if (f)
        fclose(f);
    PQclear(r);
    return plan;
}


/* The drain's watcher, the same for the relay in every mode and the peers:
 * a read_committed consumer at the end of the table's topic, counting what
 * arrives and when the first and the last message did. Each message is
 * ticked off by its row (the payload's order_id, 1 to rows: seed()), so a
 * duplicate cannot stand in for a row that never arrived. */
struct drain_watch {
    rd_kafka_t *consumer;
    pthread_t th;
    long rows;
    unsigned char *seen;       /* a bit per row */
    volatile long count;       /* rows received at least once */
    volatile long duplicates;  /* messages of a row received before */
    volatile long strangers;   /* messages with no order_id from 1 to rows */
    volatile double first, last;
    volatile bool stop;
};

/* The row a message is for: its payload's order_id; -1 without one. The
 * quotes around the key may be escaped (a value converter that writes the
 * payload as a JSON string). */
static long message_row(const rd_kafka_message_t *m)
{
    static const char key[] = "order_id";
    const char *v = m->payload, *end = v ? v + m->len : NULL;
    const char *p = v ? memmem(v, m->len, key, sizeof(key) - 1) : NULL;
    if (!p)
        return -1;
    for (p += sizeof(key) - 1; p < end && *p && strchr("\\\": ", *p); p++)
        ;
    long id = -1;
    for (; p < end && *p >= '0' && *p <= '9'; p++)
        id = (id < 0 ? 0 : id * 10) + (*p - '0');
    return id;
}

static void watch_tick(struct drain_watch *w, const rd_kafka_message_t *m)
{
    long id = message_row(m);
    if (id < 1 || id > w->rows) {
        w->strangers++;
        return;
    }
    unsigned char bit = (unsigned char)(1u << (id % 8));
    if (w->seen[id / 8] & bit) {
        w->duplicates++;
        return;
    }
    w->seen[id / 8] |= bit;
    double t = now_s();
    if (w->count == 0)
        w->first = t;
    w->last = t;
    w->count++;
}

static void *watch_thread(void *arg)
{
    struct drain_watch *w = arg;
    while (!w->stop) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(w->consumer, 20);
        if (!m)
            continue;
        if (!m->err)
            watch_tick(w, m);
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

static void watch_start(struct drain_watch *w, const char *table, long rows)
{
    char topic[160];
    snprintf(topic, sizeof(topic), "%s.order", table);
    ensure_topic(topic);
    *w = (struct drain_watch){ .consumer = consumer_at(topic, "10"), .rows = rows,
                               .seen = calloc((size_t)rows / 8 + 1, 1) };
    if (!w->seen)
        die("out of memory");
    pthread_create(&w->th, NULL, watch_thread, w);
    sleep_s(1.0); /* at the end of every partition before the runner starts */
}

static void watch_stop(struct drain_watch *w)
{
    w->stop = true;
    pthread_join(w->th, NULL);
    rd_kafka_consumer_close(w->consumer);
    rd_kafka_destroy(w->consumer);
    free(w->seen);
}

/* Whether the table shows @p table's drain done: its last row (@p last_id)
 * marked or deleted, then every row. Whether the last row is done is one
 * index lookup; whether every row is walks the dead entries the drain leaves
 * in the partial index: asked only once the last row is done. */
static bool table_done(PGconn *c, const char *table, long long last_id, bool deleting)
{
    long long last_left = deleting
        ? pg_int(c, "SELECT count(*) FROM \"public\".\"%s\" WHERE \"id\" = %lld", table, last_id)
        : pg_int(c, "SELECT count(*) FROM \"public\".\"%s\" WHERE \"id\" = %lld AND "
                    "\"sent_at\" IS NULL", table, last_id);
    if (last_left)
        return false;
    return 0 == (deleting
        ? pg_int(c, "SELECT count(*) FROM (SELECT 1 FROM \"public\".\"%s\" LIMIT 1) s", table)
        : pg_int(c, "SELECT count(*) FROM (SELECT 1 FROM \"public\".\"%s\" WHERE "
                    "\"sent_at\" IS NULL AND \"dead_at\" IS NULL LIMIT 1) s", table));
}

/* The runner has exited (a peer does when its claim finds nothing): its last
 * messages may still be on their way to the watcher. Dies unless they all
 * arrive within 2 s and the table says done. */
static void wait_after_exit(PGconn *c, const char *table, long rows, long long last_id,
                            const struct drain_opts *o, struct drain_watch *w)
{
    const char *who = o->runner == RUN_RELAY ? "relay" : "peer";
    double until = now_s() + 2.0;
    while (w->count < rows && now_s() < until)
        sleep_s(0.02);
    if (w->count < rows)
        die("%s exited before the drain of %s finished: %ld of %ld rows in Kafka (see %s)", who,
            table, w->count, rows, workdir);
    if (!o->wal && !table_done(c, table, last_id, o->deleting))
        die("%s exited with every message sent but %s not %s (see %s)", who, table,
            o->deleting ? "empty" : "all marked", workdir);
}

/* Waits until the watcher has every row, and the table says done (polling
 * modes; capture = wal leaves it as it is). @return whether @p p exited. */
static bool drain_wait(PGconn *c, const char *table, long rows, long long last_id,
                       const struct drain_opts *o, struct drain_watch *w, struct relay_proc *p)
{
    double deadline = p->started + 1800;
    for (;;) {
        if (w->strangers)
            die("%ld messages in the topic of %s are for no row of it (see %s)", w->strangers,
                table, workdir);
        if (w->count >= rows && (o->wal || table_done(c, table, last_id, o->deleting)))
            return false;
        if (now_s() > deadline)
            die("drain of %s did not finish: %ld of %ld rows in Kafka", table, w->count, rows);
        int st;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            wait_after_exit(c, table, rows, last_id, o, w);
            return true;
        }
        sleep_s(0.02);
    }
}

/* A polling drain leaves no row unsent, and a deleting one no row at all. */
static void check_table_after(PGconn *c, const char *table, bool deleting)
{
    long long left = deleting
        ? pg_int(c, "SELECT count(*) FROM \"public\".\"%s\"", table)
        : pg_int(c, "SELECT count(*) FROM \"public\".\"%s\" WHERE \"sent_at\" IS NULL", table);
    if (left)
        die("%lld rows of %s %s after the drain", left, table, deleting ? "not deleted" : "unsent");
}

struct drain_result drain(PGconn *c, const char *table, long rows, int aggregates,
                                 const struct drain_opts *o)
{
    struct wal_opts wo;
    wal_opts_init(&wo, table);
    const char *extra[12];
    int n = 0;
    for (const char *const *x = o->extra; x && *x && n < 7; x++)
        extra[n++] = *x;
    for (int i = 0; o->wal && wo.v[i]; i++)
        extra[n++] = wo.v[i];
    extra[n] = NULL;
    drop(c, table);
    migrate(table, extra); /* as the relay runs: on_sent and capture set the pages' fill */
    if (o->runner != RUN_RELAY) {
        /* The peers claim the oldest rows WHERE sent_at IS NULL, as their
         * authors would, with the index that claim needs and pages filled as
         * PostgreSQL fills them by default (the deleting peer too: a DELETE
         * writes no index entry, so that index costs it nothing). The
         * relay's table has neither: its claims start from a floor, and each
         * page keeps room for the marks to be HOT updates (schema/005). Nor
         * do they keep the relay's index on xid, which only the relay's claim
         * reads: each of their marks would write an entry in it for nothing. */
        pg_exec(c, "CREATE INDEX ON \"public\".\"%s\" (\"id\") WHERE \"sent_at\" IS NULL "
                   "AND \"dead_at\" IS NULL", table);
        pg_exec(c, "DROP INDEX IF EXISTS \"public\".\"%s_xid_idx\"", table);
        pg_exec(c, "ALTER TABLE \"public\".\"%s\" SET (fillfactor = 100)", table);
    }
    seed(c, table, rows, aggregates);

    long long last_id = pg_int(c, "SELECT max(\"id\") FROM \"public\".\"%s\"", table);
    PGconn *holder = o->hold ? hold_snapshot() : NULL;
    int holder_pid = holder ? PQbackendPID(holder) : 0;
    struct drain_result r = { .rows = rows, .peak_rss_mb = -1, .cpu_s = -1, .pg_cpu_s = -1,
                              .broker_cpu_s = -1 };
    struct drain_watch w;
    watch_start(&w, table, rows);
    long long lsn0 = wal_lsn(c);
    struct machine_cpu m0 = machine_cpu_now();
    double broker0 = brokers_cpu_s(), self0 = self_cpu_s();
    struct relay_proc p =
        o->runner == RUN_PEER_MINIMAL ? peer_start("peer_minimal.py", table, o->deleting)
        : o->runner == RUN_PEER_SAME  ? peer_start("peer_same.py", table, false)
                                      : relay_start(table, extra);
    bool exited = drain_wait(c, table, rows, last_id, o, &w, &p);
    r.done_s = now_s() - p.started;
    r.wal_bytes = (double)(wal_lsn(c) - lsn0);
    r.machine_busy = machine_busy(m0, machine_cpu_now());
    double broker1 = brokers_cpu_s();
    r.broker_cpu_s = broker0 >= 0 && broker1 >= 0 ? broker1 - broker0 : -1;
    r.bench_cpu_s = self_cpu_s() - self0;
    if (!exited)
        r.pg_cpu_s = client_backends_cpu_s(c, holder_pid);
    if (!exited && o->runner == RUN_RELAY)
        relay_cost(p.pid, &r.peak_rss_mb, &r.cpu_s);
    if (!exited)
        relay_stop(&p);
    r.duplicates = w.duplicates;
    watch_stop(&w);
    if (o->plan)
        *o->plan = explain_claim(c, table, o->hold ? "snapshot-held" : "no-snapshot");
    if (holder)
        release_snapshot(holder);
    r.seconds = w.last - p.started;
    r.rows_per_s = (double)rows / r.seconds;
    r.first_to_last_s = w.last - w.first;
    r.ftl_rows_per_s = r.first_to_last_s > 0 ? (double)rows / r.first_to_last_s : -1;
    if (o->wal)
        drop(c, table); /* the slot would keep the WAL of every later scenario */
    else
        check_table_after(c, table, o->deleting);
    return r;
}

/* Runs a floor procedure on a fresh, seeded table; the procedure commits
 * after each batch, as the relay does. */
static struct drain_result floor_run(PGconn *c, const char *table, long rows, int aggregates,
                                     const char *body, int batch)
{
    drop(c, table);
    migrate(table, NULL);
    seed(c, table, rows, aggregates);
    pg_exec(c,
            "CREATE OR REPLACE PROCEDURE \"public\".\"%s_floor\"(p_batch int) LANGUAGE plpgsql "
            "AS $$ DECLARE ids bigint[]; bytes bigint; last bigint := 0; BEGIN LOOP %s "
            "EXIT WHEN ids IS NULL; "
            "UPDATE \"public\".\"%s\" SET \"sent_at\" = clock_timestamp() "
            "WHERE \"id\" = ANY(ids) AND \"sent_at\" IS NULL; "
            "last := ids[array_upper(ids, 1)]; COMMIT; END LOOP; END $$",
            table, body, table);
    struct drain_result r = { .rows = rows, .peak_rss_mb = -1, .cpu_s = -1, .broker_cpu_s = -1 };
    double cpu0 = proc_cpu_s(PQbackendPID(c));
    struct machine_cpu m0 = machine_cpu_now();
    double t0 = now_s();
    long long lsn0 = wal_lsn(c);
    pg_exec(c, "CALL \"public\".\"%s_floor\"(%d)", table, batch);
    r.seconds = now_s() - t0;
    r.wal_bytes = (double)(wal_lsn(c) - lsn0);
    r.first_to_last_s = r.done_s = r.seconds;
    r.machine_busy = machine_busy(m0, machine_cpu_now());
    double cpu1 = proc_cpu_s(PQbackendPID(c));
    r.pg_cpu_s = cpu0 >= 0 && cpu1 >= 0 ? cpu1 - cpu0 : -1;
    r.rows_per_s = r.ftl_rows_per_s = (double)rows / r.seconds;
    return r;
}

/* The minimal floor: only the ids of the oldest unsent rows, then the
 * conditional UPDATE. Nothing a relay could do with less: it reads on from
 * the last id it marked ("last"), a cursor no relay may use (a transaction
 * that commits late would be skipped) but safe here, where nothing writes
 * meanwhile, and cheaper than any claim. */
struct drain_result minimal_floor(PGconn *c, const char *table, long rows, int aggregates,
                                         int batch)
{
    char body[512];
    snprintf(body, sizeof(body),
             "SELECT array_agg(s.id) INTO ids FROM (SELECT o.\"id\" AS id FROM \"public\".\"%s\" "
             "AS o WHERE o.\"id\" > last AND o.\"sent_at\" IS NULL AND o.\"dead_at\" IS NULL "
             "ORDER BY o.\"id\" LIMIT p_batch) s;",
             table);
    return floor_run(c, table, rows, aggregates, body, batch);
}

/* The wide floor: the minimal floor's loop reading the relay's columns,
 * formatted as text (to_char() of created_at too, as the claim did before it
 * read binary), done entirely inside PostgreSQL. */
struct drain_result wide_floor(PGconn *c, const char *table, long rows, int aggregates,
                                      int batch)
{
    char body[1024];
    snprintf(body, sizeof(body),
             "SELECT array_agg(s.id), sum(length(s.payload) + length(s.headers)) INTO ids, bytes "
             "FROM (SELECT o.\"id\" AS id, o.\"event_id\"::text AS ev, o.\"payload\"::text AS "
             "payload, coalesce(o.\"headers\"::text, '') AS headers, "
             "floor(extract(epoch FROM o.\"created_at\") * 1000)::bigint AS ms, "
             "to_char(o.\"created_at\" AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') "
             "AS ts FROM \"public\".\"%s\" AS o WHERE o.\"id\" > last AND o.\"sent_at\" IS NULL "
             "AND o.\"dead_at\" IS NULL ORDER BY o.\"id\" LIMIT p_batch) s;",
             table);
    return floor_run(c, table, rows, aggregates, body, batch);
}

/* The walsender alone: PostgreSQL's own pg_recvlogical reads the slot of a
 * fresh, seeded table (capture = wal's migrate) to the end of the WAL, with
 * the relay's START_REPLICATION options, and throws the output away. No
 * Kafka, no relay: the most any reader of that slot could drain here, and
 * the walsender's CPU for it (pg_cpu_s). */
struct drain_result wal_floor(PGconn *c, const char *table, long rows, int aggregates)
{
    struct wal_opts wo;
    wal_opts_init(&wo, table);
    drop(c, table);
    migrate(table, wo.v);
    seed(c, table, rows, aggregates);
    PGresult *res = PQexec(c, "SELECT pg_current_wal_lsn()::text");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        die("pg_current_wal_lsn: %s", PQerrorMessage(c));
    char end[64], bin[512], pub[192];
    snprintf(end, sizeof(end), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    const char *bindir = getenv("PG_BINDIR");
    snprintf(bin, sizeof(bin), "%s/pg_recvlogical", bindir ? bindir : "/usr/lib/postgresql/15/bin");
    snprintf(pub, sizeof(pub), "publication_names=%s", table);
    const char *argv[] = { bin, "-d", pg_conninfo, "-S", table, "--start", "-E", end,
                           "-f", "/dev/null", "-o", "proto_version=1", "-o", pub,
                           "-o", "messages=true", NULL };
    char log[512];
    snprintf(log, sizeof(log), "%s/recvlogical-%s.log", workdir, table);
    struct drain_result r = { .rows = rows, .peak_rss_mb = -1, .cpu_s = -1, .pg_cpu_s = -1,
                              .broker_cpu_s = -1 };
    struct machine_cpu m0 = machine_cpu_now();
    double t0 = now_s();
    pid_t pid = run_cmd(argv, log);
    int walsender = 0, st;
    /* The walsender ends with the stream: its CPU is read while it runs. */
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (!walsender)
            walsender = (int)pg_int(c, "SELECT coalesce(max(active_pid), 0) FROM "
                                       "pg_replication_slots WHERE slot_name = '%s'", table);
        double cpu = walsender ? proc_cpu_s(walsender) : -1;
        if (cpu >= 0)
            r.pg_cpu_s = cpu;
        sleep_s(0.01);
    }
    r.seconds = now_s() - t0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("pg_recvlogical failed on %s (see %s)", table, log);
    r.machine_busy = machine_busy(m0, machine_cpu_now());
    r.first_to_last_s = r.done_s = r.seconds;
    r.rows_per_s = r.ftl_rows_per_s = (double)rows / r.seconds;
    r.wal_bytes = 0;
    drop(c, table);
    return r;
}
