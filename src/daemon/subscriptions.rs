//! The targets' subscriptions: each target is asked to send what may have
//! drifted (plugins' `changed`, file-system events), and those that watch
//! their live state are told after each pass which resources they manage.
//! The daemon knows no adapter: what a watch covers is the target's own.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};

use tokio::sync::mpsc::UnboundedSender;

use super::Trigger;
use crate::model::{ResourceId, Resources};
use crate::target::{ChangeSink, Recheck, Subscription, Target};

/// Where targets' notifications go: the loop's triggers.
fn sink(tx: &UnboundedSender<Trigger>) -> ChangeSink {
    let tx = tx.clone();
    Arc::new(move |recheck| match recheck {
        Recheck::Nothing => {}
        Recheck::Keys(ids) => drop(tx.send(Trigger::Keys(ids))),
        Recheck::All => drop(tx.send(Trigger::FullPass)),
    })
}

/// One target as subscribed, and its watch when it has one.
struct Subscribed {
    /// Which instance it is; not kept alive here (a plugin's process ends
    /// with the context that held it, off the loop's thread).
    target: Weak<dyn Target>,
    watch: Option<Box<dyn Subscription>>,
}

pub struct Subscriptions {
    sink: ChangeSink,
    /// Whether live state is watched at all (`policy.watch`).
    watch: bool,
    targets: BTreeMap<String, Subscribed>,
}

impl Subscriptions {
    /// Subscribes every target in `targets`, each watching its live state
    /// when `watch`; what they send goes to `tx`.
    pub fn start(
        targets: &BTreeMap<String, Arc<dyn Target>>,
        tx: &UnboundedSender<Trigger>,
        watch: bool,
    ) -> Subscriptions {
        let mut subs = Subscriptions {
            sink: sink(tx),
            watch,
            targets: BTreeMap::new(),
        };
        subs.follow(targets, watch);
        subs
    }

    /// Follows new targets (a reload): one that is the same instance as
    /// before, under the same `watch`, keeps its subscription; the others
    /// are subscribed anew and the old ones dropped, which ends their
    /// watches. True when any began: the next pass tells them the whole
    /// managed set.
    pub fn follow(&mut self, targets: &BTreeMap<String, Arc<dyn Target>>, watch: bool) -> bool {
        let same_watch = watch == self.watch;
        self.watch = watch;
        let mut old = std::mem::take(&mut self.targets);
        let mut began = false;
        for (name, target) in targets {
            match old.remove(name) {
                Some(s)
                    if same_watch && std::ptr::addr_eq(s.target.as_ptr(), Arc::as_ptr(target)) =>
                {
                    self.targets.insert(name.clone(), s);
                }
                was => {
                    // The old watch ends before a new one begins.
                    drop(was);
                    let watch = target.subscribe(self.sink.clone(), watch);
                    let target = Arc::downgrade(target);
                    self.targets
                        .insert(name.clone(), Subscribed { target, watch });
                    began = true;
                }
            }
        }
        began
    }

    fn watches(&self) -> impl Iterator<Item = (&String, &dyn Subscription)> {
        self.targets
            .iter()
            .filter_map(|(name, s)| Some((name, s.watch.as_deref()?)))
    }

    /// Live state is watched and every watch sees drift as it happens.
    pub fn healthy(&self) -> bool {
        self.watch && self.watches().all(|(_, w)| w.healthy())
    }

    /// The watcher line for status: each watch's, named by its target when
    /// there are several. With watching off it says so, rather than
    /// leaving a line from when it was on in the ledger and `tend status`.
    pub fn describe(&self) -> String {
        if !self.watch {
            return "off (policy.watch is false): drift is found by the resync".to_string();
        }
        let lines: Vec<(&String, String)> = self
            .watches()
            .map(|(name, w)| (name, w.describe()))
            .collect();
        match lines.as_slice() {
            [] => "no target watches its live state".to_string(),
            [(_, line)] => line.clone(),
            several => several
                .iter()
                .map(|(name, line)| format!("{name}: {line}"))
                .collect::<Vec<_>>()
                .join("; "),
        }
    }

    /// Tells each watch its target's managed set, from a revision's
    /// desired resources.
    pub fn manage(&mut self, resources: &Resources) -> Recheck {
        let mut recheck = Recheck::Nothing;
        for (name, s) in &mut self.targets {
            let Some(w) = s.watch.as_mut() else {
                continue;
            };
            let mut managed = resources
                .values()
                .filter(|d| d.target() == name)
                .map(|d| (&d.id, d.path_str()));
            recheck = merge(recheck, w.manage(&mut managed));
        }
        recheck
    }

    /// Tells each watch of a few identities of its target: each with its
    /// path now, or `None` when it is no longer managed.
    pub fn patch<'a>(
        &mut self,
        changes: impl IntoIterator<Item = (&'a ResourceId, Option<&'a str>)>,
    ) -> Recheck {
        let mut by_target: HashMap<&str, Vec<(&ResourceId, Option<&str>)>> = HashMap::new();
        for (id, path) in changes {
            by_target.entry(id.target()).or_default().push((id, path));
        }
        let mut recheck = Recheck::Nothing;
        for (name, s) in &mut self.targets {
            let Some(w) = s.watch.as_mut() else {
                continue;
            };
            // Told even of no change: its target may have published a
            // new tree, which it then watches.
            let changes = by_target.remove(name.as_str()).unwrap_or_default();
            recheck = merge(recheck, w.patch(&mut changes.into_iter()));
        }
        recheck
    }
}

/// What two watches ask to look at again, together.
fn merge(a: Recheck, b: Recheck) -> Recheck {
    match (a, b) {
        (Recheck::All, _) | (_, Recheck::All) => Recheck::All,
        (Recheck::Nothing, r) | (r, Recheck::Nothing) => r,
        (Recheck::Keys(mut a), Recheck::Keys(b)) => {
            a.extend(b);
            Recheck::Keys(a)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_watches_ask_for_adds_up() {
        let id = |s: &str| ResourceId::new("files", "file", s);
        let keys = |k: &[&str]| Recheck::Keys(k.iter().map(|s| id(s)).collect());
        assert_eq!(merge(Recheck::Nothing, Recheck::Nothing), Recheck::Nothing);
        assert_eq!(merge(Recheck::Nothing, keys(&["a"])), keys(&["a"]));
        assert_eq!(merge(keys(&["a"]), Recheck::Nothing), keys(&["a"]));
        assert_eq!(merge(keys(&["a"]), keys(&["b"])), keys(&["a", "b"]));
        assert_eq!(merge(keys(&["a"]), Recheck::All), Recheck::All);
        assert_eq!(merge(Recheck::All, Recheck::Nothing), Recheck::All);
    }
}
