//! `tend fleet status` (SPEC §12): every host's status as it keeps it in
//! the fleet's etcd, one table sorted by host (`-o json`: an array).

use std::process::ExitCode;
use std::time::SystemTime;

use super::{outln, Because, Cause, Failure};
use crate::cli::{Flags, Output};
use crate::fleet::status::{self, HostStatus};
use crate::target::etcd::Connection;

/// Exit code when some host listed is not in sync, as `tend status` says
/// of one host.
const NOT_IN_SYNC: u8 = 1;

pub fn status(g: &Flags) -> Result<ExitCode, Failure> {
    let Some(fleet) = crate::config::fleet_only(g)? else {
        return Err(Failure::says(
            Cause::Usage,
            match &g.config {
                Some(p) => format!("{}: no `fleet:` section", p.display()),
                None => "no fleet: give -c CONFIG with a `fleet:` section".into(),
            },
        ));
    };
    let conn = Connection::new(&fleet.etcd).because(Cause::Fleet)?;
    let read = status::read_all(&conn)
        .because(Cause::Fleet)
        .map_err(|f| f.context("cannot read the fleet's status"))?;
    for why in &read.unreadable {
        eprintln!(
            "tend: {}",
            crate::render::quote::escape_controls(&format!("left out: {why}"))
        );
    }
    let now = SystemTime::now();
    match g.output {
        Output::Json => {
            let text = serde_json::to_string_pretty(&json(&read.hosts, now)).because(Cause::Io)?;
            outln!("{text}");
        }
        _ => {
            for line in status::text(&read, now).lines() {
                outln!("{}", crate::render::quote::escape_controls(line));
            }
        }
    }
    Ok(if read.hosts.iter().all(|h| h.not_in_sync() == 0) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(NOT_IN_SYNC)
    })
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
