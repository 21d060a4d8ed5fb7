/* bench_verdict.c — the drain targets judged against the best honest peer:
 * in each round the relay's drain over the fastest peer of that round, the
 * median of those ratios against the target, said in words. */
#include "bench.h"

#define PEERS_MAX 3

/* One target: drain @c relay at least @c target times the fastest of
 * @c peers that ran in the same round. mark keeps every row it sent (what
 * verify, replay and an audit read), so it is set against the peers that do
 * the same; a row deleted after sending is a choice either kind of peer's
 * author could make, so delete is set against all three: the fastest of
 * more peers can only raise its bar. */
static const struct verdict {
    int relay;
    int peers[PEERS_MAX]; /* -1: no more */
    double target;
    const char *name, *line;
} verdicts[] = {
    { R_MARK, { R_PEER_MIN, R_PEER_SAME, -1 }, 1.5, "mark_ge_1.5_best_peer", "mark" },
    { R_DELETE, { R_PEER_MIN, R_PEER_SAME, R_PEER_DEL }, 2.0, "delete_ge_2_best_peer", "delete" },
};
#define N_VERDICTS (int)(sizeof(verdicts) / sizeof(verdicts[0]))

/* Whether @p v can be judged: its drain and at least one of its peers ran. */
static bool verdict_ran(const struct rounds *R, const struct verdict *v)
{
    if (!R->ran[v->relay])
        return false;
    for (int j = 0; j < PEERS_MAX && v->peers[j] >= 0; j++)
        if (R->ran[v->peers[j]])
            return true;
    return false;
}

/* The fastest peer of @p v that ran in round @p i. */
static int fastest_peer(const struct rounds *R, const struct verdict *v, int i)
{
    int best = -1;
    for (int j = 0; j < PEERS_MAX && v->peers[j] >= 0; j++) {
        int k = v->peers[j];
        if (R->ran[k] && (best < 0 || R->v[k][i] > R->v[best][i]))
            best = k;
    }
    return best;
}

/* Each round's ratio into @p each and its peer into @p peer; @return their
 * median. */
static double verdict_ratio(const struct rounds *R, const struct verdict *v, double *each,
                            int *peer)
{
    for (int i = 0; i < R->n; i++) {
        peer[i] = fastest_peer(R, v, i);
        each[i] = R->v[v->relay][i] / R->v[peer[i]][i];
    }
    return median(each, R->n);
}

static int rounds_below(const double *each, int n, double target)
{
    int below = 0;
    for (int i = 0; i < n; i++)
        below += each[i] < target;
    return below;
}

/* "met", or "missed by X %": the median X % short of the target. */
static void verdict_words(double m, double target, char *out, size_t len)
{
    if (m >= target)
        snprintf(out, len, "met");
    else
        snprintf(out, len, "missed by %.1f %%", (1.0 - m / target) * 100.0);
}

/* The names of @p v's peers that did (@p ran) or did not run, as a JSON list. */
static void peers_json(FILE *o, const struct rounds *R, const struct verdict *v, bool ran)
{
    int n = 0;
    fprintf(o, "[");
    for (int j = 0; j < PEERS_MAX && v->peers[j] >= 0; j++)
        if (R->ran[v->peers[j]] == ran)
            fprintf(o, "%s\"%s\"", n++ ? ", " : "", round_names[v->peers[j]]);
    fprintf(o, "]");
}

/* One target's figures over the rounds: each round's ratio against its
 * fastest peer, their median, the words and the rounds below the target;
 * what the target asks of each round and what the machine allows it. */
struct verdict_taken {
    double each[ROUNDS_MAX];
    int peer[ROUNDS_MAX];
    double median;
    char words[64];
    int below;
    double needed[ROUNDS_MAX]; /* rows/s: the target times the round's fastest peer */
    double bound[ROUNDS_MAX];  /* rows/s; -1: not measured */
    int beyond;                /* rounds whose need is above their bound */
};

/* The most a drain could reach on this machine in round @p i if its runner
 * used no CPU at all: every core busy with what the drain needs besides it
 * (PostgreSQL's backends, the broker, the consumer counting the messages),
 * at the CPU per row those used in the runner's own drain. It leaves out
 * PostgreSQL's own processes (WAL writer, checkpointer), so it is high. */
static double cpu_bound(const struct rounds *R, int k, int i)
{
    double others = R->others_cpu[k][i];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return others > 0 && cores > 0 ? (double)cores * 100000.0 / others : -1;
}

static void verdict_take(const struct rounds *R, const struct verdict *v, struct verdict_taken *t)
{
    t->median = verdict_ratio(R, v, t->each, t->peer);
    verdict_words(t->median, v->target, t->words, sizeof(t->words));
    t->below = rounds_below(t->each, R->n, v->target);
    t->beyond = 0;
    for (int i = 0; i < R->n; i++) {
        t->needed[i] = v->target * R->v[t->peer[i]][i];
        t->bound[i] = cpu_bound(R, v->relay, i);
        t->beyond += t->bound[i] >= 0 && t->needed[i] > t->bound[i];
    }
}

