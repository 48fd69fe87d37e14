//! `tend fleet status` (SPEC §12): every host's status as it keeps it in
//! the fleet's etcd, one table sorted by host (`-o json`: an array).

use std::process::ExitCode;
use std::time::SystemTime;

use super::{fail, outln, refused};
use crate::cli::{Flags, Output};
use crate::fleet::status::{self, HostStatus};
use crate::target::etcd::Connection;

/// Exit code when some host listed is not in sync, as `tend status` says
/// of one host.
const NOT_IN_SYNC: u8 = 1;

pub fn status(g: &Flags) -> ExitCode {
    let fleet = match crate::config::fleet_only(g) {
        Ok(Some(f)) => f,
        Ok(None) => {
            return fail(match &g.config {
                Some(p) => format!("{}: no `fleet:` section", p.display()),
                None => "no fleet: give -c CONFIG with a `fleet:` section".into(),
            })
        }
        Err(e) => return refused(e),
    };
    let conn = match Connection::new(&fleet.etcd) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let read = match status::read_all(&conn) {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot read the fleet's status: {e}")),
    };
    for why in &read.unreadable {
        eprintln!(
            "tend: {}",
            crate::render::quote::escape_controls(&format!("left out: {why}"))
        );
    }
    let now = SystemTime::now();
    match g.output {
        Output::Json => match serde_json::to_string_pretty(&json(&read.hosts, now)) {
            Ok(text) => outln!("{text}"),
            Err(e) => return fail(e),
        },
        _ => {
            for line in status::text(&read, now).lines() {
                outln!("{}", crate::render::quote::escape_controls(line));
            }
        }
    }
    if read.hosts.iter().all(|h| h.not_in_sync() == 0) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(NOT_IN_SYNC)
    }
}

/// Each host's document with the ages worked out.
fn json(hosts: &[HostStatus], now: SystemTime) -> serde_json::Value {
    let rows = hosts.iter().map(|h| {
        let mut v = serde_json::to_value(h).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "oldest_drift_age_seconds".into(),
                status::age(h.oldest_drift.as_deref(), now).into(),
            );
            o.insert(
                "last_pass_age_seconds".into(),
                status::age(h.last_pass.as_deref(), now).into(),
            );
        }
        v
    });
    serde_json::Value::Array(rows.collect())
}
