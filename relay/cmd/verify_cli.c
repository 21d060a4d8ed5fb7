/* verify_cli.c — `outbox-relay verify` as a command: its arguments, the
 * report (human or JSON) and the exit status; the check itself is verify.c. */
#include "cmd/verify.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <limits.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/cli_args.h"
#include "base/errors.h"
#include "core/event.h"
#include "base/log.h"
#include "io/pg.h"
#include "core/pg_binary.h"
#include "core/sql.h"
#include "base/stats.h"

#define EXAMPLES_DEFAULT 10


void verify_usage(FILE *out)
{
    fprintf(out,
            "Usage: outbox-relay verify [--since T] [--until T] [--from-id N] [--to-id N]\n"
            "                           [--json] [--examples N] [--slice-rows N]\n"
            "                           [--settle DURATION]\n"
            "       (plus the -c FILE and -X section.key=value options of every command)\n"
            "\n"
            "Compares the outbox table with what Kafka holds, for the rows of a window\n"
            "(default: every row still in the table), reading each row's topic with a\n"
            "read_committed consumer. Never writes to the table or commits offsets.\n"
            "\n"
            "  --since T, --until T   rows with created_at >= T and < T: a timestamp\n"
            "                         (2025-01-07T09:00:00Z) or a duration ago (90s, 15m, 2h, 7d)\n"
            "  --from-id N, --to-id N rows with N <= id <= N\n"
            "  --json                 print the report as one JSON object\n"
            "  --examples N           examples shown of each problem (default %d)\n"
            "  --slice-rows N         rows held in memory at once (default %d; about 100\n"
            "                         bytes each); a larger window is read in slices\n"
            "  --settle DURATION      relay.capture = wal: how long to wait for the relay to\n"
            "                         confirm the slot past verify's fence (default\n"
            "                         verify.settle, 30s)\n"
            "\n"
            "Reports per topic and in total: missing (marked sent, not in Kafka),\n"
            "pending (not sent yet), duplicates (an event_id more than once), out of\n"
            "order (an aggregate whose first deliveries are not in id order), mismatched\n"
            "(key, value or headers differ from the row) and unknown (an event_id no\n"
            "row has, e.g. deleted by retention: not an error).\n"
            "With relay.capture = wal no row is marked: verify reads the rows in one\n"
            "snapshot, then writes a fence into the WAL (a logical message) and waits until\n"
            "the slot's confirmed_flush_lsn passes it; every row of the snapshot that is not\n"
            "dead then counts as sent. If the slot does not pass it within --settle (is the\n"
            "relay running?), every row not marked counts as pending and the status is 75.\n"
            "Exit status: 0 nothing missing, mismatched or out of order; 1 something is;\n"
            "64 usage, 69 PostgreSQL or Kafka unreachable, 70 error, 75 (capture = wal)\n"
            "the slot was not confirmed past the fence in time and nothing else failed,\n"
            "78 no such table (or slot; or relay.profile = debezium with capture = wal),\n"
            "130 interrupted.\n",
            EXAMPLES_DEFAULT, VERIFY_SLICE_ROWS_DEFAULT);
}

static const char *const count_names[] = {"rows", "sent", "pending", "dead", "messages",
                                          "missing", "duplicates", "extra_deliveries", "replayed",
                                          "out_of_order", "mismatched", "unknown"};

static uint64_t count_at(const struct vcheck_counts *c, size_t i)
{
    const uint64_t v[] = {c->rows, c->sent, c->pending, c->dead, c->messages, c->missing,
                          c->duplicates, c->extra_deliveries, c->replayed, c->out_of_order,
                          c->mismatched, c->unknown};
    return v[i];
}

#define N_COUNTS (sizeof count_names / sizeof count_names[0])

static void diff_text(unsigned d, char *out, size_t len)
{
    snprintf(out, len, "%s%s%s%s", d & VCHECK_DIFF_KEY ? "key " : "",
             d & VCHECK_DIFF_VALUE ? "value " : "", d & VCHECK_DIFF_HEADERS ? "headers " : "",
             d & VCHECK_DIFF_TOPIC ? "topic " : "");
    size_t n = strlen(out);
    if (n)
        out[n - 1] = '\0';
}

static cJSON *counts_json(const struct vcheck_counts *c)
{
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; o && i < N_COUNTS; i++)
        cJSON_AddNumberToObject(o, count_names[i], (double)count_at(c, i));
    return o;
}

/* capture = wal: the fence and whether the slot passed it (not in poll mode's report). */
static void wal_json(cJSON *root, const struct relay_config *cfg, const struct verify_meta *meta)
{
    const struct verify_fence *f = &meta->fence;
    cJSON *o = cJSON_AddObjectToObject(root, "wal");
    cJSON_AddStringToObject(o, "slot", cfg->slot);
    cJSON_AddStringToObject(o, "fence_lsn", f->lsn_text);
    cJSON_AddStringToObject(o, "confirmed_flush_lsn", f->confirmed_text);
    cJSON_AddBoolToObject(o, "confirmed", f->passed);
    cJSON_AddNumberToObject(o, "waited_seconds", f->waited);
}

