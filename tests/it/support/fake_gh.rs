//! A fake GitHub CLI for tests: the only stand-in the test suite uses.
//!
//! [`FakeGh::install`] writes an executable `gh` (a Python 3 script, `fake_gh.py`) into
//! `<TestEnv>/fake-gh/bin/`, backed by `state.json` beside it. It accepts exactly the argv of
//! `docs/SPEC.md` §7 plus the worker's oldest-first claim listing (`--search sort:created-asc`), each
//! with or without `--repo X` (never on `auth status`, which the real gh
//! rejects), and exits 2 with `unknown gh invocation: <argv>` on anything else. Every call is
//! logged, so tests can count calls and check argv.
//!
//! ```ignore
//! let env = TestEnv::new();
//! let gh = FakeGh::install(&env);
//! gh.set_issues(&[FakeIssue::open(7, &["running"]), FakeIssue::closed(3, &[])]);
//! gh.fail_next(1, 1, "HTTP 502: Bad Gateway");
//! // in-process: a GhTracker that runs the fake
//! let t = gh.tracker(Some("o/r"));
//! // or a child process (the built binary, a worker) finding it first on PATH
//! env.bin().env("PATH", gh.path_env()).args(["--tracker", "gh", "issue", "list"]);
//! assert_eq!(gh.calls().len(), 1);
//! assert_eq!(gh.issue(7).unwrap().labels, vec!["running"]);
//! ```
//!
//! Scripted replies ([`FakeGh::fail_next`], [`FakeGh::respond_next`],
//! [`FakeGh::delay_next`], [`FakeGh::pass_next`]) form one queue; each valid call takes the
//! next entry. A delayed call sleeps, then answers normally (use it to force a timeout); a
//! hung call ([`FakeGh::hang_next`]) never answers and starts a child in its process group
//! that never ends either ([`FakeGh::hung_children`]).
//!
//! Chaos mode ([`FakeGh::set_chaos`]): with the queue empty, each valid call fails with
//! gh's network-error text (a transient failure) before doing anything, with probability
//! `rate`, drawn from a generator seeded with the seed and the call's index, so a fixed
//! seed replays the same failures. An argv outside `docs/SPEC.md` §7 is still refused first.
//!
//! Authors: every comment the fake posts is by its viewer (`fake`, the login `gh api user`
//! answers); [`FakeComment::by`] stores an outsider's. A write applied and
//! then answered with a failure: [`FakeGh::apply_then_fail_next`].

use std::ffi::OsString;
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use afk_supervisor::tracker::GhTracker;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::TestEnv;

const SCRIPT: &str = include_str!("fake_gh.py");

/// One comment the fake recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakeComment {
    pub body: String,
    #[serde(rename = "createdAt", default)]
    pub created_at: String,
    /// The author's login; `None`: the fake's viewer (the fleet's own login).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// `OWNER`, `MEMBER`, `COLLABORATOR`, `CONTRIBUTOR`, `NONE`…; `None`: the viewer's.
    #[serde(
        rename = "authorAssociation",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub author_association: Option<String>,
}

impl FakeComment {
    /// A comment by `login` with GitHub's author association `association`, now.
    pub fn by(login: &str, association: &str, body: &str) -> FakeComment {
        FakeComment {
            body: body.into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            author: Some(login.into()),
            author_association: Some(association.into()),
        }
    }
}

/// One issue in the fake's store. `state` is `OPEN` or `CLOSED`, as gh prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakeIssue {
    pub number: u64,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub body: String,
    pub state: String,
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(rename = "closedAt", default)]
    pub closed_at: Option<String>,
    #[serde(default)]
    pub comments: Vec<FakeComment>,
    /// `None`: the viewer (the fleet's own login) wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    #[serde(
        rename = "authorAssociation",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub author_association: Option<String>,
    /// Changes of the body or title after creation (SPEC §11.20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edits: Vec<FakeEdit>,
    /// Who applied which label when; `None`: the viewer applied each label at creation.
    #[serde(
        rename = "labelEvents",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub label_events: Option<Vec<FakeLabelEvent>>,
    /// When anything last changed it (the fake moves it on every write).
    #[serde(rename = "updatedAt", default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// A change of an issue's `body` or `title` by `by` at `at` (RFC 3339).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakeEdit {
    pub part: String,
    pub by: String,
    pub at: String,
}

