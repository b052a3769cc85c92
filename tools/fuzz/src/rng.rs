//! A small deterministic PRNG (splitmix64): every case's generator is derived from the run seed,
//! the target name and the case index, so any case can be replayed on its own.

/// splitmix64: fast, tiny, good enough for input generation (not for cryptography).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a of a target name, so two targets never share a case stream.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Rng {
    /// The generator of case `index` of `target` in a run seeded with `seed`.
    pub(crate) fn for_case(seed: u64, target: &str, index: u64) -> Self {
        Self(mix(
            seed ^ mix(fnv(target) ^ mix(index.wrapping_add(0x9e37_79b9)))
        ))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// A value in `0..n` (`0` when `n == 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        // The bias of a plain modulo is irrelevant here.
        (self.next_u64() % n as u64) as usize
    }

    /// A value in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    /// True with probability `1 / n`.
    pub(crate) fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// True with probability one half.
    pub(crate) fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    pub(crate) fn byte(&mut self) -> u8 {
        (self.next_u64() >> 56) as u8
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }

    /// A length skewed towards small values: mostly < 16, sometimes up to `max`.
    pub(crate) fn len(&mut self, max: usize) -> usize {
        match self.below(10) {
            0..=6 => self.below(16.min(max + 1)),
            7 | 8 => self.below(256.min(max + 1)),
            _ => self.below(max + 1),
        }
    }

    /// An independent generator (for a component that draws lazily, like a fake transport).
    pub(crate) fn fork(&mut self) -> Self {
        Self(self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_reproducible_and_distinct() {
        let a: Vec<u64> = {
            let mut r = Rng::for_case(7, "webhook", 3);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = Rng::for_case(7, "webhook", 3);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let c = Rng::for_case(7, "webhook", 4).next_u64();
        let d = Rng::for_case(7, "sse", 3).next_u64();
        assert_eq!(a, b);
        assert_ne!(a[0], c);
        assert_ne!(a[0], d);
    }
}
