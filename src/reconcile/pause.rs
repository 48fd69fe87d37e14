//! The one pause rule, over the pauses in force (`tend pause`).

use std::collections::HashSet;

use crate::ledger::PauseRecord;
use crate::model::ResourceId;

/// Which resources are paused right now: the one pause rule. A resource is
/// paused by its own pause, or by the global one unless it was resumed while
/// the global pause lasts.
pub struct Paused {
    all: bool,
    ids: HashSet<String>,
    /// Resumed while the global pause lasts.
    excepted: HashSet<String>,
}

impl Paused {
    pub fn from_records(records: impl IntoIterator<Item = PauseRecord>) -> Paused {
        let mut p = Paused {
            all: false,
            ids: HashSet::new(),
            excepted: HashSet::new(),
        };
        for rec in records {
            match rec.id {
                None => p.all = true,
                Some(id) if rec.excepted => {
                    p.excepted.insert(id);
                }
                Some(id) => {
                    p.ids.insert(id);
                }
            }
        }
        p
    }

    pub fn is(&self, id: &ResourceId) -> bool {
        (self.all && !self.excepted.contains(id.as_str())) || self.ids.contains(id.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(id: Option<&str>, excepted: bool) -> PauseRecord {
        PauseRecord {
            id: id.map(String::from),
            until: None,
            excepted,
        }
    }

    #[test]
    fn the_pause_rule_at_its_boundaries() {
        let (a, b) = (
            ResourceId::new("files", "file", "a"),
            ResourceId::new("files", "file", "b"),
        );
        let none = Paused::from_records([]);
        assert!(!none.is(&a));
        let one = Paused::from_records([pause(Some(a.as_str()), false)]);
        assert!(one.is(&a) && !one.is(&b));
        let all = Paused::from_records([pause(None, false)]);
        assert!(all.is(&a) && all.is(&b));
        // Resumed under the global pause: corrected meanwhile.
        let except = Paused::from_records([pause(None, false), pause(Some(b.as_str()), true)]);
        assert!(except.is(&a) && !except.is(&b));
        // An exception alone pauses nothing.
        assert!(!Paused::from_records([pause(Some(a.as_str()), true)]).is(&a));
    }
}
