//! How fast a parked shard answers: GETs to an idle daemon, each after a
//! pause long enough for its shard to park (`idle`), against GETs sent
//! back to back (`warm`). The difference of their medians is the wake-up
//! cost a request pays when it finds its shard parked.
//!
//! Usage: cargo run --release -p styx-tools --example wake -- [ADDR] [SAMPLES]
//! (defaults 127.0.0.1:7400 and 200). Prints a table and one JSON line.

use std::time::{Duration, Instant};
use styx_net::client::{ConnectOptions, Connection};

fn main() {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:7400".into());
    let samples: usize = args.next().map_or(200, |s| s.parse().expect("SAMPLES is a number"));
    let result = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(move || async move {
            let conn = Connection::connect(addr.as_str(), &ConnectOptions::default())
                .await
                .map_err(|e| format!("{addr}: {e}"))?;
            let get = || async {
                let began = Instant::now();
                conn.get("account", 0u64).await.map_err(|e| e.to_string())?;
                Ok::<u64, String>(began.elapsed().as_micros() as u64)
            };
            let ping = || async {
                let began = Instant::now();
                conn.ping().await.map_err(|e| e.to_string())?;
                Ok::<u64, String>(began.elapsed().as_micros() as u64)
            };
            let mut warm = Vec::with_capacity(samples);
            let mut idle = Vec::with_capacity(samples);
            let mut ping_idle = Vec::with_capacity(samples);
            for i in 0..samples {
                // Pauses from 100 to 300 ms: longer than any spin, and
                // landing anywhere in a parked shard's timer period.
                let pause = Duration::from_millis(100 + (i as u64 * 37) % 200);
                glommio::timer::sleep(pause).await;
                idle.push(get().await?);
                for _ in 0..4 {
                    warm.push(get().await?);
                }
                glommio::timer::sleep(pause).await;
                ping_idle.push(ping().await?);
            }
            ping_idle.sort_unstable();
            eprintln!(
                "PING after a pause (answered without the shard): p50 {} µs, p99 {} µs",
                ping_idle[ping_idle.len() / 2],
                ping_idle[ping_idle.len() * 99 / 100]
            );
            Ok::<_, String>((warm, idle))
        })
        .expect("client executor")
        .join()
        .expect("client thread");
    let (mut warm, mut idle) = result.unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1)
    });
    warm.sort_unstable();
    idle.sort_unstable();
    let q = |v: &[u64], p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    println!("GET round trip (µs)   p50     p99     max");
    println!(
        "warm (back to back) {:>6} {:>7} {:>7}",
        q(&warm, 0.5),
        q(&warm, 0.99),
        q(&warm, 1.0)
    );
    println!(
        "idle (shard parked) {:>6} {:>7} {:>7}",
        q(&idle, 0.5),
        q(&idle, 0.99),
        q(&idle, 1.0)
    );
    println!(
        "{{\"warm_p50_us\":{},\"warm_p99_us\":{},\"idle_p50_us\":{},\"idle_p99_us\":{},\"wake_cost_p50_us\":{}}}",
        q(&warm, 0.5),
        q(&warm, 0.99),
        q(&idle, 0.5),
        q(&idle, 0.99),
        q(&idle, 0.5).saturating_sub(q(&warm, 0.5))
    );
}
