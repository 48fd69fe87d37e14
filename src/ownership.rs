//! Field ownership for structured resources: which JSON fields a declaration
//! manages, how they compare with live state, and which fields tend set
//! before and must now remove. Pure. Pointers are RFC 6901, rooted at the
//! resource (`/spec/replicas`); patches sent to plugins are rooted at the
//! object's state (`/replicas`).

use serde_json::{Map, Value};

use crate::model::Field;

/// Where a resource's declared fields live in its pointers.
pub const ROOT: &str = "/spec";

/// One reference token, escaped (`~` as `~0`, `/` as `~1`).
pub fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Why a pointer is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    #[error("{0:?} is not a JSON pointer: it must start with `/`")]
    NoSlash(String),
    #[error("{0:?}: `~` must be followed by 0 or 1")]
    Escape(String),
    #[error("ignore pointer {0:?} must name a field under /spec (like /spec/replicas)")]
    NotUnderSpec(String),
}

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("a patch operation without `path`")]
    NoPath,
    #[error(transparent)]
    Pointer(#[from] PointerError),
    #[error("a patch operation on the whole object")]
    WholeObject,
    #[error("patch operation {0:?} is not add, replace or remove")]
    Op(Option<String>),
}

/// The unescaped tokens of a pointer; refuses what RFC 6901 refuses.
pub fn tokens(pointer: &str) -> Result<Vec<String>, PointerError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(PointerError::NoSlash(pointer.to_string()));
    };
    rest.split('/')
        .map(|t| {
            let mut out = String::new();
            let mut chars = t.chars();
            while let Some(c) = chars.next() {
                if c != '~' {
                    out.push(c);
                    continue;
                }
                match chars.next() {
                    Some('0') => out.push('~'),
                    Some('1') => out.push('/'),
                    _ => return Err(PointerError::Escape(pointer.to_string())),
                }
            }
            Ok(out)
        })
        .collect()
}

/// Checks an `ignore:` entry: a pointer to a field under `/spec`.
pub fn check_ignore(pointer: &str) -> Result<(), PointerError> {
    let t = tokens(pointer)?;
    if t.len() < 2 || t[0] != "spec" {
        return Err(PointerError::NotUnderSpec(pointer.to_string()));
    }
    Ok(())
}

/// Whether `a` is `b` or lies above it (`/spec/a` covers `/spec/a/b`).
fn covers(a: &str, b: &str) -> bool {
    b == a || (b.starts_with(a) && b[a.len()..].starts_with('/'))
}

fn ignored(pointer: &str, ignore: &[String]) -> bool {
    ignore.iter().any(|i| covers(i, pointer))
}

/// The declared spec without the fields `ignore` hands to other owners.
pub fn strip_ignored(spec: &Value, ignore: &[String]) -> Value {
    fn walk(v: &Value, at: &str, ignore: &[String]) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter_map(|(k, v)| {
                        let p = format!("{at}/{}", escape(k));
                        (!ignored(&p, ignore)).then(|| (k.clone(), walk(v, &p, ignore)))
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    walk(spec, ROOT, ignore)
}

/// The fields a declaration manages: every leaf of its spec (a scalar, an
/// array, which is atomic, or an empty object), as `/spec/...` pointers.
pub fn managed_fields(spec: &Value) -> Vec<String> {
    fn walk(v: &Value, at: String, out: &mut Vec<String>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, v) in m {
                    walk(v, format!("{at}/{}", escape(k)), out);
                }
            }
            _ => out.push(at),
        }
    }
    let mut out = Vec::new();
    if let Value::Object(m) = spec {
        for (k, v) in m {
            walk(v, format!("{ROOT}/{}", escape(k)), &mut out);
        }
    }
    out
}

/// JSON equality, with numbers compared by value (`3` equals `3.0`).
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                return x == y;
            }
            if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                return x == y;
            }
            x.as_f64() == y.as_f64()
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// The value at a `/spec/...` pointer of a live state.
fn lookup<'a>(state: &'a Value, pointer: &str) -> Option<&'a Value> {
    let t = tokens(pointer).ok()?;
    let mut v = state;
    for token in t.iter().skip(1) {
        v = v.as_object()?.get(token)?;
    }
    Some(v)
}

