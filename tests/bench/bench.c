/* bench.c — the performance harness of outbox-relay: drain rate against
 * the SQL floor, commit→consumer latency, memory and CPU cost.
 *
 * It drives the real binary against the stack of tests/support/stack.sh
 * (OUTBOX_RELAY_TEST_PG, OUTBOX_RELAY_TEST_KAFKA) and prints one JSON report
 * on stdout and a short table on stderr. Every figure of one report comes
 * from the same run on the same machine: compare ratios, not absolutes.
 *
 *   outbox-relay-bench --relay PATH [--peers DIR] [--rows N] [--aggregates N]
 *                      [--latency-seconds S] [--rates R1,R2] [--smoke]
 *                      [--long-txn-rows N] [--fresh-rate R]
 *                      [--latency-modes warmup,poll,wal,floor]  (the latency runs'
 *                      parts: the broker's warm-up, polling, capture = wal,
 *                      Kafka's own floor; all by default)
 *                      [--relay-opt section.key=value]...   (extra -X for the relay)
 *                      [--drain-only mark,wal,...]   (those drains only, --rounds times)
 *                      [--warmup-rounds N]   (uncounted rounds of the drains first; 1)
 *                      [--startup-only]              (the start-up scenario only)
 *
 * Every relay drain is compared, in the same run and on identical fresh
 * tables, with two floors (PL/pgSQL loops inside PostgreSQL: the minimal one
 * claims ids only, the wide one reads the relay's columns) and with three
 * honest peers, relays a careful engineer writes by hand in Python:
 * tests/bench/peer_minimal.py (two headers), the same deleting the rows it
 * sent instead of marking them (--on-sent delete) and tests/bench/peer_same.py
 * (the relay's exact messages). The relay drains in three ways: on_sent = mark,
 * on_sent = delete, and capture = wal (from a logical replication slot, the
 * table only read); one read_committed consumer times them all and the peers.
 */
#include "bench.h"

/* The drains of the rounds, by scenario (struct rounds). */
static const char *const del_opts[] = { "relay.on_sent=delete", NULL };
static const struct drain_opts round_opts[R_N] = {
    [R_PEER_MIN] = { .runner = RUN_PEER_MINIMAL },
    [R_PEER_SAME] = { .runner = RUN_PEER_SAME },
    [R_PEER_DEL] = { .runner = RUN_PEER_MINIMAL, .deleting = true },
    [R_MARK] = { .runner = RUN_RELAY },
    [R_DELETE] = { .runner = RUN_RELAY, .extra = del_opts, .deleting = true },
    [R_WAL] = { .runner = RUN_RELAY, .wal = true },
};
static const char *const round_tables[R_N] = {
    "bench_floor_min", "bench_peer", "bench_peer_same", "bench_peer_del", "bench_drain",
    "bench_drain_del", "bench_drain_wal", "bench_wal_floor",
};

/* @p name is one of the comma-separated names of @p list. */
static bool name_listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

/* Scenario @p k of a round on its fresh table. */
static struct drain_result round_drain(PGconn *c, int k, long rows, int aggregates)
{
    if (k == R_FLOOR)
        return minimal_floor(c, round_tables[k], rows, aggregates, 1000);
    if (k == R_WAL_FLOOR)
        return wal_floor(c, round_tables[k], rows, aggregates);
    return drain(c, round_tables[k], rows, aggregates, &round_opts[k]);
}


/* What the drain of scenario @p k was checked for, in words: every row's
 * message received (drain() waits for each row's own), and what the table
 * was left with (drain() dies otherwise). */
static const char *drain_checked(int k, const struct drain_result *d, char *out, size_t len)
{
    const struct drain_opts *o = &round_opts[k];
    if (k == R_FLOOR || k == R_WAL_FLOOR)
        return "no messages (a floor)";
    snprintf(out, len, "every row's message received, %ld duplicate(s); table %s", d->duplicates,
             o->wal ? "left as it was" : o->deleting ? "empty" : "every row marked");
    return out;
}

/* A real broker's JVM compiles its produce path during the first drains:
 * measured, the first round's drains ran at about half the rate of later
 * ones, and whichever drain came first paid for the others. So the drains
 * of @p ks run @p n rounds before the rounds that count, shown and not
 * counted. */
