//! `tend diff`: what `sync` would change, changing nothing. Exit 0 no
//! differences, 1 differences (prunes held back included), 2 error (incl.
//! invalid declarations or resources that could not be observed). A state
//! dir that is not there is not made: a throwaway one is used and removed.

use std::process::ExitCode;

use super::{fetch_or_last, throwaway_state_dir, Because, Cause, Failure};
use crate::cli::{Flags, Output};
use crate::config::Settings;
use crate::ledger::{HashKey, Ledger, DATABASE_FILE};
use crate::model::Change;
use crate::reconcile::{self, Context, PassOptions, Pruning, Scope};
use crate::render::{self, count, markdown, quote};

pub fn run(g: &Flags, mut settings: Settings) -> Result<ExitCode, Failure> {
    // Dropped last: everything below may write into it.
    let _throwaway = throwaway_state_dir(&mut settings)?;
    let ctx = Context::observing(settings).because(Cause::Target)?;
    let fetched = fetch_or_last(&ctx, "tend diff")?;
    let dir = &ctx.settings.state_dir;
    // With no ledger yet, a fresh one is what there is to compare with; an
    // empty one in memory gives the same answer and writes nothing.
    let ledger = if fetched.lock.is_none() {
        Ledger::open_read_only(dir)
    } else if dir.join(DATABASE_FILE).exists() {
        Ledger::open(dir)
    } else {
        Ledger::open_in_memory(dir)
    };
    let ledger = ledger.because(Cause::State)?;
    let key = HashKey::load_or_create(dir).because(Cause::State)?;
    let revision =
        match reconcile::trust::admit(&ctx, &ledger, fetched.revision).because(Cause::Source)? {
            Ok(admitted) => admitted.revision,
            Err(refused) => {
                return Err(Failure::says(
                    Cause::Source,
                    format!("{refused}; sync would change nothing"),
                ))
            }
        };
    let rev = reconcile::load(&ctx, revision).because(Cause::Source)?;
    let p = reconcile::prepare(&ctx, &rev, &ledger, Scope::All).because(Cause::State)?;
    let pruning = reconcile::pruning(&ctx, &rev, &p, PassOptions::default());
    let color = g.use_color();
    let json = g.output != Output::Text;
    let changes: Vec<&Change> = p
        .plan
        .applies
        .iter()
        .chain(p.plan.deletes.iter().filter(|_| pruning == Pruning::Delete))
        .collect();
    let shown_changes: Vec<String> = changes
        .iter()
        .map(|c| reconcile::show::change(&ctx, &rev, c, &key, color && !json, json))
        .collect();
    match g.output {
        Output::Markdown => {
            let rows: Vec<markdown::Row> = changes
                .iter()
                .zip(&shown_changes)
                .map(|(c, shown)| row(c, shown))
                .collect();
            let problems: Vec<String> = rev
                .declared
                .problems
                .iter()
                .map(|p| p.to_string())
                .collect();
            let title = format!(
                "tend diff {} against the live state",
                markdown::code(&fetched.revision.to_string()[..12])
            );
            super::out(&markdown::render(&markdown::Report {
                title: &title,
                rows: &rows,
                problems: &problems,
                notes: &[],
            }));
        }
        Output::Json => {
            let changes: Vec<serde_json::Value> = shown_changes
                .iter()
                .map(|s| serde_json::from_str(s).expect("rendered JSON"))
                .collect();
            let v = serde_json::json!({"revision": revision.to_string(), "changes": changes});
            super::outln!("{}", serde_json::to_string_pretty(&v).expect("serializes"));
        }
        Output::Text => {
            for s in &shown_changes {
                super::out(s);
            }
        }
    }
    for problem in &rev.declared.problems {
        eprintln!("{}", quote::escape_controls(&problem.to_string()));
    }
    for (id, reason) in &p.plan.unknown {
        eprintln!(
            "tend: {}: could not observe: {}",
            quote::name(id.as_str()),
            quote::escape_controls(&reason.to_string())
        );
    }
    let undeclared = p.plan.deletes.len();
    match &pruning {
        Pruning::Held(reason) => {
            eprintln!(
                "tend: {} held: {}",
                count(undeclared, "prune", "prunes"),
                quote::escape_controls(&reason.to_string())
            )
        }
        Pruning::Release => eprintln!(
            "tend: {} no longer declared: sync releases {}, deleting nothing (policy.prune is false)",
            count(undeclared, "resource", "resources"),
            if undeclared == 1 { "it" } else { "them" }
        ),
        Pruning::Delete => {}
    }
    // Both are told above, beside the changes.
    if !rev.declared.problems.is_empty() {
        return Err(Failure::told(Cause::Declarations));
    }
    if !p.plan.unknown.is_empty() {
        return Err(Failure::told(Cause::Target));
    }
    // Prunes held back are differences too: the root holds what the
    // revision no longer declares, and `sync` would not converge. Releases
    // are not: sync acts on nothing there.
    Ok(
        if shown_changes.is_empty() && (p.plan.deletes.is_empty() || pruning == Pruning::Release) {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}

/// A change's row in the Markdown report, from its JSON form.
fn row(change: &Change, shown_json: &str) -> markdown::Row {
    let v: serde_json::Value = serde_json::from_str(shown_json).expect("rendered JSON");
    let sensitive = change.desired.as_ref().is_some_and(|d| d.sensitive);
    let diff = v["diff"].as_str().unwrap_or_default().to_string();
    let mut what: Vec<String> = render::field_texts(change, sensitive)
        .into_iter()
        .filter(|t| t != "create" && t != "delete")
        .collect();
    if !diff.is_empty() {
        what.push(
            if sensitive {
                "content (sensitive)"
            } else {
                "content"
            }
            .into(),
        );
    }
    markdown::Row {
        action: change.action,
        id: change.id.to_string(),
        what,
        diff: if sensitive { String::new() } else { diff },
    }
}
