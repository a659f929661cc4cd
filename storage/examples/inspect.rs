//! Prints what `styx inspect log|snapshot DIR` will print.
//!
//! ```text
//! cargo run --release -p styx-storage --example inspect -- log|snapshot PATH
//! ```

use std::path::Path;
use styx_storage::inspect;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (what, path) = match args.as_slice() {
        [what, path] => (what.as_str(), Path::new(path)),
        _ => {
            eprintln!("usage: inspect log|snapshot PATH");
            std::process::exit(2);
        }
    };
    let clean = match what {
        "log" => inspect::log(path).map(|r| {
            print!("{r}");
            r.is_clean()
        }),
        "snapshot" => inspect::snapshot(path).map(|r| {
            print!("{r}");
            r.is_clean()
        }),
        other => {
            eprintln!("inspect log|snapshot, not {other}");
            std::process::exit(2);
        }
    };
    match clean {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
