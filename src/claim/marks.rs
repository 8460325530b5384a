//! Claim marks: the comments that decide, on a tracker several checkouts share, which
//! worker holds an issue (SPEC §11.5).
//!
//! A label switch is not atomic, so two checkouts can both switch `ready-for-agent` to
//! `running`. The comments of an issue are totally ordered by the tracker, so the claim is
//! decided there: a worker posts a claim mark, re-reads the issue and proceeds only when
//! its mark is the holder in the fold of the thread ([`standing`]). Everything here is pure:
//! the texts, their parser and the fold.
//!
//! A comment is a mark when its last non-empty line, trimmed, is one of:
//! - `🤖 /afk claim <worker>@<host> <nonce>`: holds the issue when nobody holds it;
//! - `🤖 /afk yielded <worker>@<host> <nonce>`: a loser's record. When the claim it names
//!   was held (nobody held the issue, but it was handed off or closed meanwhile), it voids
//!   that claim: the thread stands as it did before it, so a late claim on a handed-off
//!   issue leaves it handed off;
//! - `🤖 /afk release <worker>@<host> <nonce>`: ends the claim of that nonce and gives the
//!   issue back to the queue (failed attempt, interruption);
//! - `🤖 /afk handoff <worker>@<host> <nonce>`: ends the claim of that nonce and hands the
//!   issue to a person (finished, set aside): a `running` label left by a failed label
//!   change is then finished to `ready-for-human`, never requeued;
//! - `🤖 /afk takeover <worker>@<host>|- <nonce>|- by <host> <nonce>; restoring ready-for-agent.`:
//!   another checkout ends a stale claim (or a `running` issue nobody holds, `- -`);
//!   effective only when it names the claim held at that point (for `- -`: nobody holds it
//!   and the previous event was not already a takeover);
//! - the SPEC §7 restore comment: ends whatever claim is held.
//!
//! Any other comment is no mark. Each mark carries a nonce, so a mark posted twice (a retry
//! after a timeout that had in fact landed) changes nothing, and an end mark can only end
//! the claim it names.

use std::fmt;

/// The `docs/SPEC.md` §7 restore comment, verbatim: the mark a restored issue carries.
pub const RESTORE_COMMENT: &str = "🤖 /afk orchestrator died mid-issue; restoring ready-for-agent.";

const PREFIX: &str = "🤖 /afk ";
const TAKEOVER_TAIL: &str = "; restoring ready-for-agent.";

/// Whether `s` may stand as a worker id or a host in a mark: 1 to 64 of `A-Z a-z 0-9 . _ -`.
pub fn valid_host(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

fn valid_nonce(s: &str) -> bool {
    (8..=32).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Who holds (or held) a claim: a worker id on a host (a checkout).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Holder {
    pub worker: String,
    pub host: String,
}

impl Holder {
    pub fn new(worker: &str, host: &str) -> Holder {
        Holder {
            worker: worker.into(),
            host: host.into(),
        }
    }

    fn parse(s: &str) -> Option<Holder> {
        let (worker, host) = s.split_once('@')?;
        (valid_host(worker) && valid_host(host)).then(|| Holder::new(worker, host))
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.worker, self.host)
    }
}

/// One parsed mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    Claim {
        holder: Holder,
        nonce: String,
    },
    Yielded {
        holder: Holder,
        nonce: String,
    },
    Release {
        holder: Holder,
        nonce: String,
    },
    Handoff {
        holder: Holder,
        nonce: String,
    },
    /// `target`: the claim ended (holder and nonce), `None` for a running issue nobody held.
    Takeover {
        target: Option<(Holder, String)>,
        host: String,
        nonce: String,
    },
    /// The SPEC §7 restore comment.
    Restore,
}

impl Mark {
    /// The text of the mark (one line).
    pub fn text(&self) -> String {
        match self {
            Mark::Claim { holder, nonce } => format!("{PREFIX}claim {holder} {nonce}"),
            Mark::Yielded { holder, nonce } => format!("{PREFIX}yielded {holder} {nonce}"),
            Mark::Release { holder, nonce } => format!("{PREFIX}release {holder} {nonce}"),
            Mark::Handoff { holder, nonce } => format!("{PREFIX}handoff {holder} {nonce}"),
            Mark::Takeover {
                target,
                host,
                nonce,
            } => {
                let (h, n) = match target {
                    Some((h, n)) => (h.to_string(), n.as_str()),
                    None => ("-".to_string(), "-"),
                };
                format!("{PREFIX}takeover {h} {n} by {host} {nonce}{TAKEOVER_TAIL}")
            }
            Mark::Restore => RESTORE_COMMENT.to_string(),
        }
    }