/* capture = wal: the slot's verdict; the problem first when it gave none. */
static void wal_human(const struct relay_config *cfg, const struct verify_meta *meta,
                      int64_t settle_ms)
{
    const struct verify_fence *f = &meta->fence;
    if (f->passed)
        printf("  capture = wal: slot %s confirmed past verify's fence %s in %.1f s: every row "
               "read that is not dead counts as sent\n", cfg->slot, f->lsn_text, f->waited);
    else
        printf("\nthe relay has not confirmed the slot %s past %s within %.1f s (it is at %s): "
               "rows cannot be told apart from pending; is the relay running?\n", cfg->slot,
               f->lsn_text, (double)settle_ms / 1000.0, f->confirmed_text);
}

static void print_json(const struct relay_config *cfg, const struct verify_window *w,
                       const struct vcheck *v, const struct verify_meta *meta)
{
    cJSON *root = cJSON_CreateObject();
    char table[128];
    snprintf(table, sizeof table, "%s.%s", cfg->schema, cfg->table);
    cJSON_AddStringToObject(root, "table", table);
    cJSON *win = cJSON_AddObjectToObject(root, "window");
    const char *wv[] = {w->from_id, w->to_id, w->since, w->until};
    const char *wn[] = {"from_id", "to_id", "since", "until"};
    for (int i = 0; i < 4; i++) {
        if (wv[i])
            cJSON_AddStringToObject(win, wn[i], wv[i]);
        else
            cJSON_AddNullToObject(win, wn[i]);
    }
    cJSON_AddBoolToObject(root, "ok", vcheck_ok(v));
    cJSON_AddNumberToObject(root, "window_rows", (double)meta->window_rows);
    cJSON_AddNumberToObject(root, "messages_read", (double)meta->messages_read);
    cJSON_AddNumberToObject(root, "slices", meta->slices);
    cJSON_AddNumberToObject(root, "truncated_partitions", (double)meta->truncated_partitions);
    cJSON_AddNumberToObject(root, "duration_seconds", meta->duration);
    if (meta->wal)
        wal_json(root, cfg, meta);
    cJSON_AddItemToObject(root, "total", counts_json(&v->total));
    cJSON *topics = cJSON_AddArrayToObject(root, "topics");
    for (size_t t = 0; t < v->n_topics; t++) {
        cJSON *o = counts_json(&v->topics[t].c);
        cJSON_AddItemToObjectCS(o, "topic", cJSON_CreateString(v->topics[t].name));
        cJSON_AddItemToArray(topics, o);
    }
    cJSON *ex = cJSON_AddObjectToObject(root, "examples");
    for (int p = 0; p < VCHECK_P_COUNT; p++) {
        cJSON *arr = cJSON_AddArrayToObject(ex, vcheck_problem_name((enum vcheck_problem)p));
        for (size_t i = 0; i < v->n_examples[p]; i++) {
            const struct vcheck_example *e = &v->examples[p][i];
            cJSON *o = cJSON_CreateObject();
            char uuid[37], diff[64];
            vcheck_uuid_format(e->event_id, uuid);
            cJSON_AddNumberToObject(o, "id", (double)e->id);
            cJSON_AddStringToObject(o, "event_id", uuid);
            cJSON_AddStringToObject(o, "topic", v->topics[e->topic].name);
            if (e->partition >= 0) {
                cJSON_AddNumberToObject(o, "partition", e->partition);
                cJSON_AddNumberToObject(o, "offset", (double)e->offset);
            }
            if (p == VCHECK_P_DUPLICATE)
                cJSON_AddNumberToObject(o, "deliveries", e->deliveries);
            if (p == VCHECK_P_OUT_OF_ORDER) {
                cJSON_AddNumberToObject(o, "later_id", (double)e->other_id);
                cJSON_AddNumberToObject(o, "later_offset", (double)e->other_offset);
            }
            if (p == VCHECK_P_MISMATCH) {
                diff_text(e->diff, diff, sizeof diff);
                cJSON_AddStringToObject(o, "differs", diff);
            }
            cJSON_AddItemToArray(arr, o);
        }
    }
    char *text = cJSON_PrintUnformatted(root);
    if (text)
        printf("%s\n", text);
    cJSON_free(text);
    cJSON_Delete(root);
}

