#!/bin/sh
# A stand-in coding agent for the demo fleet. The built-in worker runs it inside the issue's
# own git worktree with RED_AFK_ISSUE, RED_AFK_ISSUE_TITLE, RED_AFK_BRANCH and friends set;
# a real agent (claude, codex, ...) would edit code here. This one writes a note and commits.
set -eu
note="notes/issue-${RED_AFK_ISSUE}.md"
mkdir -p notes
printf '# %s\n\nWorked unattended by runner %s on branch %s.\n' \
  "${RED_AFK_ISSUE_TITLE}" "${RED_AFK_RUNNER}" "${RED_AFK_BRANCH}" > "$note"
# Pretend to think for a moment, so `status` has something to show.
sleep "${DEMO_AGENT_SECONDS:-3}"
git add "$note"
git commit -q -m "afk: #${RED_AFK_ISSUE} ${RED_AFK_ISSUE_TITLE}"
echo "demo agent: committed $note"
