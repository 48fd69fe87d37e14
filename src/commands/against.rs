//! `tend diff --against REV`: the declared state at REV against the one at
//! `--ref` (or HEAD), for CI. Reads only the repository (see
//! [`super::revisions`]): no target, no state dir, no config needed. Exit
//! 0 equal, 1 different, 2 error, invalid declarations at `--ref`
//! included (CI must fail on them).

mod compare;

use std::process::ExitCode;

use git2::Oid;

use super::revisions::{declare_as_written, Revisions};
use super::{out, outln, Because, Cause, Failure};
use crate::cli::{Flags, Output};
use crate::config::Settings;
use crate::declare::Declared;
use crate::ledger::HashKey;
use crate::model::{Action, Field, Spec};
use crate::render::{self, count, markdown, Shown};
use crate::source::Snapshot;
use compare::Difference;

/// One revision and its declaration.
struct Side {
    name: String,
    snapshot: Snapshot,
    declared: Declared,
}

impl Side {
    fn read(
        revisions: &Revisions,
        settings: &Settings,
        config_given: bool,
        rev: Option<&str>,
    ) -> Result<Side, Failure> {
        let snapshot = revisions.snapshot(rev).because(Cause::Source)?;
        let declared =
            declare_as_written(settings, config_given, &snapshot).because(Cause::Source)?;
        Ok(Side {
            name: rev.unwrap_or("HEAD").to_string(),
            snapshot,
            declared,
        })
    }

    fn bytes(&self, blob: Oid) -> Option<Vec<u8>> {
        match self.declared.inline.get(&blob) {
            Some(b) => Some(b.clone()),
            None => self.snapshot.read(blob).ok(),
        }
    }

    fn short(&self) -> String {
        self.snapshot.revision().to_string()[..12].to_string()
    }
}

