//! Throwaway certificates for the tests' TLS servers (nginx, etcd): a CA
//! and the certificates it signs, EC P-256 keys valid two days, made by
//! openssl. Self-contained: the etcd helper that unit tests include uses
//! it too.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

pub const OPENSSL: &str = "/usr/bin/openssl";

/// A certificate for a server on 127.0.0.1 or localhost.
pub const SERVER: &str = "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
                          extendedKeyUsage=serverAuth\n";
/// A certificate a client shows.
pub const CLIENT: &str = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";

const EC: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

/// Runs openssl in `dir` with `stdin`; it must succeed. What it printed.
pub fn openssl(dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new(OPENSSL)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run openssl");
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ca.pem` and `ca.key` in `dir`.
pub fn authority(dir: &Path) {
    let mut ca = vec!["req", "-x509", "-nodes", "-days", "2"];
    ca.extend(EC);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    ca.extend(["-subj", "/CN=tend test CA"]);
    ca.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
    ca.extend(["-addext", "keyUsage=critical,keyCertSign"]);
    openssl(dir, &ca, None);
}

/// `<name>.pem` and `<name>.key` in `dir`, for `common_name` with the
/// extensions `ext` ([`SERVER`], [`CLIENT`]), signed by the CA there.
pub fn signed(dir: &Path, name: &str, common_name: &str, ext: &str) {
    let (key, csr, pem, extfile) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.ext"),
    );
    let subject = format!("/CN={common_name}");
    let mut req = vec!["req", "-nodes"];
    req.extend(EC);
    req.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
    openssl(dir, &req, None);
    std::fs::write(dir.join(&extfile), ext).unwrap();
    let mut sign = vec![
        "x509", "-req", "-in", &csr, "-CA", "ca.pem", "-CAkey", "ca.key",
    ];
    sign.extend([
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        &pem,
        "-extfile",
        &extfile,
    ]);
    openssl(dir, &sign, None);
}
