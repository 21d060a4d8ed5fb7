/* sql_debezium.h — polling Debezium's outbox table (relay.profile = debezium,
 * relay.capture = poll): the view that shows the table under the relay's
 * column names, so that the claim, the mark and every other statement of
 * capture = poll (sql.h) run on it unchanged. */
#ifndef OUTBOX_SQL_DEBEZIUM_H
#define OUTBOX_SQL_DEBEZIUM_H

#include <stddef.h>

/** The view's name: the table's, with this suffix. */
#define SQL_DEBEZIUM_VIEW_SUFFIX "_relay"

/** What the view maps: Debezium's table and the column behind each of the
 *  relay's names. event_type and created_at may be "" (none: NULL, and the
 *  insert time); placed are relay.additional_placement's columns in its
 *  order, shown as placed_1.. */
struct sql_debezium_map {
    const char *schema, *table;
    const char *event_id, *aggregate_type, *aggregate_id, *event_type, *payload, *created_at;
    size_t n_placed;
    const char *placed[8];
};

/** Writes the view's name ("<table>_relay") to @p out.
 *  @return 0, or -EINVAL (the table's name is not a valid identifier, or
 *  too long for the suffix). */
int sql_debezium_view_name(const char *table, char *out, size_t len);

/** The text migrate stores as the view's comment: the mapping it was made
 *  for, which the relay compares with its own at start. NULL: no memory, or
 *  an identifier not valid. Caller frees. */
char *sql_debezium_signature(const struct sql_debezium_map *m);

/** DROP and CREATE of the view, and its comment: statements to run after
 *  schema/debezium_poll.sql, in its transaction. Caller frees; NULL as above. */
char *sql_debezium_view(const struct sql_debezium_map *m);

/** $1 = "schema"."view" quoted: the view's comment, NULL when there is no
 *  such view (or it has none). */
extern const char sql_debezium_comment[];

/** The sequence of relay_seq: "<view>_seq", whose comment migrate sets to
 *  the WAL position before which the rows are the connector's. */
#define SQL_DEBEZIUM_SEQ_SUFFIX "_seq"

/** $1 = "schema"."<view>_seq" quoted, $2 = the connector's slot: that
 *  position (NULL: none recorded), the slot's confirmed_flush_lsn (NULL: no
 *  such slot) and whether the relay must wait (the slot exists and has not
 *  confirmed past the position). */
extern const char sql_debezium_boundary[];

/** "schema"."<table>_relay_seq" quoted, $1 of sql_debezium_boundary.
 *  @return as sql_quote_qualified(). */
int sql_debezium_seq(const char *schema, const char *table, char *out, size_t len);

#endif
