//! A file's declared owner or group: an id, or none, in four bytes.

use std::fmt;

/// A user or group id a file is declared with, or none: four bytes, as
/// `chown` takes it (where `u32::MAX`, -1, changes nothing).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct OwnerId(u32);

impl OwnerId {
    pub const NONE: OwnerId = OwnerId(u32::MAX);

    pub fn get(self) -> Option<u32> {
        (self != OwnerId::NONE).then_some(self.0)
    }
}

impl From<Option<u32>> for OwnerId {
    fn from(id: Option<u32>) -> OwnerId {
        id.map_or(OwnerId::NONE, OwnerId)
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.get(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::OwnerId;

    #[test]
    fn an_owner_id_is_an_option_in_four_bytes() {
        assert_eq!(std::mem::size_of::<OwnerId>(), 4);
        for id in [None, Some(0), Some(7), Some(u32::MAX - 1)] {
            let owner = OwnerId::from(id);
            assert_eq!(owner.get(), id);
            // Written into a spec's digest as the option was, so digests
            // recorded before are still the same.
            assert_eq!(format!("{owner:?}"), format!("{id:?}"));
        }
        // chown's "no change".
        assert_eq!(OwnerId::from(Some(u32::MAX)).get(), None);
    }
}
