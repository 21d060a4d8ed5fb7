/* bench_report.c — the ratios of the rounds and the parts of the JSON report. */
#include "bench.h"

/* ---- rounds: the headline ratios, again ----------------------------------- */

const char *const round_names[R_N] = {
    "minimal_floor", "peer_minimal", "peer_same_messages", "peer_minimal_delete", "mark", "delete",
    "wal", "wal_floor",
};

/* Drain @p d as scenario @p k of round @p i. */
void rounds_put(struct rounds *R, int k, int i, const struct drain_result *d)
{
    R->ran[k] = true;
    R->v[k][i] = d->rows_per_s;
    R->ftl[k][i] = d->ftl_rows_per_s;
    R->pg_cpu[k][i] = d->pg_cpu_s >= 0 ? d->pg_cpu_s * 100000.0 / (double)d->rows : -1;
    R->wal[k][i] = d->wal_bytes >= 0 ? d->wal_bytes * 100000.0 / (double)d->rows : -1;
    double others = d->pg_cpu_s + d->broker_cpu_s + d->bench_cpu_s;
    R->others_cpu[k][i] =
        d->pg_cpu_s >= 0 && d->broker_cpu_s >= 0 ? others * 100000.0 / (double)d->rows : -1;
}

/* num / den of every round into @p each; @return their median. */
double rounds_ratio(const struct rounds *R, int num, int den, double *each)
{
    for (int i = 0; i < R->n; i++)
        each[i] = R->v[num][i] / R->v[den][i];
    return median(each, R->n);
}

/* The same from first to last message. */
static double rounds_ratio_ftl(const struct rounds *R, int num, int den, double *each)
{
    for (int i = 0; i < R->n; i++)
        each[i] = R->ftl[num][i] / R->ftl[den][i];
    return median(each, R->n);
}

static void rounds_json_list(FILE *o, const char *name, const double *v, int n, int digits)
{
    fprintf(o, "\"%s\": [", name);
    for (int i = 0; i < n; i++)
        fprintf(o, "%s%.*f", i ? ", " : "", digits, v[i]);
    fprintf(o, "]");
}

static const struct { int num, den; const char *name, *line; } round_ratios[] = {
    { R_MARK, R_PEER_MIN, "mark_per_peer_minimal", "mark / minimal peer" },
    { R_MARK, R_PEER_SAME, "mark_per_peer_same_messages", "mark / same-messages peer" },
    { R_DELETE, R_PEER_MIN, "delete_per_peer_minimal", "delete / minimal peer" },
    { R_DELETE, R_PEER_SAME, "delete_per_peer_same_messages", "delete / same-messages peer" },
    { R_DELETE, R_PEER_DEL, "delete_per_peer_minimal_delete", "delete / deleting peer" },
    { R_MARK, R_FLOOR, "mark_per_minimal_floor", "mark / minimal floor" },
    { R_WAL, R_MARK, "wal_per_mark", "wal / mark" },
    { R_WAL, R_PEER_MIN, "wal_per_peer_minimal", "wal / minimal peer" },
    { R_WAL, R_DELETE, "wal_per_delete", "wal / delete" },
    /* What any reader of the slot could reach here, against mark: the
     * walsender decodes on one core, shared with the broker and the relay. */
    { R_WAL_FLOOR, R_MARK, "wal_floor_per_mark", "walsender alone / mark" },
    { R_WAL, R_WAL_FLOOR, "wal_per_wal_floor", "wal / walsender alone" },
};

/* Both sides of ratio @p k were run. */
static bool ratio_ran(const struct rounds *R, int k)
{
    return R->ran[round_ratios[k].num] && R->ran[round_ratios[k].den];
}