static void print_human(const struct relay_config *cfg, const struct vcheck *v,
                        const struct verify_meta *meta, int64_t settle_ms)
{
    const struct vcheck_counts *c = &v->total;
    printf("verify %s.%s: %" PRIu64 " rows", cfg->schema, cfg->table, c->rows);
    if (c->rows)
        printf(" (id %" PRId64 "..%" PRId64 ")", meta->first_id, meta->last_id);
    printf(", %zu topic%s, %" PRIu64 " messages read in %.1f s\n", v->n_topics,
           v->n_topics == 1 ? "" : "s", meta->messages_read, meta->duration);
    printf("  missing %" PRIu64 ", pending %" PRIu64 ", duplicates %" PRIu64
           ", out of order %" PRIu64 ", mismatched %" PRIu64 ", unknown %" PRIu64 "\n",
           c->missing, c->pending, c->duplicates, c->out_of_order, c->mismatched, c->unknown);
    if (meta->wal)
        wal_human(cfg, meta, settle_ms);
    if (v->n_topics > 1 || (v->n_topics == 1 && !vcheck_ok(v))) {
        printf("\n%-40s %9s %9s %9s %9s %9s %9s %9s %9s\n", "TOPIC", "ROWS", "SENT", "PENDING",
               "MISSING", "DUPL", "ORDER", "MISMATCH", "UNKNOWN");
        for (size_t t = 0; t < v->n_topics; t++) {
            const struct vcheck_counts *k = &v->topics[t].c;
            printf("%-40s %9" PRIu64 " %9" PRIu64 " %9" PRIu64 " %9" PRIu64 " %9" PRIu64
                   " %9" PRIu64 " %9" PRIu64 " %9" PRIu64 "\n",
                   v->topics[t].name[0] ? v->topics[t].name : "(invalid topic)", k->rows, k->sent,
                   k->pending, k->missing, k->duplicates, k->out_of_order, k->mismatched,
                   k->unknown);
        }
    }
    static const char *const titles[VCHECK_P_COUNT] = {
        "missing (marked sent, not in Kafka)",
        "duplicates (delivered more than once; consumers drop repeated event_ids)",
        "out of order (first deliveries of an aggregate not in id order)",
        "mismatched (the message differs from its row)",
        "unknown (event_id of no row in the window, e.g. deleted by retention; not an error)",
    };
    const uint64_t totals[VCHECK_P_COUNT] = {c->missing, c->duplicates, c->out_of_order,
                                             c->mismatched, c->unknown};
    for (int p = 0; p < VCHECK_P_COUNT; p++) {
        if (!totals[p])
            continue;
        printf("\n%s: %" PRIu64 "%s\n", titles[p], totals[p],
               v->n_examples[p] < totals[p] ? ", first shown" : "");
        for (size_t i = 0; i < v->n_examples[p]; i++) {
            const struct vcheck_example *e = &v->examples[p][i];
            char uuid[37], diff[64];
            vcheck_uuid_format(e->event_id, uuid);
            const char *topic = v->topics[e->topic].name;
            switch (p) {
            case VCHECK_P_MISSING:
                printf("  id %" PRId64 " event_id %s topic %s\n", e->id, uuid, topic);
                break;
            case VCHECK_P_DUPLICATE:
                printf("  id %" PRId64 " event_id %s: %u times in %s, first at [%d] offset %" PRId64
                       "\n", e->id, uuid, e->deliveries, topic, (int)e->partition, e->offset);
                break;
            case VCHECK_P_OUT_OF_ORDER:
                printf("  %s [%d]: id %" PRId64 " at offset %" PRId64 " after id %" PRId64
                       " at offset %" PRId64 "\n", topic, (int)e->partition, e->id, e->offset,
                       e->other_id, e->other_offset);
                break;
            case VCHECK_P_MISMATCH:
                diff_text(e->diff, diff, sizeof diff);
                printf("  id %" PRId64 " event_id %s at %s [%d] offset %" PRId64 ": %s differ%s\n",
                       e->id, uuid, topic, (int)e->partition, e->offset, diff,
                       strchr(diff, ' ') ? "" : "s");
                break;
            default:
                printf("  %s [%d] offset %" PRId64 ": event_id %s outbox_id %" PRId64 "\n", topic,
                       (int)e->partition, e->offset, uuid, e->id);
            }
        }
    }
    if (c->missing && meta->truncated_partitions)
        printf("\nnote: %zu partition%s had to be read from the first message Kafka still holds "
               "(its retention deleted older ones): rows sent before that are reported missing\n",
               meta->truncated_partitions, meta->truncated_partitions == 1 ? "" : "s");
    bool unproven = meta->wal && !meta->fence.passed;
    printf("\n%s\n", !vcheck_ok(v) ? "FAILED: see above"
                     : unproven    ? "NOT PROVEN: nothing mismatched or out of order, but no row "
                                     "could be counted as sent (see above)"
                                   : "OK: nothing missing, mismatched or out of order");
}

static atomic_int interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    atomic_store(&interrupted, 1);
}

