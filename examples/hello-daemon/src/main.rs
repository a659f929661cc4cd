//! A daemon serving your own functions: register them on an [`App`], hand
//! it to `styx_daemon::main`, and you get everything `styxd` has —
//! the TCP protocol, the input log, snapshots, recovery, exactly-once
//! clients, `/metrics` — with the same settings (`--help` lists them).
//!
//! ```text
//! cargo run --release -p hello-daemon -- --data-dir ./hello-data
//! ```
//!
//! Here: a guest book. `book.sign(name)` appends to a book's entries and
//! calls the signer's `guest.visit()`, which counts visits, in one
//! transaction; `book.entries()` reads the book.

use rkyv::{Archive, Deserialize, Serialize};
use std::process::ExitCode;
use std::sync::Arc;
use styx_engine::{Abort, App};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A book's state: who signed, in order.
#[derive(Archive, Serialize, Deserialize, Default)]
struct Book {
    entries: Vec<String>,
}

/// Entries a book holds at most: state should stay small.
const ENTRIES_MAX: usize = 10_000;

fn app() -> App {
    let mut app = App::new("guestbook");
    let book = app.operator("book", 16);
    let guest = app.operator("guest", 16);
    app.function(guest, "visit", |ctx, (): ()| async move {
        let visits = ctx.get::<u64>()?.unwrap_or(0) + 1;
        ctx.put(&visits)?;
        Ok(visits)
    });
    app.function(book, "sign", |ctx, name: String| async move {
        if name.is_empty() || name.len() > 64 {
            return Err(Abort::new("a name is 1 to 64 bytes"));
        }
        let mut book = ctx.get::<Book>()?.unwrap_or_default();
        if book.entries.len() >= ENTRIES_MAX {
            return Err(Abort::new("the book is full"));
        }
        let visits: u64 = ctx.call("guest", name.as_str(), "visit", ()).await?;
        book.entries.push(format!("{name} (visit {visits})"));
        ctx.put(&book)?;
        Ok(book.entries.len() as u64)
    });
    app.function(book, "entries", |ctx, (): ()| async move {
        Ok(ctx.get::<Book>()?.map(|b| b.entries).unwrap_or_default())
    });
    let _ = guest;
    app
}

fn main() -> ExitCode {
    styx_daemon::main(Arc::new(app()))
}
