/* verify.h — `outbox-relay verify`: does Kafka hold what the outbox table says
 * was sent? Also run periodically by the daemon (verify_task.h).
 *
 * Read-only on both sides: the table is read in id-ordered pages, Kafka with
 * a read_committed consumer that assigns partitions itself (no group, no
 * commits) from the offsets matching the window's timestamps. */
#ifndef OUTBOX_VERIFY_H
#define OUTBOX_VERIFY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <libpq-fe.h>

#include "config/config.h"
#include "core/verify_check.h"

/** Rows held at once by default: the memory bound (see docs/consumers.md). */
#define VERIFY_SLICE_ROWS_DEFAULT 500000

/** Which rows to check; NULL = open. Combined with AND. */
struct verify_window {
    const char *from_id, *to_id;  /* decimal ids, inclusive */
    const char *since, *until;    /* timestamps PostgreSQL reads (timestamptz); until exclusive */
};

struct verify_opts {
    struct verify_window w;
    size_t slice_rows;            /* 0 = VERIFY_SLICE_ROWS_DEFAULT */
    bool progress;                /* a progress line on stderr (a terminal) */
    atomic_int *stop;             /* may be NULL; non-zero: stop soon with -EINTR */
    int64_t settle_ms;            /* relay.capture = wal: how long to wait for the slot to pass
                                     the fence (verify_wal_fence) */
    bool no_fence;                /* relay.capture = wal: no fence (no stream runs to pass it):
                                     every row not dead counts pending */
    const char *snapshot;         /* relay.capture = wal: the rows read in this exported
                                     snapshot (a slot's, as it was made); NULL: one of its own */
};

/** relay.capture = wal: verify's fence in the slot (verify_wal.c). */
struct verify_fence {
    uint64_t lsn;                 /* F: pg_logical_emit_message()'s LSN */
    char lsn_text[32];
    char confirmed_text[32];      /* the slot's confirmed_flush_lsn when the wait ended */
    bool passed;                  /* confirmed_flush_lsn >= F within the settle time */
    double waited;                /* seconds */
};

/** What a run saw besides the counts. */
struct verify_meta {
    uint64_t window_rows;         /* rows in the window when it started */
    int64_t first_id, last_id;    /* 0 when empty */
    uint64_t messages_read;       /* all messages consumed, judged or not */
    unsigned slices;
    double duration;              /* seconds */
    size_t missing_topics;        /* topics of sent rows that Kafka does not have */
    size_t truncated_partitions;  /* partitions read from their first message, after deleted
                                     ones: retention may have removed what the window needs */
    bool wal;                     /* relay.capture = wal: the slot said which rows are sent */
    bool snapshot_imported;       /* the rows were read in o->snapshot */
    struct verify_fence fence;    /* when wal; fence.passed false: every row not marked is
                                     counted pending (verify_main exits VERIFY_EXIT_UNCONFIRMED) */
};

/** Exit status of `verify` when relay.capture = wal and the relay did not
 *  confirm the slot past verify's fence within --settle (EX_TEMPFAIL). */
#define VERIFY_EXIT_UNCONFIRMED 75

/** Runs one check of the window @p o->w of the table of @p cfg into @p v
 *  (vcheck_init'ed by the caller, which chooses how many examples it keeps).
 *  With relay.capture = wal the rows are read in one snapshot taken before
 *  verify_wal_fence(), and a row not dead counts as sent once the slot
 *  passed the fence (meta->fence).
 *  @return 0; -EHOSTUNREACH PostgreSQL unreachable; -ENETUNREACH Kafka
 *  unreachable or a partition could not be read; -ENOENT the table (or,
 *  capture = wal, the slot) does not exist; -EINVAL a window value PostgreSQL refused; -EINTR stopped;
 *  -EIO/-ENOMEM otherwise. @p err says why. */
int verify_run(const struct relay_config *cfg, const struct verify_opts *o, struct vcheck *v,
               struct verify_meta *meta, char *err, size_t errlen);

/** relay.capture = wal, after the reading transaction took its snapshot:
 *  on a connection of its own, checks that cfg->slot exists, writes the
 *  fence (a transactional logical message with the heartbeat prefix) and
 *  polls the slot every 100 ms, at most @p settle_ms, until its
 *  confirmed_flush_lsn reaches the fence (then @p f->passed: every row of
 *  the snapshot is on Kafka; verify_wal.c says why).
 *  @return 0 (passed or not); -ENOENT no such slot; -EHOSTUNREACH;
 *  -EINTR @p stop set; -EIO otherwise. @p err says why. */
int verify_wal_fence(const struct relay_config *cfg, int64_t settle_ms, atomic_int *stop,
                     struct verify_fence *f, char *err, size_t errlen);

/** Imports the exported @p snapshot into the REPEATABLE READ transaction
 *  @p c just began (SET TRANSACTION SNAPSHOT, before any other statement).
 *  @return true; false when PostgreSQL refused it: then logged, and the
 *  transaction rolled back for the caller to begin again. */
bool verify_wal_snapshot(PGconn *c, const char *snapshot);

/** Prints the command's usage (`verify --help`) to @p out. */
void verify_usage(FILE *out);

/** The command: `verify [--since T] [--until T] [--from-id N] [--to-id N]
 *  [--json] [--examples N] [--slice-rows N] [--settle D]`; @p argv holds its words.
 *  @return a process exit status: 0 nothing missing, mismatched or out of
 *  order; 1 something is; 64 usage; 69 PostgreSQL or Kafka unreachable;
 *  70 error; 75 (capture = wal) the slot did not pass the fence in time;
 *  78 the table (or the slot) does not exist; 130 interrupted. */
int verify_main(const struct relay_config *cfg, int argc, char **argv);

/** Parses a window bound given as a duration ("90s", "15m", "2h", "7d": that
 *  long before @p now, unix seconds) into RFC 3339 UTC text in @p out;
 *  anything else is copied for PostgreSQL to read. */
void verify_time_arg(const char *arg, double now, char *out, size_t outlen);

#endif
