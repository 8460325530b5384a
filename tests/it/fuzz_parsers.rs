//! Fuzzing every parser of outside data (issue 16): pid and `.start` files,
//! `afk.state.json`, `state.toon`, `resize.toon`, the config (file and `RED_AFK_*`), the
//! TOONL reader, the agents' output (issue 20), gh's JSON, git's porcelain and the local tracker's files. Each input gives
//! a value or an error: never a panic (a panic fails the case and proptest shrinks it).
//!
//! Inputs are arbitrary bytes, bytes drawn from the format's own punctuation, and mutations
//! (flipped, inserted, deleted, duplicated bytes, cuts) of the samples in
//! `tests/corpus/<parser>/`. Every corpus file is also run through its parser as is; the
//! inputs that found bugs are kept there. Bounded for CI (2,000 cases per parser by
//! default); a longer run:
//! `PROPTEST_CASES=200000 cargo test --release --test it fuzz_parsers::`.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use afk_supervisor::attempt_state::AttemptState;
use afk_supervisor::config::{self, Overrides};
use afk_supervisor::event_log;
use afk_supervisor::git::parse as git;
use afk_supervisor::lanes::{scale_directive as resize, state_file};
use afk_supervisor::pidfile;
use afk_supervisor::sweeps::docs::probe;
use afk_supervisor::tracker::{gh, local};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::support::text;

/// Runs one parser on one input; what it returns is checked only for what must always
/// hold, the point being that it returns at all.
type Parser = fn(&[u8]);

fn pid(b: &[u8]) {
    if let Ok(p) = pidfile::parse_pid(&text(b)) {
        assert!(p > 0, "{p}");
    }
}

fn start(b: &[u8]) {
    let _ = pidfile::parse_start_token(b);
}

fn attempt_state(b: &[u8]) {
    let _ = AttemptState::parse(b);
}

fn state_toon(b: &[u8]) {
    if let Ok(s) = state_file::decode(&text(b)) {
        // What decodes must encode again (status and the heartbeat rewrite it).
        state_file::encode(&s).expect("a decoded state encodes");
    }
}

fn resize_toon(b: &[u8]) {
    if let Ok(r) = resize::decode(&text(b)) {
        resize::encode(&r).expect("a decoded directive encodes");
    }
}

fn config_file(b: &[u8]) {
    let t = text(b);
    let _ = config::resolve(
        Some((Path::new("c.toml"), &t)),
        &HashMap::new(),
        &Overrides::default(),
    );
}

/// Every variable the config reads: the numeric ones, the base, the runner, and the
/// worker's liveness interval.
fn env_vars() -> Vec<&'static str> {
    config::NUMERIC_ENV
        .iter()
        .map(|(var, _)| *var)
        .chain(["RED_AFK_TRUNK", "RED_AFK_RUNNER", "RED_AFK_LIVENESS_S"])
        .collect()
}

