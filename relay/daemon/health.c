/* health.c — see health.h.
 *
 * The readiness checks are one table: their order is the order of the
 * /readyz?verbose lines, and every reader of readiness goes through it, so
 * the probe, /status and /metrics cannot disagree. */
#include "daemon/health.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/kafka_rules.h"
#include "core/pg_failure.h"

/* Longer than any reason a check gives: the longest is PostgreSQL's
 * "not connected: " with stats' pg_error and a hint. */
#define WHY_MAX 1024

/* What a check looks at. */
struct health_in {
    const struct relay_stats *s;
    const struct relay_config *cfg;    /* may be NULL */
    double mono_now;
};

/* One readiness check: @return whether it passes; when it does not, @p why
 * says what fails. */
typedef bool (*health_check_fn)(const struct health_in *in, char *why, size_t len);

static bool schema_fit(const struct relay_stats *s)
{
    return s->schema_problem[0] == '\0';
}

/* Not connected names why, and what to change when libpq's words name only
 * its own side (a certificate, a password). */
static bool check_postgres(const struct health_in *in, char *why, size_t len)
{
    const struct relay_stats *s = in->s;
    const char *hint = pg_failure_hint(s->pg_error);
    if (s->refused)
        snprintf(why, len, "not connected (relaying refused; see database)");
    else if (s->server.problem[0])
        snprintf(why, len, "%s", s->server.problem);
    else if (s->pg_error[0])
        snprintf(why, len, "not connected: %s%s%s", s->pg_error, hint ? "; " : "", hint ? hint : "");
    else
        snprintf(why, len, "not connected");
    return s->pg_up && !s->server.problem[0];
}

/* The connection is a session of its own and this role sees every row. */
static bool check_database(const struct health_in *in, char *why, size_t len)
{
    const struct relay_stats *s = in->s;
    snprintf(why, len, "refused: %s", s->refused_reason);
    return !s->refused;
}

/* The table is the one this binary's statements were written for. */
static bool check_schema(const struct health_in *in, char *why, size_t len)
{
    const struct relay_stats *s = in->s;
    snprintf(why, len, "%s", s->schema_problem);
    return schema_fit(s);
}

/* A standby is ready to take over, unless it waits behind something that
 * will not let go: then it names the holder. */
static bool check_role(const struct health_in *in, char *why, size_t len)
{
    const struct relay_stats *s = in->s;
    snprintf(why, len, "%s",
             s->refused                     ? "none (relaying refused; see database)"
             : !schema_fit(s)                ? "none (waiting for the schema; see schema)"
             : s->role == STATS_ROLE_UNKNOWN ? "not known yet (leader lock not queried since connecting)"
                                             : s->standby_reason);
    return s->role != STATS_ROLE_UNKNOWN &&
           !(s->role == STATS_ROLE_STANDBY && (s->standby_stuck || s->standby_stalled));
}

/* Statistics decide once they come; before the first, a broker that already
 * acknowledged a delivery or answered for the transaction coordinator is
 * evidence enough that Kafka is reachable. */
static bool check_kafka(const struct health_in *in, char *why, size_t len)
{
    const struct relay_stats *s = in->s;
    if (s->brokers_up < 0) {
        snprintf(why, len, "no statistics from librdkafka and no answer from a broker yet");
        return s->kafka_answered;
    }
    snprintf(why, len, "no broker up (%d known)", s->brokers_total);
    return s->brokers_up > 0;
}

/* A broker that holds its connections and answers nothing is still UP for
 * check_kafka: messages waiting with no acknowledgement at all is what shows it. */
