#!/usr/bin/env bash
# Starts the real backends coordkit's tests and benchmarks use, on loopback, installing them
# from Debian's packages when missing. Idempotent: a backend that already answers is left
# alone, so `up` is fast when everything runs.
#
#   deploy/dev/backends.sh up       make sure every backend answers
#   deploy/dev/backends.sh status   print each backend and whether it answers
set -euo pipefail

REDIS_PORT=${COORDKIT_DEV_REDIS_PORT:-6379}
REDLOCK_PORTS=${COORDKIT_DEV_REDLOCK_PORTS:-"6380 6381 6382"}
ZK_PORT=${COORDKIT_DEV_ZK_PORT:-2181}
NATS_PORT=${COORDKIT_DEV_NATS_PORT:-4222}
ZK_DIR=${COORDKIT_DEV_ZK_DIR:-/var/lib/coordkit/zookeeper}
MYSQL_DATABASE=${COORDKIT_DEV_MYSQL_DATABASE:-coordkit}
PG_PORT=${COORDKIT_DEV_PG_PORT:-5432}
PG_DATABASE=${COORDKIT_DEV_PG_DATABASE:-coordkit}

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

mysql_ok() { mariadb -h 127.0.0.1 -P 3306 -uroot -e 'SELECT 1' >/dev/null 2>&1; }

mysql_up() {
  if ! { command -v mariadb >/dev/null && mysql_ok; }; then
    command -v mariadbd >/dev/null || apt_install mariadb-server mariadb-client
    log "starting mariadb on 127.0.0.1:3306"
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
    wait_for mariadb mysql_ok
  fi
  # Parallel test instances each keep a connection pool: leave them room.
  mariadb -h 127.0.0.1 -uroot -e "CREATE DATABASE IF NOT EXISTS \`$MYSQL_DATABASE\`;
    SET GLOBAL max_connections = GREATEST(@@GLOBAL.max_connections, 512)"
}

pg_ok() { psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -Atc 'SELECT 1' >/dev/null 2>&1; }

# pg_psql SQL: runs SQL as the postgres superuser on the dev cluster.
pg_psql() { psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qAtc "$1"; }

# pg_up: Debian's PostgreSQL cluster on 127.0.0.1, trusting local connections (dev only),
# with the database the tests use and room for every parallel test's pool.
pg_up() {
  if ! { command -v psql >/dev/null && pg_ok; }; then
    command -v pg_ctlcluster >/dev/null || apt_install postgresql postgresql-client
    local version
    version=$(ls /etc/postgresql | sort -V | tail -1)
    if [ -z "$version" ]; then
      log "no PostgreSQL cluster in /etc/postgresql"
      return 1
    fi
    log "starting postgresql $version on 127.0.0.1:$PG_PORT"
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    wait_for postgresql pg_ok || {
      # A fresh package install authenticates by peer: trust loopback for the dev cluster.
      local hba=/etc/postgresql/$version/main/pg_hba.conf
      sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
      pg_ctlcluster --skip-systemctl-redirect "$version" main restart
      wait_for postgresql pg_ok
    }
  fi
  if [ "$(pg_psql "SELECT COUNT(*) FROM pg_database WHERE datname = '$PG_DATABASE'")" = 0 ]; then
    pg_psql "CREATE DATABASE \"$PG_DATABASE\""
  fi
  # Dev only, as ZooKeeper's forceSync=no: commits do not wait for their WAL flush. The
  # tests never crash this cluster (fault tests start private ones), and fsync stalls on the
  # disk shared with MariaDB made leases miss deadlines. The benchmarks ask for
  # synchronous_commit=on in their connection URLs, so they measure durable commits.
  if [ "$(pg_psql 'SHOW synchronous_commit')" != off ]; then
    pg_psql "ALTER SYSTEM SET synchronous_commit = off"
    pg_psql "SELECT pg_reload_conf()" >/dev/null
  fi
  # Some images start PostgreSQL with autovacuum off; the tests update the same rows hundreds
  # of thousands of times, and without it every run reads through the dead versions of the ones
  # before.
  if [ "$(pg_psql 'SHOW autovacuum')" != on ]; then
    pg_psql "ALTER SYSTEM SET autovacuum = on"
    pg_psql "SELECT pg_reload_conf()" >/dev/null
  fi
  if [ "$(pg_psql 'SHOW max_connections')" -lt 500 ]; then
    log "raising postgresql max_connections to 500 (restart)"
    pg_psql "ALTER SYSTEM SET max_connections = 500"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main restart
    wait_for postgresql pg_ok
  fi
}

