//! A descendant started after the stray search (#22): a worker exits leaving a daemon that,
//! on SIGTERM, starts a `setsid -f` child. One search per ended worker found the daemon and
//! never the child, which lived until `stop`. The search repeats, with backoff, until nothing
//! carrying the ended worker's id is left.

use std::fs;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT, alive};
use crate::support::{fleet, wait_until};

const WORKER: &str = r#"
if mkdir "$AFK_TEST_DIR/first" 2>/dev/null; then
  setsid sh "$AFK_TEST_DIR/daemon.sh" &
  while [ ! -s "$AFK_TEST_DIR/daemon" ]; do sleep 0.05; done
  exit 0
fi
exec sleep 600
"#;

/// On SIGTERM, starts a child in a new session (it carries the worker's id in its
/// environment), then exits.
const DAEMON: &str = r#"
trap 'setsid -f sh "$AFK_TEST_DIR/late.sh"; exit 0' TERM
echo $$ > "$AFK_TEST_DIR/daemon"
while :; do sleep 0.1; done
"#;

const LATE: &str = r#"
echo $$ > "$AFK_TEST_DIR/late.tmp" && mv "$AFK_TEST_DIR/late.tmp" "$AFK_TEST_DIR/late"
exec sleep 600
"#;

fn pid_in(f: &Fleet, name: &str) -> Option<i32> {
    fleet::read(&f.file(name)).trim().parse().ok()
}

#[test]
fn a_descendant_started_after_the_first_stray_search_is_found_by_the_next() {
    let mut f = Fleet::new(WORKER, FAST_TIMING);
    fs::write(f.file("daemon.sh"), DAEMON).unwrap();
    fs::write(f.file("late.sh"), LATE).unwrap();
    f.start(&["--workers", "1"]);
    // The first worker's daemon is found and sent SIGTERM; it starts the late child.
    assert!(
        wait_until(WAIT, || pid_in(&f, "late").is_some()),
        "{}",
        f.dump()
    );
    let daemon = pid_in(&f, "daemon").unwrap();
    let late = pid_in(&f, "late").unwrap();
    assert!(
        wait_until(WAIT, || !alive(daemon) && !alive(late)),
        "daemon {daemon} alive={} late {late} alive={}\n{}",
        alive(daemon),
        alive(late),
        f.dump()
    );
}
