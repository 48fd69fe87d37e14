//! `tend diff`: what `sync` would change, changing nothing. Exit 0 no
//! differences, 1 differences, 2 error (incl. invalid declarations or
//! resources that could not be observed).

use std::process::ExitCode;

use super::{fail, fetch_or_last};
use crate::cli::{GlobalArgs, Output};
use crate::config::Settings;
use crate::ledger::{HashKey, Ledger};
use crate::model::{Action, Field, Spec};
use crate::reconcile::{self, Context, PassOptions, Scope};
use crate::render::{self, Shown};

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
    let ledger = if fetched.lock.is_some() {
        Ledger::open(dir)
    } else {
        Ledger::open_read_only(dir)
    };
    let ledger = match ledger {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let key = match HashKey::load_or_create(dir) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let rev = match reconcile::load(&ctx, fetched.revision) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let p = match reconcile::prepare(&ctx, &rev, &ledger, Scope::All) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let held = reconcile::prune_guard(&ctx, &rev, &p, PassOptions::default());
    let hash = |b: &[u8]| key.hash(crate::model::blob_id(b).as_bytes());
    let color = g.use_color();
    let mut shown_changes = Vec::new();
    for change in p
        .plan
        .applies
        .iter()
        .chain(p.plan.deletes.iter().filter(|_| held.is_none()))
    {
        let target = &ctx.targets[&change.target];
        let content_changes = change.action != Action::Update
            || change
                .fields
                .iter()
                .any(|f| matches!(f, Field::Content | Field::Type { .. }));
        let live = if content_changes && change.action != Action::Create {
            target.read_live(&change.path).ok().flatten()
        } else {
            None
        };
        let desired = match change.desired.as_ref().map(|d| &d.spec) {
            Some(Spec::File(f)) if content_changes => {
                use crate::model::ContentSource;
                rev.content.read(f.blob).ok()
            }
            _ => None,
        };
        let sensitive = change.desired.as_ref().is_some_and(|d| d.sensitive);
        let shown = Shown {
            live: live.as_deref(),
            desired: desired.as_deref(),
            hash: &hash,
            sensitive,
            color,
        };
        shown_changes.push(match g.output {
            Output::Json => render::json(change, &shown).to_string(),
            Output::Text => render::text(change, &shown),
        });
    }
    match g.output {
        Output::Json => {
            let changes: Vec<serde_json::Value> = shown_changes
                .iter()
                .map(|s| serde_json::from_str(s).expect("rendered JSON"))
                .collect();
            let v =
                serde_json::json!({"revision": fetched.revision.to_string(), "changes": changes});
            println!("{}", serde_json::to_string_pretty(&v).expect("serializes"));
        }
        Output::Text => {
            for s in &shown_changes {
                print!("{s}");
            }
        }
    }
    for problem in &rev.declared.problems {
        eprintln!("{problem}");
    }
    for (id, reason) in &p.plan.unknown {
        eprintln!("tend: {id}: could not observe: {reason}");
    }
    if let Some(reason) = &held {
        eprintln!("tend: {} prune(s) held: {reason}", p.plan.deletes.len());
    }
    if !rev.declared.problems.is_empty() || !p.plan.unknown.is_empty() {
        return ExitCode::from(super::ERROR);
    }
    if shown_changes.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