void rounds_json(FILE *o, const struct rounds *R)
{
    double each[ROUNDS_MAX];
    fprintf(o, "  \"rounds\": {\"n\": %d", R->n);
    for (int k = 0; k < R_N; k++) {
        if (!R->ran[k])
            continue;
        char name[64];
        snprintf(name, sizeof(name), "%s_rows_per_s", round_names[k]);
        fprintf(o, ", ");
        rounds_json_list(o, name, R->v[k], R->n, 0);
        fprintf(o, ", \"%s_median\": %.0f", name, median(R->v[k], R->n));
        snprintf(name, sizeof(name), "%s_first_to_last_rows_per_s", round_names[k]);
        fprintf(o, ", ");
        rounds_json_list(o, name, R->ftl[k], R->n, 0);
    }
    for (int k = 0; k < N_ROUND_RATIOS; k++) {
        if (!ratio_ran(R, k))
            continue;
        double m = rounds_ratio(R, round_ratios[k].num, round_ratios[k].den, each);
        fprintf(o, ", \"%s\": {", round_ratios[k].name);
        rounds_json_list(o, "each", each, R->n, 3);
        fprintf(o, ", \"median\": %.3f, ", m);
        m = rounds_ratio_ftl(R, round_ratios[k].num, round_ratios[k].den, each);
        rounds_json_list(o, "first_to_last_each", each, R->n, 3);
        fprintf(o, ", \"first_to_last_median\": %.3f}", m);
    }
    fprintf(o, "},\n");
}

void rounds_line(const struct rounds *R)
{
    double each[ROUNDS_MAX];
    fprintf(stderr, "%d round(s), order rotated; rows/s from the start to the last message, then "
                    "each ratio within its round:\n", R->n);
    for (int k = 0; k < R_N; k++) {
        if (!R->ran[k])
            continue;
        fprintf(stderr, "  %-28s", round_names[k]);
        for (int i = 0; i < R->n; i++)
            fprintf(stderr, " %7.0f", R->v[k][i]);
        fprintf(stderr, "   median %7.0f\n", median(R->v[k], R->n));
    }
    for (int k = 0; k < N_ROUND_RATIOS; k++) {
        if (!ratio_ran(R, k))
            continue;
        double m = rounds_ratio(R, round_ratios[k].num, round_ratios[k].den, each);
        fprintf(stderr, "  %-28s", round_ratios[k].line);
        for (int i = 0; i < R->n; i++)
            fprintf(stderr, " %7.2f", each[i]);
        fprintf(stderr, "   median %7.2f", m);
        m = rounds_ratio_ftl(R, round_ratios[k].num, round_ratios[k].den, each);
        fprintf(stderr, "   first->last:");
        for (int i = 0; i < R->n; i++)
            fprintf(stderr, " %.2f", each[i]);
        fprintf(stderr, " median %.2f\n", m);
    }
}

/* PostgreSQL's load per 100k events of the relay's drains: the scenarios
 * whose WAL and backend CPU are reported side by side. */
static const int pg_load_k[] = { R_MARK, R_DELETE, R_WAL, R_WAL_FLOOR };

void pg_load_json(FILE *o, const struct rounds *R)
{
    fprintf(o, "  \"postgres_load_per_100k\": {");
    for (size_t j = 0; j < sizeof(pg_load_k) / sizeof(pg_load_k[0]); j++) {
        int k = pg_load_k[j];
        fprintf(o, "%s\"%s\": {", j ? ", " : "", round_names[k]);
        rounds_json_list(o, "wal_bytes", R->wal[k], R->n, 0);
        fprintf(o, ", \"wal_bytes_median\": %.0f, ", median(R->wal[k], R->n));
        rounds_json_list(o, "backend_cpu_s", R->pg_cpu[k], R->n, 3);
        fprintf(o, ", \"backend_cpu_s_median\": %.3f}", median(R->pg_cpu[k], R->n));
    }
    fprintf(o, "},\n");
}

void pg_load_line(const struct rounds *R)
{
    fprintf(stderr, "PostgreSQL per 100k events (each round; median): WAL MB, backends' CPU s\n");
    for (size_t j = 0; j < sizeof(pg_load_k) / sizeof(pg_load_k[0]); j++) {
        int k = pg_load_k[j];
        fprintf(stderr, "  %-9s WAL", round_names[k]);
        for (int i = 0; i < R->n; i++)
            fprintf(stderr, " %.2f", R->wal[k][i] / 1e6);
        fprintf(stderr, " (%.2f); CPU", median(R->wal[k], R->n) / 1e6);
        for (int i = 0; i < R->n; i++)
            fprintf(stderr, " %.2f", R->pg_cpu[k][i]);
        fprintf(stderr, " (%.2f)\n", median(R->pg_cpu[k], R->n));
    }
}

