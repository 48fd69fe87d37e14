//! What flags say of the targets: `--root` makes (or replaces) the `files`
//! target, `--link` and `--link-keep` set its link, `validate` reads as a
//! `files` target when none is configured; and relative roots made
//! absolute once.

use super::problem::Problems;
use super::targets::{TargetKind, TargetSettings};
use crate::cli::Flags;
use crate::target::files::FilesConfig;

/// `targets` as the flags leave them; `any_target`: with none configured,
/// one `files` target at `/` (`validate` touches no target).
pub(super) fn apply(
    args: &Flags,
    targets: &mut Vec<TargetSettings>,
    any_target: bool,
    problems: &mut Problems,
) {
    if let Some(root) = &args.root {
        // The config's own `files` target gives way, its link kept.
        let mut files = FilesConfig::at(root);
        if let Some(TargetKind::Files(was)) =
            targets.iter().find(|t| t.name == "files").map(|t| &t.kind)
        {
            (files.link, files.link_keep) = (was.link.clone(), was.link_keep);
        }
        targets.retain(|t| t.name != "files");
        targets.push(TargetSettings {
            name: "files".into(),
            kind: TargetKind::Files(files),
        });
    }
    if targets.is_empty() && any_target {
        targets.push(TargetSettings {
            name: "files".into(),
            kind: TargetKind::Files(FilesConfig::at("/")),
        });
    }
    link(args, targets, problems);
    // A relative root is the working directory's, made absolute once here:
    // every part (the target, the watcher's paths) then names the same one.
    for t in targets.iter_mut() {
        if let TargetKind::Files(FilesConfig { root, .. }) = &mut t.kind {
            if root.is_relative() {
                match std::path::absolute(&*root) {
                    Ok(absolute) => *root = absolute,
                    Err(e) => problems.general(
                        format!("targets.{}.root", t.name),
                        format!("{}: {e}", root.display()),
                    ),
                }
            }
        }
    }
}

/// `--link` and `--link-keep` (or their env) set the link of the files
/// target: the one named `files` (as `--root` makes it), or else the only
/// one.
fn link(args: &Flags, targets: &mut [TargetSettings], problems: &mut Problems) {
    if args.link.is_none() && args.link_keep.is_none() {
        return;
    }
    let files: Vec<usize> = (0..targets.len())
        .filter(|&i| matches!(targets[i].kind, TargetKind::Files(_)))
        .collect();
    let named = files.iter().copied().find(|&i| targets[i].name == "files");
    let only = match files.as_slice() {
        [only] => Some(*only),
        _ => None,
    };
    let Some(TargetKind::Files(files)) = named.or(only).map(|at| &mut targets[at].kind) else {
        problems.general(
            "--link",
            "no single files target to publish (several, or none); set `link` on one under `targets:`",
        );
        return;
    };
    if let Some(name) = &args.link {
        match crate::target::files::check_link_name(name) {
            Ok(()) => files.link = Some(name.clone()),
            Err(m) => problems.general("--link", m.to_string()),
        }
    }
    if args.link_keep.is_some() {
        match files.link.is_some() {
            true => files.link_keep = args.link_keep,
            false => problems.general("--link-keep", "needs --link (or `link` in the config)"),
        }
    }
}