static bool check_acks(const struct health_in *in, char *why, size_t len)
{
    const struct relay_stats *s = in->s;
    int limit_ms = in->cfg ? in->cfg->ack_timeout_ms : 0;
    double wait = stats_ack_wait(s, in->mono_now);
    if (s->kafka_in_flight <= 0 && !s->kafka_committing)
        snprintf(why, len, "nothing in flight, but kafka has answered neither the initialisation "
                 "of transactions nor a replaced producer's messages for %.0f s", floor(wait));
    else
        snprintf(why, len, "%lld message%s in flight%s, no acknowledgement for %.0f s",
                 (long long)s->kafka_in_flight, s->kafka_in_flight == 1 ? "" : "s",
                 s->kafka_committing ? " and a transaction ending" : "", floor(wait));
    return limit_ms <= 0 || wait * 1000 < limit_ms;
}

static bool check_producer(const struct health_in *in, char *why, size_t len)
{
    const struct relay_stats *s = in->s;
    int denied = stats_kafka_denial(s);
    if (denied) {
        snprintf(why, len, "kafka refuses the relay's principal %s (%s): needs %s; retried "
                 "with a back-off until an ACL or the credentials change",
                 kafka_denial_name(denied), s->kafka_denial_error, kafka_denial_need(denied));
        return false;
    }
    snprintf(why, len, "fatal error; the producer is being replaced");
    return !s->producer_fatal;
}

static bool check_relaying(const struct health_in *in, char *why, size_t len)
{
    const struct relay_stats *s = in->s;
    snprintf(why, len, "halted: %s", s->halt_reason);
    return !s->halted;
}

/* A relay draining for shutdown takes no new work: let the orchestrator stop
 * routing to it. */
static bool check_shutdown(const struct health_in *in, char *why, size_t len)
{
    const struct relay_stats *s = in->s;
    snprintf(why, len, "stopping: draining in-flight deliveries");
    return !s->stopping;
}

/* relay.capture = wal: the slot can be read on. A lost slot no longer
 * holds the WAL of transactions not yet relayed: its events may be gone. */
static bool check_slot(const struct health_in *in, char *why, size_t len)
{
    const struct stats_slot *sl = &in->s->slot;
    bool lost = !strcmp(sl->wal_status, "lost");
    snprintf(why, len, "%s",
             sl->problem[0] ? sl->problem
                            : "the replication slot is lost (wal_status lost): PostgreSQL removed "
                              "WAL it had not yet sent");
    return !sl->problem[0] && !lost;
}

static const struct health_check {
    const char *name;
    health_check_fn check;
    bool wal_only;                 /* listed only when relay.capture = wal (slot.enabled) */
} checks[] = {
    {"postgres", check_postgres, false},
    {"database", check_database, false},
    {"schema", check_schema, false},
    {"role", check_role, false},
    {"slot", check_slot, true},
    {"kafka", check_kafka, false},
    {"acks", check_acks, false},
    {"producer", check_producer, false},
    {"relaying", check_relaying, false},
    {"shutdown", check_shutdown, false},
};

bool health_ready(const struct relay_stats *s, const struct relay_config *cfg, double mono_now,
                  struct strbuf *out)
{
    const struct health_in in = {.s = s, .cfg = cfg, .mono_now = mono_now};
    bool ready = true;
    char why[WHY_MAX];
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        if (checks[i].wal_only && !s->slot.enabled)
            continue;
        bool ok = checks[i].check(&in, why, sizeof why);
        ready &= ok;
        if (out)
            strbuf_printf(out, "[%c]%s %s\n", ok ? '+' : '-', checks[i].name, ok ? "ok" : why);
    }
    return ready;
}

const char *health_role_name(enum stats_role role)
{
    switch (role) {
    case STATS_ROLE_LEADER: return "leader";
    case STATS_ROLE_STANDBY: return "standby";
    default: return "unknown";
    }
}

/* The query ran up to a few seconds ago: the oldest row has aged since. */
double health_oldest_unsent_age(const struct relay_stats *s, double now)
{
    double age = s->oldest_unsent_age;
    if (s->backlog_rows > 0 && now > s->backlog_time)
        age += now - s->backlog_time;
    return age;
}
