//! `afk-supervisor mcp` driven by a real MCP client, the official Python SDK (`mcp`, in a
//! venv the test makes), against a running fleet on the local tracker; and by raw pipes
//! for what no SDK client sends (a malformed frame, stdin closed).

use std::io::Write;
use std::process::Stdio;

use serde_json::Value;

use crate::support::fleet::{FAST_TIMING, Fleet, StatusExit, WAIT};
use crate::support::{self, stdout_lines, wait_until};
use afk_supervisor::event_log::Kind;

const SLEEPING_WORKER: &str = "exec sleep 1000\n";

/// One SDK session (`tests/it/support/mcp_session.py`) in `mode` (`read` or `write`).
fn session(f: &Fleet, mode: &str) -> Value {
    let mut vars = f.env.vars();
    vars.push(("AFK_TEST_TAG".into(), f.tag.clone().into()));
    support::python::mcp_session(&f.repo, mode, vars)
}

fn call<'a>(s: &'a Value, label: &str) -> &'a Value {
    s["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["label"] == label)
        .unwrap_or_else(|| panic!("no call {label}: {s}"))
}

/// Files issue `labels` on the fleet's local tracker and returns its number.
fn file_issue(f: &Fleet, title: &str, labels: &[&str]) -> u64 {
    let mut args = vec!["issue", "new", "--title", title];
    for l in labels {
        args.extend(["--label", l]);
    }
    let out = f.run_cmd(&args);
    assert!(out.status.success(), "{out:?}");
    let listed = f.run_cmd(&["issue", "list", "--state", "all", "--json"]);
    assert!(listed.status.success(), "{listed:?}");
    let all: Value = serde_json::from_slice(&listed.stdout).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .filter(|i| i["title"] == title)
        .map(|i| i["number"].as_u64().unwrap())
        .max()
        .unwrap_or_else(|| panic!("no issue {title}: {all}"))
}

/// A fleet of two sleeping workers and one ready issue with a ledger record.
fn fleet() -> Fleet {
    let mut f = Fleet::new(SLEEPING_WORKER, FAST_TIMING);
    f.new_issue("t");
    let ledger = f.repo.join(".red/state/attempts");
    std::fs::create_dir_all(&ledger).unwrap();
    std::fs::write(
        ledger.join("1.toonl"),
        "[]{worker,start,end,outcome,branch,head}:\n\
         w-1,\"2026-01-01T00:00:00Z\",\"2026-01-01T00:05:00Z\",worker-died,afk/1-t,null\n\
         []{worker,start,end,outcome,branch,head,cost_usd,input_tokens,output_tokens,cache_read_tokens,turns,model,session_id,excused,rescued,cpu_ms,memory_peak_kib}:\n\
         w-2,\"2026-01-02T00:00:00Z\",\"2026-01-02T00:10:00Z\",agent-failed exit 1,afk/1-t,null,0.4,1000,200,null,3,claude-x,s-1,null,\"refs/afk/rescue/1/a2 abc123\",null,null\n",
    )
    .unwrap();
    f.start(&["--workers", "2"]);
    f.wait_workers(2);
    assert!(wait_until(WAIT, || {
        f.status_json(StatusExit::Is(0))["fleet"]["ready_for_agent"] == 1
    }));
    f
}

