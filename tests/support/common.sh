# common.sh — sourced by stack.sh and kafka.sh: the small things both need.

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

# A TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
    local port
    if command -v python3 >/dev/null 2>&1; then
        if port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' 2>/dev/null); then
            echo "$port"; return 0
        fi
    fi
    for _ in $(seq 1 200); do
        port=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"; return 0
        fi
    done
    return 1
}

# Stops a process: SIGTERM, up to $2 tenths of a second, then SIGKILL.
stop_pid() {
    local pid=$1 tenths=${2:-50}
    pid_alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 "$tenths"); do pid_alive "$pid" || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do pid_alive "$pid" || return 0; sleep 0.1; done
}
