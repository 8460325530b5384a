//! The live view's screen, drawn with ratatui: a few header lines (the supervisor, the
//! fleet, alerts), one table row per slot, and a footer saying how to quit. Pure drawing:
//! the same [`draw`] renders into a terminal or a test buffer.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table};

use super::{
    alerts, boot_words, cpu_words, human_duration, human_kib, issue_words, slot_reason_words,
    tracker_words,
};
use crate::control::{SlotRow, StatusReport};
use crate::exit_code;
use crate::lanes::state_file::SlotState;
use crate::text;

/// One frame's content.
#[derive(Debug, Clone, Copy)]
pub struct Screen<'a> {
    /// The repo shown in the title line.
    pub repo: &'a str,
    /// The time shown in the title line.
    pub time: &'a str,
    /// The fleet, or why there is none to show (the view keeps going either way).
    pub report: Result<&'a StatusReport, &'a str>,
    pub colour: bool,
}

/// Styles, or none at all: without colour only bold is used (NO_COLOR asks for no colour,
/// not for no emphasis).
#[derive(Debug, Clone, Copy)]
struct Palette {
    colour: bool,
}

impl Palette {
    fn fg(self, c: Color) -> Style {
        if self.colour {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }

    fn state(self, state: SlotState) -> Style {
        self.fg(match state {
            SlotState::Running => Color::Green,
            SlotState::Idle => Color::Blue,
            SlotState::Parked => Color::Red,
            SlotState::HalfOpen | SlotState::Stalled => Color::Yellow,
            SlotState::Retiring => Color::Cyan,
            SlotState::Stopped => Color::Magenta,
            SlotState::Unknown => Color::Reset,
        })
    }
}

/// Whether the view may use colour: only on a terminal, and not when `NO_COLOR` is set
/// to anything non-empty (<https://no-color.org>).
pub fn colour_wanted(on_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    on_terminal && no_color.is_none_or(|v| v.is_empty())
}

pub const FOOTER: &str = "q or Ctrl-C: quit this view (the fleet keeps running)";

pub fn draw(frame: &mut Frame, s: &Screen) {
    let p = Palette { colour: s.colour };
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let mut head = vec![Line::from(Span::styled(
        format!("afk-supervisor status  {}  {}", s.repo, s.time),
        bold,
    ))];
    let report = match s.report {
        Ok(r) => r,
        Err(why) => {
            head.push(Line::from(Span::styled(
                text::escape(why),
                p.fg(Color::Yellow),
            )));
            let [top, _, foot] = Layout::vertical([
                Constraint::Length(head.len() as u16),
                Constraint::Fill(1),
                Constraint::Length(1),
            ])
            .areas(frame.area());
            frame.render_widget(Paragraph::new(head), top);
            frame.render_widget(Paragraph::new(FOOTER), foot);
            return;
        }
    };
    head.extend(header_lines(report, p));
    let rows: Vec<Row> = report
        .slots
        .iter()
        .map(|r| slot_row(r, report.epoch, p))
        .collect();
    let [top, table, foot] = Layout::vertical([
        Constraint::Length(head.len() as u16),
        Constraint::Fill(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(head), top);
    let header = Row::new(
        [
            "SLOT",
            "STATE",
            "PID",
            "WORKER",
            "ISSUE",
            "UPTIME",
            // Workers started after the slot's first (a next issue's too), not crashes.
            "RESP",
            "CPU",
            "MEM",
            "PEAK",
            "LAST EVENT / WHY PARKED",
        ]
        .map(Cell::from),
    )
    .style(bold);
    let widths = [
        Constraint::Length(4),
        Constraint::Length(9),
        Constraint::Length(7),
        Constraint::Length(22),
        Constraint::Fill(2),
        Constraint::Length(6),
        Constraint::Length(4),
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Fill(3),
    ];
    frame.render_widget(Table::new(rows, widths).header(header), table);
    frame.render_widget(Paragraph::new(FOOTER), foot);
}

/// The supervisor line, the fleet line, then the pause and the fleet circuit if any.
fn header_lines(r: &StatusReport, p: Palette) -> Vec<Line<'static>> {
    let f = &r.fleet;
    let mut sup = format!("supervisor pid={}", r.supervisor.pid);
    if let Some(up) = r.supervisor.uptime_s {
        sup.push_str(&format!("  up {}", human_duration(up)));
    }
    let Some(age) = r.supervisor.heartbeat_age_s else {
        // Before the first heartbeat there is no fleet to describe yet.
        sup.push_str("  no heartbeat yet (boot sweeps running)");
        return vec![Line::from(sup)];
    };
    sup.push_str(&format!("  heartbeat {} ago", human_duration(age)));
    if let Some(b) = &f.boot_suite {
        sup.push_str(&format!("  boot suite: {}", boot_words(b)));
    }
    sup.push_str(&format!("  tracker: {}", tracker_words(f)));
    if let Some(i) = &f.isolation {
        sup.push_str(&format!("  isolation: {}", text::excerpt(&text::escape(i))));
    }
    let circuit = r.slots.iter().filter(|s| s.probe_epoch.is_some()).count();
    let parked = match (f.parked, circuit) {
        (0, _) => "parked 0".to_string(),
        (n, 0) => format!("parked {n} (exit {})", exit_code::CONFIG),
        (n, c) if c == n => format!("parked {n} (circuit open)"),
        (n, c) => format!(
            "parked {n} ({c} circuit open, {} exit {})",
            n - c,
            exit_code::CONFIG
        ),
    };
    let mut fleet = vec![
        Span::raw(format!(
            "fleet: target {}  live {}  idle {}  ",
            f.target, f.live, f.idle
        )),
        Span::styled(
            parked,
            if f.parked > 0 {
                p.fg(Color::Red)
            } else {
                Style::default()
            },
        ),
        Span::raw(format!(
            "  deaths {}  respawns {} in {}",
            f.deaths,
            f.respawns,
            human_duration(f.window_s)
        )),
    ];
    if let Some(q) = f.quarantined {
        fleet.push(Span::raw("  "));
        fleet.push(Span::styled(
            format!("quarantined {q}"),
            if q > 0 {
                p.fg(Color::Magenta)
            } else {
                Style::default()
            },
        ));
    }
    let mut lines = vec![Line::from(sup), Line::from(fleet)];
    for a in alerts(r) {
        let colour = if a.starts_with("paused") {
            Color::Yellow
        } else {
            Color::Red
        };
        lines.push(Line::from(Span::styled(a, p.fg(colour))));
    }
    lines
}

fn slot_row(s: &SlotRow, now: u64, p: Palette) -> Row<'static> {
    let last = match slot_reason_words(s, now) {
        Some(why) => Cell::from(why).style(p.fg(Color::Red)),
        None => Cell::from(s.last_event.as_ref().map_or("-".into(), |e| {
            // `2027-01-15T08:00:01.000Z` → `08:00:01`.
            let hms = e.ts.get(11..19).unwrap_or(&e.ts);
            text::escape(&format!("{hms} {}: {}", e.kind, e.msg))
        })),
    };
    Row::new(vec![
        Cell::from(s.slot.to_string()),
        Cell::from(s.state.to_string()).style(p.state(s.state)),
        Cell::from(s.pid.map_or("-".into(), |p| p.to_string())),
        Cell::from(s.worker_id.as_deref().map_or("-".into(), text::escape)),
        Cell::from(issue_words(s)),
        Cell::from(s.uptime_s.map_or("-".into(), human_duration)),
        Cell::from(s.restarts.to_string()),
        Cell::from(s.cpu_permille.map_or("-".into(), cpu_words)),
        Cell::from(s.rss_kib.map_or("-".into(), human_kib)),
        // The attempt's `memory.peak`: cgroup mode with the memory controller only.
        Cell::from(s.memory_peak_kib.map_or("-".into(), human_kib)),
        last,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::tests::report;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use ratatui::buffer::Buffer;

    fn render(colour: bool, report: Result<&StatusReport, &str>) -> Buffer {
        let mut t = Terminal::new(TestBackend::new(200, 16)).unwrap();
        let screen = Screen {
            repo: "/src/repo",
            time: "2027-01-15T08:00:02Z",
            report,
            colour,
        };
        t.draw(|f| draw(f, &screen)).unwrap();
        t.backend().buffer().clone()
    }

    fn lines(b: &Buffer) -> Vec<String> {
        let w = b.area.width as usize;
        b.content
            .chunks(w)
            .map(|row| row.iter().map(|c| c.symbol()).collect::<String>())
            .collect()
    }

    /// Where `needle` starts on the screen (row, column).
    fn find(b: &Buffer, needle: &str) -> (u16, u16) {
        for (y, l) in lines(b).iter().enumerate() {
            if let Some(x) = l.find(needle) {
                return (y as u16, l[..x].chars().count() as u16);
            }
        }
        panic!("{needle:?} not on screen:\n{}", lines(b).join("\n"));
    }

    #[test]
    fn the_screen_shows_the_fleet_the_alerts_and_each_slot_in_words() {
        let r = report();
        let b = render(true, Ok(&r));
        let text = lines(&b).join("\n");
        let l: Vec<&str> = text.lines().map(str::trim_end).collect();
        assert_eq!(
            l[0],
            "afk-supervisor status  /src/repo  2027-01-15T08:00:02Z"
        );
        assert_eq!(
            l[1],
            "supervisor pid=4242  up 1h02m  heartbeat 1s ago  boot suite: clean 1.2s  tracker: local, 7 ready-for-agent"
        );
        assert_eq!(
            l[2],
            "fleet: target 4  live 1  idle 1  parked 2 (1 circuit open, 1 exit 78)  deaths 6  respawns 5 in 2m00s  quarantined 2"
        );
        assert_eq!(
            l[3],
            "paused: rate limited: API rate limit exceeded, resumes in 4m"
        );
        assert_eq!(
            l[4],
            "fleet circuit open: 3 slots tripped: exits 1 1 1: boom, probe in 1m"
        );
        assert_eq!(
            l[5],
            "SLOT STATE     PID     WORKER                 ISSUE                                            UPTIME RESP CPU    MEM    PEAK   LAST EVENT / WHY PARKED",
            "{text}"
        );
        // PEAK is the cgroup's memory.peak where there is one, `-` where there is none.
        assert_eq!(
            l[6],
            "0    running   5001    sup-4242-slot-0-3      #17 Fix the \\e[2Jparser                          3m05s  2    12.5%  20.0M  96.0M  08:00:01 slot.spawn: spawned worker sup-4242-slot-0-3",
            "{text}"
        );
        assert_eq!(
            l[7],
            "1    idle      -       -                      -                                                -      0    -      -      -      -",
            "{text}"
        );
        let row = |i: usize| {
            l.iter()
                .find(|x| x.starts_with(&format!("{i}    ")))
                .unwrap()
        };
        assert!(
            row(0).contains("running   5001    sup-4242-slot-0-3"),
            "{text}"
        );
        assert!(row(0).contains("#17 Fix the \\e[2Jparser"), "{text}");
        assert!(
            row(0).contains("3m05s  2    12.5%  20.0M  96.0M  08:00:01"),
            "{text}"
        );
        assert!(
            row(0).ends_with("08:00:01 slot.spawn: spawned worker sup-4242-slot-0-3"),
            "{text}"
        );
        assert!(row(1).contains("idle"), "{text}");
        assert!(row(2).ends_with("agent.command not configured"), "{text}");
        assert!(
            row(3).ends_with("circuit open: 5 fast deaths within 120s, probe in 3m"),
            "{text}"
        );
        assert_eq!(l[15], FOOTER);
        // Colour where it means something.
        let (y, x) = find(&b, "agent.command not configured");
        assert_eq!(b[(x, y)].fg, Color::Red);
        let (y, x) = find(&b, "running");
        assert_eq!(b[(x, y)].fg, Color::Green);
        let (y, x) = find(&b, "paused:");
        assert_eq!(b[(x, y)].fg, Color::Yellow);
    }

    #[test]
    fn before_the_first_heartbeat_only_the_supervisor_is_shown() {
        let mut r = report();
        r.supervisor.heartbeat_age_s = None;
        r.supervisor.heartbeat_epoch = None;
        r.slots.clear();
        let b = render(true, Ok(&r));
        let l = lines(&b);
        assert_eq!(
            l[1].trim_end(),
            "supervisor pid=4242  up 1h02m  no heartbeat yet (boot sweeps running)"
        );
        assert!(
            !l.iter()
                .any(|x| x.contains("fleet:") || x.contains("tracker")),
            "{l:#?}"
        );
    }

    #[test]
    fn without_colour_no_cell_has_one() {
        let r = report();
        for b in [
            render(false, Ok(&r)),
            render(false, Err("no supervisor running")),
        ] {
            assert!(
                b.content
                    .iter()
                    .all(|c| c.fg == Color::Reset && c.bg == Color::Reset),
                "{}",
                lines(&b).join("\n")
            );
        }
        // And the words are all there still.
        let b = render(false, Ok(&r));
        find(&b, "circuit open: 5 fast deaths within 120s, probe in 3m");
        find(&b, "paused: rate limited");
        let b = render(false, Err("no supervisor running for this project (x)"));
        find(&b, "no supervisor running for this project (x)");
    }

    #[test]
    fn no_color_and_a_pipe_turn_colour_off() {
        use std::ffi::OsStr;
        assert!(colour_wanted(true, None));
        assert!(colour_wanted(true, Some(OsStr::new(""))));
        assert!(!colour_wanted(true, Some(OsStr::new("1"))));
        assert!(!colour_wanted(false, None));
    }
}