    /// The mark a comment carries: its last non-empty line, trimmed; `None` for any other
    /// comment.
    pub fn parse(body: &str) -> Option<Mark> {
        if body.trim() == RESTORE_COMMENT {
            return Some(Mark::Restore);
        }
        let line = body.lines().map(str::trim).rfind(|l| !l.is_empty())?;
        // A restore that rescued work names it above the restore line (SPEC §11.15).
        if line == RESTORE_COMMENT {
            return Some(Mark::Restore);
        }
        let rest = line.strip_prefix(PREFIX)?;
        if let Some(t) = rest.strip_prefix("takeover ") {
            let t = t.strip_suffix(TAKEOVER_TAIL)?;
            let w: Vec<&str> = t.split(' ').collect();
            let [holder, target_nonce, "by", host, nonce] = w.as_slice() else {
                return None;
            };
            let target = match (*holder, *target_nonce) {
                ("-", "-") => None,
                (h, n) if valid_nonce(n) => Some((Holder::parse(h)?, n.to_string())),
                _ => return None,
            };
            return (valid_host(host) && valid_nonce(nonce)).then(|| Mark::Takeover {
                target,
                host: host.to_string(),
                nonce: nonce.to_string(),
            });
        }
        let w: Vec<&str> = rest.split(' ').collect();
        let [verb, holder, nonce] = w.as_slice() else {
            return None;
        };
        if !valid_nonce(nonce) {
            return None;
        }
        let holder = Holder::parse(holder)?;
        let nonce = nonce.to_string();
        match *verb {
            "claim" => Some(Mark::Claim { holder, nonce }),
            "yielded" => Some(Mark::Yielded { holder, nonce }),
            "release" => Some(Mark::Release { holder, nonce }),
            "handoff" => Some(Mark::Handoff { holder, nonce }),
            _ => None,
        }
    }
}

/// A fresh nonce: 16 hex digits from the kernel's random source (time and pid where it
/// cannot be read).
pub fn new_nonce() -> String {
    use std::io::Read;
    let mut b = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if read.is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        b = (t ^ (u64::from(std::process::id()) << 32)).to_be_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One comment of a thread: its body and when the tracker stored it (epoch seconds,
/// `None` when unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub body: String,
    pub at: Option<u64>,
}

/// A held claim: the claim mark's holder and nonce, and when it was posted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub holder: Holder,
    pub nonce: String,
    pub at: Option<u64>,
    /// The thread's last event before this claim: what a `yielded` of it restores.
    pub before: Option<(Event, Option<u64>)>,
}

/// What the last event of the fold was (a claim taken or ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Claimed,
    Ended,
    HandedOff,
    TakenOver,
}

/// The fold of a thread's marks, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Standing {
    /// Who holds the issue after the last comment.
    pub holder: Option<Held>,
    /// The last effective event and when it happened.
    pub last: Option<(Event, Option<u64>)>,
    /// Nonces of the takeover marks that were effective.
    pub takeovers: Vec<String>,
    /// Nonces of claim marks that lost (a claim was held when they came).
    pub losers: Vec<String>,
}

impl Standing {
    /// Whether the claim of `nonce` is the one held.
    pub fn holds(&self, nonce: &str) -> bool {
        self.holder.as_ref().is_some_and(|h| h.nonce == nonce)
    }

    /// Whether the takeover mark of `nonce` was effective.
    pub fn took_over(&self, nonce: &str) -> bool {
        self.takeovers.iter().any(|n| n == nonce)
    }
}

