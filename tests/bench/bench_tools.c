/* bench_tools.c — verify and replay over the drained table: their rate and memory. */
#include "bench.h"

/* ---- scenario: verify and replay on the drained table ---------------------- */

/* The memory each command is documented to stay within (docs/consumers.md, verify and
 * replay): verify holds one slice of rows, about 100 bytes each, on top of
 * its libraries and a bounded prefetch (librdkafka's share of it up to ~28 MB
 * on a long partition); replay holds one page of 1,000 rows whatever the range. */
static double verify_bound_mb(long slice_rows)
{
    return 48.0 + (double)slice_rows * 100.0 / 1e6;
}




/* verify --json's report in @p path (its output and log): its totals and how many partitions began
 * after the window. @return false when there is no report to read. */
static bool verify_report(const char *path, struct verify_totals *t)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Its log lines (stderr) share the file: the report is the line that
     * opens an object. */
    const char *js = buf[0] == '{' ? buf : strstr(buf, "\n{");
    cJSON *root = js ? cJSON_Parse(js) : NULL;
    const cJSON *total = cJSON_GetObjectItemCaseSensitive(root, "total");
    if (!cJSON_IsObject(total)) {
        cJSON_Delete(root);
        return false;
    }
    const char *names[] = { "messages", "mismatched", "out_of_order", "duplicates" };
    long *into[] = { &t->messages, &t->mismatched, &t->out_of_order, &t->duplicates };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(total, names[i]);
        *into[i] = cJSON_IsNumber(v) ? (long)v->valuedouble : -1;
    }
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(root, "truncated_partitions");
    t->truncated_partitions = cJSON_IsNumber(tp) ? (long)tp->valuedouble : 0;
    cJSON_Delete(root);
    return true;
}

struct tool_result verify_run(const char *table, long rows, long slice_rows)
{
    const char *argv[24];
    int n = 0;
    argv[n++] = relay_bin;
    argv[n++] = "verify";
    base_args(argv, &n, table);
    char slice[32];
    snprintf(slice, sizeof(slice), "%ld", slice_rows);
    argv[n++] = "--slice-rows";
    argv[n++] = slice;
    argv[n++] = "--json";
    argv[n] = NULL;
    char log[512];
    snprintf(log, sizeof(log), "%s/verify-%s-%ld.json", workdir, table, slice_rows);
    struct cmd_cost c = run_measured(argv, log);
    struct verify_totals v;
    if (!verify_report(log, &v))
        die("verify of %s wrote no report (%s)", table, log);
    struct tool_result t = { .rows = rows, .slice_rows = slice_rows,
                             .rows_per_s = (double)rows / c.seconds, .peak_rss_mb = c.peak_rss_mb,
                             .bound_mb = verify_bound_mb(slice_rows), .messages = v.messages,
                             .truncated_partitions = v.truncated_partitions };
    /* A drain the relay finished must verify clean: anything else is a bug,
     * not a figure. One exception: librdkafka's mock cluster keeps only the
     * last few MB of each partition, so after a large drain verify reports
     * the rows sent before that as missing, and says why (truncated
     * partitions). Nothing else may be wrong. */
    bool mock_truncated = broker_is_mock() && v.truncated_partitions > 0 &&
                          v.mismatched == 0 && v.out_of_order == 0 && v.duplicates == 0;
    if (c.status != 0 && !(c.status == 1 && mock_truncated))
        die("verify of %s exited %d (see %s)", table, c.status, log);
    return t;
}