#[test]
fn every_read_tool_answers_as_the_cli_does_and_writes_are_refused_read_only() {
    let f = fleet();
    let out = f.run_cmd(&["issue", "comment", "1", "--body", "seen it"]);
    assert!(out.status.success(), "{out:?}");
    // A running attempt's reservation (this test process holds it, so it is live).
    let mut budget = afk_supervisor::config::Config::default().budget;
    budget.usd_per_day = Some(afk_supervisor::config::Usd::from_f64(10.0));
    let holder = afk_supervisor::budget::reserve::Holder::this("w-test").unwrap();
    let now = afk_supervisor::timeutil::now_epoch();
    let decision =
        afk_supervisor::budget::reserve::check_and_reserve(&f.layout, &budget, &holder, 3600, now)
            .unwrap();
    // Issue 1's pull request, as the landing left it (`docs/SPEC.md` §11.22): open, its CI
    // failing after one fix round, its checks passed in the second round.
    let layout = afk_supervisor::layout::Layout::new(&f.repo);
    afk_supervisor::landing::write(
        &layout,
        afk_supervisor::landing::PrRecord {
            issue: 1,
            state: afk_supervisor::landing::PrState::Open,
            url: Some("local-pr-1".into()),
            branch: "afk/w/1-t".into(),
            base: "main".into(),
            title: "t".into(),
            body: "Closes #1\n".into(),
            draft: false,
            ready_when_green: false,
            checks: "passed (round 2)".into(),
            failing: true,
            check_rounds: 1,
            fix_rounds: 1,
            guidance: None,
            failure: None,
            seen: Vec::new(),
            needs_person: false,
            merge_requested: false,
            created_epoch: 1,
            updated_epoch: 1,
            merged_epoch: None,
        },
    )
    .unwrap();
    let prs = &f.status_json(StatusExit::Is(0))["fleet"]["prs"];
    assert_eq!(
        (
            prs["open"].as_u64(),
            prs["failing"].as_u64(),
            prs["merged"].as_u64()
        ),
        (Some(1), Some(1), Some(0)),
        "{prs}"
    );
    let s = session(&f, "read");
    drop(decision);
    let tools: Vec<&str> = s["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        tools,
        [
            "fleet_status",
            "give_back",
            "list_issues",
            "pause_fleet",
            "release_quarantine",
            "resume_fleet",
            "scale",
            "show_issue",
            "slot_log",
            "spend",
            "stop_slot",
            "tail_events"
        ]
    );
    // Each tool has an input schema and an output schema.
    for t in &tools {
        assert!(
            s["schemas"][t]["input"].is_object(),
            "{t}: {}",
            s["schemas"][t]
        );
        assert!(
            s["schemas"][t]["output"].is_object(),
            "{t}: {}",
            s["schemas"][t]
        );
    }
    // Every parameter says what it is, in one line (issue 52, item 13).
    for t in &tools {
        let props = s["schemas"][t]["input"]["properties"].as_object();
        for (name, p) in props.into_iter().flatten() {
            let d = p["description"].as_str().unwrap_or_default();
            assert!(!d.trim().is_empty(), "{t}.{name} has no description");
            assert!(!d.contains('\n'), "{t}.{name}: {d:?}");
        }
    }
    let instructions = s["instructions"].as_str().unwrap();
    assert!(instructions.contains("Read-only") && instructions.contains("--allow-writes"));
    assert_eq!(
        s["resources"],
        serde_json::json!(["afk://event-log", "afk://state.toon"])
    );
    assert!(
        s["state_resource"]
            .as_str()
            .unwrap()
            .contains("pid_start_time"),
        "{s}"
    );

    // fleet_status is status --json (made a moment apart: the clock fields differ).
    let mcp = call(&s, "status");
    assert_eq!(mcp["is_error"], false, "{mcp}");
    let mut got = mcp["structured"].clone();
    let mut want = f.status_json(StatusExit::Is(0));
    for v in [&mut got, &mut want] {
        v["epoch"] = Value::Null;
        for k in ["heartbeat_epoch", "heartbeat_age_s", "uptime_s"] {
            v["supervisor"][k] = Value::Null;
        }
        for slot in v["slots"].as_array_mut().unwrap() {
            for k in [
                "uptime_s",
                "cpu_ms",
                "rss_kib",
                "cpu_permille",
                "last_event",
            ] {
                slot[k] = Value::Null;
            }
        }
    }
    assert_eq!(got, want);
    assert_eq!(call(&s, "status_again")["is_error"], false);

    let issues = &call(&s, "issues")["structured"]["issues"];
    assert_eq!(issues.as_array().unwrap().len(), 1, "{issues}");
    assert_eq!(issues[0]["number"], 1);
    // What the issue is: its title in the list, its title, body and comments shown.
    assert_eq!(issues[0]["title"], "t", "{issues}");
    let issue = &call(&s, "issue")["structured"];
    assert_eq!(issue["title"], "t", "{issue}");
    assert_eq!(issue["body"], "", "{issue}");
    assert!(issue["created_at"].is_string(), "{issue}");
    assert_eq!(issue["comments"][0]["body"], "seen it", "{issue}");
    assert!(issue["comments"][0]["at"].is_string(), "{issue}");
    assert!(
        issue["labels"]
            .as_array()
            .unwrap()
            .contains(&"ready-for-agent".into())
    );
    assert_eq!(issue["attempts"][0]["outcome"], "worker-died");
    assert_eq!(issue["attempts"][0]["branch"], "afk/1-t");
    assert_eq!(issue["attempts"][1]["cost_usd"], 0.4, "{issue}");
    assert_eq!(issue["attempts"][1]["session_id"], "s-1");
    assert_eq!(
        issue["attempts"][1]["rescued"],
        "refs/afk/rescue/1/a2 abc123"
    );
    let pr = &issue["pr"];
    assert_eq!(pr["url"], "local-pr-1", "{issue}");
    assert_eq!(pr["state"], "open");
    assert_eq!(pr["checks"], "passed (round 2)");
    assert_eq!(
        (pr["check_rounds"].as_u64(), pr["fix_rounds"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(pr["failing"], true);
    let spend = &call(&s, "spend")["structured"];
    assert_eq!(spend["by"], "day", "{spend}");
    // The died attempt reported no cost: its day is a row of attempts, not of runs.
    assert_eq!(spend["rows"][0]["key"], "2026-01-01", "{spend}");
    assert_eq!(spend["rows"][0]["runs"], 0, "{spend}");
    assert_eq!(spend["rows"][0]["attempts"], 1, "{spend}");
    assert_eq!(spend["rows"][1]["key"], "2026-01-02", "{spend}");
    assert_eq!(spend["total"]["usd"], 0.4, "{spend}");
    assert_eq!(spend["total"]["tokens"], 1200, "{spend}");
    assert_eq!(spend["total"]["runs"], 1, "{spend}");
    assert_eq!(spend["total"]["attempts"], 2, "{spend}");
    // Reserved apart: the median of the priced runs, $0.40, for the one running attempt.
    assert_eq!(spend["reserved"]["usd"], 0.4, "{spend}");
    assert_eq!(spend["reserved"]["attempts"], 1, "{spend}");
    let by_issue = &call(&s, "spend_by_issue")["structured"];
    assert_eq!(by_issue["rows"][0]["key"], "#1", "{by_issue}");

    let events = &call(&s, "events")["structured"];
    assert_eq!(events["events"].as_array().unwrap().len(), 5);
    assert!(events["next_cursor"].as_str().unwrap().starts_with("e1-"));
    let spawns = call(&s, "events_kind")["structured"]["events"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(spawns.len(), f.count(Kind::SlotSpawn));
    assert!(spawns.iter().all(|e| e["kind"] == Kind::SlotSpawn.as_str()));
    let log = &call(&s, "slot_log")["structured"];
    assert_eq!(log["slot"], 0);
    assert!(
        log["path"]
            .as_str()
            .unwrap()
            .ends_with("afk-supervisor-slot-0.log")
    );

    for (label, words) in [
        ("write_refused", "read-only"),
        ("pause_refused", "read-only"),
        ("unknown_tool", "tool not found"),
        ("huge_cursor", "longer than 4096"),
        ("bad_state", "expected open, closed or all"),
        ("bad_spend", "expected day or issue"),
    ] {
        let c = call(&s, label);
        assert_eq!(c["is_error"], true, "{label}: {c}");
        assert!(c["text"].as_str().unwrap().contains(words), "{label}: {c}");
    }
    // Refused writes changed nothing.
    let st = f.status_json(StatusExit::Is(0));
    assert_eq!(st["fleet"]["target"], 2);
    assert!(st["fleet"]["operator_pause"].is_null());
    assert_eq!(f.run_cmd(&["stop"]).status.code(), Some(0));
}

#[test]
fn with_allow_writes_every_write_tool_acts_on_the_fleet_and_hostile_input_is_refused() {
    let f = fleet();
    // The session gives back #2 and releases #3 (numbers fixed in mcp_session.py).
    assert_eq!(file_issue(&f, "for a human", &["ready-for-human"]), 2);
    assert_eq!(
        file_issue(&f, "quarantined", &["afk:quarantined", "ready-for-human"]),
        3
    );
    let s = session(&f, "write");
    assert!(s["instructions"].as_str().unwrap().contains("ALLOWED"));
    for (label, words) in [
        ("negative", "target -1 is out of range 0..=1024"),
        ("too_big", "out of range"),
        ("huge_reason", "longer than 4096"),
        ("bad_slot", "slot 99 is not in the fleet"),
        ("give_back_closed", "issue #99999"),
        ("give_back_again", "issue #2 is already ready-for-agent"),
        ("release_unquarantined", "issue #1 is not quarantined"),
    ] {
        let c = call(&s, label);
        assert_eq!(c["is_error"], true, "{label}: {c}");
        assert!(c["text"].as_str().unwrap().contains(words), "{label}: {c}");
    }
    let scaled = call(&s, "scale");
    assert_eq!(scaled["is_error"], false, "{scaled}");
    assert!(
        scaled["structured"]["message"]
            .as_str()
            .unwrap()
            .contains("directive applied")
    );
    assert_eq!(call(&s, "pause")["is_error"], false, "{s}");
    for label in ["give_back", "release", "stop_slot"] {
        let c = call(&s, label);
        assert_eq!(c["is_error"], false, "{label}: {c}");
    }
    // The tracker obeys: both issues are queued, with no human or quarantine label left.
    let mut given = f.labels_of(2);
    given.sort();
    assert_eq!(given, ["ready-for-agent"], "#2");
    let mut released = f.labels_of(3);
    released.sort();
    assert_eq!(released, ["ready-for-agent"], "#3");
    // The fleet obeys: scaled to one slot, whose worker the stop took; paused via mcp.
    assert!(
        wait_until(WAIT, || f.worker_pids().is_empty()),
        "{}",
        f.dump()
    );
    assert!(
        wait_until(WAIT, || {
            // `status` exits 1 here (degraded by the operator pause); its JSON is whole.
            let out = f.run_cmd(&["status", "--json"]);
            let Ok(st) = serde_json::from_slice::<Value>(&out.stdout) else {
                return false;
            };
            st["slots"]
                .as_array()
                .is_some_and(|s| s.len() == 1 && s[0]["slot"] == 0 && s[0]["state"] == "stopped")
        }),
        "{}",
        f.dump()
    );
    let stopped = f.wait_events(Kind::SlotStopped, 1);
    assert!(stopped[0].msg.contains("via=mcp"), "{stopped:?}");
    let after = &call(&s, "status_after")["structured"];
    assert_eq!(after["fleet"]["target"], 1);
    assert_eq!(after["fleet"]["operator_pause"]["via"], "mcp");
    assert_eq!(after["fleet"]["operator_pause"]["reason"], "via mcp");
    let paused = f.wait_events(Kind::FleetOperatorPaused, 1);
    assert!(paused[0].msg.contains("via=mcp"), "{paused:?}");
    let asked: Vec<String> = f
        .events_of(Kind::ControlRequest)
        .into_iter()
        .map(|e| e.msg)
        .collect();
    assert!(
        asked
            .iter()
            .any(|m| m.starts_with("scale 1") && m.ends_with("(via=mcp)")),
        "{asked:?}"
    );
    // One request each: the refused second give_back logged nothing.
    for what in [
        "give back #2: ready-for-agent",
        "release quarantine of #3: ready-for-agent",
        "stop slot 0 (shrink-mode=hard-kill)",
    ] {
        let want = format!("{what} (via=mcp)");
        assert_eq!(
            asked.iter().filter(|m| **m == want).count(),
            1,
            "{want}: {asked:?}"
        );
    }
    assert_eq!(f.run_cmd(&["stop"]).status.code(), Some(0));
}

#[test]
fn a_malformed_frame_is_answered_and_the_server_keeps_serving_then_exits_on_closed_stdin() {
    let env = support::TestEnv::new();
    let repo = env.repo_with_origin().path;
    let mut child = env
        .bin()
        .arg("--repo")
        .arg(&repo)
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = stdout_lines(&mut child);
    let mut stdin = child.stdin.take().unwrap();
    let init = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}
    });
    writeln!(stdin, "{init}").unwrap();
    let first: Value = serde_json::from_str(&rx.recv_timeout(WAIT).unwrap()).unwrap();
    assert_eq!(first["id"], 1, "{first}");
    writeln!(
        stdin,
        "{}",
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    // Garbage, then a frame that is JSON but no JSON-RPC message.
    writeln!(stdin, "{{this is not json").unwrap();
    writeln!(stdin, "{{\"id\": [], \"method\": 7}}").unwrap();
    let list = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    writeln!(stdin, "{list}").unwrap();
    // Whatever the server says to the garbage, it answers the good request after it.
    let mut answered = None;
    while let Ok(l) = rx.recv_timeout(WAIT) {
        let v: Value = serde_json::from_str(&l).unwrap();
        if v["id"] == 2 {
            answered = Some(v);
            break;
        }
    }
    let answered = answered.expect("no answer to tools/list after a malformed frame");
    assert!(
        answered["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.len() == 12),
        "{answered}"
    );
    // Closed stdin: the server ends, cleanly, without being killed.
    drop(stdin);
    let mut status = None;
    assert!(wait_until(WAIT, || {
        status = child.try_wait().unwrap();
        status.is_some()
    }));
    assert_eq!(status.unwrap().code(), Some(0));
}
