/* pg.h — one asynchronous libpq connection driven by the libuv loop.
 *
 * The connection runs one statement at a time; its result and any NOTIFY that
 * arrives are handed to callbacks on the loop thread. When the connection is
 * lost the owner is told once (on_lost) and may call pg_connect() again. */
#ifndef OUTBOX_PG_H
#define OUTBOX_PG_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "core/event.h"
#include "io/pg_attempt.h"
#include "io/pq_watch.h"

struct pg_conn;

/** Called with the final result of a statement (NULL if the connection was
 *  lost before it completed). The result is freed after the callback returns,
 *  unless the callback called pg_result_keep(). */
typedef void (*pg_result_cb)(struct pg_conn *pg, PGresult *res, void *arg);

struct pg_callbacks {
    void (*on_connected)(struct pg_conn *pg, void *arg);
    void (*on_lost)(struct pg_conn *pg, const char *why, void *arg);
    void (*on_notify)(struct pg_conn *pg, const char *channel, void *arg);
    void *arg;
};

enum pg_state { PG_DISCONNECTED = 0, PG_CONNECTING, PG_READY, PG_BUSY, PG_CLOSING };

struct pg_conn {
    uv_loop_t *loop;
    PGconn *conn;
    struct pq_watch w;        /* its socket on the loop */
    struct pg_attempt att;    /* connecting: the hosts of the list in turn */
    enum pg_state state;
    struct pg_callbacks cb;
    pg_result_cb result_cb;
    void *result_arg;
    PGresult *last;           /* last non-NULL result of the running statement */
    bool keep;                /* the running result callback keeps its result */
    char *conninfo;
};

/** Why pg_connect failed at once (-EIO), as it may be logged. */
const char *pg_connect_failure(const struct pg_conn *pg);

/** From a result callback only: the callback owns the result now and
 *  PQclears it when done with it. */
void pg_result_keep(struct pg_conn *pg);

/** Prepares @p pg; does not connect. @return 0 or -ENOMEM. */
int pg_init(struct pg_conn *pg, uv_loop_t *loop, const char *conninfo,
            const struct pg_callbacks *cb);

/** libpq's message @p why as it may be logged: the conninfo's secrets
 *  redacted, the trailing newline cut; "connection lost" when empty. */
void pg_error_text(const char *conninfo, const char *why, char *out, size_t len);

/** Starts an asynchronous connection attempt through the conninfo's hosts in
 *  turn (pg_attempt.h); on_connected or on_lost follows.
 *  The session is named "outbox-relay" in pg_stat_activity unless the
 *  conninfo sets application_name.
 *  @return 0, or -EIO when libpq could not even start (on_lost is not called). */
int pg_connect(struct pg_conn *pg);

/** Sends one statement with text parameters. @return 0, -EBUSY if one is running,
 *  -ENOTCONN if not connected, -EIO if libpq refused it (the connection is then
 *  lost: on_lost has been called, the result callback will not be). */
int pg_query(struct pg_conn *pg, const char *sql, int nparams, const char *const *params,
             pg_result_cb cb, void *arg);

/** Prepares @p sql as the named statement @p name on this connection (it lasts
 *  until the connection does). Same returns as pg_query(). */
int pg_prepare(struct pg_conn *pg, const char *name, const char *sql, int nparams,
               pg_result_cb cb, void *arg);

/** Runs the statement prepared as @p name. Same returns as pg_query(). */
int pg_query_prepared(struct pg_conn *pg, const char *name, int nparams,
                      const char *const *params, pg_result_cb cb, void *arg);

/** pg_query_prepared(), its result in binary format (pg_binary.h). */
int pg_query_prepared_binary(struct pg_conn *pg, const char *name, int nparams,
                             const char *const *params, pg_result_cb cb, void *arg);

/** @return the backend pid libpq was told at connect (BackendKeyData), 0 when
 *  not connected. A pooler or proxy hands out its own, so it differs from
 *  what pg_backend_pid() answers. */
int pg_announced_pid(const struct pg_conn *pg);

/** @return the SQLSTATE of @p res ("" when it has none). */
const char *pg_sqlstate(const PGresult *res);

/** @return true when a statement can be sent now. */
bool pg_ready(const struct pg_conn *pg);

/** @return true while a statement's result is awaited. */
bool pg_busy(const struct pg_conn *pg);

/** @return the host and the port of the server connected to ("" when not). */
const char *pg_host(const struct pg_conn *pg);
const char *pg_port(const struct pg_conn *pg);

/** @return the server's version number (e.g. 150018), 0 when not connected. */
int pg_server_version(const struct pg_conn *pg);

/** Drops the connection (no on_lost callback) and releases the uv handle. */
void pg_close(struct pg_conn *pg);

/** pg_close, then frees the conninfo. */
void pg_free(struct pg_conn *pg);

/** Points @p out at row @p i of a binary result with the claim statement's
 *  columns (CLAIM_* in sql.h): valid as long as the result and @p out are
 *  (event_id and created_at are formatted into @p out). */
void pg_claim_row(const PGresult *res, int i, struct event_row *out);

/** The columns placed_1.. of row @p i, from column @p first to the last, into
 *  @p out's placed values (after pg_claim_row()): each as the text pgoutput
 *  would give, integers marked as numbers. */
void pg_claim_placed(const PGresult *res, int i, int first, struct event_row *out);

/** The id of row @p i of such a result. */
int64_t pg_claim_id(const PGresult *res, int i);

/** Its created_at in milliseconds since the Unix epoch (pgb_time_epoch_ms). */
int64_t pg_claim_created_ms(const PGresult *res, int i);

#endif
