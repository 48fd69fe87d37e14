//! tend: keeps live state equal to a versioned declaration in Git, and keeps
//! that responsibility after the first run.

pub mod model;
pub mod source;
pub mod target;
