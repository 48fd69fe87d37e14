//! `tend validate`: parse and check declarations; touches no target. A
//! state dir that is not there is not made (a throwaway one is used), and
//! `--as-written` reads the repository alone, as `diff --against` does.

use std::process::ExitCode;

use super::revisions::{declare_as_written, Revisions};
use super::{fetch_or_last, throwaway_state_dir, Because, Cause, Failure};
use crate::cli::{Flags, Output};
use crate::config::Settings;
use crate::declare::Declared;
use crate::reconcile::Context;
use crate::render::count;
use crate::render::quote::{escape_controls as said, name};

pub fn run(g: &Flags, mut settings: Settings, as_written: bool) -> Result<ExitCode, Failure> {
    let (revision, declared) = if as_written {
        read_as_written(g, &settings)?
    } else {
        let _throwaway = throwaway_state_dir(&mut settings)?;
        read_for_this_host(settings)?
    };
    let refused: Vec<(&crate::model::ResourceId, &String)> = declared.refused().collect();
    if g.output == Output::Json {
        let v = serde_json::json!({
            "revision": revision.to_string(),
            "resources": declared.resources.len(),
            "problems": declared.problems.iter().map(|p| serde_json::json!({"file": p.file, "line": p.line, "message": p.message})).collect::<Vec<_>>(),
            "refused": refused.iter().map(|(id, reason)| serde_json::json!({"id": id, "reason": reason})).collect::<Vec<_>>(),
            "warnings": declared.notes.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        });
        super::outln!("{v}");
    } else {
        for p in &declared.problems {
            super::outln!("{}", said(&p.to_string()));
        }
        for (id, reason) in &refused {
            super::outln!("refused {}: {}", name(id.as_str()), said(reason));
        }
        for n in &declared.notes {
            super::outln!("warning {}", said(&n.to_string()));
        }
        super::outln!(
            "{} declared, {}{}",
            count(
                declared.resources.len() + declared.blocked.len(),
                "resource",
                "resources"
            ),
            count(declared.problems.len(), "problem", "problems"),
            match refused.len() {
                0 => String::new(),
                n => format!(", {}", count(n, "path refused", "paths refused")),
            }
        );
    }
    // A refused path never applies either: a check before merging says so.
    Ok(if declared.is_complete() && refused.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Through the state dir's mirror, with the configured targets started to
/// learn what they serve, hooks looked up in the config and owners on
/// this host.
fn read_for_this_host(settings: Settings) -> Result<(git2::Oid, Declared), Failure> {
    let ctx = Context::observing(settings).because(Cause::Target)?;
    let fetched = fetch_or_last(&ctx, "tend validate")?;
    let declared = ctx
        .mirror
        .snapshot(fetched.revision)
        .and_then(|s| ctx.declare(&s))
        .because(Cause::Source)?;
    Ok((fetched.revision, declared))
}

fn read_as_written(g: &Flags, settings: &Settings) -> Result<(git2::Oid, Declared), Failure> {
    let revisions = Revisions::open(settings)?;
    let snapshot = revisions
        .snapshot(settings.source.reference.as_deref())
        .because(Cause::Source)?;
    let declared =
        declare_as_written(settings, g.config.is_some(), &snapshot).because(Cause::Source)?;
    Ok((snapshot.revision(), declared))
}