static void warm_up(PGconn *c, const int *ks, int nk, int n, long rows, int aggregates)
{
    if (broker_is_mock())
        return;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < nk; j++) {
            struct drain_result d = round_drain(c, ks[j], rows, aggregates);
            fprintf(stderr, "bench: warm-up %d of %d, not counted: %s %.0f rows/s, broker CPU "
                            "%.2f s\n", i + 1, n, round_names[ks[j]], d.rows_per_s,
                    d.broker_cpu_s);
            drop(c, round_tables[ks[j]]);
        }
    }
}

/* The report of drain_only_rounds on stdout: the rounds' ratios among the
 * drains run, the verdict, and rows/s of each round. */
static void drain_only_json(const struct rounds *R, const int *ks, int nk, bool durable)
{
    fprintf(stdout, "{\n");
    machine_json(stdout, durable);
    rounds_json(stdout, R);
    verdicts_json(stdout, R);
    fprintf(stdout, "  \"drains\": {");
    for (int j = 0; j < nk; j++) {
        fprintf(stdout, "%s\n    \"%s\": [", j ? "," : "", round_names[ks[j]]);
        for (int i = 0; i < R->n; i++)
            fprintf(stdout, "%s%.0f", i ? ", " : "", R->v[ks[j]][i]);
        fprintf(stdout, "]");
    }
    fprintf(stdout, "\n  }\n}\n");
}

/* Only the drains listed in @p list, @p n rounds: within a round each listed
 * drain once, the order rotated from one round to the next, so that what
 * the shared machine does meanwhile falls on every drain alike. The report
 * as JSON on stdout; each sample with the machine's load on stderr, then the
 * rounds' ratios and the verdict. */
static void drain_only_rounds(PGconn *c, const char *list, int n, int warmups, long rows,
                              int aggregates, bool durable)
{
    static struct rounds R;
    R.n = n < ROUNDS_MAX ? n : ROUNDS_MAX;
    int ks[R_N], nk = 0;
    for (int k = 0; k < R_N; k++)
        if (name_listed(list, round_names[k]))
            ks[nk++] = k;
    char checked[160];
    fprintf(stderr, "bench: PostgreSQL %s; broker: %s\n",
            durable ? "durable (fsync, synchronous_commit on)" : "fsync off", broker_name());
    warm_up(c, ks, nk, warmups, rows, aggregates);
    for (int i = 0; i < R.n; i++) {
        for (int j = 0; j < nk; j++) {
            int k = ks[(i + j) % nk];
            struct drain_result d = round_drain(c, k, rows, aggregates);
            fprintf(stderr, "bench: %s round %d: %.0f rows/s (first to last %.0f), relay CPU "
                            "%.2f s, PostgreSQL CPU %.2f s, broker CPU %.2f s, consumer CPU %.2f s, "
                            "machine busy %.0f %%, peak RSS %.1f MB, load average %s; %s\n",
                    round_names[k], i + 1, d.rows_per_s, d.ftl_rows_per_s, d.cpu_s, d.pg_cpu_s,
                    d.broker_cpu_s, d.bench_cpu_s, d.machine_busy * 100.0, d.peak_rss_mb,
                    load_average(),
                    drain_checked(k, &d, checked, sizeof(checked)));
            rounds_put(&R, k, i, &d);
            drop(c, round_tables[k]);
        }
    }
    drain_only_json(&R, ks, nk, durable);
    rounds_line(&R);
    verdicts_line(&R);
}

