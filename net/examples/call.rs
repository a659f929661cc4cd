//! Calls one function with no arguments and prints the outcome: a manual
//! check against a running server.
//!
//! ```text
//! cargo run -p styx-net --example call -- 127.0.0.1:7000 account 5 balance
//! ```
//!
//! KEY is a `u64` key (its big-endian bytes) when it parses as one, else
//! the bytes of the string. Exits with 1 on an abort, 2 on an error.

use std::process::ExitCode;
use std::time::Duration;
use styx_engine::Payload;
use styx_net::client::{Client, Options, Outcome};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, operator, key, function] = &args[..] else {
        eprintln!("usage: call ADDR OPERATOR KEY FUNCTION   (e.g. call 127.0.0.1:7000 account 5 balance)");
        return ExitCode::from(2);
    };
    let (addr, operator, key, function) = (addr.clone(), operator.clone(), key.clone(), function.clone());
    glommio::LocalExecutorBuilder::default()
        // Small enough for the default memlock limit of a normal user.
        .io_memory(1 << 20)
        .spawn(move || async move { call(&addr, &operator, &key, &function).await })
        .expect("a glommio executor")
        .join()
        .expect("the executor ran")
}

async fn call(addr: &str, operator: &str, key: &str, function: &str) -> ExitCode {
    let options = Options {
        timeout: Duration::from_secs(5),
        ..Options::default()
    };
    let client = match Client::new(addr, options) {
        Ok(client) => client,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = match key.parse::<u64>() {
        Ok(n) => client.call(operator, n, function, Payload::EMPTY).await,
        Err(_) => client.call(operator, key, function, Payload::EMPTY).await,
    };
    match outcome {
        Ok(Outcome::Committed { tid, result }) => {
            println!(
                "committed, tid {tid}, result {} bytes: {}",
                result.len(),
                show(result.as_bytes())
            );
            ExitCode::SUCCESS
        }
        Ok(Outcome::Aborted { tid, abort }) => {
            println!("aborted, tid {tid}, {:?}: {}", abort.kind(), abort.message());
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// The bytes in hex, and as the likely types when the length fits.
fn show(bytes: &[u8]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut out = if hex.is_empty() {
        "(none)".to_string()
    } else {
        hex.join(" ")
    };
    if let Ok(eight) = <[u8; 8]>::try_from(bytes) {
        out += &format!(
            "  (i64 {}, u64 {})",
            i64::from_le_bytes(eight),
            u64::from_le_bytes(eight)
        );
    } else if let Ok(four) = <[u8; 4]>::try_from(bytes) {
        out += &format!("  (i32 {}, u32 {})", i32::from_le_bytes(four), u32::from_le_bytes(four));
    }
    out
}
