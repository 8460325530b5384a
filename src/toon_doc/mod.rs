//! A TOON document encoder for the flat shapes this project writes at a high rate
//! (`state.toon`: objects of primitives, arrays of primitives, arrays of flat objects),
//! byte for byte what `reddb_io_toon::to_string` writes for them.
//!
//! Why it exists: the supervisor rewrites its heartbeat after transitions, and the
//! general encoder clones every nested value while it checks depths and shapes. At 1,000
//! slots one heartbeat took 10 to 20 ms through it, 2.5 through a `serde_json::Value`
//! and this walk, and 0.7 through [`encode_serialize`], which builds a lighter tree
//! ([`Node`]) straight from serde. Anything outside these shapes (a float, an object whose
//! values are objects, an array inside an array row) is not guessed at: the encoders answer
//! `None` and the caller uses the general encoder. A property test holds the two equal.

mod node;

use serde_json::Value;

use node::Fields;
pub use node::Node;

/// The document text of `value` (no trailing newline, as the general encoder), or `None`
/// when its shape is not one this encoder writes.
pub fn encode(value: &Value) -> Option<String> {
    document(&Node::from_value(value)?)
}

/// The document text of `value` as serde would give it to the general encoder, written
/// without building a `serde_json::Value` first: at 1,000 slots that tree (15,000 small
/// maps and keys, freshly allocated each time) cost more than the writing itself.
pub fn encode_serialize<T: serde::Serialize>(value: &T) -> Option<String> {
    document(&value.serialize(node::NodeSerializer).ok()?)
}

fn document(root: &Node) -> Option<String> {
    let Node::Map(root) = root else {
        return None;
    };
    // A root whose fields are all flat objects of one shape is a keyed table there.
    if root.len() >= 2 && root.iter().all(|(_, v)| matches!(v, Node::Map(_))) {
        return None;
    }
    let mut out = String::with_capacity(256);
    object(&mut out, root, 0)?;
    if out.ends_with('\n') {
        out.pop();
    }
    Some(out)
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

fn object(out: &mut String, map: &Fields, depth: usize) -> Option<()> {
    for (k, v) in map {
        field(out, k, v, depth)?;
    }
    Some(())
}

fn field(out: &mut String, key: &str, value: &Node, depth: usize) -> Option<()> {
    indent(out, depth);
    push_key(out, key);
    match value {
        Node::Map(map) => {
            // Only objects of primitives: one whose values are objects can be a keyed table.
            if !map.iter().all(|(_, v)| v.is_primitive()) {
                return None;
            }
            out.push_str(":\n");
            object(out, map, depth + 1)
        }
        Node::Seq(items) => array(out, items, depth),
        v => {
            out.push_str(": ");
            primitive(out, v)?;
            out.push('\n');
            Some(())
        }
    }
}

/// An array after its key (already written at `depth`).
fn array(out: &mut String, items: &[Node], depth: usize) -> Option<()> {
    if items.is_empty() {
        out.push_str(": []\n");
        return Some(());
    }
    if items.iter().all(Node::is_primitive) {
        header(out, items.len(), None);
        out.push(' ');
        cells(out, items.iter())?;
        out.push('\n');
        return Some(());
    }
    let rows: Vec<&Fields> = items
        .iter()
        .map(|n| match n {
            Node::Map(m) => Some(m),
            _ => None,
        })
        .collect::<Option<_>>()?;
    if rows
        .iter()
        .any(|r| !r.iter().all(|(_, v)| v.is_primitive()))
    {
        return None;
    }
    let first = rows[0];
    // Rows of one struct type share their keys in one order; a row that differs is
    // looked up key by key, as the general encoder does.
    let same_keys = |r: &Fields| {
        r.len() == first.len()
            && (r.iter().zip(first).all(|((a, _), (b, _))| a == b)
                || first.iter().all(|(k, _)| node::get(r, k).is_some()))
    };
    let tabular = !first.is_empty() && rows.iter().all(|r| same_keys(r));
    if tabular {
        header(out, rows.len(), Some(first));
        out.push('\n');
        for r in &rows {
            indent(out, depth + 1);
            if r.iter().zip(first).all(|((a, _), (b, _))| a == b) {
                cells(out, r.iter().map(|(_, v)| v))?;
            } else {
                cells(out, first.iter().filter_map(|(k, _)| node::get(r, k)))?;
            }
            out.push('\n');
        }
        return Some(());
    }
    header(out, rows.len(), None);
    out.push('\n');
    for r in &rows {
        let mut fields = r.iter();
        let Some((k, v)) = fields.next() else {
            indent(out, depth + 1);
            out.push_str("-\n");
            continue;
        };
        indent(out, depth + 1);
        out.push_str("- ");
        push_key(out, k);
        out.push_str(": ");
        primitive(out, v)?;
        out.push('\n');
        for (k, v) in fields {
            field(out, k, v, depth + 2)?;
        }
    }
    Some(())
}

/// One cell of a row written by [`row`]: the primitives a TOONL record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell<'a> {
    Null,
    U64(u64),
    I64(i64),
    Str(&'a str),
}

/// A TOONL row (with its newline): the cells as a tabular row under a comma header,
/// byte for byte what `reddb_io_toon::ToonlEncoder` writes for them. The event log writes
/// one per transition, three a respawn; through the general encoder each went to a
/// `serde_json::Value`, then a TOON value, then text whose cells the encoder parsed back to
/// check them (a tenth of a respawn's cost).
pub fn row<'a>(cells: impl IntoIterator<Item = Cell<'a>>) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(128);
    for (i, cell) in cells.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match cell {
            Cell::Null => out.push_str("null"),
            // Writing to a String cannot fail.
            Cell::U64(n) => drop(write!(out, "{n}")),
            Cell::I64(n) => drop(write!(out, "{n}")),
            Cell::Str(s) if row_needs_quotes(s) => quote(&mut out, s),
            Cell::Str(s) => out.push_str(s),
        }
    }
    out.push('\n');
    out
}

