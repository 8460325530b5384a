#!/usr/bin/env bash
# The main job on a fresh machine: a real fleet on the embedded local tracker, no GitHub.
#
#   bash examples/demo.sh [WORKERS] [ISSUES]
#
# Builds the release binary, makes a throwaway repo with a bare `origin`, files ISSUES
# `ready-for-agent` issues plus one blocked on issue #1, and starts `afk-supervisor` with
# WORKERS slots. Each slot runs the built-in worker, which runs examples/demo-agent.sh (a
# stand-in for a coding agent that commits a note) on one issue at a time. When the queue is
# drained it closes #1 by hand, waits for the supervisor's unblock belt to promote the
# blocked issue and a worker to take it, shows `status`, stops the fleet, and prints what
# happened: issues, branches on origin and the event log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
workers=${1:-3}
issues=${2:-6}

cargo build --release --quiet --manifest-path "$root/Cargo.toml"
bin=$root/target/release/afk-supervisor

demo=$(mktemp -d "${TMPDIR:-/tmp}/afk-demo.XXXXXX")
echo "== demo repo: $demo/repo"
export HOME=$demo/home GIT_CONFIG_GLOBAL=$demo/home/.gitconfig GIT_CONFIG_NOSYSTEM=1
mkdir -p "$HOME"
git config --global user.name "AFK demo"
git config --global user.email "afk-demo@example.invalid"
git config --global init.defaultBranch main
git init -q --bare "$demo/origin.git"
git clone -q "$demo/origin.git" "$demo/repo" 2>/dev/null
cd "$demo/repo"
printf '# demo project\n' > README.md
printf '.red/tmp/\n.red/state/\n' > .gitignore
git add README.md .gitignore
git commit -qm "initial commit"
git push -q origin main

mkdir -p .red
cat > .red/afk-supervisor.toml <<TOML
[fleet]
workers = $workers

[tracker]
kind = "local"

[agent]
command = ["$root/examples/demo-agent.sh"]

[timing]
tick_s = 1
unblock_interval_s = 2
TOML

for i in $(seq 1 "$issues"); do
  "$bin" issue new --title "Demo task $i" --label ready-for-agent 2>/dev/null >/dev/null
done
blocked=$("$bin" issue new --title "Follow-up to task 1" --label blocked:dependency --label req:1 2>/dev/null)
echo "== filed $issues ready issues and #$blocked (blocked by #1)"

count() { "$bin" issue list --label "$1" 2>/dev/null | grep -c . || true; }
wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@"; do
    if [ "$SECONDS" -ge "$deadline" ]; then echo "timed out waiting for $what" >&2; exit 1; fi
    sleep 1
  done
}
drained() { [ "$(count ready-for-agent)" -eq 0 ] && [ "$(count running)" -eq 0 ]; }
started() { [ "$(count running)" -gt 0 ] || [ "$(count ready-for-human)" -gt 0 ]; }
promoted() { [ "$(count blocked:dependency)" -eq 0 ]; }

"$bin" --workers "$workers" > "$demo/supervisor.out" 2>&1 &
sup=$!
trap 'kill "$sup" 2>/dev/null || true' EXIT
echo "== supervisor pid $sup, $workers workers"

wait_for 30 "the first worker" started
"$bin" status
wait_for 300 "the queue to drain" drained
echo "== queue drained; closing #1 by hand"
"$bin" issue close 1 2>/dev/null
wait_for 60 "the belt to promote #$blocked" promoted
wait_for 120 "#$blocked to be worked" drained
"$bin" status
"$bin" stop
trap - EXIT

echo "== issues"
"$bin" issue list --state all 2>/dev/null
echo "== afk branches on origin"
git -C "$demo/origin.git" branch --list 'afk/*'
echo "== event log (.red/tmp/supervisors/default/supervisor.log.toonl)"
cat .red/tmp/supervisors/default/supervisor.log.toonl
