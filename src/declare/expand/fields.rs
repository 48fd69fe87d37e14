//! Field values of path declarations: `source:` paths joined inside the
//! repository, octal modes, and owners and groups resolved on this host.

use crate::declare::yaml::IdOrName;
use crate::declare::DeclError;

/// Joins `rel` onto the directory `base` inside the repository, refusing to
/// climb above the repository root. A leading `/` means the repository root.
pub(super) fn repo_join(base: &str, rel: &str) -> Result<String, DeclError> {
    let mut parts: Vec<&str> = if rel.starts_with('/') {
        Vec::new()
    } else {
        base.split('/').filter(|p| !p.is_empty()).collect()
    };
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(format!("source {rel:?} leaves the repository").into());
                }
            }
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

pub(super) fn parent_dir(path: &str) -> &str {
    path.rfind('/').map(|i| &path[..i]).unwrap_or("")
}

pub(super) fn parse_mode(s: &str) -> Result<u32, DeclError> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o7777 && !digits.is_empty() => Ok(m),
        _ => Err(format!("mode {s:?} is not an octal permission like \"0644\"").into()),
    }
}

pub(super) fn resolve_principal(p: &IdOrName, group: bool) -> Result<u32, DeclError> {
    let what = if group { "group" } else { "owner" };
    // `-1` means "leave unchanged" to chown: it names no one.
    let id = |n: u32| match n {
        u32::MAX => {
            Err(format!("{what} id {n} is not valid (chown reads it as \"unchanged\")").into())
        }
        n => Ok(n),
    };
    let name = match p {
        IdOrName::Id(n) => return id(*n),
        IdOrName::Name(s) => s,
    };
    if let Ok(n) = name.parse::<u32>() {
        return id(n);
    }
    let found = if group {
        nix::unistd::Group::from_name(name)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw())
    } else {
        nix::unistd::User::from_name(name)
            .ok()
            .flatten()
            .map(|u| u.uid.as_raw())
    };
    found.ok_or_else(|| {
        format!(
            "unknown {} {name:?} on this host",
            if group { "group" } else { "user" }
        )
        .into()
    })
}

/// Whether a declaration's `source:` is an age file to decrypt: `decrypt:
/// age` needs a source and is always sensitive.
pub(super) fn decrypts(d: &crate::declare::yaml::Decl) -> Result<bool, DeclError> {
    let decrypt = match d.decrypt.as_deref() {
        None => false,
        Some("age") if d.source.is_some() => true,
        Some("age") => return Err("`decrypt: age` needs `source:`, the age file".into()),
        Some(other) => return Err(format!("decrypt: {other:?} is not known (known: age)").into()),
    };
    if decrypt && d.sensitive == Some(false) {
        return Err("`decrypt: age` is always sensitive; drop `sensitive: false`".into());
    }
    Ok(decrypt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_chown_reads_as_unchanged_names_no_one() {
        for p in [IdOrName::Id(u32::MAX), IdOrName::Name("4294967295".into())] {
            let e = resolve_principal(&p, false).unwrap_err();
            assert!(
                e.to_string().contains("owner id 4294967295 is not valid"),
                "{e}"
            );
        }
        assert_eq!(
            resolve_principal(&IdOrName::Id(u32::MAX - 1), true),
            Ok(u32::MAX - 1)
        );
    }

    #[test]
    fn repo_join_stays_inside() {
        assert_eq!(repo_join("a/b", "../c/d").unwrap(), "a/c/d");
        assert_eq!(repo_join("a/b", "/x").unwrap(), "x");
        assert!(repo_join("a", "../../etc/passwd").is_err());
        assert!(repo_join("", "..").is_err());
    }

    #[test]
    fn modes() {
        assert_eq!(parse_mode("0644").unwrap(), 0o644);
        assert_eq!(parse_mode("4755").unwrap(), 0o4755);
        assert!(parse_mode("0999").is_err());
        assert!(parse_mode("").is_err());
        assert!(parse_mode("17777").is_err());
    }
}
