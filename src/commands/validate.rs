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
    if g.output == Output::Json {
        let v = serde_json::json!({
            "revision": fetched.revision.to_string(),
            "resources": declared.resources.len(),
            "problems": declared.problems.iter().map(|p| serde_json::json!({"file": p.file, "line": p.line, "message": p.message})).collect::<Vec<_>>(),
        });
        super::outln!("{v}");
    } else {
        for p in &declared.problems {
            super::outln!("{p}");
        }
        super::outln!(
            "{} resources declared, {} problems",
            declared.resources.len() + declared.blocked.len(),
            declared.problems.len()
        );
    }
    if declared.is_complete() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
