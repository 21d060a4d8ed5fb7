/* relay.c — the daemon's boot and its loop: the PostgreSQL connection and its
 * reconnects, timers, signals, reload and shutdown.
 *
 * Everything runs on one libuv loop: PostgreSQL results and notifications,
 * Kafka delivery reports, timers and signals. Each event updates the relay's
 * state and calls relay_step() (relay_step.c), the single place that asks the
 * engine (plan.c) what to do next and carries it out; the decisions themselves
 * are there, in engine.c and in batch.c, without I/O. See relay_int.h for the files. */
#include "daemon/relay_int.h"
#include "core/slot_failover.h"

#include "core/pg_failure.h"

/* The capture modes, by relay.capture: the one place that tells them apart. */
static const struct capture_ops *const capture_modes[] = {
    [RELAY_CAPTURE_POLL] = &relay_poll_ops,
    [RELAY_CAPTURE_WAL] = &relay_wal_ops,
};

/* Kafka's delivery report, for the mode whose message it was. */
void relay_on_report(void *opaque, rd_kafka_resp_err_t err, void *arg)
{
    struct relay *r = arg;
    r->ops->on_report(r, opaque, err);
}

uint64_t relay_now_ms(struct relay *r)
{
    return uv_now(r->loop);
}

/* ---- retention: both modes delete in batches with their own statement ---- */

#define RETENTION_BATCH 1000

static void on_retention(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    long deleted = PQresultStatus(res) == PGRES_COMMAND_OK ? strtol(PQcmdTuples(res), NULL, 10) : 0;
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        log_error("retention delete failed", "error=%s", log_quote(PQresultErrorMessage(res)));
    else if (deleted > 0)
        log_debug("retention deleted sent rows", "rows=%ld", deleted);
    /* A full batch: more are due; the next one runs after any pending claim. */
    if (deleted < RETENTION_BATCH) {
        r->retention_due = false;
        r->last_retention_ms = relay_now_ms(r);
    }
    relay_step(r);
}

void relay_retention_delete(struct relay *r, const char *sql, const char *bound)
{
    char limit[16];
    snprintf(limit, sizeof limit, "%d", RETENTION_BATCH);
    const char *params[] = { bound, limit };
    pg_query(&r->pg, sql, 2, params, on_retention, r);
}

/* The row's topic into @p topic, checked. @return 0, or -EINVAL with @p err
 * saying why (the row is poison: its topic never will be valid). */
int relay_row_topic(const struct relay *r, const struct event_row *row, char *topic, size_t len,
                     char *err, size_t errlen)
{
    int rc;
    if (row->topic && *row->topic)
        rc = snprintf(topic, len, "%s", row->topic) < (int)len ? 0 : -ENOSPC;
    else
        rc = event_topic_render(r->cfg->topic, row->aggregate_type, row->event_type, topic, len);
    if (rc < 0) {
        snprintf(err, errlen, "invalid topic name: longer than %zu bytes", len - 1);
        return -EINVAL;
    }
    return event_topic_check(topic, err, errlen) < 0 ? -EINVAL : 0;
}

/* ---- PostgreSQL connection --------------------------------------------- */

static void start_connect(struct relay *r);

static void on_reconnect_timer(uv_timer_t *t)
{
    start_connect(t->data);
}

static void schedule_reconnect(struct relay *r)
{
    if (r->stopping) {
        if (plan_drain_on_lost(r->ops->producing(r)) == DRAIN_FINISH)
            relay_finish(r);
        return;
    }
    if (r->st.refused)
        return; /* for good: a new connection would be refused the same way */
    uint64_t delay = plan_reconnect_delay(r->reconnect_attempt, (uint64_t)r->cfg->reconnect_interval_ms,
                                          (uint64_t)r->cfg->reconnect_max_ms, (uint64_t)rand());
    r->reconnect_attempt++;
    log_info("reconnecting to postgres later", "delay_ms=%" PRIu64 " attempt=%u", delay,
             r->reconnect_attempt);
    uv_timer_start(&r->reconnect, on_reconnect_timer, delay, 0);
}

/* Why PostgreSQL is not connected, for /readyz and /status: libpq's
 * message (secrets already out) on one line, as readiness lines are. */
