/* pgoutput.h — PostgreSQL's logical replication stream, decoded without I/O:
 * the frames of the streaming replication protocol (XLogData, keepalive,
 * the standby status update) and the messages of the built-in pgoutput
 * plugin, protocol version 1 (Begin, Commit, Relation, Insert, logical
 * Message; the others are skipped), and which commit LSN may be confirmed
 * once Kafka acknowledged what came before it.
 *
 * The building blocks of log-based capture (relay.capture = wal); unit-tested
 * in tests/unit/test_pgoutput.c. Values point into the caller's buffer: a
 * decoded message lives as long as the frame it came from. */
#ifndef OUTBOX_PGOUTPUT_H
#define OUTBOX_PGOUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- LSNs as PostgreSQL writes them ("16/B374D848") ---- */

#define PGO_LSN_TEXT 18

/** Writes @p lsn as PostgreSQL prints a pg_lsn. */
void pgo_lsn_text(uint64_t lsn, char out[PGO_LSN_TEXT]);

/** @return the LSN @p s spells, 0 when it is NULL or spells none. */
uint64_t pgo_lsn_parse(const char *s);

/* ---- frames (CopyData of START_REPLICATION) ---- */

enum pgo_frame_kind { PGO_XLOGDATA, PGO_KEEPALIVE };

struct pgo_frame {
    enum pgo_frame_kind kind;
    uint64_t start_lsn, end_lsn;  /* XLogData: where its data starts; the server's WAL end */
    int64_t send_time_us;         /* since 2000-01-01, as the server sends it */
    bool reply_requested;         /* keepalive: answer now or be disconnected */
    const uint8_t *data;          /* XLogData: a pgoutput message */
    size_t len;
};

/** Parses one CopyData payload. @return 0, or -EINVAL for anything else. */
int pgo_frame_parse(const uint8_t *buf, size_t len, struct pgo_frame *f);

#define PGO_STATUS_UPDATE_LEN 34

/** Writes a standby status update ('r'): @p flushed is what the server may
 *  forget (its slot's confirmed_flush_lsn moves there), applied the same;
 *  @p written is how far the stream was read (at least @p flushed), which a
 *  shutting-down server waits for from each walsender's client before it
 *  stops. @return PGO_STATUS_UPDATE_LEN. */
size_t pgo_status_update(uint8_t out[PGO_STATUS_UPDATE_LEN], uint64_t written, uint64_t flushed,
                         int64_t now_us, bool reply_requested);

/* ---- pgoutput messages ---- */

#define PGO_MAX_COLUMNS 64

struct pgo_relation {
    uint32_t oid;
    char *nspname, *relname;
    int ncols;
    char **colnames;
    uint32_t *coltypes;     /* each column's type oid */
};

/** The relations seen so far: a Relation message precedes the first change
 *  of a table in a session and after its definition changed. */
struct pgo_relations {
    struct pgo_relation *v;
    size_t n;
};

struct pgo_value {
    const char *text;   /* NULL for SQL NULL or an unchanged TOASTed value */
    size_t len;
};

enum pgo_kind { PGO_BEGIN, PGO_COMMIT, PGO_RELATION, PGO_INSERT, PGO_MESSAGE, PGO_OTHER };

struct pgo_msg {
    enum pgo_kind kind;
    uint64_t lsn;                  /* Begin: the commit's LSN; Commit: the commit's; Message: its own */
    uint64_t end_lsn;              /* Commit: the end of the transaction: what to confirm */
    int64_t commit_time_us;        /* Begin, Commit: since 2000-01-01 */
    uint32_t xid;                  /* Begin */
    const struct pgo_relation *rel; /* Relation, Insert */
    int ncols;                     /* Insert */
    struct pgo_value cols[PGO_MAX_COLUMNS];
    bool transactional;            /* Message */
    const char *prefix;            /* Message */
    const char *content;           /* Message */
    size_t content_len;
};

/** Decodes one pgoutput message; a Relation is kept in @p rels. @return 0,
 *  -EINVAL for a malformed message, -ENOENT for an Insert into a relation
 *  never described, -E2BIG for more than PGO_MAX_COLUMNS columns, -ENOMEM. */
int pgo_decode(struct pgo_relations *rels, const uint8_t *p, size_t len, struct pgo_msg *m);

/** @return the value of column @p name of an Insert, or NULL when the
 *  relation has no such column. */
const struct pgo_value *pgo_column(const struct pgo_msg *m, const char *name);

/** The type oid of column @p name of Insert @p m's table, 0 if it has none. */
uint32_t pgo_column_type(const struct pgo_msg *m, const char *name);

void pgo_relations_free(struct pgo_relations *rels);

/* ---- what may be confirmed ---- */

/** Transactions relayed in commit order: each counts its messages handed to
 *  Kafka and not yet acknowledged. The slot may be confirmed up to the end
 *  LSN of the newest transaction whose messages, and all before it, are
 *  acknowledged: never past a message still in flight. Memory is one entry
 *  per transaction in flight, not one per row, so a 200,000-row transaction
 *  costs one entry. */
struct pgo_acks {
    struct pgo_txn { uint64_t seq, end_lsn; long pending; bool committed; } *v;
    size_t head, n, cap;
    uint64_t next_seq;
    uint64_t confirmed;            /* the LSN that may be reported flushed */
};

/** Starts a transaction; @return its sequence number, which each of its
 *  messages carries to pgo_acks_done(); 0 without memory. */
uint64_t pgo_acks_begin(struct pgo_acks *a);

/** One message of transaction @p seq handed to Kafka. */
void pgo_acks_sent(struct pgo_acks *a, uint64_t seq);

/** Transaction @p seq committed at @p end_lsn: nothing more of it comes. */
void pgo_acks_commit(struct pgo_acks *a, uint64_t seq, uint64_t end_lsn);

/** One message of transaction @p seq acknowledged by Kafka. @return the LSN
 *  that may now be confirmed (unchanged when an older one still waits). */
uint64_t pgo_acks_done(struct pgo_acks *a, uint64_t seq);

/** @p n messages of transaction @p seq acknowledged at once (a Kafka
 *  transaction that committed them). @return as pgo_acks_done(). */
uint64_t pgo_acks_done_n(struct pgo_acks *a, uint64_t seq, long n);

/** @return the number of transactions begun and not yet confirmable. */
static inline size_t pgo_acks_waiting(const struct pgo_acks *a)
{
    return a->n;
}

void pgo_acks_free(struct pgo_acks *a);

#endif