pub fn run(g: &Flags, settings: Settings, against: &str) -> Result<ExitCode, Failure> {
    let settings = &settings;
    let revisions = Revisions::open(settings)?;
    let config_given = g.config.is_some();
    let reference = settings.source.reference.as_deref();
    let new = Side::read(&revisions, settings, config_given, reference)?;
    let old = Side::read(&revisions, settings, config_given, Some(against))?;
    let differences = compare::compare(&old.declared, &new.declared);
    let key = hash_key(settings)?;
    let hash = |b: &[u8]| key.hash(crate::model::blob_id(b).as_bytes());
    let mut notes = Vec::new();
    if !old.declared.problems.is_empty() {
        notes.push(format!(
            "The declaration at {} has {}; its invalid documents are left out of the comparison.",
            old.name,
            count(old.declared.problems.len(), "problem", "problems")
        ));
    }
    let problems: Vec<String> = new
        .declared
        .problems
        .iter()
        .map(|p| p.to_string())
        .collect();
    let shown = |d, color| show(d, &old, &new, &hash, color);
    match g.output {
        Output::Text => {
            let color = g.use_color();
            for d in &differences {
                out(&shown(d, color).text());
            }
        }
        Output::Json => {
            let changes: Vec<serde_json::Value> =
                differences.iter().map(|d| shown(d, false).json()).collect();
            let v = serde_json::json!({
                "revision": new.snapshot.revision().to_string(),
                "against": old.snapshot.revision().to_string(),
                "changes": changes,
            });
            outln!("{}", serde_json::to_string_pretty(&v).expect("serializes"));
        }
        Output::Markdown => {
            let rows: Vec<markdown::Row> =
                differences.iter().map(|d| shown(d, false).row()).collect();
            let title = format!(
                "tend diff {} ({}) → {} ({})",
                markdown::code(&old.name),
                markdown::code(&old.short()),
                markdown::code(&new.name),
                markdown::code(&new.short())
            );
            let md = markdown::render(&markdown::Report {
                title: &title,
                rows: &rows,
                problems: &problems,
                notes: &notes,
            });
            out(&md);
        }
    }
    for p in &problems {
        eprintln!("{}", render::quote::escape_controls(p));
    }
    if g.output != Output::Markdown {
        for n in &notes {
            eprintln!("tend: note: {}", render::quote::escape_controls(n));
        }
    }
    if !problems.is_empty() {
        return Err(Failure::says(
            Cause::Declarations,
            format!(
                "{} at {}",
                count(problems.len(), "problem", "problems"),
                new.name
            ),
        ));
    }
    Ok(if differences.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The key of the hashes shown for sensitive content: the state dir's when
/// there is one (so they match its audit log), read, never made; otherwise
/// a throwaway one, so they only tell old from new.
fn hash_key(settings: &Settings) -> Result<HashKey, Failure> {
    if let Some(key) = HashKey::load(&settings.state_dir).ok().flatten() {
        return Ok(key);
    }
    let dir = tempfile::Builder::new()
        .prefix("tend-key-")
        .tempdir()
        .because(Cause::Io)
        .map_err(|f| f.context("cannot make a throwaway key"))?;
    HashKey::load_or_create(dir.path()).because(Cause::Io)
}

/// One difference with the bytes its content diff needs.
struct ShownDifference<'a> {
    d: &'a Difference,
    live: Option<Vec<u8>>,
    desired: Option<Vec<u8>>,
    hash: &'a dyn Fn(&[u8]) -> String,
    color: bool,
}

fn show<'a>(
    d: &'a Difference,
    old: &Side,
    new: &Side,
    hash: &'a dyn Fn(&[u8]) -> String,
    color: bool,
) -> ShownDifference<'a> {
    let c = &d.change;
    let content = c.action == Action::Create
        || c.fields
            .iter()
            .any(|f| matches!(f, Field::Content | Field::Type { .. }));
    let blob = |spec: Option<&Spec>| match spec {
        Some(Spec::File(f)) if content => Some(f.blob),
        _ => None,
    };
    let old_spec = old.declared.resources.get(&c.id).map(|d| &d.spec);
    let new_spec = c.desired.as_ref().map(|d| &d.spec);
    ShownDifference {
        d,
        live: blob(old_spec)
            .filter(|_| c.action == Action::Update)
            .and_then(|b| old.bytes(b)),
        desired: blob(new_spec).and_then(|b| new.bytes(b)),
        hash,
        color,
    }
}

impl ShownDifference<'_> {
    fn shown(&self) -> Shown<'_> {
        Shown {
            live: self.live.as_deref(),
            desired: self.desired.as_deref(),
            hash: self.hash,
            sensitive: self.d.sensitive,
            color: self.color,
        }
    }

    fn text(&self) -> String {
        let more: Vec<String> = self.d.more.iter().map(|m| m.text.clone()).collect();
        render::text_with(&self.d.change, &self.shown(), &more)
    }

    fn json(&self) -> serde_json::Value {
        let c = &self.d.change;
        let more: Vec<&str> = match c.action {
            Action::Update => self.d.more.iter().map(|m| m.name).collect(),
            _ => Vec::new(),
        };
        render::json_with(c, &self.shown(), &more)
    }

    fn row(&self) -> markdown::Row {
        let c = &self.d.change;
        let mut what: Vec<String> = render::field_texts(c, self.d.sensitive)
            .into_iter()
            .filter(|t| t != "create" && t != "delete")
            .collect();
        what.extend(self.d.more.iter().map(|m| m.text.clone()));
        let diff = render::content_diff(c, &self.shown());
        if !diff.is_empty() {
            what.push(if self.d.sensitive {
                "content (sensitive)".into()
            } else {
                "content".into()
            });
        }
        markdown::Row {
            action: c.action,
            id: c.id.to_string(),
            what,
            // Sensitive content shows in the table only: its one line
            // holds hashes, and hiding it from a diff block is surer.
            diff: if self.d.sensitive {
                String::new()
            } else {
                diff
            },
        }
    }
}
