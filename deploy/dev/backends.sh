#!/usr/bin/env bash
# Starts the real backends coordkit's tests and benchmarks use, on loopback, installing them
# from Debian's packages when missing. Idempotent: a backend that already answers is left
# alone, so `up` is fast when everything runs.
#
#   deploy/dev/backends.sh up       make sure every backend answers
#   deploy/dev/backends.sh status   print each backend and whether it answers
set -euo pipefail

REDIS_PORT=${COORDKIT_DEV_REDIS_PORT:-6379}

log() { printf 'backends: %s\n' "$*" >&2; }

# port_open HOST PORT: true when something accepts TCP connections there.
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# wait_for NAME CHECK...: retries CHECK for up to 30s.
wait_for() {
  local name=$1; shift
  for _ in $(seq 1 60); do
    if "$@"; then return 0; fi
    sleep 0.5
  done
  log "$name did not come up"
  return 1
}

apt_install() {
  log "installing $* from Debian's packages"
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
    apt-get update -qq
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  }
}

redis_ok() { [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]; }

redis_up() {
  local port=$1
  if command -v redis-cli >/dev/null && redis_ok "$port"; then return 0; fi
  command -v redis-server >/dev/null || apt_install redis-server
  log "starting redis on 127.0.0.1:$port"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --dir /var/lib/redis --logfile "/var/log/redis/coordkit-$port.log" \
    --pidfile "/var/run/redis-coordkit-$port.pid"
  wait_for "redis:$port" redis_ok "$port"
}

status_line() {
  if "${@:2}"; then printf '%-22s up\n' "$1"; else printf '%-22s DOWN\n' "$1"; return 1; fi
}

case "${1:-}" in
  up)
    redis_up "$REDIS_PORT"
    log "all backends answer"
    ;;
  status)
    rc=0
    status_line "redis 127.0.0.1:$REDIS_PORT" redis_ok "$REDIS_PORT" || rc=1
    exit $rc
    ;;
  *)
    echo "usage: $0 up|status" >&2
    exit 2
    ;;
esac
