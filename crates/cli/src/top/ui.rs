//! How `objtier top` draws a [`View`]: ratatui widgets in a terminal, or plain lines when the
//! output is not one (a pipe, a log, `--once`). Both show the same figures in the same order.

use super::model::{ProcessRow, View};
use crate::report::{human_bytes, human_seconds, percent};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table};
use ratatui::Frame;

/// The header's lines: the daemon, the source's cost and attributed share, the migrations.
fn header_lines(v: &View) -> [String; 3] {
    let cost = match (v.source_cpu_share, v.observations_per_s) {
        (Some(cpu), Some(obs)) => format!(
            "source cost {} of one CPU, {obs:.0} observations/s{}",
            percent(cpu),
            if v.samples_lost > 0 {
                format!(", {} samples lost", v.samples_lost)
            } else {
                String::new()
            }
        ),
        _ => "source cost not reported".to_string(),
    };
    let attributed = v
        .attributed_share
        .map_or("attributed: nothing sampled yet".to_string(), |s| {
            format!("attributed to objects {}", percent(s))
        });
    let over = v.rates_over_s.map_or("since start".to_string(), |s| {
        format!("over the last {}", human_seconds(s))
    });
    [
        format!(
            "daemon pid {}, up {}, source {}, interval {} ms",
            v.daemon_pid,
            human_seconds(v.uptime_s),
            v.source,
            v.interval_ms
        ),
        format!("{cost}; {attributed} (last interval)"),
        format!(
            "migrations {over}: {} promoted/s, {} demoted/s{}",
            pages(v.promoted_per_s),
            pages(v.demoted_per_s),
            if v.failed_per_s > 0.0 {
                format!(", {} failed/s", pages(v.failed_per_s))
            } else {
                String::new()
            }
        ),
    ]
}

/// Pages per second as bytes per second.
fn pages(per_s: f64) -> String {
    human_bytes((per_s * objtier_wire::PAGE_SIZE as f64) as u64)
}

fn tier_cells(v: &View) -> Vec<[String; 5]> {
    v.tiers
        .iter()
        .map(|t| {
            [
                format!("tier {} (node {})", t.tier, t.nodes),
                human_bytes(t.capacity_bytes),
                human_bytes(t.used_bytes),
                human_bytes(t.objtier_bytes),
                human_bytes(t.free_bytes),
            ]
        })
        .collect()
}

fn process_cells(p: &ProcessRow) -> [String; 5] {
    let mut flags = Vec::new();
    if p.profiled {
        flags.push("profiled".to_string());
    }
    if p.no_migrate {
        flags.push("no-migrate".to_string());
    }
    if let Some(file) = &p.placement {
        flags.push(format!("placement {}", objtier_profile::file_name(file)));
    }
    [
        format!("{} {}", p.pid, p.name),
        human_bytes(p.tracked_bytes),
        p.bytes_per_tier
            .iter()
            .map(|&b| human_bytes(b))
            .collect::<Vec<_>>()
            .join(" / "),
        p.fast_share.map_or("-".into(), percent),
        flags.join(", "),
    ]
}

fn site_line(s: &super::model::HotSite) -> String {
    let accesses = if s.accesses > 0.0 {
        format!(", ~{:.0} accesses/interval", s.accesses)
    } else {
        String::new()
    };
    format!("{}: {}{accesses}", s.frame, human_bytes(s.bytes))
}

/// The view as plain text: one snapshot for a pipe or `--once`.
pub fn text(v: &View) -> String {
    let mut out = String::new();
    for line in header_lines(v) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&format!(
        "{:<22} {:>10} {:>10} {:>10} {:>10}\n",
        "tiers", "capacity", "used", "objtier", "free"
    ));
    for [name, capacity, used, objtier, free] in tier_cells(v) {
        out.push_str(&format!(
            "{name:<22} {capacity:>10} {used:>10} {objtier:>10} {free:>10}\n"
        ));
    }
    out.push_str(&format!("{} attached process(es)\n", v.processes.len()));
    for p in &v.processes {
        let [who, tracked, tiers, fast, flags] = process_cells(p);
        out.push_str(&format!(
            "  pid {who}: {tracked} tracked, per tier {tiers}, in tier 0 {fast}{}\n",
            if flags.is_empty() {
                String::new()
            } else {
                format!(" ({flags})")
            }
        ));
        for s in &p.hottest {
            out.push_str(&format!("    {}\n", site_line(s)));
        }
    }
    out
}

