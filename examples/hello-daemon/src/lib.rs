//! The guest book application of the example daemon (`src/main.rs` serves
//! it): in a library, so that clients and tests share its typed request
//! builders (`BookRequest`, `GuestRequest`) with the daemon.
//!
//! A guest book: `book.sign(name)` appends to a book's entries and calls
//! the signer's `guest.visit()`, which counts visits, in one transaction;
//! `book.entries()` reads the book.
//!
//! `#[styx::entity]` makes a struct an operator's state (stored with rkyv;
//! `Default` is the state of an entity never written) and `#[styx::functions]`
//! registers its methods: `&mut self` methods write the state back when they
//! return `Ok`, `&self` methods only read it, and an `Err` aborts the whole
//! transaction, every call it made included. `ctx.entity::<Guest>(key)` is a
//! typed proxy: its methods are `Guest`'s functions, checked at compile time.

use rkyv::{Archive, Deserialize, Serialize};
use styx_engine::{self as styx, Abort, App, Ctx};

/// Entries a book holds at most: state should stay small.
const ENTRIES_MAX: usize = 10_000;

/// A book's state: who signed, in order.
#[styx::entity(name = "book")]
#[derive(Archive, Serialize, Deserialize, Default)]
pub struct Book {
    entries: Vec<String>,
}

#[styx::functions]
impl Book {
    /// Signs the book as `name`; returns the number of entries.
    pub async fn sign(&mut self, ctx: &Ctx, name: String) -> Result<u64, Abort> {
        if name.is_empty() || name.len() > 64 {
            return Err(Abort::new("a name is 1 to 64 bytes"));
        }
        if self.entries.len() >= ENTRIES_MAX {
            return Err(Abort::new("the book is full"));
        }
        let visits = ctx.entity::<Guest>(name.as_str()).visit().await?;
        self.entries.push(format!("{name} (visit {visits})"));
        Ok(self.entries.len() as u64)
    }

    pub async fn entries(&self) -> Result<Vec<String>, Abort> {
        Ok(self.entries.clone())
    }
}

/// A guest's state: how often they signed any book.
#[styx::entity(name = "guest")]
#[derive(Archive, Serialize, Deserialize, Default)]
pub struct Guest {
    visits: u64,
}

#[styx::functions]
impl Guest {
    /// Counts a visit; returns the visits so far.
    pub async fn visit(&mut self) -> Result<u64, Abort> {
        self.visits += 1;
        Ok(self.visits)
    }
}

/// The application: both entities, registered.
pub fn app() -> App {
    let mut app = App::new("guestbook");
    app.entity::<Book>();
    app.entity::<Guest>();
    app
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use styx_engine::sim::{Sim, test_config};
    use styx_engine::{Outcome, TypedRequest};

    /// Runs `request` alone in a simulated two-shard engine.
    fn run<R: styx_engine::Decode>(sim: &mut Sim, app: &App, request: TypedRequest<R>) -> Result<R, Abort> {
        sim.submit(0, 0, request.request(app).unwrap()).unwrap();
        sim.run();
        match sim.take_replies().pop().unwrap().outcome {
            Outcome::Committed(p) => Ok(request.decode(&p).unwrap()),
            Outcome::Aborted(a) => Err(a),
        }
    }

    #[test]
    fn signing_counts_visits_in_one_transaction() {
        let app = Arc::new(app());
        let mut sim = Sim::new(app.clone(), test_config(100), 2, 7);
        let lobby = BookRequest::new("lobby");
        assert_eq!(run(&mut sim, &app, lobby.sign("ada".into())), Ok(1));
        assert_eq!(run(&mut sim, &app, lobby.sign("ada".into())), Ok(2));
        assert!(run(&mut sim, &app, lobby.sign(String::new())).is_err());
        assert_eq!(run(&mut sim, &app, GuestRequest::new("ada").visit()), Ok(3));
        assert_eq!(
            run(&mut sim, &app, lobby.entries()),
            Ok(vec!["ada (visit 1)".to_string(), "ada (visit 2)".to_string()])
        );
    }

    #[test]
    fn the_schema_names_every_function_and_type() {
        let schema = app().schema().to_string();
        assert!(
            schema.contains("operator book: 16 partitions, state Book\n"),
            "{schema}"
        );
        assert!(schema.contains("  sign(name: String) -> u64\n"), "{schema}");
        assert!(schema.contains("  entries() -> Vec<String>\n"), "{schema}");
        assert!(
            schema.contains("operator guest: 16 partitions, state Guest\n"),
            "{schema}"
        );
        assert!(schema.contains("  visit() -> u64\n"), "{schema}");
    }
}