struct tool_result replay_run(PGconn *pc, const char *table, long rows)
{
    char from[32], to[32];
    snprintf(from, sizeof(from), "%lld",
             pg_int(pc, "SELECT min(\"id\") FROM \"public\".\"%s\"", table));
    snprintf(to, sizeof(to), "%lld",
             pg_int(pc, "SELECT max(\"id\") FROM \"public\".\"%s\"", table));
    const char *argv[24];
    int n = 0;
    argv[n++] = relay_bin;
    argv[n++] = "replay";
    base_args(argv, &n, table);
    argv[n++] = "--from-id";
    argv[n++] = from;
    argv[n++] = "--to-id";
    argv[n++] = to;
    /* A side topic, as when rebuilding a consumer: the relay's topic keeps
     * exactly one copy of each row for the verify above. */
    argv[n++] = "--topic";
    argv[n++] = "bench_replay";
    argv[n] = NULL;
    char log[512];
    snprintf(log, sizeof(log), "%s/replay-%s.log", workdir, table);
    struct cmd_cost c = run_measured(argv, log);
    if (c.status != 0)
        die("replay of %s exited %d (see %s)", table, c.status, log);
    return (struct tool_result){ .rows = rows, .rows_per_s = (double)rows / c.seconds,
                                 .peak_rss_mb = c.peak_rss_mb, .bound_mb = REPLAY_BOUND_MB };
}

void tool_json(FILE *o, const char *name, const struct tool_result *t)
{
    fprintf(o, "  \"%s\": {\"rows\": %ld, ", name, t->rows);
    if (t->slice_rows)
        fprintf(o, "\"slice_rows\": %ld, ", t->slice_rows);
    if (t->slice_rows)
        fprintf(o, "\"found_in_kafka\": %ld, \"truncated_partitions\": %ld, ", t->messages,
                t->truncated_partitions);
    fprintf(o, "\"rows_per_s\": %.0f, \"peak_rss_mb\": %.1f, \"bound_mb\": %.1f},\n",
            t->rows_per_s, t->peak_rss_mb, t->bound_mb);
}

const char *jbool(int v)
{
    return v < 0 ? "null" : v ? "true" : "false";
}

const struct latency_result *at_rate(const struct latency_result *lat, int n, int rate)
{
    for (int i = 0; i < n; i++)
        if (lat[i].rate == rate)
            return &lat[i];
    return NULL;
}

struct latency_floor floor_figures(struct latency_result r)
{
    return (struct latency_floor){ .events = r.events, .received = r.received,
                                   .achieved_rate = r.achieved_rate, .p50_ms = r.p50_ms,
                                   .p99_ms = r.p99_ms, .max_ms = r.max_ms,
                                   .machine_busy = r.machine_busy };
}

/* Whether the relay runs with relay.fencing=none (--relay-opt): then its
 * floor is Kafka's without transactions. */
static bool relay_unfenced(void)
{
    for (int i = 0; i < n_relay_opts; i++)
        if (!strcmp(relay_opts[i], "relay.fencing=none"))
            return true;
    return false;
}

const struct latency_floor *own_floor(const struct latency_result *l)
{
    return relay_unfenced() ? &l->floor_none : &l->floor_txn;
}

/* Whether the relay's latency @p r is near Kafka's own floor @p f measured in
 * the same run: p50 within 1.5 ms of it and p99 within 1.5 times it; with
 * relay.fencing = none at 1,000/s, p50 <= 3 ms and p99 within 10 ms of it.
 * -1 when either was not measured. */
int latency_target(const struct latency_floor *r, const struct latency_floor *f, int rate)
{
    if (!r || !f || !r->events || !f->events)
        return -1;
    if (relay_unfenced() && rate == 1000)
        return r->p50_ms <= 3 && r->p99_ms <= f->p99_ms + 10;
    return r->p50_ms <= f->p50_ms + 1.5 && r->p99_ms <= 1.5 * f->p99_ms;
}

/* The targets of relay.capture = wal against Kafka's floor with
 * transactions @p f: at 1,000/s p50 within 1 ms of it, at 5,000/s p99 within
 * 1.5 times it. -1 when either was not measured or at another rate. */
int wal_latency_target(const struct latency_floor *r, const struct latency_floor *f, int rate)
{
    if (!r || !f || !r->events || !f->events)
        return -1;
    if (rate == 1000)
        return r->p50_ms <= f->p50_ms + 1.0;
    if (rate == 5000)
        return r->p99_ms <= 1.5 * f->p99_ms;
    return -1;
}