static void verdict_json(FILE *o, const struct rounds *R, const struct verdict *v)
{
    struct verdict_taken t;
    verdict_take(R, v, &t);
    fprintf(o, "\"%s\": {\"target\": %.1f, \"peers\": ", v->name, v->target);
    peers_json(o, R, v, true);
    fprintf(o, ", \"peers_not_run\": ");
    peers_json(o, R, v, false);
    fprintf(o, ", \"faster_peer_each\": [");
    for (int i = 0; i < R->n; i++)
        fprintf(o, "%s\"%s\"", i ? ", " : "", round_names[t.peer[i]]);
    fprintf(o, "], \"each\": [");
    for (int i = 0; i < R->n; i++)
        fprintf(o, "%s%.3f", i ? ", " : "", t.each[i]);
    fprintf(o, "], \"needed_rows_per_s\": [");
    for (int i = 0; i < R->n; i++)
        fprintf(o, "%s%.0f", i ? ", " : "", t.needed[i]);
    fprintf(o, "], \"cpu_bound_rows_per_s\": [");
    for (int i = 0; i < R->n; i++)
        fprintf(o, "%s%.0f", i ? ", " : "", t.bound[i]);
    fprintf(o, "], \"rounds_beyond_cpu_bound\": %d", t.beyond);
    fprintf(o, ", \"median\": %.3f, \"rounds_below\": %d, \"met\": %s, \"margin_pct\": %.1f, "
               "\"verdict\": \"%s\"}",
            t.median, t.below, jbool(t.median >= v->target), (t.median / v->target - 1.0) * 100.0,
            t.words);
}

void verdicts_json(FILE *o, const struct rounds *R)
{
    int n = 0;
    fprintf(o, "  \"verdict\": {");
    for (int k = 0; k < N_VERDICTS; k++) {
        if (!verdict_ran(R, &verdicts[k]))
            continue;
        fprintf(o, "%s", n++ ? ", " : "");
        verdict_json(o, R, &verdicts[k]);
    }
    fprintf(o, "},\n");
}

/* "the faster of a, b", "the fastest of a, b, c" or "a": the peers that ran. */
static void peers_line(const struct rounds *R, const struct verdict *v)
{
    int ran = 0, n = 0;
    for (int j = 0; j < PEERS_MAX && v->peers[j] >= 0; j++)
        ran += R->ran[v->peers[j]];
    fprintf(stderr, "%s", ran == 2 ? "the faster of " : ran > 2 ? "the fastest of " : "");
    for (int j = 0; j < PEERS_MAX && v->peers[j] >= 0; j++)
        if (R->ran[v->peers[j]])
            fprintf(stderr, "%s%s", n++ ? ", " : "", round_names[v->peers[j]]);
}

static void verdict_line(const struct rounds *R, const struct verdict *v)
{
    struct verdict_taken t;
    verdict_take(R, v, &t);
    fprintf(stderr, "  %s >= %.1fx ", v->line, v->target);
    peers_line(R, v);
    fprintf(stderr, ":");
    for (int i = 0; i < R->n; i++)
        fprintf(stderr, " %.2f (%s)", t.each[i], round_names[t.peer[i]]);
    fprintf(stderr, "; median %.2f: %s", t.median, t.words);
    if (t.below)
        fprintf(stderr, " (below the target in %d of %d rounds)", t.below, R->n);
    for (int j = 0; j < PEERS_MAX && v->peers[j] >= 0; j++)
        if (!R->ran[v->peers[j]])
            fprintf(stderr, "; %s not run", round_names[v->peers[j]]);
    fprintf(stderr, "\n");
    if (!t.below)
        return;
    /* A missed target: could this machine have met it at all? */
    fprintf(stderr, "    the target needed, by round:");
    for (int i = 0; i < R->n; i++)
        fprintf(stderr, " %.0f", t.needed[i]);
    fprintf(stderr, " rows/s; the most any %s drain could reach here, were its runner free:",
            v->line);
    for (int i = 0; i < R->n; i++)
        fprintf(stderr, t.bound[i] >= 0 ? " %.0f" : " -", t.bound[i]);
    fprintf(stderr, " rows/s (every core on the rest of its drain: PostgreSQL, the broker, the "
                    "consumer)%s\n",
            t.beyond == R->n ? ": out of reach here in every round" : "");
}

void verdicts_line(const struct rounds *R)
{
    fprintf(stderr, "verdict, each target against the fastest honest peer of each round "
                    "(median of the rounds' ratios):\n");
    for (int k = 0; k < N_VERDICTS; k++) {
        if (verdict_ran(R, &verdicts[k]))
            verdict_line(R, &verdicts[k]);
        else
            fprintf(stderr, "  %s >= %.1fx: no verdict (%s or every peer of it not run)\n",
                    verdicts[k].line, verdicts[k].target, verdicts[k].line);
    }
}

int verdict_met(const struct rounds *R, int relay)
{
    for (int k = 0; k < N_VERDICTS; k++) {
        const struct verdict *v = &verdicts[k];
        if (v->relay != relay)
            continue;
        if (!verdict_ran(R, v))
            return -1;
        double each[ROUNDS_MAX];
        int peer[ROUNDS_MAX];
        return verdict_ratio(R, v, each, peer) >= v->target;
    }
    return -1;
}