/* The command's words into @p o, @p json, @p examples and @p slice.
 * @return 0 or EXIT_USAGE (said on stderr). */
static int parse_args(int argc, char **argv, struct verify_opts *o, bool *json,
                      long long *examples, long long *slice)
{
    long long id;
    static char since[64], until[64];
    double now = stats_now();
    for (int i = 0; i < argc; i++) {
        const char *w = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = strcmp(w, "--since") == 0 || strcmp(w, "--until") == 0 ||
                     strcmp(w, "--from-id") == 0 || strcmp(w, "--to-id") == 0 ||
                     strcmp(w, "--examples") == 0 || strcmp(w, "--slice-rows") == 0 ||
                     strcmp(w, "--settle") == 0;
        if (strcmp(w, "--json") == 0) {
            *json = true;
            continue;
        }
        if (!takes) {
            fprintf(stderr, "outbox-relay verify: unknown argument \"%s\"\n", w);
            verify_usage(stderr);
            return EXIT_USAGE;
        }
        if (!val) {
            fprintf(stderr, "outbox-relay verify: %s needs a value\n", w);
            return EXIT_USAGE;
        }
        i++;
        if (strcmp(w, "--settle") == 0) {
            long secs = config_parse_duration(val);
            if (secs < 0) {
                fprintf(stderr, "outbox-relay verify: --settle: \"%s\" is not a duration "
                        "(N, Ns, Nm, Nh)\n", val);
                return EXIT_USAGE;
            }
            o->settle_ms = (int64_t)secs * 1000;
        } else if (strcmp(w, "--since") == 0) {
            verify_time_arg(val, now, since, sizeof since);
            o->w.since = since;
        } else if (strcmp(w, "--until") == 0) {
            verify_time_arg(val, now, until, sizeof until);
            o->w.until = until;
        } else if (strcmp(w, "--examples") == 0 ? cli_parse_int64(val, 0, examples) < 0
                   : strcmp(w, "--slice-rows") == 0 ? cli_parse_int64(val, 1, slice) < 0
                                                    : cli_parse_int64(val, 0, &id) < 0) {
            fprintf(stderr, "outbox-relay verify: %s: \"%s\" is not a %s integer\n", w, val,
                    strcmp(w, "--examples") == 0 ? "non-negative" : "positive");
            return EXIT_USAGE;
        } else if (strcmp(w, "--from-id") == 0) {
            o->w.from_id = val;
        } else if (strcmp(w, "--to-id") == 0) {
            o->w.to_id = val;
        }
    }
    return 0;
}

int verify_main(const struct relay_config *cfg, int argc, char **argv)
{
    struct verify_opts o = {.stop = &interrupted, .settle_ms = cfg->verify_settle_ms};
    bool json = false;
    long long examples = EXAMPLES_DEFAULT, slice = VERIFY_SLICE_ROWS_DEFAULT;
    int usage = parse_args(argc, argv, &o, &json, &examples, &slice);
    if (usage)
        return usage;
    o.slice_rows = (size_t)slice;
    o.progress = !json && isatty(STDERR_FILENO);

    struct sigaction sa = {.sa_handler = on_sigint};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    struct vcheck v;
    vcheck_init(&v, (size_t)examples);
    struct verify_meta meta;
    char err[1024];
    int rc = verify_run(cfg, &o, &v, &meta, err, sizeof err);
    int status;
    if (rc == 0) {
        if (json)
            print_json(cfg, &o.w, &v, &meta);
        else
            print_human(cfg, &v, &meta, o.settle_ms);
        status = !vcheck_ok(&v) ? 1 : meta.wal && !meta.fence.passed ? VERIFY_EXIT_UNCONFIRMED
                                                                       : EXIT_OK;
        if (meta.wal && !meta.fence.passed)
            log_warn("verify: the relay has not confirmed the slot past verify's fence: rows "
                     "cannot be told apart from pending; is the relay running?",
                     "slot=%s fence_lsn=%s confirmed_flush_lsn=%s settle_ms=%" PRId64, cfg->slot,
                     meta.fence.lsn_text, meta.fence.confirmed_text, o.settle_ms);
        if (fflush(stdout) != 0)
            status = EXIT_SOFTWARE;
    } else if (rc == -EINTR) {
        fprintf(stderr, "outbox-relay verify: interrupted\n");
        status = 130;
    } else {
        log_error("verify failed", "error=%s", log_quote(err));
        status = rc == -EHOSTUNREACH || rc == -ENETUNREACH ? EXIT_UNAVAILABLE
                 : rc == -ENOENT || rc == -ENOTSUP         ? EXIT_CONFIG
                 : rc == -EINVAL                           ? EXIT_USAGE
                                                           : EXIT_SOFTWARE;
    }
    vcheck_free(&v);
    return status;
}