/// The fields that differ: every declared field whose live value is not
/// the same, and every field tend set `before` that the declaration no
/// longer names (and no `ignore:` hands away) but the live object still has.
/// Fields the live object has and tend never set are not looked at.
pub fn compare(spec: &Value, live: &Value, ignore: &[String], before: &[String]) -> Vec<Field> {
    fn walk(want: &Map<String, Value>, have: &Value, at: &str, out: &mut Vec<Field>) {
        for (k, w) in want {
            let p = format!("{at}/{}", escape(k));
            match have.as_object().and_then(|h| h.get(k)) {
                None => out.push(Field::Json {
                    pointer: p,
                    from: None,
                    to: Some(w.clone()),
                }),
                Some(h) => match (w, h) {
                    (Value::Object(w), Value::Object(_)) => walk(w, h, &p, out),
                    _ if same(w, h) => {}
                    _ => out.push(Field::Json {
                        pointer: p,
                        from: Some(h.clone()),
                        to: Some(w.clone()),
                    }),
                },
            }
        }
    }
    let mut out = Vec::new();
    if let Value::Object(want) = spec {
        walk(want, live, ROOT, &mut out);
    }
    let now = managed_fields(spec);
    let mut gone: Vec<&String> = before
        .iter()
        .filter(|p| !now.iter().any(|q| covers(q, p) || covers(p, q)))
        .filter(|p| !ignored(p, ignore) && !ignore.iter().any(|i| covers(p, i)))
        .collect();
    gone.sort();
    gone.dedup();
    for p in gone {
        if let Some(h) = lookup(live, p) {
            out.push(Field::Json {
                pointer: p.clone(),
                from: Some(h.clone()),
                to: None,
            });
        }
    }
    out
}

/// The RFC 6902 patch for structured fields, with paths relative to the
/// object's state (`/spec/replicas` becomes `/replicas`).
pub fn to_patch(fields: &[Field]) -> Vec<Value> {
    fields
        .iter()
        .filter_map(|f| match f {
            Field::Json { pointer, from, to } => {
                let path = pointer.strip_prefix(ROOT).unwrap_or(pointer);
                Some(match (from, to) {
                    (_, None) => serde_json::json!({"op": "remove", "path": path}),
                    (None, Some(v)) => serde_json::json!({"op": "add", "path": path, "value": v}),
                    (Some(_), Some(v)) => {
                        serde_json::json!({"op": "replace", "path": path, "value": v})
                    }
                })
            }
            _ => None,
        })
        .collect()
}

/// A patch of [`to_patch`] applied to a state, as a store that merges
/// applies it: adds and replaces set the value (making missing or
/// non-object parents objects), removes take the field out. Fields the
/// patch does not name are left as they are.
pub fn apply_patch(state: &Value, patch: &[Value]) -> Result<Value, PatchError> {
    let mut doc = state.clone();
    if !doc.is_object() {
        doc = Value::Object(Map::new());
    }
    for op in patch {
        let path = op["path"].as_str().ok_or(PatchError::NoPath)?;
        let t = tokens(path)?;
        let Some((last, parents)) = t.split_last() else {
            return Err(PatchError::WholeObject);
        };
        let mut node = &mut doc;
        for k in parents {
            let map = node.as_object_mut().expect("made an object below");
            let child = map
                .entry(k.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if !child.is_object() {
                *child = Value::Object(Map::new());
            }
            node = child;
        }
        let map = node.as_object_mut().expect("made an object above");
        match op["op"].as_str() {
            Some("remove") => {
                map.remove(last);
            }
            Some("add" | "replace") => {
                map.insert(last.clone(), op["value"].clone());
            }
            other => return Err(PatchError::Op(other.map(str::to_string))),
        }
    }
    Ok(doc)
}

#[cfg(test)]
mod tests;