/// The input split on `\n` into values for [`env_vars`], in order.
fn config_env(b: &[u8]) {
    let t = text(b);
    let env: HashMap<String, String> = env_vars()
        .into_iter()
        .zip(t.split('\n'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Ok(c) = config::resolve(None, &env, &Overrides::default()) {
        // Whatever is accepted is safe to use: durations in range, a base git takes as a
        // branch.
        assert!(c.timing.stop_grace_s <= config::MAX_SECONDS);
        afk_supervisor::git::check_branch_name(&c.fleet.base).expect("base validated");
    }
    let _ = config::env_seconds(&env, "RED_AFK_LIVENESS_S", "liveness_s", 1);
}

fn toonl_log(b: &[u8]) {
    let _ = event_log::decode_events(b);
}

fn gh_list(b: &[u8]) {
    let _ = gh::parse::list_all(&text(b));
}

fn gh_view(b: &[u8]) {
    let _ = gh::parse::view(&text(b));
}

fn gh_labeled(b: &[u8]) {
    let _ = gh::parse::labeled(&text(b));
}

fn gh_comments(b: &[u8]) {
    let _ = gh::parse::comments(&text(b));
}

fn gh_provenance(b: &[u8]) {
    let _ = afk_supervisor::tracker::gh_provenance::parse(&text(b));
}

fn git_status(b: &[u8]) {
    if let Ok(c) = git::status_z(b) {
        assert!(c.paths.len() + c.not_utf8.len() <= 2 * b.len().max(1));
    }
}

fn git_name_status(b: &[u8]) {
    let _ = git::name_status_z(b);
}

fn git_worktree_list(b: &[u8]) {
    let _ = git::worktree_list_z(b);
    let _ = git::nul_list(b);
}

fn git_refs(b: &[u8]) {
    let n = git::branch_names(b, "refs/heads/afk/");
    assert!(n.utf8.iter().all(|b| b.starts_with("afk/")), "{n:?}");
}

fn git_ls_remote(b: &[u8]) {
    if let Ok(n) = git::ls_remote_heads(b, "refs/heads/afk/") {
        assert!(n.utf8.iter().all(|(b, _)| b.starts_with("afk/")), "{n:?}");
    }
}

fn git_ls_tree(b: &[u8]) {
    let t = text(b);
    let _ = probe::parse_ls_tree(&t);
    let _ = probe::parse_raw_blobs(&t);
}

fn local_issue(b: &[u8]) {
    let _ = local::parse_issue(&text(b));
}

fn local_pr(b: &[u8]) {
    let _ = local::parse_pull_request(&text(b));
}

fn local_meta(b: &[u8]) {
    let _ = local::parse_meta(&text(b));
}

/// An agent's output through every profile, as stdout, as stderr and as a result file,
/// with each exit code that changes the verdict.
fn agent_output(b: &[u8]) {
    use afk_supervisor::agent_profile::{self, End, ProfileKind, Seen};
    for kind in [
        ProfileKind::Claude,
        ProfileKind::Codex,
        ProfileKind::Generic,
    ] {
        for exit_code in [0, 1, 75] {
            let seen = Seen {
                exit_code,
                stdout: b,
                stderr: b,
                result_file: Some(b),
                now_epoch: 1_800_000_000,
            };
            let (end, usage) = agent_profile::classify(kind, &seen);
            if let End::Failed { code } = end {
                assert_ne!(code, 0, "a failure never says exit 0");
            }
            assert!(usage.cost_usd.is_none_or(|c| c.is_finite() && c >= 0.0));
        }
    }
}

/// Every parser, by the name of its corpus dir.
const PARSERS: [(&str, Parser); 25] = [
    ("agents", agent_output),
    ("pid", pid),
    ("start", start),
    ("attempt_state", attempt_state),
    ("state_toon", state_toon),
    ("resize_toon", resize_toon),
    ("config", config_file),
    ("config_env", config_env),
    ("toonl", toonl_log),
    ("gh_list", gh_list),
    ("gh_view", gh_view),
    ("gh_labeled", gh_labeled),
    ("gh_comments", gh_comments),
    ("gh_provenance", gh_provenance),
    ("git_status", git_status),
    ("git_name_status", git_name_status),
    ("git_worktree_list", git_worktree_list),
    ("git_refs", git_refs),
    ("git_ls_remote", git_ls_remote),
    ("git_ls_tree", git_ls_tree),
    ("local_issue", local_issue),
    ("local_pr", local_pr),
    ("local_meta", local_meta),
    // The porcelain parsers see one another's shapes too.
    ("git_status", git_name_status),
    ("git_name_status", git_status),
];

fn corpus_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(name)
}

/// The samples of one parser's corpus, sorted by path: its files and those of its
/// subdirectories (the agents' recordings, one directory per CLI version).
fn corpus(name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut dirs = vec![corpus_dir(name)];
    while let Some(dir) = dirs.pop() {
        for p in fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
        {
            if p.is_dir() {
                dirs.push(p);
            } else if p.is_file() {
                let b = fs::read(&p).unwrap();
                files.push((p, b));
            }
        }
    }
    files.sort();
    files
}

/// Cases per parser: `PROPTEST_CASES`, else 2,000.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// One edit of a sample.
#[derive(Debug, Clone)]
enum Edit {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Duplicate(usize, usize),
    Cut(usize),
}

fn apply(mut b: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let n = b.len();
        let at = |i: usize| if n == 0 { 0 } else { i % (n + 1) };
        match e {
            Edit::Flip(i, x) if n > 0 => b[i % n] ^= x | 1,
            Edit::Flip(..) => {}
            Edit::Insert(i, bytes) => {
                let i = at(*i);
                b.splice(i..i, bytes.iter().copied());
            }
            Edit::Delete(i, len) => {
                let i = at(*i);
                let end = (i + len).min(n);
                b.drain(i..end);
            }
            Edit::Duplicate(i, len) => {
                let i = at(*i);
                let end = (i + len).min(n);
                let piece = b[i..end].to_vec();
                b.splice(i..i, piece);
            }
            Edit::Cut(i) => b.truncate(at(*i)),
        }
    }
    b
}

