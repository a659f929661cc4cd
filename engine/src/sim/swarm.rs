//! The seed swarm of randomized simulator tests: a test runs its default
//! seeds (what CI runs), more of them with `STYX_SIM_SEEDS=n`, or the one a
//! failure printed with `STYX_SIM_SEED=s`. Test crates wrap [`swarm`] and
//! [`replay_command`] with their own package and crate names.

/// A number from the environment variable `name`, if set.
///
/// # Panics
/// If it is set to something else than a number.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v}: expected a number")))
}

/// The seeds a randomized test runs: `defaults` (indices, each mapped to a
/// seed by `seed_of`), unless
/// - `STYX_SIM_SEED=s`: only seed `s` (as a failure prints it);
/// - `STYX_SIM_SEEDS=n`: `n` indices from `STYX_SIM_SEED_FIRST` (default:
///   the first default), so the defaults and more.
pub fn seeds_of(defaults: std::ops::Range<u64>, seed_of: impl Fn(u64) -> u64) -> Vec<u64> {
    if let Some(seed) = env_u64("STYX_SIM_SEED") {
        return vec![seed];
    }
    match env_u64("STYX_SIM_SEEDS") {
        Some(n) => {
            let first = env_u64("STYX_SIM_SEED_FIRST").unwrap_or(defaults.start);
            (first..first + n).map(seed_of).collect()
        }
        None => defaults.map(seed_of).collect(),
    }
}

/// [`seeds_of`] where the indices are the seeds.
pub fn seeds(defaults: std::ops::Range<u64>) -> Vec<u64> {
    seeds_of(defaults, |i| i)
}

/// The name of the test running on this thread (libtest names its threads
/// after their tests; `None` when it runs tests on the main thread).
pub fn test_name() -> Option<String> {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .map(str::to_owned)
}

/// The command that replays `seed` of the test `test` in the test crate
/// `test_crate` of `package`.
pub fn replay_command(package: &str, test_crate: &str, test: Option<&str>, seed: u64) -> String {
    let filter = test.map_or(String::new(), |t| format!(" -- --exact {t}"));
    format!("STYX_SIM_SEED={seed} cargo test --release -p {package} --test {test_crate}{filter}")
}

/// Runs `run(seed)` for every seed of `seeds`, in order. The first seed
/// that fails prints itself and the command that replays it (a test of
/// `test_crate` in `package`), and fails the test.
pub fn swarm(seeds: Vec<u64>, package: &str, test_crate: &str, mut run: impl FnMut(u64)) {
    let test = test_name();
    for seed in seeds {
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(seed))) {
            eprintln!(
                "FAILED: seed {seed}\nreplay: {}",
                replay_command(package, test_crate, test.as_deref(), seed)
            );
            std::panic::resume_unwind(panic);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replay_command_names_the_seed_and_the_test() {
        assert_eq!(
            replay_command("styx-engine", "moves", Some("bank"), 7),
            "STYX_SIM_SEED=7 cargo test --release -p styx-engine --test moves -- --exact bank"
        );
        assert_eq!(
            replay_command("styx-bench", "tpcc", None, 3),
            "STYX_SIM_SEED=3 cargo test --release -p styx-bench --test tpcc"
        );
    }

    #[test]
    fn a_failing_seed_fails_the_swarm_and_stops_it() {
        let mut ran = Vec::new();
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            swarm(vec![1, 2, 3], "p", "t", |seed| {
                ran.push(seed);
                assert_ne!(seed, 2, "seed 2 fails");
            })
        }));
        assert!(failed.is_err());
        assert_eq!(ran, vec![1, 2]);
    }
}
