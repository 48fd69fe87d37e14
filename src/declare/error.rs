//! Why a declaration cannot be taken as written, by what it takes to fix
//! it: a human editing the declaration, or only time (a key that cannot be
//! read now). Each becomes a problem with the document's file and line.

/// Why a declaration was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeclError {
    /// What is written is wrong or incomplete (a missing field, a bad mode,
    /// a path that escapes, a source that is not there): a new revision
    /// fixes it.
    #[error("{0}")]
    Invalid(String),
    /// A secret that cannot be opened now (its identity file unreadable
    /// for a reason that may pass): the resource waits, and the revision
    /// is read again at the next pass.
    #[error("{0}")]
    Waits(String),
}

impl DeclError {
    /// Whether only waiting (not a new revision) may fix it.
    pub fn waits(&self) -> bool {
        matches!(self, DeclError::Waits(_))
    }
}

impl From<String> for DeclError {
    fn from(message: String) -> DeclError {
        DeclError::Invalid(message)
    }
}

impl From<&str> for DeclError {
    fn from(message: &str) -> DeclError {
        DeclError::Invalid(message.to_string())
    }
}

impl From<crate::model::PathError> for DeclError {
    fn from(e: crate::model::PathError) -> DeclError {
        DeclError::Invalid(e.to_string())
    }
}

impl From<crate::ownership::PointerError> for DeclError {
    fn from(e: crate::ownership::PointerError) -> DeclError {
        DeclError::Invalid(e.to_string())
    }
}

/// A blob or link of the revision that could not be read makes the
/// declaration that names it invalid.
impl From<crate::source::SourceError> for DeclError {
    fn from(e: crate::source::SourceError) -> DeclError {
        DeclError::Invalid(e.to_string())
    }
}

/// Checked as written, an age file that is not one is invalid.
impl From<crate::secrets::SecretError> for DeclError {
    fn from(e: crate::secrets::SecretError) -> DeclError {
        DeclError::Invalid(e.to_string())
    }
}
