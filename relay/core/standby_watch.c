/* standby_watch.c — see standby_watch.h. */
#include "core/standby_watch.h"

#include <string.h>

void standby_watch_reset(struct standby_watch *w)
{
    memset(w, 0, sizeof(*w));
}

void standby_watch_feed(struct standby_watch *w, double now, double oldest_age, int64_t progress)
{
    w->oldest_age = oldest_age;
    if (oldest_age < 0 || progress < 0) {
        w->watching = false;
        return;
    }
    if (!w->watching || progress != w->progress) {
        /* Waiting starts now, or the leader marked or deleted rows since:
         * the clock starts again from this count. */
        w->watching = true;
        w->progress = progress;
        w->since = now;
    }
}

double standby_watch_stalled_for(const struct standby_watch *w, double now)
{
    return w->watching && now > w->since ? now - w->since : 0;
}

bool standby_watch_stalled(const struct standby_watch *w, double now, double limit_s)
{
    return limit_s > 0 && w->watching && standby_watch_stalled_for(w, now) >= limit_s;
}