zk_ok() {
  local reply
  reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$ZK_PORT" && printf ruok >&3 && timeout 2 cat <&3) 2>/dev/null) || return 1
  [ "$reply" = imok ]
}

zk_up() {
  if zk_ok; then return 0; fi
  [ -x /usr/share/zookeeper/bin/zkServer.sh ] || apt_install zookeeperd
  log "starting zookeeper on 127.0.0.1:$ZK_PORT (data in $ZK_DIR)"
  mkdir -p "$ZK_DIR/data"
  # No admin server: it would take port 8080, coord serve's default.
  cat > "$ZK_DIR/zoo.cfg" <<CFG
tickTime=1000
initLimit=10
syncLimit=5
dataDir=$ZK_DIR/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
minSessionTimeout=2000
maxSessionTimeout=60000
4lw.commands.whitelist=ruok,stat,srvr
# Dev only: no fsync per write. The disk is shared with MariaDB and the tests; fsync stalls of
# ~200ms made lease renewals miss their deadlines. Production keeps the default (yes).
forceSync=no
CFG
  # setsid: the server must outlive the shell (or CI step) that started it.
  (cd "$ZK_DIR" && ZOO_LOG_DIR="$ZK_DIR" ZOOPIDFILE="$ZK_DIR/zk.pid" \
    setsid /usr/share/zookeeper/bin/zkServer.sh start "$ZK_DIR/zoo.cfg" >/dev/null 2>&1 </dev/null)
  wait_for zookeeper zk_ok
}

nats_ok() {
  local reply
  reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$NATS_PORT" && timeout 2 head -c 4 <&3) 2>/dev/null) || return 1
  [ "$reply" = INFO ]
}

# nats_up: the shared NATS the event tests use (fault tests start private nats-server
# processes, so the binary must be there even when something else serves the port).
nats_up() {
  command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || apt_install nats-server
  if nats_ok; then return 0; fi
  log "starting nats on 127.0.0.1:$NATS_PORT"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p "$NATS_PORT" -l /var/log/nats-server-coordkit.log
  wait_for nats nats_ok
}

# tools_up: programs the tests run besides the backends (strace traces SQLite's fsyncs).
tools_up() {
  command -v strace >/dev/null || apt_install strace
}

status_line() {
  if "${@:2}"; then printf '%-22s up\n' "$1"; else printf '%-22s DOWN\n' "$1"; return 1; fi
}

case "${1:-}" in
  up)
    redis_up "$REDIS_PORT"
    for port in $REDLOCK_PORTS; do redis_up "$port"; done
    mysql_up
    pg_up
    zk_up
    nats_up
    tools_up
    log "all backends answer"
    ;;
  status)
    rc=0
    status_line "redis 127.0.0.1:$REDIS_PORT" redis_ok "$REDIS_PORT" || rc=1
    for port in $REDLOCK_PORTS; do
      status_line "redlock 127.0.0.1:$port" redis_ok "$port" || rc=1
    done
    status_line "mariadb 127.0.0.1:3306" mysql_ok || rc=1
    status_line "postgresql 127.0.0.1:$PG_PORT" pg_ok || rc=1
    status_line "zookeeper 127.0.0.1:$ZK_PORT" zk_ok || rc=1
    status_line "nats 127.0.0.1:$NATS_PORT" nats_ok || rc=1
    exit $rc
    ;;
  *)
    echo "usage: $0 up|status" >&2
    exit 2
    ;;
esac