static void set_pg_error(struct relay *r, const char *why)
{
    char *e = r->st.pg_error;
    snprintf(e, sizeof r->st.pg_error, "%s", why ? why : "");
    for (char *p = e; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
}

static void start_connect(struct relay *r)
{
    server_watch_attempt(&r->server, &r->st.server);
    if (pg_connect(&r->pg) < 0) {
        set_pg_error(r, pg_connect_failure(&r->pg));
        schedule_reconnect(r);
    }
}

static void on_pg_connected(struct pg_conn *pg, void *arg)
{
    struct relay *r = arg;
    log_info("postgres connected", "host=%s port=%s server_version=%d", pg_host(pg), pg_port(pg),
             pg_server_version(pg));
    server_watch_connected(&r->server, &r->st.server, pg_host(pg), pg_port(pg), stats_now());
    if (r->cfg->capture == RELAY_CAPTURE_WAL && r->cfg->slot_failover == RELAY_SLOT_FAILOVER_ON &&
        pg_server_version(pg) < SLOT_FAILOVER_MIN_VERSION)
        log_error("relay.slot_failover = on needs PostgreSQL 17 or later: this server keeps no "
                  "slot across a failover (relay.slot_recovery applies)",
                  "host=%s server_version=%d", pg_host(pg), pg_server_version(pg));
    relay_set_role(r, STATS_ROLE_UNKNOWN);
    relay_session_reset(r);
    r->backoff = false;
    r->reconnect_attempt = 0;
    r->st.pg_up = true;
    r->st.pg_error[0] = '\0';
    relay_quiet_reset(r); /* a new session holds no lock */
    r->ops->connected(r);
    relay_step(r);
}

static void on_pg_lost(struct pg_conn *pg, const char *why, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    /* What libpq says names its own side only: which certificate, which
     * keyword to change, is the hint's. */
    const char *hint = pg_failure_hint(why);
    if (r->st.role == STATS_ROLE_LEADER)
        log_warn("postgres connection lost; leadership released", "error=%s", log_quote(why));
    else if (hint)
        log_warn("postgres connection failed", "error=%s hint=%s", log_quote(why), log_quote(hint));
    else
        log_warn("postgres connection failed", "error=%s", log_quote(why));
    set_pg_error(r, why);
    relay_set_role(r, STATS_ROLE_UNKNOWN);
    r->may_hold_lock = false; /* the server ends the session, and the lock with it */
    r->st.pg_up = false;
    server_watch_lost(&r->server, &r->st.server, stats_now());
    relay_quiet_reset(r);
    relay_notify_status(r);
    schedule_reconnect(r);
}

static void on_pg_notify(struct pg_conn *pg, const char *channel, void *arg)
{
    (void)pg;
    (void)channel;
    struct relay *r = arg;
    r->ops->wake(r);
    if (r->notifies < INT_MAX) /* a standby claims nothing, and counts on */
        r->notifies++;
    relay_step(r);
}

/* ---- timers, signals, shutdown ----------------------------------------- */

static void on_tick(uv_timer_t *t)
{
    struct relay *r = t->data;
    r->backoff = false;
    r->lock_due = true;
    r->ops->tick(r);
    producer_poll(&r->prod);
    log_limit_flush(&r->failures, stats_mono());
    relay_step(r);
}

static void on_shutdown_timer(uv_timer_t *t)
{
    struct relay *r = t->data;
    if (plan_drain_on_deadline(r->purged, r->ops->producing(r)) == DRAIN_PURGE) {
        /* Deadline reached: fail what is still in flight so the delivered part
         * can be marked; the failed rows stay unsent for the next run. */
        log_warn("shutdown timeout; abandoning undelivered messages",
                 "in_flight=%d", r->ops->in_flight(r));
        r->purged = true;
        producer_purge(&r->prod);
        producer_poll(&r->prod);
        uv_timer_start(&r->shutdown, on_shutdown_timer, PLAN_PURGE_GRACE_MS, 0);
        return;
    }
    log_warn("shutdown deadline passed; exiting without writing pending marks", "");
    relay_finish(r);
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct relay *r = s->data;
    bool connected = pg_ready(&r->pg) || pg_busy(&r->pg);
    enum drain_act drain = plan_drain_on_signal(r->stopping, connected, r->ops->producing(r));
    if (r->stopping) {
        log_warn("second signal; exiting now", "signal=%d", signum);
        relay_finish(r);
        return;
    }
    log_info("shutting down", "signal=%d in_flight=%d", signum, r->ops->in_flight(r));
    notify_send("STOPPING=1");
    r->stopping = r->st.stopping = true;
    uv_timer_stop(&r->tick);
    uv_timer_stop(&r->reconnect);
    uv_timer_start(&r->shutdown, on_shutdown_timer, (uint64_t)r->cfg->shutdown_timeout_ms, 0);
    if (drain == DRAIN_FINISH)
        relay_finish(r);
    else
        relay_step(r);
}

/* SIGHUP: read the file again; apply what is safe to change live, name what
 * is not; a file that does not validate changes nothing. */
static void on_sighup(uv_signal_t *s, int signum)
{
    (void)signum;
    struct relay *r = s->data;
    if (!r->reload) {
        log_warn("SIGHUP ignored: no configuration to reload", "");
        return;
    }
    struct relay_config next;
    char err[1024];
    config_init(&next);
    int rc = r->reload(&next, err, sizeof(err), r->reload_arg);
    stats_reloaded(&r->st, rc >= 0);
    if (rc < 0) {
        log_error("configuration reload rejected; keeping the running configuration",
                  "error=%s", log_quote(err));
    } else {
        int changed = config_reload_apply(r->live, &next);
        log_set_level((enum log_level)r->live->log_level);
        log_info("configuration reloaded", "changed=%d batch_size=%d poll_interval_ms=%d", changed,
                 r->cfg->batch_size, r->cfg->poll_interval_ms);
        uv_timer_set_repeat(&r->tick, (uint64_t)r->cfg->poll_interval_ms);
        uv_timer_again(&r->tick);
    }
    config_free(&next);
}

static void on_watchdog(uv_timer_t *t)
{
    /* The loop turned: that is what the watchdog asks. */
    (void)t;
    notify_send("WATCHDOG=1");
}

void relay_finish(struct relay *r)
{
    if (r->finished)
        return;
    r->finished = true;
    uv_timer_stop(&r->tick);
    uv_timer_stop(&r->reconnect);
    uv_timer_stop(&r->shutdown);
    uv_timer_stop(&r->watchdog);
    uv_close((uv_handle_t *)&r->tick, NULL);
    uv_close((uv_handle_t *)&r->reconnect, NULL);
    uv_close((uv_handle_t *)&r->shutdown, NULL);
    uv_close((uv_handle_t *)&r->watchdog, NULL);
    uv_close((uv_handle_t *)&r->quiet_timer, NULL);
    uv_close((uv_handle_t *)&r->sigterm, NULL);
    uv_close((uv_handle_t *)&r->sigint, NULL);
    uv_close((uv_handle_t *)&r->sighup, NULL);
    r->ops->stop(r);
    pg_close(&r->pg);
    producer_stop(&r->prod);
    /* the status endpoint answers until here */
    http_stop(r->http);
    r->http = NULL;
    verify_task_stop(r->verify);
    r->verify = NULL;
    progress_stop(r->progress);
    r->progress = NULL;
    log_limit_flush(&r->failures, INFINITY);
    uint64_t failed = 0;
    for (int i = 0; i < STATS_FAIL_NREASONS; i++)
        failed += r->st.failed_total[i];
    log_info("stopped", "published_total=%" PRIu64 " failed_total=%" PRIu64
             " dead_lettered_total=%" PRIu64,
             r->st.published_total, failed, r->st.dead_total);
}

static void relay_free(struct relay *r)
{
    r->ops->free(r);
    pg_free(&r->pg);
    sql_statements_free(&r->sql);
    sql_session_free(&r->ssql);
}

/* The timers and signal handlers of the loop. */
static void loop_start(struct relay *r)
{
    uv_timer_init(r->loop, &r->tick);
    uv_timer_init(r->loop, &r->reconnect);
    uv_timer_init(r->loop, &r->shutdown);
    r->tick.data = r->reconnect.data = r->shutdown.data = r;
    uv_signal_init(r->loop, &r->sigterm);
    uv_signal_init(r->loop, &r->sigint);
    r->sigterm.data = r->sigint.data = r;
    uv_signal_start(&r->sigterm, on_signal, SIGTERM);
    uv_signal_start(&r->sigint, on_signal, SIGINT);
    uv_signal_init(r->loop, &r->sighup);
    r->sighup.data = r;
    uv_signal_start(&r->sighup, on_sighup, SIGHUP);
    uv_timer_init(r->loop, &r->watchdog);
    uv_timer_init(r->loop, &r->quiet_timer);
    r->quiet_timer.data = r;
    uint64_t wd_usec = notify_watchdog_usec();
    if (wd_usec > 0) /* twice per interval, as sd_watchdog_enabled(3) advises */
        uv_timer_start(&r->watchdog, on_watchdog, wd_usec / 2000, wd_usec / 2000);
    uv_timer_start(&r->tick, on_tick, (uint64_t)r->cfg->poll_interval_ms,
                   (uint64_t)r->cfg->poll_interval_ms);
    /* First retention pass a minute after start, not during the catch-up. */
    r->last_retention_ms = uv_now(r->loop);
}

/* The statements, the capture and the batches: what the loop needs before
 * it starts. @return EXIT_OK or the exit status to end with. */
static int relay_prepare(struct relay *r, const struct relay_config *cfg)
{
    unsigned flags = (r->poison->hold_claim ? SQL_HOLD_AGGREGATE : 0) |
                     (cfg->on_sent == RELAY_ON_SENT_DELETE ? SQL_DELETE_SENT : 0);
    /* Debezium's table, polled, through the view migrate made over it. */
    const char *claim = config_claim_relation(cfg, r->claim_table);
    flags |= SQL_PLACED(config_placed_count(cfg));
    flags |= r->ops->sql_flags(cfg, claim);
    if (sql_statements_init(&r->sql, cfg->schema, claim, cfg->notify_channel, flags) < 0) {
        log_error("cannot build SQL statements", "schema=%s table=%s", cfg->schema, cfg->table);
        return EXIT_CONFIG;
    }
    if (sql_session_init(&r->ssql, cfg->schema, claim, cfg->table, flags & SQL_FLOOR) < 0) {
        log_error("cannot build SQL statements", "schema=%s table=%s", cfg->schema, cfg->table);
        relay_free(r);
        return EXIT_CONFIG;
    }
    int rc = r->ops->start(r);
    if (rc != EXIT_OK)
        relay_free(r);
    return rc;
}

int relay_run(struct relay_config *cfg, relay_reload_fn reload, void *reload_arg,
              relay_gate_fn gate, void *gate_arg)
{
    struct relay r;
    memset(&r, 0, sizeof(r));
    r.cfg = r.live = cfg;
    r.reload = reload;
    r.reload_arg = reload_arg;
    r.ops = capture_modes[cfg->capture];
    r.loop = uv_default_loop();
    stats_init(&r.st);
    server_watch_init(&r.server, &r.st.server, stats_now());
    log_limit_init(&r.failures, LOG_LIMIT_INTERVAL_S, LOG_LIMIT_BURST);
    r.poison = poison_rules_of(cfg->on_poison);
    r.retention_s = cfg->on_sent == RELAY_ON_SENT_DELETE ? 0 : (long)(cfg->retention_ms / 1000);
    srand((unsigned)uv_hrtime() ^ (unsigned)getpid());

    int rc = relay_prepare(&r, cfg);
    if (rc != EXIT_OK)
        return rc;

    char err[512];
    if (relay_producer_start(&r, err, sizeof(err)) < 0) {
        log_error("kafka producer rejected the configuration", "error=%s", log_quote(err));
        relay_free(&r);
        return EXIT_CONFIG;
    }

    /* ---- the status endpoint; an address we cannot listen on is a
     * configuration error, like any other rejected key. */
    if (http_start(&r.http, r.loop, cfg, &r.st, err, sizeof(err)) < 0) {
        log_error("cannot start the status endpoint", "error=%s", log_quote(err));
        producer_stop(&r.prod);
        uv_run(r.loop, UV_RUN_DEFAULT); /* lets the closed handles finish */
        relay_free(&r);
        return EXIT_CONFIG;
    }
    /* ---- end of the status endpoint */
    if (verify_task_start(&r.verify, r.loop, cfg, &r.st) < 0)
        log_error("out of memory starting the periodic verify; running without it", "");
    if (progress_start(&r.progress, r.loop, cfg, &r.st) < 0)
        log_error("out of memory starting the progress reports; running without them", "");

    int gate_rc = gate ? gate(gate_arg) : EXIT_OK;
    if (gate_rc != EXIT_OK) {
        verify_task_stop(r.verify);
        progress_stop(r.progress);
        http_stop(r.http);
        producer_stop(&r.prod);
        uv_run(r.loop, UV_RUN_DEFAULT); /* lets the closed handles finish */
        relay_free(&r);
        return gate_rc;
    }

    struct pg_callbacks cb = {
        .on_connected = on_pg_connected,
        .on_lost = on_pg_lost,
        .on_notify = on_pg_notify,
        .arg = &r,
    };
    pg_init(&r.pg, r.loop, cfg->pg_conninfo, &cb);
    loop_start(&r);

    log_info("relay starting",
             "schema=%s table=%s topic=%s batch_size=%d poll_interval_ms=%d on_poison=%s "
             "on_sent=%s retention_s=%ld capture=%s",
             cfg->schema, cfg->table, cfg->topic, cfg->batch_size, cfg->poll_interval_ms,
             poison_policy_names[cfg->on_poison],
             cfg->on_sent == RELAY_ON_SENT_DELETE ? "delete" : "mark", r.retention_s,
             r.ops->name);
    start_connect(&r);

    uv_run(r.loop, UV_RUN_DEFAULT);

    relay_free(&r);
    uv_loop_close(r.loop);
    return EXIT_OK;
}