/* The latency scenario at each rate of @p rates ("1000,5000"), polling
 * into @p lat and with relay.capture = wal into @p lat_wal (at most 8 each;
 * both hold the same floors). @return how many rates ran. */
int latencies(PGconn *c, char *rates, double seconds, struct latency_result *lat,
              struct latency_result *lat_wal)
{
    int n = 0;
    if (!broker_is_mock() && latency_mode("warmup")) {
        char warm[64];
        snprintf(warm, sizeof(warm), "bench_kafka_warmup_%d", (int)getpid());
        fprintf(stderr, "bench: %d s of transactions to warm the broker up\n", WARMUP_SECONDS);
        (void)kafka_floor(warm, 1000, WARMUP_SECONDS, true, NULL, NULL);
    }
    for (char *save = NULL, *tok = strtok_r(rates, ",", &save); tok && n < 8;
         tok = strtok_r(NULL, ",", &save)) {
        int rate = atoi(tok);
        if (latency_mode("poll"))
            fprintf(stderr, "bench: latency at %d events/s for %.0f s\n", rate, seconds);
        /* A topic of its own for every run: the mock finds a fetch's offset by
         * walking the partition's message sets from the oldest, so a topic that
         * earlier runs filled makes every later fetch slower. */
        char table[64], txn[64], none[64], loaded[64], load[64];
        snprintf(table, sizeof(table), "bench_latency_%d_%d", rate, (int)getpid());
        snprintf(txn, sizeof(txn), "bench_kafka_txn_%d_%d", rate, (int)getpid());
        snprintf(none, sizeof(none), "bench_kafka_none_%d_%d", rate, (int)getpid());
        snprintf(loaded, sizeof(loaded), "bench_kafka_loaded_%d_%d", rate, (int)getpid());
        snprintf(load, sizeof(load), "bench_load_%d_%d", rate, (int)getpid());
        lat[n] = (struct latency_result){ .rate = rate, .notifies = -1 };
        lat_wal[n] = (struct latency_result){ .rate = rate, .notifies = -1, .wal = true };
        if (latency_mode("poll")) {
            lat[n] = latency(c, table, rate, seconds, false);
            drop(c, table);
        }
        if (latency_mode("wal")) {
            fprintf(stderr, "bench: latency at %d events/s for %.0f s, relay.capture = wal\n",
                    rate, seconds);
            lat_wal[n] = latency(c, table, rate, seconds, true);
            drop(c, table);
        }
        if (latency_mode("floor")) {
            fprintf(stderr, "bench: Kafka's own latency at %d events/s, with and without "
                            "transactions, and under the writers' load\n", rate);
            lat[n].floor_txn = floor_figures(kafka_floor(txn, rate, seconds, true, NULL, NULL));
            lat[n].floor_none = floor_figures(kafka_floor(none, rate, seconds, false, NULL, NULL));
            /* The best any relay with this fencing could do on this machine
             * while the writers load it as they loaded the relay's run. */
            lat[n].floor_loaded =
                floor_figures(kafka_floor(loaded, rate, seconds, !relay_unfenced(), c, load));
        }
        lat_wal[n].floor_txn = lat[n].floor_txn;
        lat_wal[n].floor_none = lat[n].floor_none;
        lat_wal[n].floor_loaded = lat[n].floor_loaded;
        n++;
    }
    return n;
}

/* Whether --latency-modes names @p mode (warmup, poll, wal, floor). */
bool latency_mode(const char *mode)
{
    size_t n = strlen(mode);
    for (const char *m = latency_modes; (m = strstr(m, mode)) != NULL; m += n)
        if ((m == latency_modes || m[-1] == ',') && (m[n] == ',' || m[n] == '\0'))
            return true;
    return false;
}