/// `label` applied by `by` at `at` (RFC 3339).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakeLabelEvent {
    pub label: String,
    pub by: String,
    pub at: String,
}

impl FakeIssue {
    /// Written by `login` (GitHub's association `association`), labelled `ready-for-agent`
    /// by `labeller` an hour after creation.
    pub fn authored(mut self, login: &str, association: &str, labeller: &str) -> Self {
        self.author = Some(login.into());
        self.author_association = Some(association.into());
        self.label_events = Some(
            self.labels
                .iter()
                .map(|l| FakeLabelEvent {
                    label: l.clone(),
                    by: labeller.into(),
                    at: "2026-01-01T01:00:00Z".into(),
                })
                .collect(),
        );
        self
    }

    /// The body changed by `by` at `at`.
    pub fn edited(mut self, by: &str, at: &str) -> Self {
        self.edits.push(FakeEdit {
            part: "body".into(),
            by: by.into(),
            at: at.into(),
        });
        self
    }

    /// Who holds the issue by its thread's marks (the fold every checkout computes).
    pub fn standing(&self) -> afk_supervisor::claim::marks::Standing {
        let comments: Vec<afk_supervisor::claim::marks::Comment> = self
            .comments
            .iter()
            .map(|c| afk_supervisor::claim::marks::Comment {
                body: c.body.clone(),
                at: None,
            })
            .collect();
        afk_supervisor::claim::marks::standing(&comments)
    }

    pub fn open(number: u64, labels: &[&str]) -> Self {
        FakeIssue {
            number,
            title: format!("issue {number}"),
            body: String::new(),
            state: "OPEN".into(),
            labels: labels.iter().map(|s| s.to_string()).collect(),
            closed_at: None,
            comments: Vec::new(),
            author: None,
            author_association: None,
            edits: Vec::new(),
            label_events: None,
            updated_at: None,
        }
    }

    /// Closed at `2026-01-01T00:00:00Z` (set `closed_at` for another time).
    pub fn closed(number: u64, labels: &[&str]) -> Self {
        FakeIssue {
            state: "CLOSED".into(),
            closed_at: Some("2026-01-01T00:00:00Z".into()),
            ..FakeIssue::open(number, labels)
        }
    }

    pub fn with_body(mut self, body: &str) -> Self {
        self.body = body.into();
        self
    }

    pub fn with_comment(mut self, c: FakeComment) -> Self {
        self.updated_at = Some(c.created_at.clone());
        self.comments.push(c);
        self
    }
}

/// One pull request the fake recorded. `state` is `OPEN`, `MERGED` or `CLOSED`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakePr {
    pub number: u64,
    pub base: String,
    pub head: String,
    pub title: String,
    pub body: String,
    pub state: String,
    /// Opened with `--draft` (issue 50).
    #[serde(rename = "isDraft", default)]
    pub is_draft: bool,
}

/// A fake `gh` installed in one [`TestEnv`].
pub struct FakeGh {
    dir: PathBuf,
}

