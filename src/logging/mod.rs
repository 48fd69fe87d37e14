//! Where tend's log lines go and at what level: text or JSON on stderr, or
//! the systemd journal with each field as a journal field. The level can be
//! changed while the daemon runs (a reload).

mod fields;
mod journal;

use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

pub use journal::stderr_is_journal;

type Filtered = tracing_subscriber::layer::Layered<reload::Layer<EnvFilter, Registry>, Registry>;

/// The handle that changes the level of the installed subscriber.
static LEVEL: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Installs the process's subscriber: `format` is text, json or journal
/// (journal falls back to text on stderr when the journal's socket cannot
/// be reached); `level` a level name or filter directives.
pub fn init(format: &str, level: &str) {
    use std::io::IsTerminal;
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let (filter, handle) = reload::Layer::new(filter);
    let journal = match format {
        "journal" => journal::Journal::connect()
            .map_err(|e| eprintln!("tend: cannot log to the journal ({e}); logging to stderr"))
            .ok(),
        _ => None,
    };
    // Colour codes only for a terminal: a log file or the journal's stream
    // would keep them as noise.
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let output: Box<dyn Layer<Filtered> + Send + Sync> = match (journal, format) {
        (Some(j), _) => Box::new(j),
        (None, "json") => Box::new(fmt.json()),
        (None, _) => Box::new(fmt.with_target(false).fmt_fields(fields::Escaped)),
    };
    if tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .try_init()
        .is_ok()
    {
        let _ = LEVEL.set(handle);
    }
}

/// Why the level could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum LevelError {
    #[error("log level {level:?}: {source}")]
    Parse {
        level: String,
        source: tracing_subscriber::filter::ParseError,
    },
    #[error(transparent)]
    Reload(#[from] reload::Error),
    #[error("logging was not set up")]
    NotSetUp,
}

/// Changes the level of the subscriber [`init`] installed.
pub fn set_level(level: &str) -> Result<(), LevelError> {
    let filter = EnvFilter::try_new(level).map_err(|source| LevelError::Parse {
        level: level.to_string(),
        source,
    })?;
    match LEVEL.get() {
        Some(handle) => Ok(handle.reload(filter)?),
        None => Err(LevelError::NotSetUp),
    }
}
