#!/usr/bin/env bash
# Supervisor figures: respawn delay, memory with 64 idle workers, CPU time over 60 s idle.
#
#   bash benches/scripts/supervisor.sh            # builds the release binary, prints the three figures
#   IDLE_S=60 WORKERS=64 RESPAWNS=30 bash benches/scripts/supervisor.sh
#
# Everything runs in a temp repo with shell-script workers; the fleet is stopped at the end.
# For the side-by-side comparison with supervisord, s6 and a floor at 64/256/1,000 workers,
# see benches/scripts/compare.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORKERS=${WORKERS:-64}
IDLE_S=${IDLE_S:-60}
RESPAWNS=${RESPAWNS:-30}

# Ask cargo where the binary is, so CARGO_TARGET_DIR is honoured.
BIN=$(cargo build --release --quiet --message-format=json-render-diagnostics |
  python3 "$PWD/benches/scripts/compare.py" exe afk-supervisor)
TMP=$(mktemp -d)
[ -n "${KEEP_TMP:-}" ] && echo "tmp: $TMP" >&2
SUP=""
cleanup() {
  if [ -n "$SUP" ] && kill -0 "$SUP" 2>/dev/null; then
    "$BIN" --repo "$TMP/repo" stop --timeout 30 >/dev/null 2>&1 || kill -9 "$SUP" 2>/dev/null || true
  fi
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"
}
trap cleanup EXIT

git init -q "$TMP/repo"
mkdir -p "$TMP/repo/.red" "$TMP/stamps"
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

start_fleet() { # $1 = worker script, $2 = workers, $3 = extra [timing] lines
  cat > "$TMP/repo/.red/afk-supervisor.toml" <<TOML
[worker]
command = ["sh", "$1"]
[tracker]
kind = "local"
[timing]
$3
TOML
  "$BIN" --repo "$TMP/repo" --workers "$2" >"$TMP/sup.err" 2>&1 &
  SUP=$!
}

wait_live() { # $1 = count
  for _ in $(seq 1 600); do
    n=$(grep -c '^  [0-9]*,[0-9]*,[0-9]*$' "$TMP/repo/.red/tmp/supervisors/default/state.toon" 2>/dev/null || true)
    [ "${n:-0}" -ge "$1" ] && return 0
    sleep 0.1
  done
  echo "fleet never reached $1 live workers" >&2; exit 1
}

stop_fleet() {
  "$BIN" --repo "$TMP/repo" stop --timeout 30 >/dev/null
  wait "$SUP" 2>/dev/null || true
  SUP=""
}

# 1. Respawn delay: a worker stamps its start, lives 0.3 s, stamps its end and exits 1.
#    Delay = successor's start stamp - predecessor's end stamp (shell start-up included).
cat > "$TMP/dying.sh" <<'SH'
date +%s%N > "$STAMPS/start-$RED_AFK_WORKER_ID"
sleep 0.3
date +%s%N > "$STAMPS/end-$RED_AFK_WORKER_ID"
exit 1
SH
export STAMPS="$TMP/stamps"
start_fleet "$TMP/dying.sh" 1 "fast_death_s = 0"
for _ in $(seq 1 600); do
  [ "$(ls "$STAMPS" | grep -c '^start-')" -gt "$RESPAWNS" ] && break
  sleep 0.1
done
stop_fleet
delays=$(cd "$STAMPS" && for f in end-*; do
  id=${f#end-}; n=${id##*-}; next="start-${id%-*}-$((n + 1))"
  [ -f "$next" ] && echo $(( ($(cat "$next") - $(cat "$f")) / 1000 ))
done | sort -n)
count=$(echo "$delays" | wc -l)
median=$(echo "$delays" | awk -v n="$count" 'NR == int((n + 1) / 2)')
p95=$(echo "$delays" | awk -v n="$count" 'NR == int(n * 0.95 + 0.999)')
max=$(echo "$delays" | tail -1)
echo "respawn delay (worker's last stamp -> successor's first stamp, $count samples): median ${median} us, p95 ${p95} us, max ${max} us"
# The supervisor's own share: the slot.exit record to the next slot.spawn record (ms stamps).
python3 - "$TMP/repo/.red/tmp/supervisors/default/supervisor.log.toonl" <<'PY'
import sys, datetime
def t(ts):
    return datetime.datetime.strptime(ts.strip('"'), "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
exit_at, gaps = None, []
for line in open(sys.argv[1]):
    cells = line.rstrip("\n").split(",", 5)
    if len(cells) < 6 or cells[0].startswith("[]"):
        continue
    if cells[1] == "slot.exit":
        exit_at = t(cells[0])
    elif cells[1] == "slot.spawn" and exit_at is not None:
        gaps.append((t(cells[0]) - exit_at) * 1000)
        exit_at = None
gaps.sort()
if gaps:
    print("supervisor share (exit record -> spawn record, %d samples): median %.0f ms, max %.0f ms (ms-resolution stamps)"
          % (len(gaps), gaps[len(gaps) // 2], gaps[-1]))
PY

# 2. and 3. Memory with $WORKERS idle workers, CPU time over $IDLE_S s idle (default timing).
cat > "$TMP/idle.sh" <<'SH'
exec sleep 100000
SH
start_fleet "$TMP/idle.sh" "$WORKERS" ""
wait_live "$WORKERS"
sleep 2
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$SUP/status")
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$SUP/status")
threads=$(awk '/^Threads/ {print $2}' "/proc/$SUP/status")
echo "memory with $WORKERS idle workers: VmRSS ${rss} kB (peak ${hwm} kB), ${threads} threads"
hz=$(getconf CLK_TCK)
t0=$(ticks "$SUP")
sleep "$IDLE_S"
t1=$(ticks "$SUP")
echo "CPU time over ${IDLE_S} s idle with $WORKERS workers: $(( (t1 - t0) * 1000 / hz )) ms (utime+stime, tick_s=15)"
stop_fleet
