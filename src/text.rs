//! Text helpers for the one-line messages every error is reported as: where in a file a
//! parse failed, a child's multi-line stderr or a huge argv folded and clipped, and outside
//! text (issue titles, branch and file names) made safe to show on a terminal or in a log.

/// Longest rendering of an argv, a list or stderr put in a message; a batch over thousands
/// of branches would otherwise make a message of hundreds of kilobytes.
pub const MESSAGE_MAX: usize = 600;

/// Longest piece of outside input (a config key or value, a file's content) quoted in a
/// message; longer pieces are cut there and end in `…`.
pub const QUOTE_MAX: usize = 80;

/// `path` as text for a file others read (`state.toon`): a UTF-8 path as it is (checked by
/// std's fast validation; `Path::display` and `to_string_lossy` walk it char by char, a
/// cost the heartbeat pays per slot), any other lossily.
pub fn path_text(path: &std::path::Path) -> String {
    match path.to_str() {
        Some(s) => s.to_owned(),
        None => path.to_string_lossy().into_owned(),
    }
}

/// `s` made safe to show to a person on a terminal or in a line-based log: every control
/// character (C0 including TAB, CR, LF and ESC, DEL, and the C1 controls U+0080..U+009F)
/// becomes a visible escape (`\t`, `\r`, `\n`, `\e`, `\0`, otherwise `\x7f` or
/// `\u{9b}`), as do the line and paragraph separators and the bidirectional overrides
/// (U+2028, U+2029, U+202A..U+202E, U+2066..U+2069), which can split a line or reorder
/// what a reader sees. Ordinary Unicode, quotes, backslashes and spaces are kept as they
/// are. The result is one line that cannot move the cursor, change colours, or split a
/// log record. The one place outside text is escaped for display.
pub fn escape(s: &str) -> String {
    if !s.chars().any(needs_escape) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        push_escaped(&mut out, c);
    }
    out
}

/// A multi-line text (an issue body) shown line by line: every line [`escape`]d, the line
/// breaks between them kept, so it reads as written but cannot rewrite the terminal.
pub fn escape_lines(s: &str) -> String {
    s.split('\n').map(escape).collect::<Vec<_>>().join("\n")
}

/// [`escape`] for bytes that may not be UTF-8 (a branch or file name from git or the file
/// system): valid UTF-8 runs are escaped as text, every other byte is shown as `\xNN`.
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_escaped(&mut out, c);
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\0' => out.push_str("\\0"),
        '\u{1b}' => out.push_str("\\e"),
        c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
        c if needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        c => out.push(c),
    }
}

/// `s` cut after [`QUOTE_MAX`] characters, with `…` when something was cut.
pub fn excerpt(s: &str) -> String {
    match s.char_indices().nth(QUOTE_MAX) {
        None => s.to_string(),
        Some((end, _)) => format!("{}…", &s[..end]),
    }
}

/// A message from a parser that quotes outside input (`` unknown field `…` ``,
/// `"…"`) made readable: every quoted piece, and every unquoted run without a space, longer
/// than [`QUOTE_MAX`] is cut to it with `…`, and the whole is one line of at most
/// [`MESSAGE_MAX`] bytes.
pub fn clip_quoted(msg: &str) -> String {
    let mut out = String::new();
    let mut piece = String::new();
    let mut open: Option<char> = None;
    let flush = |piece: &mut String, out: &mut String| {
        out.push_str(&excerpt(piece));
        piece.clear();
    };
    for c in msg.chars() {
        let c = if c == '\n' || c == '\r' { ' ' } else { c };
        match open {
            Some(q) if c == q => {
                flush(&mut piece, &mut out);
                out.push(c);
                open = None;
            }
            Some(_) => piece.push(c),
            None if c == '`' || c == '"' => {
                flush(&mut piece, &mut out);
                out.push(c);
                open = Some(c);
            }
            None if c == ' ' => {
                flush(&mut piece, &mut out);
                out.push(c);
            }
            None => piece.push(c),
        }
    }
    flush(&mut piece, &mut out);
    let parts = out.len();
    clip(out, parts, "bytes")
}

