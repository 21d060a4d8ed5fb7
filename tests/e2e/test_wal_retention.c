/* test_wal_retention.c — relay.capture = wal never writes a row it relays,
 * so relay.on_sent means what fits a stream: mark keeps rows for
 * relay.retention after their created_at; delete removes rows once the slot
 * moved past them. In this mode retention runs every few seconds
 * (PLAN_CAPTURE_RETENTION_EVERY_MS): no claim competes with it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

static struct e2e_ctx KEEP, DEL;

static void fini(void)
{
    e2e_teardown(&KEEP);
    e2e_teardown(&DEL);
}

static void write_rows(struct e2e_ctx *t, const char *created, int n)
{
    e2e_exec(t->conn,
             "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload, created_at) "
             "SELECT 'order', 'k' || (i %% 20), 'changed', jsonb_build_object('i', i), %s "
             "FROM generate_series(1, %d) AS i",
             t->qtable, created, n);
}

Test(e2e, wal_retention_by_created_at_and_delete_behind_the_slot, .fini = fini, .timeout = 120)
{
    e2e_setup(&KEEP, "walkeep");
    e2e_wal_enable(&KEEP);
    e2e_migrate(&KEEP);
    e2e_setup(&DEL, "waldel");
    e2e_wal_enable(&DEL);
    e2e_migrate(&DEL);

    /* 2,500 rows written ten days ago (more than one retention batch), 100 now. */
    write_rows(&KEEP, "now() - interval '10 days'", 2500);
    write_rows(&KEEP, "now()", 100);
    write_rows(&DEL, "now()", 2600);
    const char *keep_opts[] = {"relay.on_sent=mark", "relay.retention=7d", NULL};
    const char *del_opts[] = {"relay.on_sent=delete", NULL};
    struct e2e_relay *k = e2e_relay_start(&KEEP, keep_opts);
    struct e2e_relay *d = e2e_relay_start(&DEL, del_opts);
    cr_assert(e2e_wal_wait_confirmed(&KEEP, 60000), "keep: not confirmed (log %s)", k->log_path);
    cr_assert(e2e_wal_wait_confirmed(&DEL, 60000), "delete: not confirmed (log %s)", d->log_path);
    cr_assert_eq(e2e_count_where(&KEEP, "sent_at IS NOT NULL"), 0, "the relay marked rows");

    bool kept = e2e_wait_sql(&KEEP, 30000, "SELECT count(*) = 100 FROM %s", KEEP.qtable);
    bool deleted = e2e_wait_sql(&DEL, 30000, "SELECT count(*) = 0 FROM %s", DEL.qtable);
    cr_assert(kept, "mark: %lld rows left, expected the 100 written now (log %s)",
              e2e_count_where(&KEEP, "true"), k->log_path);
    cr_assert_eq(e2e_count_where(&KEEP, "created_at < now() - interval '7 days'"), 0);
    cr_assert(deleted, "delete: %lld rows left behind the slot (log %s)", e2e_count_where(&DEL, "true"),
              d->log_path);

    /* Deleting rows took nothing out of the stream: every event is on Kafka once. */
    char topic[160];
    snprintf(topic, sizeof topic, "%s.order", DEL.table);
    const char *topics[] = {topic};
    struct e2e_msgs m;
    e2e_consume_from(DEL.kafka, true, topics, 1, 60000, &m);
    cr_assert_eq(m.n, 2600, "%zu messages for 2,600 rows", m.n);
    e2e_msgs_free(&m);
}
