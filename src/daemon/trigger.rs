//! What makes the daemon look at something sooner than its timers say.

use crate::model::ResourceId;

/// Why the loop should look at something sooner than its timers say.
/// (Fetch requests from the HTTP surface come on a channel of their own,
/// bounded, see `http::start`.)
#[derive(Debug, Clone)]
pub enum Trigger {
    /// These resources may have drifted (file-system or plugin events).
    Keys(Vec<ResourceId>),
    /// A full pass now (watch overflow, pause changes).
    FullPass,
    /// Read the config again, then fetch and pass (SIGHUP).
    Reload,
    /// Fetch now: the fleet's poller fetched a revision this host has not.
    Fetch,
}