/// `[N]:` or `[N]{a,b}:` after the key.
fn header(out: &mut String, len: usize, fields: Option<&Fields>) {
    out.push('[');
    out.push_str(&len.to_string());
    out.push(']');
    if let Some(fields) = fields {
        out.push('{');
        for (i, (k, _)) in fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_key(out, k);
        }
        out.push('}');
    }
    out.push(':');
}

fn cells<'a>(out: &mut String, values: impl Iterator<Item = &'a Node>) -> Option<()> {
    for (i, v) in values.enumerate() {
        if i > 0 {
            out.push(',');
        }
        primitive(out, v)?;
    }
    Some(())
}

fn primitive(out: &mut String, v: &Node) -> Option<()> {
    use std::fmt::Write;
    match v {
        Node::Null => out.push_str("null"),
        Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        // Integers are written verbatim (a float is not a `Node`: its text follows
        // JavaScript's rules, which the general encoder knows).
        Node::I64(n) => write!(out, "{n}").ok()?,
        Node::U64(n) => write!(out, "{n}").ok()?,
        Node::Str(s) if needs_quotes(s) => quote(out, s),
        Node::Str(s) => out.push_str(s),
        Node::Seq(_) | Node::Map(_) => return None,
    }
    Some(())
}

/// Keys matching `^[A-Za-z_][A-Za-z0-9_.]*$` are bare (TOON §7.3).
fn push_key(out: &mut String, key: &str) {
    let mut chars = key.chars();
    let bare = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if bare {
        out.push_str(key);
    } else {
        quote(out, key);
    }
}

/// The TOON v4.1 quoting checklist (§7.2) for a document value, the comma the active
/// delimiter.
fn needs_quotes(s: &str) -> bool {
    s.is_empty()
        || s.starts_with([' ', '\t'])
        || s.ends_with([' ', '\t'])
        || matches!(s, "true" | "false" | "null")
        || numeric_like(s)
        || s.contains([':', '"', '\\', '[', ']', '{', '}', ','])
        || s.chars().any(|c| (c as u32) < 0x20)
        || s.starts_with('-')
        || s.starts_with('#')
}

/// The same checklist as the TOONL row writer keeps it: it trims with [`str::trim`], so a
/// cell that starts or ends with any Unicode whitespace (a no-break space) is quoted, where
/// a document value is quoted only for ASCII space and tab.
fn row_needs_quotes(s: &str) -> bool {
    s.trim() != s || needs_quotes(s)
}

