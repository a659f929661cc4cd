//! Shared by the runtime's integration tests.

#![allow(dead_code)]

use std::sync::Arc;
use styx_engine::{Abort, App, FnId};

/// A bank of accounts (16 partitions): `transfer(creditor, amount)` calls
/// the creditor's `deposit`, then debits its own account; balances start at
/// 0 unless loaded and may go negative. Returns the app and `transfer`.
pub fn bank(name: &str) -> (Arc<App>, FnId) {
    let mut app = App::new(name);
    let account = app.operator("account", 16);
    let deposit = app.function(account, "deposit", |ctx, amount: i64| async move {
        let balance = ctx.get::<i64>()?.unwrap_or(0);
        ctx.put(&(balance + amount))?;
        Ok(())
    });
    let transfer = app.function(
        account,
        "transfer",
        move |ctx, (creditor, amount): (u64, i64)| async move {
            ctx.call_fn::<()>(deposit, creditor, amount).await?;
            let balance = ctx.get::<i64>()?.unwrap_or(0);
            ctx.put(&(balance - amount))?;
            Ok::<(), Abort>(())
        },
    );
    (Arc::new(app), transfer)
}
