//! The status page's fleet table (with `fleet:`): every host's status as
//! the fleet's etcd holds it, read when the page is asked for, as `tend
//! fleet status` prints it.

use std::fmt::Write;
use std::time::SystemTime;

use super::html::{escape, Table};
use super::ReadError;
use crate::fleet::status::{self, Fleet};

const HEAD: [&str; 9] = [
    "Host",
    "Revision",
    "In sync",
    "Drifted",
    "Failed",
    "Other",
    "Oldest drift",
    "Role",
    "Last pass",
];

/// The Fleet section; nothing without `fleet:`.
pub fn section(out: &mut String, fleet: Option<Result<&Fleet, &ReadError>>, now: SystemTime) {
    let Some(fleet) = fleet else { return };
    out.push_str("<h2>Fleet</h2>");
    let fleet = match fleet {
        Ok(f) => f,
        Err(e) => {
            let _ = write!(
                out,
                "<p class=\"banner warn\">Cannot read the fleet's status: {}</p>",
                escape(&e.reason())
            );
            return;
        }
    };
    if fleet.hosts.is_empty() {
        out.push_str("<p class=\"muted\">No host has published its status.</p>");
        return;
    }
    let mut table = Table::new(&HEAD);
    for h in &fleet.hosts {
        table.row(status::row(h, now).map(|cell| escape(&cell)));
    }
    out.push_str(&table.finish());
    if let Some(day) = fleet.day() {
        out.push_str("<h3>The fleet's last 24 hours</h3>");
        out.push_str(&super::overview::svg(&day));
    }
    if !fleet.unreadable.is_empty() {
        let _ = write!(
            out,
            "<p class=\"muted\">{} key(s) under tend/fleet/ are not a host's status.</p>",
            fleet.unreadable.len()
        );
    }
}
