//! TPC-C's random distributions (clause 2.1.6 and 4.3.2): NURand, random
//! strings, last names. Loader and generator share them so that the names
//! and ids the generator draws are the ones the loader created.

use styx_engine::rng::Rng;

/// NURand's run-time constants `C` (2.1.6). The specification draws them at
/// random; fixed values keep runs reproducible and satisfy its rule for
/// C_LAST (65 <= |C_run - C_load| <= 119, and neither 96 nor 112).
pub const C_LAST_LOAD: u64 = 157;
pub const C_LAST_RUN: u64 = 223;
pub const C_ID: u64 = 259;
pub const C_OL_I_ID: u64 = 7_911;

const _: () = assert!(C_LAST_RUN - C_LAST_LOAD >= 65 && C_LAST_RUN - C_LAST_LOAD <= 119);
const _: () = assert!(C_LAST_RUN - C_LAST_LOAD != 96 && C_LAST_RUN - C_LAST_LOAD != 112);

/// Uniform in `lo..=hi`.
pub fn uniform(rng: &mut Rng, lo: u64, hi: u64) -> u64 {
    assert!(lo <= hi, "uniform({lo}, {hi})");
    lo + rng.below(hi - lo + 1)
}

/// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x.
pub fn nurand(rng: &mut Rng, a: u64, c: u64, x: u64, y: u64) -> u64 {
    (((uniform(rng, 0, a) | uniform(rng, x, y)) + c) % (y - x + 1)) + x
}

const ALPHANUMERIC: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// A random a-string of `lo..=hi` characters.
pub fn a_string(rng: &mut Rng, lo: usize, hi: usize) -> String {
    let len = uniform(rng, lo as u64, hi as u64) as usize;
    (0..len)
        .map(|_| ALPHANUMERIC[rng.below(ALPHANUMERIC.len() as u64) as usize] as char)
        .collect()
}

/// A random n-string (digits) of `lo..=hi` characters.
pub fn n_string(rng: &mut Rng, lo: usize, hi: usize) -> String {
    let len = uniform(rng, lo as u64, hi as u64) as usize;
    (0..len).map(|_| char::from(b'0' + rng.below(10) as u8)).collect()
}

/// I_DATA and S_DATA: 26..=50 characters, 10 % with "ORIGINAL" somewhere.
pub fn data_with_original(rng: &mut Rng) -> String {
    let mut s = a_string(rng, 26, 50);
    if rng.below(10) == 0 {
        let at = rng.below((s.len() - 8) as u64) as usize;
        s.replace_range(at..at + 8, "ORIGINAL");
    }
    s
}

/// A zip code: four random digits and "11111" (4.3.2.7).
pub fn zip(rng: &mut Rng) -> String {
    let mut s = n_string(rng, 4, 4);
    s.push_str("11111");
    s
}

const SYLLABLES: [&str; 10] = [
    "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
];

/// The last name of number `n` in `0..1000` (4.3.2.3).
pub fn last_name(n: u64) -> String {
    assert!(n < 1000, "last name number {n}");
    let mut s = String::with_capacity(15);
    for digit in [n / 100, (n / 10) % 10, n % 10] {
        s.push_str(SYLLABLES[digit as usize]);
    }
    s
}

/// How many distinct last names a district of `customers` has: all 1 000
/// of them at full scale, where customers 1..=1000 take one each; fewer in
/// a scaled-down load, so that every name drawn exists.
pub fn last_names(customers: u32) -> u64 {
    u64::from(customers).min(1000)
}

/// A last-name number drawn with NURand(255, 0, 999), folded onto the
/// `last_names` that exist.
pub fn last_name_number(rng: &mut Rng, c: u64, last_names: u64) -> u64 {
    nurand(rng, 255, c, 0, 999) % last_names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_names_follow_the_syllables() {
        assert_eq!(last_name(0), "BARBARBAR");
        assert_eq!(last_name(371), "PRICALLYOUGHT");
        assert_eq!(last_name(999), "EINGEINGEING");
    }

    #[test]
    fn nurand_stays_in_range_and_is_skewed() {
        let mut rng = Rng::new(5);
        let mut counts = vec![0u32; 3000];
        for _ in 0..300_000 {
            let c = nurand(&mut rng, 1023, C_ID, 1, 3000);
            assert!((1..=3000).contains(&c));
            counts[c as usize - 1] += 1;
        }
        let max = *counts.iter().max().unwrap();
        let min = *counts.iter().min().unwrap();
        assert!(max > 4 * min.max(1), "NURand is non-uniform: max {max}, min {min}");
    }

    #[test]
    fn original_appears_in_about_a_tenth() {
        let mut rng = Rng::new(9);
        let n = (0..10_000)
            .filter(|_| data_with_original(&mut rng).contains("ORIGINAL"))
            .count();
        assert!((800..1200).contains(&n), "{n}");
    }
}
