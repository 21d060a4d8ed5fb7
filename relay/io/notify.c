/* notify.c — sd_notify without libsystemd: one AF_UNIX datagram per call. */
#include "io/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int notify_send(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 0;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path))
        return -EINVAL;
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract namespace */

    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
    int rc = n < 0 ? -errno : 0;
    close(fd);
    return rc;
}

uint64_t notify_watchdog_usec(void)
{
    const char *usec = getenv("WATCHDOG_USEC");
    if (!usec || !*usec)
        return 0;
    const char *pid = getenv("WATCHDOG_PID");
    if (pid && *pid && strtol(pid, NULL, 10) != (long)getpid())
        return 0;
    char *end;
    unsigned long long v = strtoull(usec, &end, 10);
    return *end ? 0 : (uint64_t)v;
}