impl FakeGh {
    /// Installs the fake (fresh state: no issues, logged in, repo `fake-owner/fake-repo`).
    pub fn install(env: &TestEnv) -> FakeGh {
        let dir = env.path().join("fake-gh");
        let bin = dir.join("bin");
        fs::create_dir_all(&bin).expect("fake-gh dir");
        let python = python3();
        let program = bin.join("gh");
        // `-SE`: no site packages, no PYTHON* variables: faster start, and the fake behaves
        // the same on every machine.
        fs::write(&program, format!("#!{} -SE\n{SCRIPT}", python.display()))
            .expect("write fake gh");
        fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).expect("chmod fake gh");
        let fake = FakeGh { dir };
        for f in ["state.json", "calls.jsonl", "pids"] {
            let _ = fs::remove_file(fake.bin_dir().join(f));
        }
        fake
    }

    /// The directory holding `gh`; put it first on `PATH`.
    pub fn bin_dir(&self) -> PathBuf {
        self.dir.join("bin")
    }

    /// The fake's executable.
    pub fn program(&self) -> PathBuf {
        self.bin_dir().join("gh")
    }

    /// `PATH` with the fake first, for child processes.
    pub fn path_env(&self) -> OsString {
        let mut parts = vec![self.bin_dir()];
        if let Some(p) = std::env::var_os("PATH") {
            parts.extend(std::env::split_paths(&p));
        }
        std::env::join_paths(parts).expect("join PATH")
    }

    /// Puts the fake first on `cmd`'s `PATH`.
    pub fn apply<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        cmd.env("PATH", self.path_env())
    }

    /// A [`GhTracker`] that runs this fake, with a 30 s timeout.
    pub fn tracker(&self, repo: Option<&str>) -> GhTracker {
        self.tracker_with_timeout(repo, Duration::from_secs(30))
    }

    pub fn tracker_with_timeout(&self, repo: Option<&str>, timeout: Duration) -> GhTracker {
        GhTracker::new(repo.map(str::to_string), timeout).with_program(self.program())
    }

    pub fn set_issues(&self, issues: &[FakeIssue]) {
        self.edit(|s| s["issues"] = serde_json::to_value(issues).expect("issues"));
    }

    /// Files `issues` beside the ones the fake holds, as a person adds work mid-run.
    pub fn add_issues(&self, issues: &[FakeIssue]) {
        self.edit(|s| {
            let list = s["issues"].as_array_mut().expect("issues in state.json");
            list.extend(
                issues
                    .iter()
                    .map(|i| serde_json::to_value(i).expect("issue")),
            );
        });
    }

    /// Every issue, as the fake now holds it.
    pub fn issues(&self) -> Vec<FakeIssue> {
        serde_json::from_value(self.state()["issues"].clone()).expect("issues in state.json")
    }

    pub fn issue(&self, number: u64) -> Option<FakeIssue> {
        self.issues().into_iter().find(|i| i.number == number)
    }

    pub fn prs(&self) -> Vec<FakePr> {
        serde_json::from_value(self.state()["prs"].clone()).expect("prs in state.json")
    }

    /// Whether `gh auth status` succeeds (default: yes).
    pub fn set_auth(&self, logged_in: bool) {
        self.edit(|s| s["auth"] = json!(logged_in));
    }

    /// Calls of `gh api user` so far.
    pub fn viewer_calls(&self) -> usize {
        self.calls()
            .iter()
            .filter(|c| c[..] == ["api", "user"])
            .count()
    }

    /// The next `k` calls are applied to the state and then answered with `code` and
    /// `stderr`: a write GitHub applied though its answer failed (a 502 or a timeout).
    pub fn apply_then_fail_next(&self, k: usize, code: i32, stderr: &str) {
        self.push_script(k, json!({"apply": true, "code": code, "stderr": stderr}));
    }

    /// Every call so far, oldest first: the argv after the program name.
    pub fn calls(&self) -> Vec<Vec<String>> {
        match fs::read_to_string(self.bin_dir().join("calls.jsonl")) {
            Ok(text) => text
                .lines()
                .map(|l| serde_json::from_str(l).expect("call log line"))
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Each call's first two words (`issue list`), then those of `flags` it carries, in
    /// the order of `flags`: the calls' kinds, to compare in order.
    pub fn verbs(&self, flags: &[&str]) -> Vec<String> {
        self.calls()
            .iter()
            .map(|argv| {
                let mut v: Vec<&str> = argv.iter().take(2).map(String::as_str).collect();
                v.extend(flags.iter().filter(|f| argv.iter().any(|a| a == *f)));
                v.join(" ")
            })
            .collect()
    }

    pub fn clear_calls(&self) {
        let _ = fs::remove_file(self.bin_dir().join("calls.jsonl"));
    }

    /// The pid of every call so far (each call writes its pid first thing).
    pub fn pids(&self) -> Vec<i32> {
        self.read_pids("pids")
    }

    /// The next `k` calls exit with `code` and print `stderr`.
    pub fn fail_next(&self, k: usize, code: i32, stderr: &str) {
        self.respond_next(k, code, "", stderr);
    }

    /// The next `k` calls print `stdout` and `stderr` and exit with `code` (e.g. code 0
    /// with malformed JSON).
    pub fn respond_next(&self, k: usize, code: i32, stdout: &str, stderr: &str) {
        self.push_script(k, json!({"code": code, "stdout": stdout, "stderr": stderr}));
    }

    /// The next `k` calls of one kind (`"pr create"`: their first two words) exit with
    /// `code` and print `stderr`, whatever other calls come first (issue 50).
    pub fn fail_verb_next(&self, verb: &str, k: usize, code: i32, stderr: &str) {
        self.edit(|s| {
            let steps = &mut s["verb_script"][verb];
            if !steps.is_array() {
                *steps = json!([]);
            }
            for _ in 0..k {
                steps
                    .as_array_mut()
                    .expect("verb_script array")
                    .push(json!({"code": code, "stderr": stderr}));
            }
        });
    }

    /// The next `k` calls sleep `secs` before answering normally.
    pub fn delay_next(&self, k: usize, secs: f64) {
        self.push_script(k, json!({"delay": secs}));
    }

    /// The next `k` calls never answer: each starts a `sleep` child and waits forever, so
    /// only the caller's deadline (a kill of the call's process group) ends them.
    pub fn hang_next(&self, k: usize) {
        self.push_script(k, json!({"hang": true}));
    }

    /// The pids of the children hung calls started.
    pub fn hung_children(&self) -> Vec<i32> {
        self.read_pids("hung")
    }

    /// The pids listed one a line in the fake's file `name`; none before it exists.
    fn read_pids(&self, name: &str) -> Vec<i32> {
        fs::read_to_string(self.bin_dir().join(name))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// The next `k` calls answer normally (to aim a scripted failure at a later call).
    pub fn pass_next(&self, k: usize) {
        self.push_script(k, json!({}));
    }

    /// Chaos mode: each later call fails transiently with probability `rate` (see the
    /// module doc); `None` turns it off.
    pub fn set_chaos(&self, chaos: Option<(f64, u64)>) {
        self.edit(|s| match chaos {
            Some((rate, seed)) => s["chaos"] = json!({"rate": rate, "seed": seed, "calls": 0}),
            None => {
                if let Some(m) = s.as_object_mut() {
                    m.remove("chaos");
                }
            }
        });
    }

    /// Calls chaos mode has failed since [`FakeGh::set_chaos`].
    /// Every repository call fails with GitHub's primary rate-limit message until `reset`
    /// (epoch seconds), and `gh api rate_limit` names that reset; `None` lifts it.
    pub fn set_rate_limit(&self, reset: Option<u64>) {
        self.edit(|st| {
            st["rate_limit"] = match reset {
                Some(r) => json!({"reset": r, "hits": 0}),
                None => Value::Null,
            };
        });
    }

    /// Calls refused for the rate limit so far.
    pub fn rate_limit_hits(&self) -> u64 {
        self.state()["rate_limit"]["hits"].as_u64().unwrap_or(0)
    }

    /// Every call with the time it was made (epoch seconds).
    pub fn stamped_calls(&self) -> Vec<(f64, Vec<String>)> {
        let text = std::fs::read_to_string(self.bin_dir().join("stamps.jsonl")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| {
                let t = v["t"].as_f64().unwrap_or(0.0);
                let argv = v["argv"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                (t, argv)
            })
            .collect()
    }

    /// How the steward's conditional listings were answered: (200s, 304s). A 304 is free
    /// on GitHub; a 200 counts as a read.
    pub fn conditional_answers(&self) -> (usize, usize) {
        let text = fs::read_to_string(self.bin_dir().join("conditional")).unwrap_or_default();
        let count = |code: &str| text.lines().filter(|l| *l == code).count();
        (count("200"), count("304"))
    }

    pub fn chaos_failures(&self) -> u64 {
        self.state()["chaos"]["failed"].as_u64().unwrap_or(0)
    }

    // ---- issue 49: GitHub's write limits per identity (fake_gh.py, write_limit_step) ----

    /// Narrows GitHub's write limits (by default 80 a minute, 500 an hour per login) to
    /// `per_min` per `min_s` and `per_hour` per `hour_s`, for a test's short hour.
    pub fn set_write_limits(&self, per_min: u64, per_hour: u64, min_s: f64, hour_s: f64) {
        self.edit(|st| {
            st["write_limits"] = json!({
                "per_min": per_min, "per_hour": per_hour, "min_s": min_s, "hour_s": hour_s
            });
        });
    }

    /// The repository has exactly these labels: GitHub refuses to add any other, until a
    /// `gh label create` makes it.
    pub fn set_repo_labels(&self, names: &[&str]) {
        self.edit(|st| st["labels"] = json!(names));
    }

    /// The repository's labels, when a test set them.
    pub fn repo_labels(&self) -> Vec<String> {
        self.state()["labels"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Writes refused for GitHub's write limits so far: 0 for a fleet within its pace.
    pub fn write_limit_hits(&self) -> u64 {
        self.state()["write_limits"]["hits"].as_u64().unwrap_or(0)
    }

    // ---- end issue 49 ----

    fn push_script(&self, k: usize, step: Value) {
        self.edit(|s| {
            let script = s["script"].as_array_mut().expect("script array");
            for _ in 0..k {
                script.push(step.clone());
            }
        });
    }

    fn state_path(&self) -> PathBuf {
        self.bin_dir().join("state.json")
    }

    fn state(&self) -> Value {
        let _lock = self.lock();
        read_state(&self.state_path())
    }

    /// A read-modify-write of `state.json` under the same lock the fake takes.
    fn edit(&self, f: impl FnOnce(&mut Value)) {
        let _lock = self.lock();
        let path = self.state_path();
        let mut state = read_state(&path);
        f(&mut state);
        let tmp = path.with_extension("json.tmp");
        fs::write(&tmp, serde_json::to_vec_pretty(&state).expect("encode")).expect("write");
        fs::rename(&tmp, &path).expect("rename state.json");
    }

    fn lock(&self) -> File {
        let f = File::options()
            .create(true)
            .append(true)
            .open(self.bin_dir().join("state.lock"))
            .expect("open state.lock");
        f.lock().expect("lock state.lock");
        f
    }
}

fn read_state(path: &Path) -> Value {
    let mut state: Value = match fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).expect("state.json"),
        Err(_) => json!({}),
    };
    for (k, v) in [
        ("repo", json!("fake-owner/fake-repo")),
        ("auth", json!(true)),
        ("issues", json!([])),
        ("prs", json!([])),
        ("script", json!([])),
    ] {
        if state.get(k).is_none() {
            state[k] = v;
        }
    }
    state
}

/// The real interpreter behind `python3` on PATH (not a shim), for the fake's shebang.
fn python3() -> PathBuf {
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FOUND.get_or_init(find_python3).clone()
}

fn find_python3() -> PathBuf {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("the fake gh needs python3 on PATH");
    assert!(out.status.success(), "python3 failed: {out:?}");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

// ---- issue 50: the landing's pull requests ------------------------------------------
impl FakeGh {
    /// Replaces `key` (`checks`, `reviews`, `comments`, `headRefOid`, `isDraft`) of pull
    /// request `number` (see the landing block of `fake_gh.py` for the shapes).
    pub fn set_pr(&self, number: u64, key: &str, value: Value) {
        self.edit(|s| {
            let prs = s["prs"].as_array_mut().expect("prs array");
            let pr = prs
                .iter_mut()
                .find(|p| p["number"] == number)
                .expect("no such pull request");
            pr[key] = value;
        });
    }

    /// One pull request as the fake holds it, every key.
    pub fn pr_json(&self, number: u64) -> Value {
        self.state()["prs"]
            .as_array()
            .expect("prs array")
            .iter()
            .find(|p| p["number"] == number)
            .cloned()
            .expect("no such pull request")
    }

    /// Every pull request opened from now on starts with these `checks` (rows as
    /// [`FakeGh::set_pr`] takes them): the CI a test wants before any host can act.
    pub fn set_new_pr_checks(&self, checks: Value) {
        self.edit(|s| s["new_pr_checks"] = checks);
    }

    /// `gh run view <run> --log-failed` answers `log`.
    pub fn set_run_log(&self, run: &str, log: &str) {
        self.edit(|s| {
            if !s["runs"].is_object() {
                s["runs"] = json!({});
            }
            s["runs"][run] = json!(log);
        });
    }
}
