//! `styx verify WORKLOAD`: reads a running daemon's state and checks what
//! holds whatever ran on it.

use crate::workloads::{Knobs, Name, Visit};
use styx_bench::remote::{Pool, connect_options, dump_state, on_client};
use styx_bench::runner::{State, Workload};
use styx_bench::ycsbt::{self, START_BALANCE};
use styx_engine::App;

/// `styx verify WORKLOAD`: reads the state of the daemon at `addr` and
/// checks what holds whatever ran on it — TPC-C's consistency conditions,
/// movie's reviews each in both lists exactly once, travel's no
/// overbooking, YCSB-T's conserved total and no negative balance (of
/// `knobs.keys` accounts that started at the start balance). Returns the
/// violations (none: consistent).
pub fn verify(workload: &str, addr: &str, knobs: &Knobs) -> Result<Vec<String>, String> {
    let name = Name::parse(workload)
        .ok_or_else(|| format!("unknown workload {workload:?}; one of ycsbt, tpcc, movie, travel"))?;
    let addr = addr.to_string();
    knobs.visit(name, Verify { addr })?
}

struct Verify {
    addr: String,
}

impl Visit for Verify {
    type Out = Result<Vec<String>, String>;

    fn visit<W: Workload>(self, workload: W) -> Self::Out {
        let app = workload.app();
        let a = app.clone();
        let state = on_client(move || async move {
            let pool = Pool::connect(&self.addr, 1, connect_options()).await?;
            let state = dump_state(&pool.all().await?, &a).await;
            pool.close();
            state
        })?;
        Ok(match workload.name() {
            // Balances moved by transfers the verifier never saw: only the
            // total and the signs can be checked.
            "ycsbt" => {
                let keys = workload.parameters()["keys"].as_u64().expect("ycsbt has keys");
                conservation(&app, &state, keys)
            }
            // State-only checks: no tallies, no surprises to report.
            _ => workload.check(&app, &state, Vec::new()),
        })
    }
}

/// YCSB-T without tallies: the total is `keys` start balances, no balance
/// is negative, no account lies outside `0..keys`.
fn conservation(app: &App, state: &State, keys: u64) -> Vec<String> {
    let account = app.op_id(ycsbt::OPERATOR).expect("account operator");
    let mut errors = Vec::new();
    let mut total: i64 = 0;
    for ((op, key), value) in state {
        if *op != account {
            continue;
        }
        let balance = match value.decode::<i64>() {
            Ok(b) => b,
            Err(e) => {
                errors.push(format!("account {key}: {e}"));
                continue;
            }
        };
        total += balance;
        if balance < 0 && errors.len() < 10 {
            errors.push(format!("account {key} is overdrawn: {balance}"));
        }
        if key.as_u64().is_none_or(|k| k >= keys) && errors.len() < 10 {
            errors.push(format!("account {key} is not among the {keys} accounts"));
        }
    }
    let want = START_BALANCE * keys as i64;
    if total != want {
        errors.push(format!(
            "total {total}, expected {want} ({keys} accounts of {START_BALANCE})"
        ));
    }
    errors
}
