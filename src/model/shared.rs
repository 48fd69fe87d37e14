//! A string that shares its allocation: a declared file's path and origin
//! are parts of its identity, held once for each of the many files a
//! revision declares.

use arcstr::ArcStr;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// A part of a shared string. Compares, orders and hashes as the `str` it
/// shows, whatever it shares.
#[derive(Clone)]
pub struct SharedStr {
    buf: ArcStr,
    start: u32,
    end: u32,
}

impl SharedStr {
    /// `buf[range]`; `None` when the range is not on character boundaries
    /// or does not fit in the offsets kept.
    pub(crate) fn part(buf: &ArcStr, range: std::ops::Range<usize>) -> Option<SharedStr> {
        buf.get(range.clone())?;
        Some(SharedStr {
            buf: buf.clone(),
            start: u32::try_from(range.start).ok()?,
            end: u32::try_from(range.end).ok()?,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.buf[self.start as usize..self.end as usize]
    }
}

impl Deref for SharedStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for SharedStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> Self {
        SharedStr::from(ArcStr::from(s))
    }
}

impl From<String> for SharedStr {
    fn from(s: String) -> Self {
        SharedStr::from(ArcStr::from(s))
    }
}

impl From<ArcStr> for SharedStr {
    fn from(buf: ArcStr) -> Self {
        let end = u32::try_from(buf.len()).expect("strings over 4 GiB are not kept");
        SharedStr { buf, start: 0, end }
    }
}

impl Default for SharedStr {
    fn default() -> Self {
        SharedStr::from("")
    }
}

impl PartialEq for SharedStr {
    fn eq(&self, other: &Self) -> bool {
        // The same part of the same buffer needs no comparing.
        (ArcStr::ptr_eq(&self.buf, &other.buf)
            && (self.start, self.end) == (other.start, other.end))
            || self.as_str() == other.as_str()
    }
}

impl Eq for SharedStr {}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for SharedStr {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<SharedStr> for String {
    fn eq(&self, other: &SharedStr) -> bool {
        self == other.as_str()
    }
}

impl PartialOrd for SharedStr {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SharedStr {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for SharedStr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::SharedStr;
    use arcstr::ArcStr;
    use std::collections::hash_map::DefaultHasher;
    use std::hash::{Hash, Hasher};

    fn hash(v: impl Hash) -> u64 {
        let mut h = DefaultHasher::new();
        v.hash(&mut h);
        h.finish()
    }

    #[test]
    fn a_part_behaves_as_the_str_it_shows() {
        let buf = ArcStr::from("files/file/etc/app.conf");
        let part = SharedStr::part(&buf, 11..buf.len()).unwrap();
        let own = SharedStr::from("etc/app.conf");
        assert_eq!(part.as_str(), "etc/app.conf");
        assert_eq!(part, own);
        assert_eq!(hash(&part), hash(&own));
        assert_eq!(hash(&part), hash("etc/app.conf"));
        let later = SharedStr::from(String::from("etc/b"));
        assert!(part < later);
        assert_eq!(format!("{part} {part:?}"), "etc/app.conf \"etc/app.conf\"");
        assert_eq!(
            ArcStr::strong_count(&buf),
            Some(2),
            "the part shares the buffer"
        );
    }

    #[test]
    fn a_part_off_character_boundaries_is_refused() {
        let buf = ArcStr::from("aé");
        assert!(SharedStr::part(&buf, 2..3).is_none());
        assert!(SharedStr::part(&buf, 0..9).is_none());
        assert!(SharedStr::part(&buf, 1..3).is_some());
    }
}