/// Bytes that mean something in one of the formats.
const PUNCTUATION: &[u8] =
    b" \t\n\r\0:,\"'[]{}()=#-+.\\/^@*?~0123456789aeflnrstux\x1b\x7f\xc3\xa9\xff";

fn edit() -> impl Strategy<Value = Edit> {
    let insert = prop_oneof![
        prop::collection::vec(any::<u8>(), 1..8),
        prop::collection::vec(prop::sample::select(PUNCTUATION), 1..8),
        // Numbers at and past every bound.
        prop::sample::select(vec![
            b"18446744073709551616".to_vec(),
            b"-1".to_vec(),
            b"4294967296".to_vec(),
            b"1e400".to_vec(),
            b"null".to_vec(),
        ]),
    ];
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, x)| Edit::Flip(i, x)),
        (any::<usize>(), insert).prop_map(|(i, b)| Edit::Insert(i, b)),
        (any::<usize>(), 1usize..16).prop_map(|(i, n)| Edit::Delete(i, n)),
        (any::<usize>(), 1usize..64).prop_map(|(i, n)| Edit::Duplicate(i, n)),
        any::<usize>().prop_map(Edit::Cut),
    ]
}

fn inputs(samples: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let mutated = (
        prop::sample::select(samples),
        prop::collection::vec(edit(), 1..6),
    )
        .prop_map(|(s, edits)| apply(s, &edits));
    prop_oneof![
        2 => prop::collection::vec(any::<u8>(), 0..512),
        2 => prop::collection::vec(prop::sample::select(PUNCTUATION), 0..256),
        6 => mutated,
    ]
}

/// Fuzzes every parser registered under `name`.
fn fuzz(name: &str) {
    let samples: Vec<Vec<u8>> = corpus(name).into_iter().map(|(_, b)| b).collect();
    assert!(!samples.is_empty(), "tests/corpus/{name} is empty");
    for (_, parse) in PARSERS.iter().filter(|(n, _)| *n == name) {
        let mut runner = TestRunner::new(Config {
            cases: cases(),
            failure_persistence: None,
            ..Config::default()
        });
        let result = runner.run(&inputs(samples.clone()), |input| {
            parse(&input);
            Ok(())
        });
        if let Err(e) = result {
            panic!("{name}: {e}");
        }
    }
}

macro_rules! fuzz_tests {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                fuzz($name);
            }
        )*
    };
}

fuzz_tests! {
    fuzz_pid_files => "pid",
    fuzz_start_files => "start",
    fuzz_attempt_state_json => "attempt_state",
    fuzz_state_toon => "state_toon",
    fuzz_resize_toon => "resize_toon",
    fuzz_config_file => "config",
    fuzz_config_environment => "config_env",
    fuzz_toonl_reader => "toonl",
    fuzz_gh_issue_list_json => "gh_list",
    fuzz_gh_issue_view_json => "gh_view",
    fuzz_gh_labeled_list_json => "gh_labeled",
    fuzz_gh_comments_json => "gh_comments",
    fuzz_gh_provenance_json => "gh_provenance",
    fuzz_git_status => "git_status",
    fuzz_git_name_status => "git_name_status",
    fuzz_git_worktree_list => "git_worktree_list",
    fuzz_git_ref_listing => "git_refs",
    fuzz_git_ls_remote => "git_ls_remote",
    fuzz_git_ls_tree_and_log_raw => "git_ls_tree",
    fuzz_local_issue_files => "local_issue",
    fuzz_local_pr_files => "local_pr",
    fuzz_local_meta_file => "local_meta",
    fuzz_agent_output => "agents",
}

