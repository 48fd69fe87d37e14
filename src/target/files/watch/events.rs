//! Which events a watch can ignore.

use std::path::Path;

use super::super::temp::is_temp_name;

/// Whether an event can mean a managed path changed. Opens and read-only
/// closes cannot: a web server reading the files it serves, or tend
/// listing a directory, must not schedule passes.
pub(super) fn changes_something(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    use notify::EventKind;
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// tend's own temp files (`.tend-*.tmp`), whose events are never a change.
pub(super) fn is_own_temp(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    path.file_name().is_some_and(|n| is_temp_name(n.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_temp_files_are_told_by_name() {
        assert!(is_own_temp(Path::new("/r/etc/.tend-abc.tmp")));
        assert!(!is_own_temp(Path::new("/r/etc/tend.tmp")));
    }

    #[test]
    fn reads_and_opens_are_not_changes() {
        use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, ModifyKind};
        use notify::EventKind;
        assert!(!changes_something(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!changes_something(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(changes_something(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(changes_something(&EventKind::Modify(ModifyKind::Data(
            DataChange::Any
        ))));
        assert!(changes_something(&EventKind::Create(CreateKind::File)));
    }
}
