//! `tend validate`: parse and check declarations; touches no target.

use std::process::ExitCode;

use super::{fail, fetch_or_last};
use crate::cli::{GlobalArgs, Output};
use crate::config::Settings;
use crate::reconcile::Context;

pub fn run(g: &GlobalArgs, settings: Settings) -> ExitCode {
    let ctx = match Context::build(settings) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let fetched = match fetch_or_last(&ctx, "tend validate") {
        Ok(f) => f,
        Err(code) => return code,
    };
    let declared = match ctx
        .mirror
        .snapshot(fetched.revision)
        .and_then(|s| ctx.declare(&s))
    {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let refused: Vec<(&crate::model::ResourceId, &String)> = declared.refused().collect();
    if g.output == Output::Json {
        let v = serde_json::json!({
            "revision": fetched.revision.to_string(),
            "resources": declared.resources.len(),
            "problems": declared.problems.iter().map(|p| serde_json::json!({"file": p.file, "line": p.line, "message": p.message})).collect::<Vec<_>>(),
            "refused": refused.iter().map(|(id, reason)| serde_json::json!({"id": id, "reason": reason})).collect::<Vec<_>>(),
            "warnings": declared.notes.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        });
        super::outln!("{v}");
    } else {
        for p in &declared.problems {
            super::outln!("{p}");
        }
        for (id, reason) in &refused {
            super::outln!("refused {id}: {reason}");
        }
        for n in &declared.notes {
            super::outln!("warning {n}");
        }
        super::outln!(
            "{} resources declared, {} problems, {} paths refused",
            declared.resources.len() + declared.blocked.len(),
            declared.problems.len(),
            refused.len()
        );
    }
    // A refused path never applies either: a check before merging says so.
    if declared.is_complete() && refused.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
