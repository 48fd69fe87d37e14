//! What a full pass freed goes back to the system: glibc's allocator keeps
//! the freed pages inside its heaps for reuse, and a daemon then idles for
//! minutes holding them.

/// Returns the whole free pages of every heap to the system (glibc's
/// `malloc_trim`); elsewhere the allocator is left as it is.
pub(super) fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer; it only releases pages no
    // allocation holds, under the allocator's own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::give_back;

    fn anon_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// 256 MiB of small blocks freed while one block after them stays
    /// (as a pass's allocations are freed while the daemon's own stay):
    /// the heap cannot shrink from its top, and the pages are held until
    /// they are given back.
    #[test]
    fn freed_pages_in_the_middle_of_a_heap_go_back_to_the_system() {
        const BLOCK: usize = 4000;
        let blocks: Vec<Box<[u8]>> = (0..(256 << 20) / BLOCK)
            .map(|i| vec![i as u8; BLOCK].into_boxed_slice())
            .collect();
        let kept = vec![1u8; BLOCK].into_boxed_slice();
        let held = anon_kib();
        drop(blocks);
        give_back();
        let after = anon_kib();
        assert!(
            after + 128 * 1024 < held,
            "{held} KiB resident with the blocks, {after} KiB after they were freed and given back"
        );
        assert_eq!(kept[0], 1);
    }
}