/// The 1-based line and column (in characters) of byte `offset` in `text`, for
/// `FILE:LINE:COL:` messages.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Multi-line stderr (`fatal: …` followed by hints) folded into one line, blank lines
/// dropped, clipped after [`MESSAGE_MAX`] characters.
pub fn one_line(s: &str) -> String {
    let lines: Vec<&str> = s.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() {
        "(no output on stderr)".into()
    } else {
        clip(lines.join(" | "), lines.len(), "lines")
    }
}

/// `s` cut after [`MESSAGE_MAX`] bytes (on a character boundary), saying how much there
/// was: `parts` `what` in all.
pub fn clip(s: String, parts: usize, what: &str) -> String {
    if s.len() <= MESSAGE_MAX {
        return s;
    }
    let mut end = MESSAGE_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} … ({} chars, {parts} {what} in all)", &s[..end], s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_characters_from_one() {
        let text = "a = 1\nbé = x\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 6), (2, 1));
        assert_eq!(line_col(text, text.find('=').unwrap()), (1, 3));
        assert_eq!(line_col(text, text.rfind('x').unwrap()), (2, 6));
        assert_eq!(line_col(text, 9999), (3, 1));
        // Inside a multi-byte character: the character's own position.
        assert_eq!(line_col(text, 8), (2, 2));
    }

    #[test]
    fn quoted_input_is_cut_to_a_readable_length() {
        assert_eq!(excerpt("short"), "short");
        let long = "k".repeat(1 << 20);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), QUOTE_MAX + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(excerpt(&"é".repeat(QUOTE_MAX)), "é".repeat(QUOTE_MAX));
        let msg = format!("unknown field `{long}`, expected one of `fleet`, `worker`");
        let clipped = clip_quoted(&msg);
        assert_eq!(
            clipped,
            format!(
                "unknown field `{}…`, expected one of `fleet`, `worker`",
                "k".repeat(QUOTE_MAX)
            )
        );
        let bare = clip_quoted(&format!("invalid key {long} here\nnext"));
        assert_eq!(
            bare,
            format!("invalid key {}… here next", "k".repeat(QUOTE_MAX))
        );
        let spaced = clip_quoted(&format!("bad \"{}\"", "a b ".repeat(1 << 18)));
        assert!(spaced.len() < MESSAGE_MAX + 100, "{}", spaced.len());
    }

    #[test]
    fn control_characters_are_shown_as_escapes() {
        assert_eq!(escape("plain é ✓ \"q\" a\\b"), "plain é ✓ \"q\" a\\b");
        assert_eq!(
            escape("a\u{1b}[2Jb\rc\nd\te\0f\u{7f}g\u{9b}h\u{7}"),
            "a\\e[2Jb\\rc\\nd\\te\\0f\\x7fg\\u{9b}h\\x07"
        );
        assert_eq!(escape("x\u{2028}y\u{202e}z"), "x\\u{2028}y\\u{202e}z");
        assert_eq!(escape_bytes(b"afk/1-\xff\n\xc3\xa9"), "afk/1-\\xff\\né");
        let all: String = (0u8..=0x7f)
            .map(char::from)
            .chain('\u{80}'..='\u{9f}')
            .collect();
        assert!(!escape(&all).chars().any(char::is_control));
    }

    #[test]
    fn stderr_is_folded_and_clipped() {
        assert_eq!(one_line("fatal: x\n\n  hint: y\n"), "fatal: x | hint: y");
        assert_eq!(one_line(" \n"), "(no output on stderr)");
        let long: String = (0..1000).map(|i| format!("error {i}\n")).collect();
        let folded = one_line(&long);
        assert!(folded.len() < MESSAGE_MAX + 100, "{}", folded.len());
        assert!(folded.ends_with("1000 lines in all)"), "{folded}");
        assert!(clip("é".repeat(MESSAGE_MAX), 1, "x").len() < 2 * MESSAGE_MAX);
    }
}