/// Folds the marks of `comments` (oldest first) into who holds the issue.
pub fn standing(comments: &[Comment]) -> Standing {
    let mut s = Standing::default();
    for c in comments {
        let Some(mark) = Mark::parse(&c.body) else {
            continue;
        };
        match mark {
            Mark::Claim { holder, nonce } => match &s.holder {
                None => {
                    s.holder = Some(Held {
                        holder,
                        nonce,
                        at: c.at,
                        before: s.last,
                    });
                    s.last = Some((Event::Claimed, c.at));
                }
                Some(h) if h.nonce == nonce => {}
                Some(_) => {
                    if !s.losers.contains(&nonce) {
                        s.losers.push(nonce);
                    }
                }
            },
            Mark::Yielded { nonce, .. } => {
                if s.holds(&nonce) {
                    s.last = s.holder.take().and_then(|h| h.before);
                }
            }
            Mark::Release { nonce, .. } => {
                if s.holds(&nonce) {
                    s.holder = None;
                    s.last = Some((Event::Ended, c.at));
                }
            }
            Mark::Handoff { nonce, .. } => {
                if s.holds(&nonce) {
                    s.holder = None;
                    s.last = Some((Event::HandedOff, c.at));
                }
            }
            Mark::Restore => {
                s.holder = None;
                s.last = Some((Event::Ended, c.at));
            }
            Mark::Takeover { target, nonce, .. } => {
                let effective = match (&target, &s.holder) {
                    (Some((_, n)), Some(h)) => *n == h.nonce,
                    (None, None) => !matches!(s.last, Some((Event::TakenOver, _))),
                    _ => false,
                };
                if effective {
                    s.holder = None;
                    s.last = Some((Event::TakenOver, c.at));
                    s.takeovers.push(nonce);
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn h(w: &str) -> Holder {
        Holder::new(w, "box")
    }

    fn c(m: &Mark) -> Comment {
        Comment {
            body: m.text(),
            at: Some(1),
        }
    }

    fn claim(w: &str, n: &str) -> Mark {
        Mark::Claim {
            holder: h(w),
            nonce: n.into(),
        }
    }

    fn release(w: &str, n: &str) -> Mark {
        Mark::Release {
            holder: h(w),
            nonce: n.into(),
        }
    }

    #[test]
    fn texts_round_trip_and_are_exact() {
        let m = claim("w1", "0123456789abcdef");
        assert_eq!(m.text(), "🤖 /afk claim w1@box 0123456789abcdef");
        let t = Mark::Takeover {
            target: Some((h("w1"), "0123456789abcdef".into())),
            host: "other".into(),
            nonce: "fedcba9876543210".into(),
        };
        assert_eq!(
            t.text(),
            "🤖 /afk takeover w1@box 0123456789abcdef by other fedcba9876543210; restoring ready-for-agent."
        );
        let none = Mark::Takeover {
            target: None,
            host: "other".into(),
            nonce: "fedcba9876543210".into(),
        };
        assert_eq!(
            none.text(),
            "🤖 /afk takeover - - by other fedcba9876543210; restoring ready-for-agent."
        );
        for m in [
            m,
            t,
            none,
            Mark::Restore,
            release("w", "00000000"),
            Mark::Handoff {
                holder: h("w"),
                nonce: "abababab".into(),
            },
            Mark::Yielded {
                holder: h("w"),
                nonce: "aaaaaaaa".into(),
            },
        ] {
            assert_eq!(Mark::parse(&m.text()), Some(m.clone()), "{}", m.text());
            // As the last line of a longer comment (the worker's hand-off).
            let body = format!("🤖 /afk finished attempt 1-a1.\n\n{}\n", m.text());
            if m != Mark::Restore {
                assert_eq!(Mark::parse(&body), Some(m));
            }
        }
    }

    #[test]
    fn other_comments_are_no_marks() {
        for body in [
            "",
            "lgtm",
            "🤖 /afk claim w1@box",
            "🤖 /afk claim w1@box xyz",
            "🤖 /afk claim w1 0123456789abcdef",
            "🤖 /afk claim w 1@box 0123456789abcdef",
            "🤖 /afk claim w1@box 0123456789abcdef\nsomething after",
            "🤖 /afk takeover - - by h 0123456789abcdef",
            "🤖 /afk unblocked: all dependencies closed (#1).",
            "quoting: 🤖 /afk claim w1@box 0123456789abcdef",
        ] {
            assert_eq!(Mark::parse(body), None, "{body:?}");
        }
    }

    #[test]
    fn the_first_claim_after_the_last_end_wins() {
        let a = "aaaaaaaaaaaaaaaa";
        let b = "bbbbbbbbbbbbbbbb";
        let s = standing(&[c(&claim("a", a)), c(&claim("b", b))]);
        assert!(s.holds(a) && !s.holds(b));
        assert_eq!(s.losers, [b]);
        // The loser's yield ends nothing; the holder's release does.
        let s = standing(&[
            c(&claim("a", a)),
            c(&claim("b", b)),
            c(&Mark::Yielded {
                holder: h("b"),
                nonce: b.into(),
            }),
        ]);
        assert!(s.holds(a));
        let s = standing(&[c(&claim("a", a)), c(&release("a", a)), c(&claim("b", b))]);
        assert!(s.holds(b));
        // A late claim on a handed-off issue that yields leaves it handed off (the
        // claims belt then finishes the hand-off, never requeues it).
        let handoff = Mark::Handoff {
            holder: h("a"),
            nonce: a.into(),
        };
        let yielded = Mark::Yielded {
            holder: h("b"),
            nonce: b.into(),
        };
        let s = standing(&[
            c(&claim("a", a)),
            c(&handoff),
            c(&claim("b", b)),
            c(&yielded),
        ]);
        assert_eq!(s.holder, None);
        assert_eq!(s.last.map(|l| l.0), Some(Event::HandedOff));
        // On an unmarked thread it leaves no event at all.
        let s = standing(&[c(&claim("b", b)), c(&yielded)]);
        assert_eq!((s.holder, s.last), (None, None));
        // A restore ends whatever is held; a mark posted twice changes nothing.
        let s = standing(&[c(&claim("a", a)), c(&claim("a", a)), c(&Mark::Restore)]);
        assert_eq!(s.holder, None);
        assert_eq!(s.last.map(|l| l.0), Some(Event::Ended));
    }

    #[test]
    fn a_takeover_ends_only_the_claim_it_names() {
        let a = "aaaaaaaaaaaaaaaa";
        let b = "bbbbbbbbbbbbbbbb";
        let t = |target: Option<&str>, nonce: &str| Mark::Takeover {
            target: target.map(|n| (h("a"), n.to_string())),
            host: "other".into(),
            nonce: nonce.into(),
        };
        let (t1, t2) = ("1111111111111111", "2222222222222222");
        let s = standing(&[c(&claim("a", a)), c(&t(Some(a), t1)), c(&t(Some(a), t2))]);
        assert_eq!(s.holder, None);
        assert!(s.took_over(t1) && !s.took_over(t2));
        // A late takeover of an ended claim does not end the next one.
        let s = standing(&[
            c(&claim("a", a)),
            c(&t(Some(a), t1)),
            c(&claim("b", b)),
            c(&t(Some(a), t2)),
        ]);
        assert!(s.holds(b));
        // Nobody holds it: the first `- -` takeover is effective, a second at once is not.
        let s = standing(&[c(&t(None, t1)), c(&t(None, t2))]);
        assert!(s.took_over(t1) && !s.took_over(t2));
        let s = standing(&[c(&claim("a", a)), c(&t(None, t1))]);
        assert!(s.holds(a) && !s.took_over(t1));
    }

    /// One worker's steps in the claim protocol, as comments on the shared thread.
    #[derive(Debug, Clone)]
    enum Step {
        /// Posts its claim mark.
        Post(usize),
        /// Reads the thread and decides (a winner then releases later, a loser yields).
        Decide(usize),
        /// A winner hands the issue off.
        Finish(usize),
        /// The same comment posted again (a retried write).
        Repost(usize),
    }

    fn steps(workers: usize) -> impl Strategy<Value = Vec<Step>> {
        prop::collection::vec(
            (0..workers, 0..4u8).prop_map(|(w, k)| match k {
                0 => Step::Post(w),
                1 => Step::Decide(w),
                2 => Step::Finish(w),
                _ => Step::Repost(w),
            }),
            0..40,
        )
    }

    proptest! {
        /// However the workers' posts, reads and hand-offs interleave, at most one worker
        /// at a time believes it holds the issue, and every believer is the fold's holder.
        #[test]
        fn never_two_holders(plan in steps(4)) {
            let nonce = |w: usize| format!("{w:016x}");
            let mut thread: Vec<Comment> = Vec::new();
            let mut posted = [false; 4];
            let mut decided = [false; 4];
            let mut working = [false; 4];
            let mut last: [Option<String>; 4] = Default::default();
            for step in plan {
                match step {
                    Step::Post(w) if !posted[w] => {
                        posted[w] = true;
                        let m = claim(&format!("w{w}"), &nonce(w)).text();
                        last[w] = Some(m.clone());
                        thread.push(Comment { body: m, at: None });
                    }
                    Step::Decide(w) if posted[w] && !decided[w] => {
                        decided[w] = true;
                        if standing(&thread).holds(&nonce(w)) {
                            working[w] = true;
                        } else {
                            let m = Mark::Yielded { holder: h(&format!("w{w}")), nonce: nonce(w) };
                            last[w] = Some(m.text());
                            thread.push(Comment { body: m.text(), at: None });
                        }
                    }
                    Step::Finish(w) if working[w] => {
                        working[w] = false;
                        let m = release(&format!("w{w}"), &nonce(w)).text();
                        last[w] = Some(format!("🤖 /afk finished.\n{m}"));
                        thread.push(Comment { body: format!("🤖 /afk finished.\n{m}"), at: None });
                    }
                    Step::Repost(w) => {
                        if let Some(m) = last[w].clone() {
                            thread.push(Comment { body: m, at: None });
                        }
                    }
                    _ => {}
                }
                let s = standing(&thread);
                let believers: Vec<usize> = (0..4).filter(|w| working[*w]).collect();
                prop_assert!(believers.len() <= 1, "{believers:?} in {thread:?}");
                for w in believers {
                    prop_assert!(s.holds(&nonce(w)), "w{w} works without holding");
                }
            }
        }

        /// The fold never panics and ignores whatever is not a mark.
        #[test]
        fn any_text_is_safe(bodies in prop::collection::vec(".{0,80}", 0..10)) {
            let thread: Vec<Comment> =
                bodies.into_iter().map(|body| Comment { body, at: None }).collect();
            let _ = standing(&thread);
        }
    }
}