void latency_line(const struct latency_result *l)
{
    if (l->events == 0) {
        fprintf(stderr, "latency @%5d/s%s: not run (--latency-modes)\n", l->rate,
                l->wal ? " capture=wal" : "");
        return;
    }
    fprintf(stderr, "latency @%5d/s%s: p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%ld/%ld received; "
                    "%.0f/s achieved by %d writer%s; %ld NOTIFYs; machine %.0f%% busy; relay CPU "
                    "%.2f s per 100k events, %.1f context switches per event; peak RSS %.1f MB)\n",
            l->rate, l->wal ? " capture=wal" : "", l->p50_ms, l->p99_ms, l->max_ms, l->received,
            l->events, l->achieved_rate, l->writers, l->writers > 1 ? "s" : "", l->notifies,
            100.0 * l->machine_busy, l->relay_cpu_s_per_100k, l->switches_per_event, l->peak_rss_mb);
    if (l->switches_by_thread[0])
        fprintf(stderr, "  context switches per event by thread: %s\n", l->switches_by_thread);
    const struct latency_floor *f[] = { &l->floor_txn, &l->floor_none, &l->floor_loaded };
    const char *name[] = { "with transactions", "idempotent only",
                           relay_unfenced() ? "idem., writers on" : "txns, writers on" };
    for (int i = 0; i < 3; i++)
        if (f[i]->events)
            fprintf(stderr, "  Kafka alone %-17s p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%.0f/s; "
                            "machine %.0f%% busy)\n",
                    name[i], f[i]->p50_ms, f[i]->p99_ms, f[i]->max_ms, f[i]->achieved_rate,
                    100.0 * f[i]->machine_busy);
}

static void floor_json(FILE *o, const char *name, const struct latency_floor *f)
{
    fprintf(o, "\"%s\": {\"achieved_rate\": %.0f, \"events\": %ld, \"received\": %ld, "
               "\"p50_ms\": %.2f, \"p99_ms\": %.2f, \"max_ms\": %.2f, \"machine_busy\": %.2f}",
            name, f->achieved_rate, f->events, f->received, f->p50_ms, f->p99_ms, f->max_ms,
            f->machine_busy);
}

void latency_json(FILE *o, const char *name, const struct latency_result *lat, int n)
{
    fprintf(o, "  \"%s\": [", name);
    for (int i = 0; i < n; i++) {
        fprintf(o, "%s\n    {\"rate\": %d, \"achieved_rate\": %.0f, \"writers\": %d, "
                   "\"events\": %ld, \"received\": %ld, \"p50_ms\": %.2f, \"p99_ms\": %.2f, "
                   "\"max_ms\": %.2f, \"notifies\": %ld, \"machine_busy\": %.2f, "
                   "\"relay_cpu_s_per_100k\": %.2f, \"relay_switches_per_event\": %.2f, "
                   "\"relay_switches_by_thread\": \"%s\", \"peak_rss_mb\": %.1f",
                i ? "," : "", lat[i].rate, lat[i].achieved_rate, lat[i].writers, lat[i].events,
                lat[i].received, lat[i].p50_ms, lat[i].p99_ms, lat[i].max_ms, lat[i].notifies,
                lat[i].machine_busy, lat[i].relay_cpu_s_per_100k, lat[i].switches_per_event,
                lat[i].switches_by_thread, lat[i].peak_rss_mb);
        const struct latency_floor *own = own_floor(&lat[i]);
        if (own->events) {
            /* What the database, the wake-up and the relay add to Kafka's own. */
            fprintf(o, ", \"kafka_floor\": {");
            floor_json(o, "transactional", &lat[i].floor_txn);
            fprintf(o, ", ");
            floor_json(o, "none", &lat[i].floor_none);
            fprintf(o, ", ");
            floor_json(o, "under_writers", &lat[i].floor_loaded);
            fprintf(o, "}, \"over_kafka_floor\": {\"fencing\": \"%s\", \"p50_ms\": %.2f, "
                       "\"p99_ms\": %.2f}",
                    relay_unfenced() ? "none" : "transactional", lat[i].p50_ms - own->p50_ms,
                    lat[i].p99_ms - own->p99_ms);
        }
        fprintf(o, "}");
    }
    fprintf(o, "\n  ]");
}
