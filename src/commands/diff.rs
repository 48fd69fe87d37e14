//! `tend diff`: what `sync` would change, changing nothing. Exit 0 no
//! differences, 1 differences (prunes held back included), 2 error (incl.
//! invalid declarations or resources that could not be observed).

use std::process::ExitCode;

use super::{fail, fetch_or_last};
use crate::cli::{GlobalArgs, Output};
use crate::config::Settings;
use crate::ledger::{HashKey, Ledger, DATABASE_FILE};
use crate::reconcile::{self, Context, PassOptions, Pruning, Scope};

pub fn run(g: &GlobalArgs, settings: Settings) -> ExitCode {
    let ctx = match Context::build(settings) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let fetched = match fetch_or_last(&ctx, "tend diff") {
        Ok(f) => f,
        Err(code) => return code,
    };
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
    let ledger = match ledger {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let key = match HashKey::load_or_create(dir) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let revision = match reconcile::trust::admit(&ctx, &ledger, fetched.revision) {
        Ok(Ok(admitted)) => admitted.revision,
        Ok(Err(refused)) => return fail(format!("{refused}; sync would change nothing")),
        Err(e) => return fail(e),
    };
    let rev = match reconcile::load(&ctx, revision) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let p = match reconcile::prepare(&ctx, &rev, &ledger, Scope::All) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let pruning = reconcile::pruning(&ctx, &rev, &p, PassOptions::default());
    let color = g.use_color();
    let json = g.output == Output::Json;
    let shown_changes: Vec<String> = p
        .plan
        .applies
        .iter()
        .chain(p.plan.deletes.iter().filter(|_| pruning == Pruning::Delete))
        .map(|c| reconcile::show::change(&ctx, &rev, c, &key, color, json))
        .collect();
    match g.output {
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
        eprintln!("{problem}");
    }
    for (id, reason) in &p.plan.unknown {
        eprintln!("tend: {id}: could not observe: {reason}");
    }
    match &pruning {
        Pruning::Held(reason) => {
            eprintln!("tend: {} prune(s) held: {reason}", p.plan.deletes.len())
        }
        Pruning::Release => eprintln!(
            "tend: {} no longer declared: sync releases them, deleting nothing (policy.prune is false)",
            p.plan.deletes.len()
        ),
        Pruning::Delete => {}
    }
    if !rev.declared.problems.is_empty() || !p.plan.unknown.is_empty() {
        return ExitCode::from(super::ERROR);
    }
    // Prunes held back are differences too: the root holds what the
    // revision no longer declares, and `sync` would not converge. Releases
    // are not: sync acts on nothing there.
    if shown_changes.is_empty() && (p.plan.deletes.is_empty() || pruning == Pruning::Release) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
