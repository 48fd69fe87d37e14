//! What tells a mirror is missing objects: a read's note beside the
//! objects, and a fetch's error. The repair (`repair.rs`) acts on them.

use std::path::Path;

use git2::Oid;

use super::SourceError;

/// Written beside the objects by a reader that found one missing; the next
/// fetch checks the whole revision and removes it.
pub(super) const DAMAGED: &str = "tend-damaged";

/// Notes, best effort, that a read in the mirror at `dir` found `oid`
/// missing.
pub(super) fn mark_damaged(dir: &Path, oid: Oid) {
    let _ = std::fs::write(dir.join(DAMAGED), format!("{oid}\n"));
}

/// Whether `e` says the mirror lacks an object (rather than that the
/// remote or the configuration is wrong), and what it lacks.
pub(super) fn lost_objects(e: &SourceError) -> Option<String> {
    match e {
        SourceError::Git { context, message }
            if message.contains("not found") || message.contains("no match for id") =>
        {
            Some(format!("{context}: {message}"))
        }
        SourceError::NotACommit {
            reference, kind, ..
        } if kind == "missing object" => {
            Some(format!("{reference} points to an object the mirror lacks"))
        }
        _ => None,
    }
}