int main(int argc, char **argv)
{
    long rows = 1000000, cost_small = 100000, lt_rows = -1, start_rows = -1, fresh_rows = -1;
    int aggregates = 5000, start_runs = 3, fresh_rate = 100, n_rounds = 1, warmups = 1;
    double lat_seconds = 10;
    char rates_arg[64] = "1000,5000";
    bool latency_only = false, startup_only = false;
    char drain_only[128] = "";
    static const struct option opts[] = {
        { "relay", required_argument, NULL, 'r' },
        { "peers", required_argument, NULL, 'p' },
        { "rows", required_argument, NULL, 'n' },
        { "aggregates", required_argument, NULL, 'a' },
        { "latency-seconds", required_argument, NULL, 's' },
        { "rates", required_argument, NULL, 'R' },
        { "long-txn-rows", required_argument, NULL, 'L' },
        { "fresh-rate", required_argument, NULL, 'F' },
        { "smoke", no_argument, NULL, 'S' },
        { "relay-opt", required_argument, NULL, 'X' },
        { "latency-only", no_argument, NULL, 'l' },
        { "startup-only", no_argument, NULL, 'T' },
        { "rounds", required_argument, NULL, 'N' },
        { "drain-only", required_argument, NULL, 'D' },
        { "warmup-rounds", required_argument, NULL, 'W' },
        { "latency-modes", required_argument, NULL, 'M' },
        { NULL, 0, NULL, 0 },
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'r': relay_bin = optarg; break;
        case 'M': latency_modes = optarg; break;
        case 'p': peer_dir = optarg; break;
        case 'n': rows = strtol(optarg, NULL, 10); break;
        case 'a': aggregates = atoi(optarg); break;
        case 's': lat_seconds = strtod(optarg, NULL); break;
        case 'L': lt_rows = strtol(optarg, NULL, 10); break;
        case 'F': fresh_rate = atoi(optarg); break;
        case 'X':
            if (n_relay_opts < 16)
                relay_opts[n_relay_opts++] = optarg;
            break;
        case 'R': snprintf(rates_arg, sizeof(rates_arg), "%s", optarg); break;
        case 'l': latency_only = true; break;
        case 'T': startup_only = true; break;
        case 'D': snprintf(drain_only, sizeof(drain_only), "%s", optarg); break;
        case 'W': warmups = atoi(optarg); break;
        case 'N':
            n_rounds = atoi(optarg);
            if (n_rounds < 1 || n_rounds > ROUNDS_MAX)
                die("--rounds must be 1 to %d", ROUNDS_MAX);
            break;
        case 'S':
            rows = 5000;
            cost_small = 2000;
            aggregates = 100;
            lat_seconds = 1;
            start_runs = 1;
            snprintf(rates_arg, sizeof(rates_arg), "200");
            break;
        default: die("usage: outbox-relay-bench --relay PATH [--peers DIR] [--rows N] "
                     "[--aggregates N] [--latency-seconds S] [--rates R1,R2] [--long-txn-rows N] "
                     "[--fresh-rate R] [--rounds N] [--smoke] [--latency-only] "
                     "[--latency-modes warmup,poll,wal,floor] "
                     "[--drain-only SCENARIO,...] [--warmup-rounds N] [--startup-only] "
                     "[--relay-opt section.key=value]...");
        }
    }
    pg_conninfo = getenv("OUTBOX_RELAY_TEST_PG");
    kafka_servers = getenv("OUTBOX_RELAY_TEST_KAFKA");
    if (!relay_bin || !pg_conninfo || !kafka_servers)
        die("needs --relay and the stack's OUTBOX_RELAY_TEST_PG / OUTBOX_RELAY_TEST_KAFKA");
    char peer_path[512];
    snprintf(peer_path, sizeof(peer_path), "%s/peer_minimal.py", peer_dir);
    if (access(peer_path, R_OK) != 0)
        die("peer relay %s: %s (--peers DIR)", peer_path, strerror(errno));
    snprintf(workdir, sizeof(workdir), "/tmp/outbox-relay-bench.XXXXXX");
    if (!mkdtemp(workdir))
        die("mkdtemp: %s", strerror(errno));
    if (cost_small > rows)
        cost_small = rows;
    /* With a snapshot held, every claim walks the dead versions of all rows
     * sent so far: the drain is quadratic, so that scenario is kept smaller. */
    if (lt_rows < 0)
        lt_rows = rows < 200000 ? rows : 200000;
    start_rows = rows;
    fresh_rows = rows;

    PGconn *c = pg_open();
    bool durable = pg_durable(c);
    if (latency_only) {
        /* Tuning the latency path needs only its own scenario. */
        struct latency_result lat[8], latw[8];
        int n_lat = latencies(c, rates_arg, lat_seconds, lat, latw);
        PQfinish(c);
        fprintf(stdout, "{\n");
        machine_json(stdout, durable);
        latency_json(stdout, "latency", lat, n_lat);
        fprintf(stdout, ",\n");
        latency_json(stdout, "latency_wal", latw, n_lat);
        fprintf(stdout, "\n}\n");
        for (int i = 0; i < n_lat; i++) {
            latency_line(&lat[i]);
            latency_line(&latw[i]);
        }
        fprintf(stderr, "logs: %s\n", workdir);
        return 0;
    }
    if (startup_only) {
        struct startup_result su = startup(c, "bench_start", rows, aggregates, start_runs);
        drop(c, "bench_start");
        PQfinish(c);
        fprintf(stdout, "{\n");
        machine_json(stdout, durable);
        startup_json(stdout, &su);
        fprintf(stdout, "\n}\n");
        startup_line(&su);
        return 0;
    }
    if (*drain_only) {
        drain_only_rounds(c, drain_only, n_rounds, warmups, rows, aggregates, durable);
        PQfinish(c);
        return 0;
    }
    int all[R_N];
    for (int k = 0; k < R_N; k++)
        all[k] = k;
    warm_up(c, all, R_N, warmups, rows, aggregates);
    /* Floors and peer first, then the relay: all on identical fresh tables. */
    fprintf(stderr, "bench: minimal SQL floor on %ld rows\n", rows);
    struct drain_result fl_min = minimal_floor(c, "bench_floor_min", rows, aggregates, 1000);
    fprintf(stderr, "bench: wide SQL floor on %ld rows\n", rows);
    struct drain_result fl_wide = wide_floor(c, "bench_floor", rows, aggregates, 1000);
    fprintf(stderr, "bench: minimal peer (Python, two headers) on %ld rows\n", rows);
    struct drain_result peer = round_drain(c, R_PEER_MIN, rows, aggregates);
    fprintf(stderr, "bench: same-messages peer (Python, the relay's messages) on %ld rows\n", rows);
    struct drain_result peer_same = round_drain(c, R_PEER_SAME, rows, aggregates);
    fprintf(stderr, "bench: minimal peer deleting what it sent (Python) on %ld rows\n", rows);
    struct drain_result peer_del = round_drain(c, R_PEER_DEL, rows, aggregates);
    fprintf(stderr, "bench: drain of %ld rows (relay, on_sent=mark)\n", rows);
    const struct drain_opts mark_o = round_opts[R_MARK];
    struct drain_result d_mark = round_drain(c, R_MARK, rows, aggregates);
    /* verify and replay read what that drain wrote, before the table goes. */
    long small_slice = rows < 100000 ? rows : 100000;
    fprintf(stderr, "bench: verify of %ld rows, slices of %ld and %d\n", rows, small_slice,
            500000);
    struct tool_result v_small = verify_run("bench_drain", rows, small_slice);
    struct tool_result v_default = verify_run("bench_drain", rows, 500000);
    fprintf(stderr, "bench: replay of %ld rows to a side topic\n", rows);
    struct tool_result rp = replay_run(c, "bench_drain", rows);
    fprintf(stderr, "bench: drain of %ld rows (relay, on_sent=delete)\n", rows);
    struct drain_result d_del = round_drain(c, R_DELETE, rows, aggregates);
    fprintf(stderr, "bench: drain of %ld rows (relay, capture=wal)\n", rows);
    struct drain_result d_wal = round_drain(c, R_WAL, rows, aggregates);
    fprintf(stderr, "bench: the walsender alone (pg_recvlogical) on %ld rows\n", rows);
    struct drain_result wal_fl = round_drain(c, R_WAL_FLOOR, rows, aggregates);
    fprintf(stderr, "bench: cost with a %ld-row backlog\n", cost_small);
    struct drain_result d_small = drain(c, "bench_cost", cost_small, aggregates, &mark_o);

    fprintf(stderr, "bench: start-up with a %ld-row backlog, %d run(s)\n", start_rows, start_runs);
    struct startup_result su = startup(c, "bench_start", start_rows, aggregates, start_runs);
    fprintf(stderr, "bench: fresh events at %d/s behind a %ld-row backlog\n", fresh_rate,
            fresh_rows);
    struct fresh_result fr = fresh_behind_backlog(c, "bench_fresh", fresh_rows, aggregates,
                                                  fresh_rate);
    fprintf(stderr, "bench: drain of %ld rows without and with a REPEATABLE READ snapshot held\n",
            lt_rows);
    struct claim_plan plan_free, plan_held;
    struct drain_opts lt0_o = { .runner = RUN_RELAY, .plan = &plan_free };
    struct drain_result lt_free = drain(c, "bench_lt_free", lt_rows, aggregates, &lt0_o);
    struct drain_opts lt1_o = { .runner = RUN_RELAY, .hold = true, .plan = &plan_held };
    struct drain_result lt_held = drain(c, "bench_lt_held", lt_rows, aggregates, &lt1_o);

    struct rounds rounds = { .n = 1 };
    const struct drain_result *first[R_N] = { &fl_min, &peer, &peer_same, &peer_del, &d_mark,
                                              &d_del, &d_wal, &wal_fl };
    for (int k = 0; k < R_N; k++)
        rounds_put(&rounds, k, 0, first[k]);
    for (int i = 1; i < n_rounds; i++) {
        fprintf(stderr, "bench: round %d of %d: minimal floor, the three peers, the relay's three "
                        "drains, the walsender alone, from the %s\n", i + 1, n_rounds,
                round_names[i % R_N]);
        for (int j = 0; j < R_N; j++) {
            int k = (i + j) % R_N; /* rotated: each round starts with the next scenario */
            struct drain_result d = round_drain(c, k, rows, aggregates);
            rounds_put(&rounds, k, i, &d);
        }
        rounds.n++;
    }

    struct latency_result lat[8], latw[8];
    int n_lat = latencies(c, rates_arg, lat_seconds, lat, latw);
    const char *tables[] = { "bench_floor_min", "bench_floor", "bench_peer", "bench_peer_same",
                             "bench_peer_del", "bench_drain", "bench_drain_del", "bench_drain_wal",
                             "bench_wal_floor", "bench_cost", "bench_start", "bench_fresh",
                             "bench_lt_free", "bench_lt_held" };
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
        drop(c, tables[i]);
    PQfinish(c);

    /* JSON on stdout. */
    FILE *o = stdout;
    double growth = (d_mark.peak_rss_mb - d_small.peak_rss_mb) / d_small.peak_rss_mb * 100.0;
    fprintf(o, "{\n");
    machine_json(o, durable);
    const struct drain_refs refs = { &fl_min, &fl_wide, &peer, &peer_same, &peer_del };
    drain_json(o, "minimal_floor", &fl_min, NULL);
    drain_json(o, "wide_floor", &fl_wide, NULL);
    drain_json(o, "peer_minimal", &peer, NULL);
    drain_json(o, "peer_same_messages", &peer_same, NULL);
    drain_json(o, "peer_minimal_delete", &peer_del, NULL);
    drain_json(o, "drain", &d_mark, &refs);
    drain_json(o, "drain_on_sent_delete", &d_del, &refs);
    drain_json(o, "drain_capture_wal", &d_wal, &refs);
    drain_json(o, "wal_floor", &wal_fl, NULL);
    tool_json(o, "verify", &v_small);
    tool_json(o, "verify_default_slice", &v_default);
    tool_json(o, "replay", &rp);
    rounds_json(o, &rounds);
    pg_load_json(o, &rounds);
    latency_json(o, "latency", lat, n_lat);
    fprintf(o, ",\n");
    latency_json(o, "latency_wal", latw, n_lat);
    fprintf(o, ",\n");
    startup_json(o, &su);
    fprintf(o, ",\n");
    fprintf(o, "  \"fresh_behind_backlog\": {\"backlog_rows\": %ld, \"rate\": %d, "
               "\"drain_seconds\": %.2f, \"events\": %ld, \"received\": %ld, \"p50_ms\": %.0f, "
               "\"p99_ms\": %.0f, \"max_ms\": %.0f},\n",
            fr.backlog, fr.rate, fr.drain_seconds, fr.lat.events, fr.lat.received,
            fr.lat.p50_ms, fr.lat.p99_ms, fr.lat.max_ms);
    fprintf(o, "  \"long_transaction\": {\"rows\": %ld, \"without\": {\"rows_per_s\": %.0f, "
               "\"claim_ms_after\": %.2f, \"claim_buffers_after\": %ld}, \"with_snapshot_held\": "
               "{\"rows_per_s\": %.0f, \"claim_ms_after\": %.2f, \"claim_buffers_after\": %ld}, "
               "\"ratio\": %.3f},\n",
            lt_rows, lt_free.rows_per_s, plan_free.ms, plan_free.buffers, lt_held.rows_per_s,
            plan_held.ms, plan_held.buffers, lt_held.rows_per_s / lt_free.rows_per_s);
    fprintf(o, "  \"cost\": {\"small_backlog\": {\"rows\": %ld, \"peak_rss_mb\": %.1f, "
               "\"cpu_s_per_100k\": %.3f}, \"large_backlog\": {\"rows\": %ld, \"peak_rss_mb\": "
               "%.1f, \"cpu_s_per_100k\": %.3f}, \"rss_growth_pct\": %.1f},\n",
            d_small.rows, d_small.peak_rss_mb, d_small.cpu_s * 100000.0 / (double)d_small.rows,
            d_mark.rows, d_mark.peak_rss_mb, d_mark.cpu_s * 100000.0 / (double)d_mark.rows, growth);
    const struct latency_result *l1k = at_rate(lat, n_lat, 1000), *l5k = at_rate(lat, n_lat, 5000);
    struct latency_floor relay1k = l1k ? floor_figures(*l1k) : (struct latency_floor){ 0 };
    struct latency_floor relay5k = l5k ? floor_figures(*l5k) : (struct latency_floor){ 0 };
    double first_ms = median(su.leader_to_received_ms, su.runs);
    double each[ROUNDS_MAX];
    double mark_per_floor = rounds_ratio(&rounds, R_MARK, R_FLOOR, each);
    double mark_per_same = rounds_ratio(&rounds, R_MARK, R_PEER_SAME, each);
    double start_to_first_ms = median(su.start_to_leader_ms, su.runs) + first_ms;
    /* Kafka's own floor of latency with the relay's fencing, in this run. */
    const struct latency_floor *f1k = l1k ? own_floor(l1k) : NULL, *f5k = l5k ? own_floor(l5k) : NULL;
    wal_targets_json(o, &rounds, latw, n_lat, d_wal.peak_rss_mb);
    verdicts_json(o, &rounds);
    /* The drain targets against the fastest honest peer of each round (the
     * verdict above has the ratios). */
    fprintf(o, "  \"targets\": {\"mark_ge_1.5_best_peer\": %s, "
               "\"mark_ge_1.3_same_messages_peer\": %s, \"mark_ge_1.0_minimal_floor\": %s, "
               "\"delete_ge_2_best_peer\": %s, "
               "\"latency_1000_near_kafka_floor\": %s, \"latency_5000_near_kafka_floor\": %s, "
               /* ...and near Kafka's floor while the writers load the machine as in
                * the relay's run (what no relay on this machine can beat). */
               "\"latency_1000_near_kafka_floor_under_writers\": %s, "
               "\"latency_5000_near_kafka_floor_under_writers\": %s, "
               "\"first_event_le_300ms_after_start\": %s, "
               "\"rss_le_20mb_largest_backlog\": %s, \"verify_within_bound\": %s, "
               "\"replay_within_bound\": %s}\n}\n",
            jbool(verdict_met(&rounds, R_MARK)), jbool(mark_per_same >= 1.3),
            jbool(mark_per_floor >= 1.0), jbool(verdict_met(&rounds, R_DELETE)),
            jbool(latency_target(&relay1k, f1k, 1000)), jbool(latency_target(&relay5k, f5k, 5000)),
            jbool(latency_target(&relay1k, l1k ? &l1k->floor_loaded : NULL, 1000)),
            jbool(latency_target(&relay5k, l5k ? &l5k->floor_loaded : NULL, 5000)),
            jbool(start_to_first_ms <= 300),
            jbool(d_mark.peak_rss_mb <= 20),
            jbool(v_small.peak_rss_mb <= v_small.bound_mb &&
                  v_default.peak_rss_mb <= v_default.bound_mb),
            jbool(rp.peak_rss_mb <= rp.bound_mb));

    /* The short table for people, on stderr. */
    fprintf(stderr, "\nbroker: %s; PostgreSQL %s; %ld rows; the relay's defaults", broker_name(),
            durable ? "durable (fsync, synchronous_commit on)" : "fsync off", rows);
    for (int i = 0; i < n_relay_opts; i++)
        fprintf(stderr, "%s%s", i ? ", " : " but ", relay_opts[i]);
    fprintf(stderr, "\n");
    fprintf(stderr, "%-34s %9s %9s %9s %9s %9s\n", "drain (first round)", "rows/s", "/min.fl",
            "/min.peer", "/same.peer", "/del.peer");
    const struct drain_result *rowv[] = { &fl_min, &fl_wide, &peer, &peer_same, &peer_del,
                                           &d_mark, &d_del, &d_wal };
    const char *rown[] = { "minimal SQL floor (PL/pgSQL)", "wide SQL floor (PL/pgSQL)",
                           "minimal peer (Python)", "same-messages peer (Python)",
                           "deleting peer (Python)", "relay, on_sent=mark",
                           "relay, on_sent=delete", "relay, capture=wal" };
    const int n_rows = (int)(sizeof(rowv) / sizeof(rowv[0]));
    for (int i = 0; i < n_rows; i++)
        fprintf(stderr, "%-34s %9.0f %9.2f %9.2f %9.2f %9.2f\n", rown[i], rowv[i]->rows_per_s,
                rowv[i]->rows_per_s / fl_min.rows_per_s, rowv[i]->rows_per_s / peer.rows_per_s,
                rowv[i]->rows_per_s / peer_same.rows_per_s,
                rowv[i]->rows_per_s / peer_del.rows_per_s);
    fprintf(stderr, "PostgreSQL CPU s per 100k rows (share of the drain it was busy):");
    const struct drain_result *const *pgs = rowv;
    const char *pgn[] = { "minimal floor", "wide floor", "minimal peer", "same-messages peer",
                          "deleting peer", "mark", "delete", "wal" };
    for (int i = 0; i < n_rows; i++)
        if (pgs[i]->pg_cpu_s >= 0)
            fprintf(stderr, "%s %s %.2f (%.0f%%)", i ? ";" : "", pgn[i],
                    pgs[i]->pg_cpu_s * 100000.0 / (double)pgs[i]->rows,
                    100.0 * pgs[i]->pg_cpu_s / pgs[i]->seconds);
    fprintf(stderr, "\nmachine busy (all cores, everything on it):");
    for (int i = 0; i < n_rows; i++)
        fprintf(stderr, "%s %s %.0f%%", i ? ";" : "", pgn[i], 100.0 * pgs[i]->machine_busy);
    fprintf(stderr, "\n");
    rounds_line(&rounds);
    verdicts_line(&rounds);
    pg_load_line(&rounds);
    for (int i = 0; i < n_lat; i++) {
        latency_line(&lat[i]);
        latency_line(&latw[i]);
    }
    startup_line(&su);
    fprintf(stderr, "fresh events at %d/s behind a %ld-row backlog (drained in %.1f s): p50 %.0f ms "
                    " p99 %.0f ms  max %.0f ms (%ld/%ld received)\n",
            fr.rate, fr.backlog, fr.drain_seconds, fr.lat.p50_ms, fr.lat.p99_ms, fr.lat.max_ms,
            fr.lat.received, fr.lat.events);
    fprintf(stderr, "snapshot held, %ld rows: %.0f rows/s vs %.0f without (%.2f); claim after: "
                    "%.1f ms / %ld buffers vs %.1f ms / %ld\n",
            lt_rows, lt_held.rows_per_s, lt_free.rows_per_s,
            lt_held.rows_per_s / lt_free.rows_per_s, plan_held.ms, plan_held.buffers,
            plan_free.ms, plan_free.buffers);
    fprintf(stderr, "peak RSS: %.1f MB (%ld rows)  %.1f MB (%ld rows)  growth %.1f%%; "
                    "capture=wal %.1f MB (%ld rows)\n",
            d_small.peak_rss_mb, d_small.rows, d_mark.peak_rss_mb, d_mark.rows, growth,
            d_wal.peak_rss_mb, d_wal.rows);
    for (int i = 0; i < 3; i++) {
        const struct tool_result *t = i == 0 ? &v_small : i == 1 ? &v_default : &rp;
        char what[64];
        if (t->slice_rows)
            snprintf(what, sizeof(what), "verify, slices of %ld", t->slice_rows);
        else
            snprintf(what, sizeof(what), "replay");
        fprintf(stderr, "%-26s %ld rows: %.0f rows/s, peak RSS %.1f MB (bound %.0f MB)", what,
                t->rows, t->rows_per_s, t->peak_rss_mb, t->bound_mb);
        if (t->truncated_partitions > 0)
            fprintf(stderr, "; %ld found in Kafka (the mock kept only the end of its partitions)",
                    t->messages);
        fprintf(stderr, "\n");
    }
    fprintf(stderr, "CPU s per 100k events: %.3f\n", d_mark.cpu_s * 100000.0 / (double)d_mark.rows);
    fprintf(stderr, "logs and claim plans: %s\n", workdir);
    return 0;
}
