/* kafka_notice.c — librdkafka's broker news, once per broker and cause. */
#include "core/kafka_notice.h"

#include <stdio.h>
#include <string.h>

enum log_level kafka_log_level(int syslog_level, const char *fac, const char *buf)
{
    enum log_level l = syslog_level <= 3 ? LOG_LVL_ERROR : syslog_level <= 5 ? LOG_LVL_WARN
                     : syslog_level == 6 ? LOG_LVL_INFO : LOG_LVL_DEBUG;
    /* The relay sets enable.gapless.guarantee on purpose: that librdkafka
     * calls it experimental is not the operator's concern. */
    if (!strcmp(fac, "CONFWARN") && strstr(buf, "enable.gapless.guarantee is experimental"))
        return LOG_LVL_DEBUG;
    /* Written again as the error event of the same text (kafka_notice_error);
     * a fatal error as "kafka producer fatal error", which a refused right
     * repeats at debug level only, retry after retry of its back-off. */
    if (!strcmp(fac, "FAIL") || !strcmp(fac, "FATAL"))
        return LOG_LVL_DEBUG;
    /* A transaction that failed (messages timed out while a broker was away):
     * the relay aborts it and says so with the same reason ("kafka
     * transaction aborted", a warning), or names the fatal error it became. */
    if (!strcmp(fac, "TXNERR"))
        return LOG_LVL_DEBUG;
    /* librdkafka 2.8 says this at every handshake, once a second; the
     * broker's "certificate required" that follows is written, rate-limited,
     * with a hint that names the certificate's CA. */
    if (!strcmp(fac, "SSL") && strstr(buf, "not sending any client certificates"))
        return LOG_LVL_DEBUG;
    return l;
}

/* "127.0.0.1:9092/1: Connect to ... failed" names its broker before ": ",
 * "TxnCoordinator: 127.0.0.1:9092: Disconnected" the coordinator's address
 * after its role; "3/3 brokers are down" names none. */
static void broker_of(const char *reason, char *out, size_t len)
{
    out[0] = '\0';
    if (!reason)
        return;
    const char *colon = strstr(reason, ": ");
    const char *slash = strchr(reason, '/');
    if (colon && strstr(reason, "Coordinator: ") == colon - strlen("Coordinator"))
        colon = strstr(colon + 2, ": ");
    else if (!slash || !colon || slash > colon)
        return;
    if (colon && (size_t)(colon - reason) < len)
        snprintf(out, len, "%.*s", (int)(colon - reason), reason);
}

/* Whether remembered key @p key is broker @p name ("host:port/id") or a
 * coordinator role at its address ("TxnCoordinator: host:port"). */
static bool same_broker(const char *key, const char *name)
{
    if (!strcmp(key, name))
        return true;
    const char *slash = strchr(name, '/');
    size_t hp = slash ? (size_t)(slash - name) : strlen(name);
    size_t kl = strlen(key);
    return strstr(key, "Coordinator: ") && kl >= hp && !strncmp(key + kl - hp, name, hp);
}

bool kafka_notice_error(struct kafka_notice *k, int err, const char *reason)
{
    char broker[sizeof k->seen[0].broker];
    broker_of(reason, broker, sizeof broker);
    for (int i = 0; i < k->n; i++) {
        if (k->seen[i].err == err && !strcmp(k->seen[i].broker, broker))
            return false;
    }
    struct kafka_notice_seen *s;
    if (k->n < KAFKA_NOTICE_MAX)
        s = &k->seen[k->n++];
    else
        s = &k->seen[k->next++ % KAFKA_NOTICE_MAX];
    snprintf(s->broker, sizeof s->broker, "%s", broker);
    s->err = err;
    return true;
}

void kafka_notice_broker_up(struct kafka_notice *k, const char *name)
{
    int kept = 0;
    for (int i = 0; i < k->n; i++) {
        if (same_broker(k->seen[i].broker, name) || !k->seen[i].broker[0])
            continue;
        k->seen[kept++] = k->seen[i];
    }
    k->n = kept;
    k->next = 0;
}
