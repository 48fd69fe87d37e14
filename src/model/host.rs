//! Who this host is in a fleet (SPEC §12): its name and labels, and whether
//! a declaration's `hosts:` selector picks it.

use std::collections::BTreeMap;

use serde::Deserialize;

/// This host's identity: `host.name` (the host name by default) and
/// `host.labels`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// A declaration's `hosts:`: the names it is for, and the labels a host
/// must carry, all of them. An empty part leaves that side open, so
/// `hosts: {labels: {role: web}}` is every web host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSelector {
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl HostSelector {
    pub fn picks(&self, host: &Host) -> bool {
        (self.names.is_empty() || self.names.contains(&host.name))
            && self
                .labels
                .iter()
                .all(|(k, v)| host.labels.get(k) == Some(v))
    }
}

/// A host name or label value as it may stand in a path: letters, digits,
/// `.`, `_` and `-`, not starting with a dot.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && !s.starts_with('.')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Why a template could not be filled in for a host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unclosed `{{` in {template:?}")]
    Unclosed { template: String },
    #[error("{template:?} uses {{label.{key}}}, but host {host:?} has no label {key:?}")]
    NoLabel {
        template: String,
        key: String,
        host: String,
    },
    #[error("unknown placeholder {{{name}}} in {template:?} (known: {{host}}, {{label.KEY}})")]
    Unknown { template: String, name: String },
}

/// `template` with `{host}` and `{label.KEY}` filled in from `host`; an
/// unknown placeholder or a label the host does not carry is an error
/// naming it.
pub fn expand(template: &str, host: &Host) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| TemplateError::Unclosed {
            template: template.into(),
        })?;
        let name = &after[..close];
        match name.strip_prefix("label.") {
            _ if name == "host" => out.push_str(&host.name),
            Some(key) => match host.labels.get(key) {
                Some(v) => out.push_str(v),
                None => {
                    return Err(TemplateError::NoLabel {
                        template: template.into(),
                        key: key.into(),
                        host: host.name.clone(),
                    })
                }
            },
            None => {
                return Err(TemplateError::Unknown {
                    template: template.into(),
                    name: name.into(),
                })
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web1() -> Host {
        Host {
            name: "web-1".into(),
            labels: BTreeMap::from([("role".into(), "web".into()), ("zone".into(), "a".into())]),
        }
    }

    #[test]
    fn a_selector_picks_by_name_and_every_label() {
        let h = web1();
        let sel = |names: &[&str], labels: &[(&str, &str)]| HostSelector {
            names: names.iter().map(|s| s.to_string()).collect(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        assert!(sel(&[], &[]).picks(&h));
        assert!(sel(&["web-2", "web-1"], &[]).picks(&h));
        assert!(!sel(&["web-2"], &[]).picks(&h));
        assert!(sel(&[], &[("role", "web")]).picks(&h));
        assert!(!sel(&[], &[("role", "web"), ("zone", "b")]).picks(&h));
        assert!(!sel(&[], &[("rack", "1")]).picks(&h));
        assert!(!sel(&["web-1"], &[("role", "db")]).picks(&h));
    }

    #[test]
    fn placeholders_fill_in_or_name_what_is_missing() {
        let h = web1();
        assert_eq!(expand("hosts/{host}", &h).unwrap(), "hosts/web-1");
        assert_eq!(
            expand("zones/{label.zone}/{label.role}", &h).unwrap(),
            "zones/a/web"
        );
        assert_eq!(expand("plain", &h).unwrap(), "plain");
        let e = expand("x/{label.rack}", &h).unwrap_err().to_string();
        assert!(e.contains("no label \"rack\""), "{e}");
        let e = expand("x/{hostname}", &h).unwrap_err().to_string();
        assert!(e.contains("unknown placeholder {hostname}"), "{e}");
        assert!(expand("x/{host", &h).is_err());
    }

    #[test]
    fn names_fit_in_a_path() {
        assert!(valid_name("web-1.example_a"));
        for bad in ["", "..", ".hidden", "a/b", "a b", "é"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }
}
