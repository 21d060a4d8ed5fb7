/* pg_binary.h — PostgreSQL's binary wire format for the few types a claim
 * reads. Pure logic, no I/O. A claim asks for binary results: the server
 * then sends an id, a uuid and a timestamp as 8, 16 and 8 bytes instead of
 * formatting each as text, which took it about 40 % of a 1,000-row claim. */
#ifndef OUTBOX_PG_BINARY_H
#define OUTBOX_PG_BINARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** PostgreSQL's epoch, 2000-01-01, in Unix seconds: its timestamps and the
 *  replication protocol's clocks count from there. */
#define PGB_EPOCH_UNIX_S INT64_C(946684800)

/** uuid's type OID (pg_type.oid, fixed for built-in types). */
#define PGB_UUIDOID 2950
/** smallint's, integer's and bigint's. */
#define PGB_INT2OID 21
#define PGB_INT4OID 23
#define PGB_INT8OID 20
#define PGB_JSONBOID 3802

/** Room for a uuid as text, with its NUL. */
#define PGB_UUID_TEXT 37
/** Room for a timestamp as text, with its NUL: "-infinity", or the longest
 *  year PostgreSQL allows ("294276-12-31T23:59:59.999999Z"). */
#define PGB_TIME_TEXT 32

/** A bigint (8 bytes, big-endian) from @p v. */
int64_t pgb_int8(const char *v);

/** A boolean (1 byte) from @p v. */
bool pgb_bool(const char *v);

/** A uuid (16 bytes) from @p v as lower-case text with dashes, as
 *  PostgreSQL prints it, into @p out. */
void pgb_uuid_text(const char *v, char out[PGB_UUID_TEXT]);

/** A timestamptz (8 bytes, microseconds since 2000-01-01 00:00 UTC). */
int64_t pgb_timestamptz(const char *v);

/** Whether @p t is PostgreSQL's infinity or -infinity. */
bool pgb_time_infinite(int64_t t);

/** @p t as milliseconds since the Unix epoch, rounded down; 0 for an
 *  infinite @p t (a Kafka producer then stamps the time it sends). */
int64_t pgb_time_epoch_ms(int64_t t);

/** @p t as RFC 3339 text in UTC with microseconds ("2026-12-03T11:40:58.123456Z");
 *  a year outside 1-9999 in ISO 8601's expanded form ("+12345-…", "-0043-…" for
 *  44 BC), and "infinity" or "-infinity" as PostgreSQL writes them. */
void pgb_time_text(int64_t t, char out[PGB_TIME_TEXT]);

#endif
