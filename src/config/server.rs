//! `server:`: the listener (address, limits, `/healthz`'s patience), the
//! refresh token and the webhooks' secrets.

use std::time::Duration;

use super::file::ServerConfig;
use super::problem::Problems;
use super::settings::ServerSettings;
use super::DEFAULT_LISTEN;
use crate::cli::Flags;
use crate::server::Limits;

/// The listener in force: `--listen` over the config over the defaults.
pub(super) fn resolve(
    args: &Flags,
    server: Option<ServerConfig>,
    problems: &mut Problems,
) -> ServerSettings {
    let server = server.unwrap_or_default();
    let defaults = Limits::default();
    if server.max_connections == Some(0) {
        problems.at("server.max_connections", "must be more than 0");
    }
    ServerSettings {
        listen: args
            .listen
            .clone()
            .or(server.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.into()),
        refresh_token_file: server.refresh_token_file,
        stuck_after: server.stuck_after.map_or(Duration::from_secs(60), |d| d.0),
        limits: Limits {
            connections: server.max_connections.unwrap_or(defaults.connections),
            header_timeout: server
                .header_timeout
                .map_or(defaults.header_timeout, |t| t.0),
            request_timeout: server
                .request_timeout
                .map_or(defaults.request_timeout, |t| t.0),
        },
        webhooks: server.webhooks.unwrap_or_default().secret_files().collect(),
    }
}
