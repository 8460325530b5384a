//! `status --watch` on a terminal: the screen of [`super::view`] redrawn in place once a
//! second on the alternate screen, until `q`, Esc or Ctrl-C (or SIGTERM) ends the
//! view. The view only reads the fleet's files; ending it never signals the fleet. The
//! terminal is given back as it was (main screen, cooked mode, cursor shown) on every way
//! out, a panic included, because a guard's drop does it.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::terminal::{self, EnterAlternateScreen, LeaveAlternateScreen};
use crossterm::{cursor, execute};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

use super::view::{self, Screen};
use crate::control::{ControlError, StatusReport};

/// Between two frames.
pub const EVERY: Duration = Duration::from_secs(1);
/// Longest wait for a key before the quit flags are looked at again.
const KEY_SLICE: Duration = Duration::from_millis(200);

/// Raw mode and the alternate screen while it lives; the terminal restored when dropped.
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> io::Result<TerminalGuard> {
        terminal::enable_raw_mode()?;
        let guard = TerminalGuard;
        execute!(io::stdout(), EnterAlternateScreen, cursor::Hide)?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = execute!(io::stdout(), LeaveAlternateScreen, cursor::Show);
        let _ = terminal::disable_raw_mode();
    }
}

/// Is this key a request to leave the view?
fn quits(key: &crossterm::event::KeyEvent) -> bool {
    key.kind == KeyEventKind::Press
        && match key.code {
            KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => true,
            KeyCode::Char('c') => key.modifiers.contains(KeyModifiers::CONTROL),
            _ => false,
        }
}

/// Runs the view until asked to quit. `fetch` makes each frame's report, or says why
/// there is none (no fleet running: the view keeps watching for one).
pub fn run(
    repo: &str,
    colour: bool,
    mut fetch: impl FnMut() -> Result<StatusReport, ControlError>,
) -> io::Result<()> {
    // Raw mode turns Ctrl-C into a key; these catch it when it still arrives as a signal,
    // and a `kill`, so the terminal is restored on each. A hang-up keeps its default (the
    // view ends at once): there is no terminal left to restore.
    let quit = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&quit))?;
    }
    let _guard = TerminalGuard::enter()?;
    let mut term = Terminal::new(CrosstermBackend::new(io::stdout()))?;
    term.clear()?;
    loop {
        let report = fetch().map_err(|e| e.to_string());
        let time = crate::timeutil::rfc3339(std::time::SystemTime::now());
        let screen = Screen {
            repo,
            time: &time,
            report: report.as_ref().map_err(String::as_str),
            colour,
        };
        term.draw(|f| view::draw(f, &screen))?;
        let next = Instant::now() + EVERY;
        loop {
            if quit.load(Ordering::Relaxed) {
                return Ok(());
            }
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if event::poll(left.min(KEY_SLICE))? {
                match event::read()? {
                    Event::Key(k) if quits(&k) => return Ok(()),
                    Event::Resize(..) => break,
                    _ => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::KeyEvent;

    #[test]
    fn q_esc_and_ctrl_c_quit_other_keys_do_not() {
        let k = |code, m| KeyEvent::new(code, m);
        assert!(quits(&k(KeyCode::Char('q'), KeyModifiers::NONE)));
        assert!(quits(&k(KeyCode::Esc, KeyModifiers::NONE)));
        assert!(quits(&k(KeyCode::Char('c'), KeyModifiers::CONTROL)));
        assert!(!quits(&k(KeyCode::Char('c'), KeyModifiers::NONE)));
        assert!(!quits(&k(KeyCode::Char('x'), KeyModifiers::NONE)));
    }
}
