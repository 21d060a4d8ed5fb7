/* bench_report.c — the ratios of the rounds and the parts of the JSON report. */
#include "bench.h"

/* ---- rounds: the headline ratios, again ----------------------------------- */

const char *const round_names[R_N] = {
    "minimal_floor", "peer_minimal", "peer_same_messages", "mark", "delete",
};

/* num / den of every round into @p each; @return their median. */
double rounds_ratio(const struct rounds *R, int num, int den, double *each)
{
    for (int i = 0; i < R->n; i++)
        each[i] = R->v[num][i] / R->v[den][i];
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
    { R_MARK, R_FLOOR, "mark_per_minimal_floor", "mark / minimal floor" },
};

void rounds_json(FILE *o, const struct rounds *R)
{
    double each[ROUNDS_MAX];
    fprintf(o, "  \"rounds\": {\"n\": %d", R->n);
    for (int k = 0; k < R_N; k++) {
        char name[64];
        snprintf(name, sizeof(name), "%s_rows_per_s", round_names[k]);
        fprintf(o, ", ");
        rounds_json_list(o, name, R->v[k], R->n, 0);
        fprintf(o, ", \"%s_median\": %.0f", name, median(R->v[k], R->n));
    }
    for (int k = 0; k < N_ROUND_RATIOS; k++) {
        double m = rounds_ratio(R, round_ratios[k].num, round_ratios[k].den, each);
        fprintf(o, ", \"%s\": {", round_ratios[k].name);
        rounds_json_list(o, "each", each, R->n, 3);
        fprintf(o, ", \"median\": %.3f}", m);
    }
    fprintf(o, "},\n");
}

void rounds_line(const struct rounds *R)
{
    double each[ROUNDS_MAX];
    fprintf(stderr, "%d round(s) of the minimal floor, both peers and both drains, order rotated; "
                    "rows/s, then each ratio within its round:\n", R->n);
    for (int k = 0; k < R_N; k++) {
        fprintf(stderr, "  %-28s", round_names[k]);
        for (int i = 0; i < R->n; i++)
            fprintf(stderr, " %7.0f", R->v[k][i]);
        fprintf(stderr, "   median %7.0f\n", median(R->v[k], R->n));
    }
    for (int k = 0; k < N_ROUND_RATIOS; k++) {
        double m = rounds_ratio(R, round_ratios[k].num, round_ratios[k].den, each);
        fprintf(stderr, "  %-28s", round_ratios[k].line);
        for (int i = 0; i < R->n; i++)
            fprintf(stderr, " %7.2f", each[i]);
        fprintf(stderr, "   median %7.2f\n", m);
    }
}

/* ---- report -------------------------------------------------------------- */

/* Whether PostgreSQL flushes each commit to disk (the test stack turns that
 * off for speed; tests/bench/run --durable turns it on). */
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
                       const struct drain_result *min_floor, const struct drain_result *wide,
                       const struct drain_result *peer, const struct drain_result *same)
{
    fprintf(o, "  \"%s\": {\"rows\": %ld, \"seconds\": %.3f, \"rows_per_s\": %.0f, ", name,
            d->rows, d->seconds, d->rows_per_s);
    if (d->peak_rss_mb >= 0)
        fprintf(o, "\"peak_rss_mb\": %.1f, \"cpu_s_per_100k\": %.3f, ", d->peak_rss_mb,
                d->cpu_s * 100000.0 / (double)d->rows);
    if (d->pg_cpu_s >= 0)
        fprintf(o, "\"postgres_cpu_s_per_100k\": %.3f, \"postgres_busy\": %.2f, ",
                d->pg_cpu_s * 100000.0 / (double)d->rows, d->pg_cpu_s / d->seconds);
    if (d->machine_busy >= 0)
        fprintf(o, "\"machine_busy\": %.2f, ", d->machine_busy);
    if (min_floor) {
        fprintf(o, "\"vs_minimal_floor\": ");
        ratio_json(o, d->rows_per_s, min_floor->rows_per_s);
        fprintf(o, ", \"vs_wide_floor\": ");
        ratio_json(o, d->rows_per_s, wide->rows_per_s);
        fprintf(o, ", \"vs_peer_minimal\": ");
        ratio_json(o, d->rows_per_s, peer->rows_per_s);
        fprintf(o, ", \"vs_peer_same_messages\": ");
        ratio_json(o, d->rows_per_s, same->rows_per_s);
        fprintf(o, ", ");
    }
    fprintf(o, "\"batch\": 1000},\n");
}
