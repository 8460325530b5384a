//! `status --json` of a real fleet against `docs/status.schema.json`, validated by the
//! Python `jsonschema` package (a validator this crate did not write).

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support;
use crate::support::fleet::{FAST_TIMING, Fleet};

const SLEEPING_WORKER: &str = "exec sleep 1000\n";

/// The validator's verdict on `doc`: `Ok` or its error text.
fn validate(doc: &serde_json::Value) -> Result<(), String> {
    let schema = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/status.schema.json");
    let mut child = Command::new(support::python::venv_python())
        .args([
            "-c",
            "import json, sys, jsonschema\n\
             schema = json.load(open(sys.argv[1]))\n\
             jsonschema.Draft202012Validator.check_schema(schema)\n\
             jsonschema.Draft202012Validator(schema).validate(json.load(sys.stdin))\n",
            schema,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(doc.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn status_json_of_a_running_fleet_matches_the_published_schema() {
    let mut f = Fleet::new(SLEEPING_WORKER, FAST_TIMING);
    f.start(&["--workers", "2"]);
    f.wait_workers(2);
    // An operator pause and a stopped slot, so the optional parts are in the answer too.
    assert!(f.run_cmd(&["pause", "--reason", "schema"]).status.success());
    let out = f.run_cmd(&["stop", "--slot", "1", "--shrink-mode", "hard-kill"]);
    assert!(out.status.success(), "{out:?}");
    // Exit 1: the operator pause degrades the fleet (SPEC §11.14); the JSON is whole.
    let out = f.run_cmd(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["health"], "degraded", "{doc}");
    assert!(doc["fleet"]["operator_pause"].is_object(), "{doc}");
    validate(&doc).unwrap_or_else(|e| panic!("{e}\n{doc:#}"));

    // The validator is not a rubber stamp: a wrong version, a missing part and a wrong
    // type are each refused.
    let mut bad = doc.clone();
    bad["schema_version"] = 2.into();
    assert!(validate(&bad).is_err());
    let mut bad = doc.clone();
    bad.as_object_mut().unwrap().remove("slots");
    assert!(validate(&bad).is_err());
    let mut bad = doc.clone();
    bad["fleet"]["target"] = "two".into();
    assert!(validate(&bad).is_err());
    // A field this schema does not know is fine: fields are only ever added.
    let mut newer = doc.clone();
    newer["fleet"]["a_future_field"] = serde_json::json!({"usd": 1.5});
    validate(&newer).unwrap();
    assert_eq!(f.run_cmd(&["stop"]).status.code(), Some(0));
}
