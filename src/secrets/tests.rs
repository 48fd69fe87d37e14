//! Age files made by the Debian `age` CLI, opened, refused and checked.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd
        .output()
        .expect("the age and ssh-keygen tools (scripts/test installs them)");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A fresh X25519 identity file (mode 0600) and its public key.
fn x25519(dir: &Path, name: &str) -> (PathBuf, String) {
    let path = dir.join(name);
    run(Command::new("age-keygen").arg("-o").arg(&path));
    let public = run(Command::new("age-keygen").arg("-y").arg(&path));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (path, String::from_utf8(public).unwrap().trim().to_string())
}

/// A fresh SSH ed25519 key and its public line.
fn ssh(dir: &Path, name: &str) -> (PathBuf, String) {
    let path = dir.join(name);
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&path));
    let public = std::fs::read_to_string(path.with_extension("pub")).unwrap();
    (path, public.trim().to_string())
}

fn seal(dir: &Path, plain: &[u8], args: &[&str]) -> Vec<u8> {
    let input = dir.join("plain.in");
    std::fs::write(&input, plain).unwrap();
    let sealed = run(Command::new("age").args(args).arg(&input));
    std::fs::remove_file(&input).unwrap();
    sealed
}

#[test]
fn opens_binary_armored_and_ssh_files_with_the_right_identity() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = x25519(dir.path(), "host.key");
    let (ssh_key, _) = ssh(dir.path(), "id_ed25519");
    let ssh_pub = dir.path().join("id_ed25519.pub");
    let ring = Keyring::load(&[key, ssh_key]);
    let binary = seal(dir.path(), b"one", &["-r", &public]);
    let armored = seal(dir.path(), b"two", &["-a", "-r", &public]);
    let to_ssh = seal(dir.path(), b"three", &["-R", ssh_pub.to_str().unwrap()]);
    assert_eq!(decrypt(&ring, "a.age", &binary).unwrap().as_bytes(), b"one");
    assert_eq!(
        decrypt(&ring, "b.age", &armored).unwrap().as_bytes(),
        b"two"
    );
    assert_eq!(
        decrypt(&ring, "c.age", &to_ssh).unwrap().as_bytes(),
        b"three"
    );
    assert_eq!(
        format!("{:?}", decrypt(&ring, "a.age", &binary).unwrap()),
        "Plaintext(3 bytes)"
    );
}

#[test]
fn a_refusal_names_the_file_and_each_identity_s_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (mine, _) = x25519(dir.path(), "mine.key");
    let (_, theirs) = x25519(dir.path(), "theirs.key");
    let (open, _) = x25519(dir.path(), "open.key");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let missing = dir.path().join("missing.key");
    let ring = Keyring::load(&[mine.clone(), open.clone(), missing.clone()]);
    let sealed = seal(dir.path(), b"secret", &["-r", &theirs]);
    let e = decrypt(&ring, "x.conf.age", &sealed)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("x.conf.age: no identity decrypts it"), "{e}");
    assert!(
        e.contains(&format!("{}: no matching key", mine.display())),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "{}: is readable by others than its owner (mode 0644)",
            open.display()
        )),
        "{e}"
    );
    assert!(
        e.contains(&format!("{}: cannot be read", missing.display())),
        "{e}"
    );

    let mut cut = seal(dir.path(), &vec![b'x'; 200_000], &["-r", &theirs]);
    let ring = Keyring::load(&[dir.path().join("theirs.key")]);
    std::fs::set_permissions(
        dir.path().join("theirs.key"),
        std::fs::Permissions::from_mode(0o400),
    )
    .unwrap();
    let ring2 = Keyring::load(&[dir.path().join("theirs.key")]);
    drop(ring);
    cut.truncate(cut.len() - 100);
    let e = decrypt(&ring2, "big.age", &cut).unwrap_err();
    assert!(matches!(e, SecretError::Damaged { .. }), "{e}");
    let e = decrypt(&ring2, "plain.age", b"not age at all\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("plain.age is not a usable age file"), "{e}");
}

#[test]
fn ssh_recipients_are_checked_by_their_tag_and_x25519_ones_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let (_, alice) = ssh(dir.path(), "alice");
    let (_, bob) = ssh(dir.path(), "bob");
    let (_, x) = x25519(dir.path(), "x.key");
    let to_alice = seal(
        dir.path(),
        b"s",
        &["-a", "-R", dir.path().join("alice.pub").to_str().unwrap()],
    );
    let recipients: Vec<Recipient> = [&alice, &bob, &x]
        .iter()
        .map(|r| parse_recipient(r).unwrap())
        .collect();
    let found = check_recipients("db.age", &to_alice, &recipients);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("db.age is not encrypted to recipient ssh-ed25519 ... bob"),
        "{found:?}"
    );
    assert!(check_format("db.age", &to_alice).is_ok());
    assert!(parse_recipient("ssh-dss AAAA").is_err());
}

#[test]
fn a_key_that_cannot_be_read_now_is_transient_and_a_missing_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let (_, theirs) = x25519(dir.path(), "theirs.key");
    let sealed = seal(dir.path(), b"secret", &["-r", &theirs]);
    let missing = dir.path().join("missing.key");
    let looped = dir.path().join("loop.key");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    let (wrong, _) = x25519(dir.path(), "wrong.key");

    let e = decrypt(
        &Keyring::load(std::slice::from_ref(&wrong)),
        "a.age",
        &sealed,
    )
    .unwrap_err();
    assert!(!e.rereads() && !e.transient(), "{e}");
    let e = decrypt(&Keyring::load(&[wrong.clone(), missing]), "a.age", &sealed).unwrap_err();
    assert!(e.rereads() && !e.transient(), "{e}");
    let e = decrypt(&Keyring::load(&[wrong, looped.clone()]), "a.age", &sealed).unwrap_err();
    assert!(e.rereads() && e.transient(), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("{}: cannot be read", looped.display())),
        "{e}"
    );
}