/// `[+-]?digits(.digits)?([eE][+-]?digits)?`, and the leading-zero forms (`007`).
fn numeric_like(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i > start
    };
    if matches!(b.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    if !digits(&mut i) {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == b.len()
}

fn quote(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Texts at the edges of TOON's quoting rules (keywords, numbers, delimiters, escapes,
/// control and Unicode whitespace), for the property tests of every writer here and of
/// `toonl`'s rows.
#[cfg(test)]
pub(crate) const TRICKY_TEXTS: &[&str] = &[
    "",
    " x",
    "x ",
    "true",
    "null",
    "12",
    "-3",
    "1.5e3",
    "007",
    "1.",
    "+4",
    "#h",
    "a:b",
    "a,b",
    "a\"b",
    "a\\b",
    "[x]",
    "{",
    "tab\there",
    "nl\nx",
    "\u{1}",
    "é ü",
    "\u{a0}pad\u{a0}",
    "-",
    "x-y",
    "e5",
    "1e",
    ".5",
    "false",
    "\r",
    "\u{7f}",
    "a|b",
    "a\tb",
];

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Map;

    fn general(v: &Value) -> String {
        reddb_io_toon::to_string(v).unwrap()
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z/ ._-]{0,12}",
            prop::sample::select(TRICKY_TEXTS.to_vec()).prop_map(str::to_string),
        ]
    }

    fn primitive_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            text().prop_map(Value::String),
        ]
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[a-z_][a-z0-9_]{0,6}",
            1 => prop::sample::select(vec!["9lives", "a-b", "with space", "", "x.y"])
                .prop_map(str::to_string),
        ]
    }

    fn flat_object() -> impl Strategy<Value = Map<String, Value>> {
        prop::collection::vec((key(), primitive_value()), 0..5)
            .prop_map(|kv| kv.into_iter().collect())
    }

    /// Rows that share a shape most of the time, as the heartbeat's slots do.
    fn rows() -> impl Strategy<Value = Vec<Value>> {
        (
            flat_object(),
            prop::collection::vec((primitive_value(), any::<bool>()), 0..6),
        )
            .prop_map(|(shape, rows)| {
                rows.into_iter()
                    .enumerate()
                    .map(|(i, (v, drop_one))| {
                        let mut r = shape.clone();
                        if let Some(k) = r.keys().nth(i % r.len().max(1)).cloned() {
                            r.insert(k, v);
                        }
                        if drop_one && i % 3 == 0 {
                            let k = r.keys().next().cloned();
                            if let Some(k) = k {
                                r.remove(&k);
                            }
                        }
                        Value::Object(r)
                    })
                    .collect()
            })
    }

    fn field_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            3 => primitive_value(),
            1 => flat_object().prop_map(Value::Object),
            1 => prop::collection::vec(primitive_value(), 0..4).prop_map(Value::Array),
            2 => rows().prop_map(Value::Array),
        ]
    }

    fn document() -> impl Strategy<Value = Value> {
        prop::collection::vec((key(), field_value()), 0..8)
            .prop_map(|kv| Value::Object(kv.into_iter().collect()))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Wherever this encoder writes a document, it writes what the general one does.
        #[test]
        fn writes_what_the_general_encoder_writes(doc in document()) {
            if let Some(fast) = encode(&doc) {
                prop_assert_eq!(&fast, &general(&doc), "{}", doc);
                // The same document through serde (a `Value` serializes as itself).
                prop_assert_eq!(encode_serialize(&doc), Some(fast));
            }
        }
    }

    /// The shapes it leaves to the general encoder, and a heartbeat it writes itself.
    #[test]
    fn declines_what_it_does_not_know_and_writes_the_heartbeat() {
        for v in [
            serde_json::json!({"a": 1.5}),
            serde_json::json!({"a": {"b": {"c": 1}}}),
            serde_json::json!({"a": [[1, 2]]}),
            serde_json::json!({"a": [{"b": [1]}]}),
            serde_json::json!({"x": {"a": 1}, "y": {"a": 2}}),
            serde_json::json!([1, 2]),
        ] {
            assert_eq!(encode(&v), None, "{v}");
            assert_eq!(encode_serialize(&v), None, "{v}");
        }
        // Straight from serde: a float, or an enum carrying data, is the general encoder's.
        #[derive(serde::Serialize)]
        enum Shape {
            Ratio(f64),
        }
        #[derive(serde::Serialize)]
        struct Reading {
            cpu: f64,
        }
        assert_eq!(encode_serialize(&Reading { cpu: 0.5 }), None);
        assert_eq!(
            encode_serialize(&std::collections::BTreeMap::from([(
                "s",
                Shape::Ratio(1.0)
            )])),
            None
        );
        let hb = serde_json::json!({
            "ts": "2026-12-02T06:38:12.386Z",
            "slots": {"busy": 1, "free": 0},
            "slot_pids": [{"slot": 0, "pid": 12, "start": 99}],
            "slot_detail": [
                {"slot": 0, "state": "running", "title": "Fix, \"the\" bug: now"},
                {"slot": 1, "state": "idle"},
            ],
            "empty": [],
        });
        let fast = encode(&hb).expect("a heartbeat's shape");
        assert_eq!(fast, general(&hb));
        assert_eq!(encode_serialize(&hb).as_deref(), Some(fast.as_str()));
        assert!(
            fast.contains("slot_pids[1]{slot,pid,start}:\n  0,12,99"),
            "{fast}"
        );
    }
}
