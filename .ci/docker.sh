#!/usr/bin/env bash
# How CI (and `make test-containers`) gets a docker daemon of its own: Debian's docker.io where dockerd is missing
# (.ci/install-tools containers), one dockerd on its own socket with no bridge and no iptables (the tier uses host
# networking on 127.0.0.1), its exec root in a temporary directory, its data root in RMQ_DOCKER_DATA (default
# /var/tmp/rmq-dockerd: kept between runs on one machine so the image cache survives; point it at a fresh
# mktemp -d for a clean one).
#
#   eval "$(.ci/docker.sh start)"   # starts it unless ours already answers; prints `export DOCKER_HOST=...`
#   .ci/docker.sh stop              # stops the dockerd this script started; unmounts and removes its exec root
#   .ci/docker.sh run CMD...        # start, run CMD with DOCKER_HOST set, stop; CMD's exit status
# A daemon the caller already reaches (DOCKER_HOST, the default socket) is used instead and never stopped.
#
# Where no daemon can start (no root, no cgroups), `start` says why on stderr and exits 0 without DOCKER_HOST:
# the tier then skips every test printing the daemon's error, never silently.
set -euo pipefail

DATA_ROOT=${RMQ_DOCKER_DATA:-/var/tmp/rmq-dockerd}
STATE=${RMQ_DOCKER_STATE:-/tmp/rmq-dockerd}       # socket, pid file, exec root, log
SOCK="$STATE/docker.sock"

note() { echo "docker.sh: $*" >&2; }

answers() { docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; }

# A daemon the caller already reaches (DOCKER_HOST or the default socket) is used as it is: nothing to start.
if [ "${1:-}" != stop ] && command -v docker >/dev/null 2>&1 && answers; then
  case "${1:-}" in
    start) [ -n "${DOCKER_HOST:-}" ] && echo "export DOCKER_HOST=$DOCKER_HOST"; exit 0 ;;
    run) shift; exec "$@" ;;
  esac
fi
export DOCKER_HOST="unix://$SOCK"

install_docker() {
  command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1 && return 0
  # The container group of .ci/system-tools (docker.io, debootstrap), installed where we run as root.
  "$(dirname "$0")/install-tools" containers
  command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1
}

start() {
  if answers; then echo "export DOCKER_HOST=$DOCKER_HOST"; return 0; fi
  install_docker || return 0
  if [ "$(id -u)" != 0 ]; then note "dockerd needs root here; the container tier will skip"; return 0; fi
  mkdir -p "$STATE/exec" "$DATA_ROOT"
  rm -f "$SOCK"
  local driver=overlay2
  # overlay2 cannot sit on an overlay filesystem (a container's own root); vfs always works, only slower.
  [ "$(stat -f -c %T "$DATA_ROOT")" = overlayfs ] && driver=vfs
  nohup dockerd --bridge=none --iptables=false --ip-masq=false --data-root "$DATA_ROOT" --exec-root "$STATE/exec" \
    --pidfile "$STATE/dockerd.pid" -H "$DOCKER_HOST" --storage-driver "$driver" >"$STATE/dockerd.log" 2>&1 &
  local i
  for i in $(seq 1 150); do
    if answers; then echo "export DOCKER_HOST=$DOCKER_HOST"; return 0; fi
    if ! kill -0 $! 2>/dev/null; then break; fi
    sleep 0.2
  done
  note "dockerd did not answer on $SOCK; the container tier will skip. Its log ($STATE/dockerd.log):"
  tail -5 "$STATE/dockerd.log" >&2 || true
  stop
  return 0
}

stop() {
  local pidfile="$STATE/dockerd.pid" pid i
  if [ -s "$pidfile" ]; then
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  # dockerd leaves the host's network namespace bind-mounted under its exec root.
  if [ -d "$STATE/exec" ]; then
    grep -o " $STATE/exec/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount "$m" 2>/dev/null || true; done
  fi
  rm -rf "$STATE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  run)
    shift
    eval "$(start)"
    status=0; "$@" || status=$?
    stop
    exit $status ;;
  *) echo "usage: $0 start|stop|run CMD..." >&2; exit 2 ;;
esac
