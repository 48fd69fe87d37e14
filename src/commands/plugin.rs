//! `tend plugin check`: the conformance checker's command line; prints each
//! check and exits 1 when any failed.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::{Flags, Output};
use crate::target::exec::check;

pub fn check(g: &Flags, command: &[String], timeout: Duration) -> ExitCode {
    let mut results = Vec::new();
    let json = g.output == Output::Json;
    let failed = check::run(command, timeout, &mut |o: &check::Outcome| {
        if !json {
            let mark = match (o.passed, o.skipped) {
                (true, _) => "ok  ",
                (false, true) => "skip",
                (false, false) => "FAIL",
            };
            super::outln!("{mark} {}: {}", o.check, o.detail);
        }
        results.push(o.clone());
    });
    if json {
        let v = serde_json::json!({
            "passed": failed == 0,
            "checks": results.iter().map(|o| serde_json::json!({
                "check": o.check, "passed": o.passed, "skipped": o.skipped, "detail": o.detail,
            })).collect::<Vec<_>>(),
        });
        super::outln!("{v}");
    } else if failed == 0 {
        super::outln!("all {} checks passed", results.len());
    } else {
        super::outln!("{failed} of {} checks failed", results.len());
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
