//! The audit log on a real full file system (a tiny tmpfs): an append cut
//! short by ENOSPC leaves the log ending at a line boundary, so the lines
//! appended once space is back are valid JSON lines too (issue 13, item 3).

use std::path::{Path, PathBuf};

use super::at;
use crate::ledger::{AuditEntry, AuditLog};

/// A tmpfs of `size` mounted on a fresh temp dir, unmounted when dropped.
/// Mounting needs root: under CI or as root its absence fails the test,
/// elsewhere the test is skipped with a note.
pub struct Tmpfs {
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let tmp = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(tmp.path())
            .status()
            .is_ok_and(|s| s.success());
        if !crate::test_gate::can_run(ok, "mounting a tmpfs needs root") {
            return None;
        }
        Some(Tmpfs {
            dir: tmp.path().to_path_buf(),
            _tmp: tmp,
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.dir).status();
    }
}

/// Writes a file until the file system refuses more.
pub fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 4096];
    loop {
        if let Err(e) = f.write_all(&block) {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            return;
        }
    }
}

fn batch(tag: &str, n: usize) -> Vec<AuditEntry> {
    (0..n)
        .map(|i| AuditEntry {
            time: at(i as u64),
            revision: "b".repeat(40),
            id: format!("files/file/etc/{tag}/{i}"),
            action: "update".into(),
            why: vec!["content".into()],
            before: Some(format!("git:{}", "1".repeat(40))),
            after: Some(format!("git:{}", "2".repeat(40))),
            backup: Some(format!("sha256:{}", "3".repeat(64))),
            sensitive: false,
        })
        .collect()
}

#[test]
fn an_append_cut_short_by_a_full_disk_leaves_whole_lines_only() {
    let Some(fs) = Tmpfs::mount("64k") else {
        return;
    };
    let log = AuditLog::open(&fs.dir).unwrap();
    log.append_all(&batch("before", 3)).unwrap();
    let before = std::fs::read(log.path()).unwrap();
    // A few pages stay free: the batch starts to be written, then fails.
    fill(&fs.dir.join("filler"));
    let filler = std::fs::OpenOptions::new()
        .write(true)
        .open(fs.dir.join("filler"))
        .unwrap();
    let len = filler.metadata().unwrap().len();
    filler.set_len(len - 8192).unwrap();
    let err = log.append_all(&batch("full", 200)).unwrap_err();
    assert!(err.to_string().contains("No space left"), "{err}");
    assert_eq!(
        std::fs::read(log.path()).unwrap(),
        before,
        "a failed append must leave the log as it was"
    );

    drop(filler);
    std::fs::remove_file(fs.dir.join("filler")).unwrap();
    log.append_all(&batch("after", 3)).unwrap();
    let all = log.read_all().expect("every line is valid JSON");
    let ids: Vec<_> = all.iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "files/file/etc/before/0",
            "files/file/etc/before/1",
            "files/file/etc/before/2",
            "files/file/etc/after/0",
            "files/file/etc/after/1",
            "files/file/etc/after/2"
        ]
    );
}

#[test]
fn a_torn_tail_left_while_running_is_cut_before_the_next_append() {
    let tmp = tempfile::tempdir().unwrap();
    let log = AuditLog::open(tmp.path()).unwrap();
    log.append_all(&batch("a", 2)).unwrap();
    // Another writer's fragment, or one a failed truncation left behind.
    let mut bytes = std::fs::read(log.path()).unwrap();
    bytes.extend_from_slice(b"{\"time\":\"2024-01-01T00:00:00Z\",\"id\":\"torn");
    std::fs::write(log.path(), &bytes).unwrap();
    log.append_all(&batch("b", 1)).unwrap();
    let all = log.read_all().expect("no fragment mid-log");
    assert_eq!(all.len(), 3);
    assert_eq!(all[2]["id"], "files/file/etc/b/0");
}