/// Draws `v` (or, when the daemon did not answer, `error` over the last view).
pub fn draw(frame: &mut Frame, v: &View, error: Option<&str>, refresh_s: f64) {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let dim = Style::default().fg(Color::DarkGray);
    let tiers = tier_cells(v);
    let process_rows: usize = v.processes.iter().map(|p| 1 + p.hottest.len()).sum();
    let [head, tier_area, process_area, foot] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Length(tiers.len() as u16 + 3),
        Constraint::Min(process_rows.min(u16::MAX as usize) as u16 + 3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let [daemon, cost, moves] = header_lines(v);
    let mut head_lines = vec![
        Line::from(vec![Span::styled("objtier top  ", bold), Span::raw(daemon)]),
        Line::from(cost),
        Line::from(moves),
    ];
    if let Some(e) = error {
        head_lines.push(Line::from(Span::styled(
            format!("the daemon did not answer: {e}"),
            Style::default().fg(Color::Red),
        )));
    }
    frame.render_widget(Paragraph::new(head_lines), head);
    let widths = [
        Constraint::Length(24),
        Constraint::Length(11),
        Constraint::Length(11),
        Constraint::Length(11),
        Constraint::Length(11),
    ];
    let table = Table::new(
        tiers
            .into_iter()
            .map(|cells| Row::new(cells.into_iter().map(Cell::from))),
        widths,
    )
    .header(Row::new(["tier", "capacity", "used", "objtier", "free"]).style(bold))
    .block(Block::default().borders(Borders::TOP).title(" tiers "));
    frame.render_widget(table, tier_area);
    let mut rows = Vec::new();
    for p in &v.processes {
        rows.push(Row::new(process_cells(p).map(Cell::from)));
        for s in &p.hottest {
            let accesses = if s.accesses > 0.0 {
                format!("~{:.0} accesses/interval", s.accesses)
            } else {
                String::new()
            };
            rows.push(
                Row::new([format!("  {}", s.frame), human_bytes(s.bytes), accesses]).style(dim),
            );
        }
    }
    let table = Table::new(
        rows,
        [
            Constraint::Min(24),
            Constraint::Length(11),
            Constraint::Length(24),
            Constraint::Length(10),
            Constraint::Min(12),
        ],
    )
    .header(
        Row::new([
            "pid / hottest sites",
            "tracked",
            "per tier",
            "in tier 0",
            "",
        ])
        .style(bold),
    )
    .block(
        Block::default()
            .borders(Borders::TOP)
            .title(format!(" {} attached process(es) ", v.processes.len())),
    );
    frame.render_widget(table, process_area);
    frame.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(" q ", bold),
            Span::raw(format!(
                "quit · refreshed every {}",
                human_seconds(refresh_s)
            )),
        ]))
        .style(dim),
        foot,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::model::{tests::status, view};
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    #[test]
    fn the_terminal_view_shows_tiers_processes_and_sites() {
        let v = view(&status(100.0, 400, 2.0), None, &|pid| format!("prog{pid}"));
        let mut terminal = Terminal::new(TestBackend::new(110, 24)).unwrap();
        terminal
            .draw(|f| draw(f, &v, Some("connection refused"), 2.0))
            .unwrap();
        let screen: String = terminal
            .backend()
            .buffer()
            .content()
            .iter()
            .map(|c| c.symbol())
            .collect();
        for text in [
            "objtier top",
            "daemon pid 77",
            "attributed to objects 87.5 %",
            "tier 0 (node 0)",
            "20 prog20",
            "tierbench+0x3f707",
            "~4 accesses/interval",
            "75.0 %",
            "did not answer: connection refused",
            "q quit",
        ] {
            assert!(
                screen.contains(text),
                "{text:?} not on the screen:\n{screen}"
            );
        }
    }

    #[test]
    fn the_text_view_says_the_same() {
        let v = view(&status(100.0, 400, 2.0), None, &|pid| format!("prog{pid}"));
        let t = text(&v);
        assert!(
            t.contains("migrations since start: 16.0 KiB promoted/s"),
            "{t}"
        );
        assert!(
            t.contains("source cost 2.0 % of one CPU, 10 observations/s"),
            "{t}"
        );
        assert!(t.contains("pid 20 prog20: 500 B tracked, per tier 300 B / 100 B, in tier 0 75.0 % (profiled, no-migrate, placement app.placement.json)"), "{t}");
        assert!(
            t.contains("    tierbench+0x3f707: 300 B, ~4 accesses/interval"),
            "{t}"
        );
        assert!(t.contains("2 attached process(es)"));
    }
}
