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
