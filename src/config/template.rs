//! The file `afk-supervisor init` writes: the documented defaults
//! (`config/afk-supervisor.toml`, every key with its comment) with the few values the
//! operator named filled in, so a first config is the reference file itself and never drifts
//! from it.

use super::TrackerKind;

/// The documented defaults, as shipped.
pub const DEFAULTS: &str = include_str!("../../config/afk-supervisor.toml");

/// What `init` was told; `None` keeps the documented default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Choices {
    pub agent: Option<Vec<String>>,
    pub tracker: Option<TrackerKind>,
    pub workers: Option<usize>,
}

/// The defaults with `choices` applied: each is the one line of its table replaced (the
/// commented `# command = …` of `[agent]` uncommented), every other line kept as it is.
pub fn render(choices: &Choices) -> String {
    let mut table = "";
    let mut out = String::with_capacity(DEFAULTS.len() + 64);
    for line in DEFAULTS.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            table = trimmed;
        }
        let replaced = match (table, key_of(trimmed)) {
            ("[fleet]", Some("workers")) => choices.workers.map(|n| format!("workers = {n}")),
            ("[tracker]", Some("kind")) => choices
                .tracker
                .map(|k| format!("kind = {}", quote(&k.to_string()))),
            ("[agent]", Some("# command")) => choices.agent.as_ref().map(|argv| {
                let items: Vec<String> = argv.iter().map(|a| quote(a)).collect();
                format!("command = [{}]", items.join(", "))
            }),
            _ => None,
        };
        out.push_str(replaced.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// `key` of a `key = value` line (or of a commented-out `# key = value`).
fn key_of(line: &str) -> Option<&str> {
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    let bare = key.strip_prefix("# ").unwrap_or(key);
    (!bare.is_empty() && !bare.contains(' ')).then_some(key)
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::Path;

    fn load(text: &str) -> crate::config::Config {
        crate::config::resolve(
            Some((Path::new("init.toml"), text)),
            &HashMap::new(),
            &crate::config::Overrides::default(),
        )
        .unwrap()
    }

    #[test]
    fn no_choice_is_the_documented_file_and_parses_to_the_defaults() {
        let text = render(&Choices::default());
        assert_eq!(text, DEFAULTS);
        let c = load(&text);
        assert_eq!(c.fleet.workers, 2);
        assert_eq!(c.agent.command, None);
    }

    #[test]
    fn choices_land_in_their_tables() {
        let text = render(&Choices {
            agent: Some(vec!["./scripts/agent \"x\".sh".into(), "-p".into()]),
            tracker: Some(TrackerKind::Local),
            workers: Some(7),
        });
        let c = load(&text);
        assert_eq!(c.fleet.workers, 7);
        assert_eq!(c.tracker.kind, TrackerKind::Local);
        assert_eq!(
            c.agent.command,
            Some(vec![
                "./scripts/agent \"x\".sh".to_string(),
                "-p".to_string()
            ])
        );
        // The worker table's commented command stays commented.
        assert!(text.contains("# command = [\"afk-supervisor\", \"worker\", \"--once\"]"));
    }
}
