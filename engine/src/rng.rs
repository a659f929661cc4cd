//! A small seeded random number generator (SplitMix64).
//!
//! The simulator and the workloads draw from it so that a seed replays a run
//! exactly; no dependency, no platform difference.

use crate::bytes::mix64;

#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; `n > 0`).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// An independent generator (for a sub-component).
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}

/// YCSB's Zipfian generator (Gray et al., "Quickly generating
/// billion-record synthetic databases"): item 0 is the most popular, item
/// `i` has weight `1 / (i + 1)^theta`.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    half_pow_theta: f64,
}

impl Zipf {
    /// Items `0..n` with skew `theta` in `(0, 1)`; YCSB's default is 0.99.
    pub fn new(n: u64, theta: f64) -> Zipf {
        assert!(n >= 2, "zipf over {n} items");
        assert!(theta > 0.0 && theta < 1.0, "zipf theta {theta} outside (0, 1)");
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2);
        Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
            half_pow_theta: 0.5f64.powf(theta),
        }
    }

    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1;
        }
        let v = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        v.min(self.n - 1)
    }

    pub fn theta(&self) -> f64 {
        self.theta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_is_skewed_towards_zero() {
        let z = Zipf::new(10_000, 0.99);
        let mut r = Rng::new(3);
        let mut zero = 0;
        let mut all = std::collections::HashSet::new();
        for _ in 0..100_000 {
            let x = z.sample(&mut r);
            assert!(x < 10_000);
            zero += usize::from(x == 0);
            all.insert(x);
        }
        // P(0) = 1 / zeta(10000, 0.99) ~ 0.1.
        assert!((8_000..12_000).contains(&zero), "{zero}");
        assert!(all.len() > 3_000);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut r = Rng::new(1);
        let mut seen = [false; 7];
        for _ in 0..1000 {
            seen[r.below(7) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn same_seed_same_sequence() {
        let a: Vec<u64> = (0..5).scan(Rng::new(9), |r, _| Some(r.next_u64())).collect();
        let b: Vec<u64> = (0..5).scan(Rng::new(9), |r, _| Some(r.next_u64())).collect();
        assert_eq!(a, b);
    }
}
