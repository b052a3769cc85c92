//! Counting allocations: the whole `rebuno-bench` binary allocates through `stats_alloc`'s
//! instrumented [`std::alloc::System`], so the agent and floor processes can report
//! allocations and bytes allocated per step (the driver asks with a `stats` line on stdin).
//! A `realloc` counts as one allocation of its new size; frees are not counted.

use std::alloc::System;

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Allocations (reallocations included) and bytes allocated by this process so far.
pub(crate) fn totals() -> (u64, u64) {
    let stats = GLOBAL.stats();
    let allocs = stats.allocations + stats.reallocations;
    let bytes = stats.bytes_allocated + stats.bytes_reallocated.max(0).unsigned_abs();
    (allocs as u64, bytes as u64)
}

/// Bytes this process has allocated and not yet freed: its heap in use, without the
/// allocator's own overhead and the freed memory it keeps.
pub(crate) fn in_use() -> i64 {
    let stats = GLOBAL.stats();
    let net = stats.bytes_allocated as i128 - stats.bytes_deallocated as i128
        + stats.bytes_reallocated as i128;
    net as i64
}

/// The line the agent and floor roles print for a `stats` request on stdin.
pub(crate) fn stats_line() -> String {
    let (allocs, bytes) = totals();
    let in_use = in_use();
    format!(r#"{{"allocs":{allocs},"bytes":{bytes},"in_use":{in_use}}}"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_allocations() {
        let (allocs0, bytes0) = totals();
        let v: Vec<u8> = Vec::with_capacity(1000);
        std::hint::black_box(&v);
        let (allocs1, bytes1) = totals();
        assert!(allocs1 > allocs0);
        assert!(bytes1 >= bytes0 + 1000);
        assert!(stats_line().starts_with(r#"{"allocs":"#));
        let before = in_use();
        let kept = std::hint::black_box(vec![0u8; 4096]);
        assert!(in_use() >= before + 4096);
        drop(kept);
    }
}
