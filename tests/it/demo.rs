//! `afk-supervisor demo`: the real binary builds a scratch project, runs a real fleet on it
//! and reports; the only thing checked from outside is what it leaves (with `--keep`) and
//! what it prints.

use crate::support::TestEnv;

fn summary_value<'a>(stdout: &'a str, key: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(key))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {key:?} in the summary:\n{stdout}"))
}

#[test]
fn demo_runs_a_fleet_to_the_end_and_reports_it() {
    let env = TestEnv::new();
    let dir = env.path().join("demo");
    let out = env
        .bin()
        .args(["demo", "--workers", "2", "--issues", "3", "--keep", "--dir"])
        .arg(&dir)
        .env("TMPDIR", env.path())
        .output()
        .expect("run demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );

    // Progress lines, one claim and one hand-over per issue, and the unblock.
    for n in 1..=3 {
        let claimed = format!("#{n} claimed by slot ");
        assert_eq!(stdout.matches(&claimed).count(), 1, "{claimed}\n{stdout}");
        // A pull request per issue, and its merge (`landing.merge = "auto"`).
        assert_eq!(
            stdout
                .lines()
                .filter(|l| l.starts_with(&format!("#{n} done in "))
                    && l.contains("→ pull request local-pr-"))
                .count(),
            1,
            "#{n} done\n{stdout}"
        );
        assert_eq!(
            stdout
                .lines()
                .filter(|l| l.starts_with(&format!("#{n} merged: local-pr-"))
                    && l.ends_with(&format!("→ main; #{n} closed")))
                .count(),
            1,
            "#{n} merged\n{stdout}"
        );
    }
    // #1's checks fail once; its second round passes them.
    assert!(
        stdout.contains("#1 attempt 1-a1 round 1: checks failed: exit 1 (pr.checks-failed)")
            && stdout.contains("#1 attempt 1-a1 round 2: checks passed"),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("#1 closed; #3 unblocked").count(),
        1,
        "{stdout}"
    );

    // The summary's counts.
    assert_eq!(summary_value(&stdout, "issues"), "3 (3 merged)");
    assert_eq!(summary_value(&stdout, "attempts"), "3");
    assert_eq!(summary_value(&stdout, "deaths"), "0");
    let repo = dir.canonicalize().unwrap().join("repo");
    assert_eq!(summary_value(&stdout, "repo"), repo.display().to_string());

    // What the run left: every issue ready-for-human, #1 closed, one branch per issue on
    // origin with the demo agent's commit, no supervisor left.
    let listed = env
        .bin()
        .arg("--repo")
        .arg(&repo)
        .args(["issue", "list", "--state", "all", "--json"])
        .output()
        .expect("issue list");
    assert!(listed.status.success());
    let issues: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("json");
    let issues = issues.as_array().expect("array");
    assert_eq!(issues.len(), 3);
    for i in issues {
        let labels: Vec<&str> = i["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert!(labels.contains(&"ready-for-human"), "{i}");
        assert!(
            !labels.contains(&"running")
                && !labels.contains(&"blocked:dependency")
                && !labels.contains(&"afk:pr-open"),
            "{i}"
        );
        assert_eq!(i["state"].as_str().unwrap().to_uppercase(), "CLOSED", "{i}");
    }
    // Every issue's work landed on origin's main; the merged branches are gone.
    let files = env.git(
        &dir.join("origin.git"),
        &["ls-tree", "-r", "--name-only", "main"],
    );
    assert_eq!(
        files
            .lines()
            .filter(|f| f.starts_with("notes/issue-"))
            .count(),
        3,
        "{files}"
    );
    let branches = env.git(&dir.join("origin.git"), &["branch", "--list", "afk/*"]);
    assert_eq!(branches.lines().count(), 0, "{branches}");
    let status = env
        .bin()
        .arg("--repo")
        .arg(&repo)
        .arg("status")
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(3), "the fleet was stopped");
    // The demo's bootstrap keeps `.red/` state out of `git status`.
    let porcelain = env.git(&repo, &["status", "--porcelain", "--untracked-files=all"]);
    assert!(
        !porcelain.contains(".red/tmp") && !porcelain.contains(".red/state"),
        "{porcelain}"
    );
}

#[test]
fn demo_removes_its_scratch_dir_without_keep() {
    let env = TestEnv::new();
    let tmp = env.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = env
        .bin()
        .args(["demo", "--workers", "1", "--issues", "1"])
        .env("TMPDIR", &tmp)
        .output()
        .expect("run demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary_value(&stdout, "issues"), "1 (1 merged)");
    assert!(
        stdout.contains("(removed; pass --keep to keep it)"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "scratch dir removed"
    );
    // Issue 52, item 9: the removed checkout leaves the list of fleets with it.
    let list = env.bin().args(["list", "--json"]).output().unwrap();
    assert!(list.status.success(), "{list:?}");
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(rows, serde_json::json!([]), "a gone demo is listed");
}

/// Issue 52, item 9: `list --forget-gone` drops the checkouts that are no longer there and
/// keeps the others, in their order.
#[test]
fn list_forgets_the_gone_fleets_when_asked() {
    let env = TestEnv::new();
    let state = env.path().join("state");
    let file = state.join("afk-supervisor/fleets");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let here = env.path().join("here");
    std::fs::create_dir_all(&here).unwrap();
    let gone = env.path().join("gone");
    std::fs::write(&file, format!("{}\n{}\n", gone.display(), here.display())).unwrap();
    let list = |args: &[&str]| {
        env.bin()
            .env("XDG_STATE_HOME", &state)
            .args(args)
            .output()
            .unwrap()
    };
    let before = list(&["list", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&before.stdout).unwrap();
    assert_eq!(rows[0]["state"], "gone", "{rows}");
    let out = list(&["list", "--forget-gone", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
    assert_eq!(rows[0]["repo"], here.display().to_string(), "{rows}");
    assert_eq!(rows[0]["state"], "stopped", "{rows}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("forgot {} (gone)", gone.display())),
        "{out:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("{}\n", here.display())
    );
}

#[test]
fn demo_refuses_a_non_empty_dir_and_touches_nothing() {
    let env = TestEnv::new();
    let dir = env.path().join("busy");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("mine.txt"), "keep me").unwrap();
    let out = env
        .bin()
        .args(["demo", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--dir") && stderr.contains("not empty"),
        "{stderr}"
    );
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("mine.txt")]);
}