/// Every corpus file goes through its parser as it is, and every corpus dir belongs to a
/// parser (a misspelt dir would otherwise be silently unused).
#[test]
fn every_corpus_file_parses_without_a_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut dirs: Vec<String> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    let mut names: Vec<&str> = PARSERS.iter().map(|(n, _)| *n).collect();
    names.sort();
    names.dedup();
    assert_eq!(dirs, names, "one corpus dir per parser");
    let mut count = 0;
    for (name, parse) in PARSERS {
        for (path, bytes) in corpus(name) {
            let r = std::panic::catch_unwind(|| parse(&bytes));
            assert!(r.is_ok(), "{} panicked its parser", path.display());
            count += 1;
        }
    }
    assert!(count >= 2 * names.len(), "{count} corpus runs");
}

/// The valid samples are valid: a corpus of inputs the parsers refuse would mutate into
/// nothing interesting.
#[test]
fn the_valid_samples_parse() {
    let one = |name: &str, file: &str| fs::read(corpus_dir(name).join(file)).unwrap();
    assert_eq!(
        pidfile::parse_pid(&text(&one("pid", "valid.txt"))),
        Ok(4242)
    );
    assert_eq!(
        pidfile::parse_start_token(&one("start", "valid.txt")),
        Ok(1_234_567)
    );
    AttemptState::parse(&one("attempt_state", "valid.json")).unwrap();
    state_file::decode(&text(&one("state_toon", "valid.toon"))).unwrap();
    resize::decode(&text(&one("resize_toon", "valid.toon"))).unwrap();
    config::resolve(
        Some((
            Path::new("c.toml"),
            &text(&one("config", "documented.toml")),
        )),
        &HashMap::new(),
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!(
        event_log::decode_events(&one("toonl", "valid.toonl"))
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        event_log::decode_events(&one("toonl", "torn-tail.toonl"))
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        gh::parse::list_all(&text(&one("gh_list", "valid.json")))
            .unwrap()
            .len(),
        3
    );
    gh::parse::view(&text(&one("gh_view", "valid.json"))).unwrap();
    assert_eq!(
        gh::parse::labeled(&text(&one("gh_labeled", "valid.json")))
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        gh::parse::comments(&text(&one("gh_comments", "valid.json"))).unwrap(),
        vec!["hi", "\u{1b}[2J"]
    );
    // Recorded from the tests' fake gh (GitHub itself is out of reach here).
    let p =
        afk_supervisor::tracker::gh_provenance::parse(&text(&one("gh_provenance", "fake-gh.json")))
            .unwrap()
            .unwrap();
    assert_eq!(
        (p.changes.len(), p.labelled.len(), p.comments.len()),
        (2, 1, 1)
    );
    assert_eq!(
        git::status_z(&one("git_status", "valid.bin"))
            .unwrap()
            .paths
            .len(),
        5
    );
    assert_eq!(
        git::worktree_list_z(&one("git_worktree_list", "valid.bin"))
            .unwrap()
            .len(),
        2
    );
    let refs = git::branch_names(&one("git_refs", "valid.txt"), "refs/heads/afk/");
    assert_eq!((refs.utf8.len(), refs.not_utf8.len()), (2, 1));
    local::parse_issue(&text(&one("local_issue", "valid.toml"))).unwrap();
    local::parse_pull_request(&text(&one("local_pr", "valid.toml"))).unwrap();
    assert_eq!(
        local::parse_meta(&text(&one("local_meta", "valid.toml"))),
        Ok((5, 2))
    );
}