/* ---- report -------------------------------------------------------------- */

/* Whether PostgreSQL flushes each commit to disk (the test stack turns that
 * off for speed; tests/bench/run keeps it on unless --fsync-off). */
bool pg_durable(PGconn *c)
{
    return pg_int(c, "SELECT (current_setting('fsync')::bool AND current_setting('full_page_writes')"
                     "::bool AND current_setting('synchronous_commit') <> 'off')::int") == 1;
}

void machine_json(FILE *o, bool durable)
{
    char model[256] = "unknown", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                snprintf(model, sizeof(model), "%s", p + 2);
                model[strcspn(model, "\n")] = '\0';
            }
            break;
        }
    }
    if (f)
        fclose(f);
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    fprintf(o, "  \"machine\": {\"cpus\": %ld, \"cpu\": \"%s\", \"memory_gib\": %.1f, "
               "\"postgresql\": %d, \"postgresql_durable\": %s, \"librdkafka\": \"%s\", "
               "\"broker\": \"%s\"},\n",
            sysconf(_SC_NPROCESSORS_ONLN), model,
            (double)pages * (double)psize / (1024.0 * 1024 * 1024), PQlibVersion(),
            durable ? "true" : "false", rd_kafka_version_str(), broker_name());
}

static void ratio_json(FILE *o, double v, double by)
{
    if (by > 0)
        fprintf(o, "%.3f", v / by);
    else
        fprintf(o, "null");
}

void drain_json(FILE *o, const char *name, const struct drain_result *d,
                const struct drain_refs *refs)
{
    fprintf(o, "  \"%s\": {\"rows\": %ld, \"seconds\": %.3f, \"rows_per_s\": %.0f, "
               "\"first_to_last_rows_per_s\": %.0f, \"done_seconds\": %.3f, ", name, d->rows,
            d->seconds, d->rows_per_s, d->ftl_rows_per_s, d->done_s);
    if (d->wal_bytes >= 0)
        fprintf(o, "\"wal_bytes_per_100k\": %.0f, ", d->wal_bytes * 100000.0 / (double)d->rows);
    if (d->peak_rss_mb >= 0)
        fprintf(o, "\"peak_rss_mb\": %.1f, \"cpu_s_per_100k\": %.3f, ", d->peak_rss_mb,
                d->cpu_s * 100000.0 / (double)d->rows);
    if (d->pg_cpu_s >= 0)
        fprintf(o, "\"postgres_cpu_s_per_100k\": %.3f, \"postgres_busy\": %.2f, ",
                d->pg_cpu_s * 100000.0 / (double)d->rows, d->pg_cpu_s / d->seconds);
    if (d->broker_cpu_s >= 0)
        fprintf(o, "\"broker_cpu_s_per_100k\": %.3f, \"consumer_cpu_s_per_100k\": %.3f, ",
                d->broker_cpu_s * 100000.0 / (double)d->rows, d->bench_cpu_s * 100000.0 / (double)d->rows);
    if (d->machine_busy >= 0)
        fprintf(o, "\"machine_busy\": %.2f, ", d->machine_busy);
    if (refs) {
        fprintf(o, "\"vs_minimal_floor\": ");
        ratio_json(o, d->rows_per_s, refs->min_floor->rows_per_s);
        fprintf(o, ", \"vs_wide_floor\": ");
        ratio_json(o, d->rows_per_s, refs->wide->rows_per_s);
        fprintf(o, ", \"vs_peer_minimal\": ");
        ratio_json(o, d->rows_per_s, refs->peer->rows_per_s);
        fprintf(o, ", \"vs_peer_same_messages\": ");
        ratio_json(o, d->rows_per_s, refs->same->rows_per_s);
        fprintf(o, ", \"vs_peer_minimal_delete\": ");
        ratio_json(o, d->rows_per_s, refs->peer_del->rows_per_s);
        fprintf(o, ", ");
    }
    fprintf(o, "\"batch\": 1000},\n");
}

