//! The report of a run: the machine it measured, each scenario's settings,
//! then its sections, as human tables and one JSON document. A section is
//! the rows of one type, which says its JSON key, its title and its table
//! ([`Row`]): the report knows no scenario and none of their fields.

use std::any::Any;
use std::fmt::{Display, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::ser::{SerializeMap, Serializer as _};
use serde::Serialize;

use crate::error::{Context, Result};
use crate::measure::machine::Machine;

/// The JSON writer every section is written with.
type Map<'a> = serde_json::ser::Compound<'a, &'a mut Vec<u8>, serde_json::ser::PrettyFormatter<'a>>;

/// One row of a report section: a case's figures.
pub(crate) trait Row: Serialize + Sized + 'static {
    /// The section's key in the JSON report.
    const KEY: &'static str;

    /// The title above the section's table; `None` prints no table (the
    /// scenario printed its figures as they finished).
    fn title() -> Option<String>;

    /// The section's table: one line per row, or more.
    fn table(rows: &[Self]) -> String;

    /// This row's case and how much other work ran in its window, when it
    /// is a measured window: (case, cores of other work, attempts).
    fn disturbance(&self) -> Option<(&str, f64, u32)> {
        None
    }
}

/// The rows of one [`Row`] type, behind one interface.
trait Section {
    fn key(&self) -> &'static str;
    fn is_empty(&self) -> bool;
    fn entry(&self, map: &mut Map<'_>) -> serde_json::Result<()>;
    fn text(&self) -> Option<String>;
    fn disturbed(&self, limit: f64, into: &mut Vec<String>);
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

struct Rows<R>(Vec<R>);

impl<R: Row> Section for Rows<R> {
    fn key(&self) -> &'static str {
        R::KEY
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn entry(&self, map: &mut Map<'_>) -> serde_json::Result<()> {
        map.serialize_entry(R::KEY, &self.0)
    }

    fn text(&self) -> Option<String> {
        let title = R::title()?;
        Some(format!("\n{title}\n{}", R::table(&self.0)))
    }

    fn disturbed(&self, limit: f64, into: &mut Vec<String>) {
        for (name, other, attempts) in self.0.iter().filter_map(Row::disturbance) {
            if other > limit {
                into.push(format!(
                    "{} {name}: {other:.2} cores of other work (after {attempts} attempts)",
                    R::KEY
                ));
            }
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A case that did not run.
#[derive(Debug, Serialize)]
pub(crate) struct Skipped {
    pub(crate) scenario: &'static str,
    pub(crate) case: String,
    pub(crate) reason: String,
}

/// A whole run: the figures of every scenario that ran, in one document.
pub(crate) struct Report {
    /// `push`, `pop`, ..., `all`: the subcommand.
    scenario: &'static str,
    started_at_unix: u64,
    machine: Machine,
    /// Each scenario's settings, by scenario name, and `postgresql`: the
    /// `--pg-setting`s and the values the server ran with.
    pub(crate) settings: serde_json::Map<String, serde_json::Value>,
    /// The section keys in the order the report shows them; a section with
    /// another key goes last.
    order: &'static [&'static str],
    sections: Vec<Box<dyn Section>>,
    /// Cases not run, and why (e.g. the ack route is not there yet).
    skipped: Vec<Skipped>,
    /// Cases whose window still had more than `max_other_cpu` cores of other
    /// work on the machine after every attempt: read their figures with care.
    disturbed: Vec<String>,
    /// The limit of other work (cores) above which a case is disturbed.
    max_other_cpu: f64,
    /// Scenarios that failed, with the error; their finished cases are kept.
    pub(crate) failures: Vec<String>,
}

impl Report {
    /// An empty report whose sections come in `order` (their keys).
    pub(crate) fn new(
        scenario: &'static str,
        started_at: SystemTime,
        machine: Machine,
        max_other_cpu: f64,
        order: &'static [&'static str],
    ) -> Report {
        Report {
            scenario,
            started_at_unix: started_at
                .duration_since(UNIX_EPOCH)
                .map(|elapsed| elapsed.as_secs())
                .unwrap_or_default(),
            machine,
            settings: serde_json::Map::new(),
            order,
            sections: Vec::new(),
            skipped: Vec::new(),
            disturbed: Vec::new(),
            max_other_cpu,
            failures: Vec::new(),
        }
    }

    /// The rows of type `R` so far.
    pub(crate) fn rows<R: Row>(&self) -> &[R] {
        self.sections
            .iter()
            .find_map(|section| section.as_any().downcast_ref::<Rows<R>>())
            .map_or(&[], |rows| &rows.0)
    }

    /// Add a row to its section.
    pub(crate) fn push<R: Row>(&mut self, row: R) {
        self.section_mut::<R>().0.push(row);
    }

    /// Add rows to their section.
    pub(crate) fn extend<R: Row>(&mut self, rows: impl IntoIterator<Item = R>) {
        self.section_mut::<R>().0.extend(rows);
    }

    /// Note a case that did not run.
    pub(crate) fn skip(&mut self, skipped: Skipped) {
        self.skipped.push(skipped);
    }

    fn section_mut<R: Row>(&mut self) -> &mut Rows<R> {
        let rank = |key: &str| {
            self.order
                .iter()
                .position(|&k| k == key)
                .unwrap_or(usize::MAX)
        };
        let index = match self
            .sections
            .iter()
            .position(|section| section.as_any().is::<Rows<R>>())
        {
            Some(index) => index,
            None => {
                let mine = rank(R::KEY);
                let index = self
                    .sections
                    .iter()
                    .position(|section| rank(section.key()) > mine)
                    .unwrap_or(self.sections.len());
                self.sections.insert(index, Box::new(Rows::<R>(Vec::new())));
                index
            }
        };
        self.sections[index]
            .as_any_mut()
            .downcast_mut::<Rows<R>>()
            .expect("the section of this row type")
    }

    /// True when no case finished.
    pub(crate) fn is_empty(&self) -> bool {
        self.sections.iter().all(|section| section.is_empty()) && self.skipped.is_empty()
    }

    /// Note every case whose window had more other work than the limit.
    pub(crate) fn note_disturbed(&mut self) {
        let mut disturbed = Vec::new();
        for section in &self.sections {
            section.disturbed(self.max_other_cpu, &mut disturbed);
        }
        self.disturbed = disturbed;
    }

    /// The JSON document, pretty-printed.
    pub(crate) fn json(&self) -> Result<String> {
        let mut out = Vec::new();
        self.write_json(&mut out).context("serialise the report")?;
        String::from_utf8(out).context("the report as text")
    }

    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let mut serializer = serde_json::Serializer::pretty(out);
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("tool", "queen-load")?;
        map.serialize_entry("scenario", self.scenario)?;
        map.serialize_entry("started_at_unix", &self.started_at_unix)?;
        map.serialize_entry("machine", &self.machine)?;
        map.serialize_entry("settings", &self.settings)?;
        for section in self.sections.iter().filter(|section| !section.is_empty()) {
            section.entry(&mut map)?;
        }
        if !self.skipped.is_empty() {
            map.serialize_entry("skipped", &self.skipped)?;
        }
        if !self.disturbed.is_empty() {
            map.serialize_entry("disturbed", &self.disturbed)?;
        }
        map.serialize_entry("max_other_cpu", &self.max_other_cpu)?;
        if !self.failures.is_empty() {
            map.serialize_entry("failures", &self.failures)?;
        }
        map.end()
    }

    /// The human tables, one per section that has rows.
    pub(crate) fn table(&self) -> String {
        let m = &self.machine;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "queen-load {}: {} ({} cpus, {} MiB), PostgreSQL {}, commit {}{}",
            self.scenario,
            m.cpu_model,
            m.nproc,
            m.memory_mib,
            m.postgres_version,
            short(&m.git_commit),
            if m.git_dirty { " (dirty)" } else { "" }
        );
        let pg_settings: Vec<&str> = self
            .settings
            .get("postgresql")
            .and_then(|pg| pg.get("pg_settings"))
            .and_then(serde_json::Value::as_array)
            .map(|list| list.iter().filter_map(serde_json::Value::as_str).collect())
            .unwrap_or_default();
        if !pg_settings.is_empty() {
            let _ = writeln!(out, "PostgreSQL settings: {}", pg_settings.join(" "));
        }
        for section in self.sections.iter().filter(|section| !section.is_empty()) {
            if let Some(text) = section.text() {
                out.push_str(&text);
            }
        }
        list(&mut out, "skipped", &self.skipped, |s| {
            format!("{} {}: {}", s.scenario, s.case, s.reason)
        });
        list(
            &mut out,
            format_args!(
                "disturbed (other work above {:.2} cores in the window)",
                self.max_other_cpu
            ),
            &self.disturbed,
            String::clone,
        );
        list(&mut out, "FAILED", &self.failures, String::clone);
        out
    }
}

/// A section listing `items`, one indented `line` each; nothing when there
/// are none.
fn list<T>(out: &mut String, title: impl Display, items: &[T], line: impl Fn(&T) -> String) {
    if !items.is_empty() {
        let _ = writeln!(out, "\n{title}");
        for item in items {
            let _ = writeln!(out, "  {}", line(item));
        }
    }
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}