/* The targets of relay.capture = wal, checked in this run: its drain against
 * polling's mark and the minimal peer (medians of the rounds' ratios), its
 * latency against Kafka's floor with transactions, its peak RSS at steady
 * state (the latency runs; the backlog drain's, @p drain_rss_mb, is shown
 * beside it), and the WAL it makes PostgreSQL write. */
void wal_targets_json(FILE *o, const struct rounds *R, const struct latency_result *latw,
                      int n_lat, double drain_rss_mb)
{
    double each[ROUNDS_MAX];
    double per_mark = rounds_ratio(R, R_WAL, R_MARK, each);
    double per_peer = rounds_ratio(R, R_WAL, R_PEER_MIN, each);
    /* Whether 2x mark was within reach of any reader of the slot in this run. */
    double alone_per_mark = rounds_ratio(R, R_WAL_FLOOR, R_MARK, each);
    const struct latency_result *w1k = at_rate(latw, n_lat, 1000), *w5k = at_rate(latw, n_lat, 5000);
    struct latency_floor r1k = w1k ? floor_figures(*w1k) : (struct latency_floor){ 0 };
    struct latency_floor r5k = w5k ? floor_figures(*w5k) : (struct latency_floor){ 0 };
    double rss = -1;
    for (int i = 0; i < n_lat; i++)
        rss = latw[i].peak_rss_mb > rss ? latw[i].peak_rss_mb : rss;
    double wal = median(R->wal[R_WAL], R->n);
    bool least = wal < median(R->wal[R_MARK], R->n) && wal < median(R->wal[R_DELETE], R->n);
    fprintf(o, "  \"targets_wal\": {\"wal_ge_2_mark\": %s, \"walsender_alone_ge_2_mark\": %s, "
               "\"wal_ge_2_minimal_peer\": %s, "
               "\"latency_1000_p50_within_1ms_of_kafka_txn_floor\": %s, "
               "\"latency_5000_p99_within_1.5x_kafka_txn_floor\": %s, "
               "\"steady_peak_rss_le_20mb\": %s, \"steady_peak_rss_mb\": %.1f, "
               "\"backlog_drain_peak_rss_mb\": %.1f, \"writes_least_wal\": %s},\n",
            jbool(per_mark >= 2.0), jbool(alone_per_mark >= 2.0), jbool(per_peer >= 2.0),
            jbool(wal_latency_target(&r1k, w1k ? &w1k->floor_txn : NULL, 1000)),
            jbool(wal_latency_target(&r5k, w5k ? &w5k->floor_txn : NULL, 5000)),
            jbool(rss >= 0 ? rss <= 20 : -1), rss, drain_rss_mb, jbool(least));
}

/* ---- start-up ------------------------------------------------------------ */

void startup_json(FILE *o, const struct startup_result *su)
{
    fprintf(o, "  \"startup\": {\"backlog_rows\": %ld, \"runs\": %d, "
               "\"start_to_leader_ms\": {\"median\": %.1f, \"max\": %.1f}, "
               "\"leader_to_first_received_ms\": {\"median\": %.1f, \"max\": %.1f}, "
               "\"leader_to_first_marked_ms\": {\"median\": %.1f, \"max\": %.1f}}",
            su->backlog, su->runs, median(su->start_to_leader_ms, su->runs),
            maximum(su->start_to_leader_ms, su->runs), median(su->leader_to_received_ms, su->runs),
            maximum(su->leader_to_received_ms, su->runs), median(su->leader_to_marked_ms, su->runs),
            maximum(su->leader_to_marked_ms, su->runs));
}

void startup_line(const struct startup_result *su)
{
    fprintf(stderr, "start-up (%ld-row backlog, median of %d): start → leader %.0f ms; leader → "
                    "first received %.0f ms (max %.0f), first marked %.0f ms\n",
            su->backlog, su->runs, median(su->start_to_leader_ms, su->runs),
            median(su->leader_to_received_ms, su->runs), maximum(su->leader_to_received_ms, su->runs),
            median(su->leader_to_marked_ms, su->runs));
}
