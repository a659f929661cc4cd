//! YCSB-T over the wire: deposit the start balances into a daemon that
//! was not preloaded (`styx bench ycsbt --connect … --load`), and read
//! every balance back (`styx verify ycsbt --total`).

use crate::ycsbt::{self, START_BALANCE};
use styx_engine::{Address, Key, Payload};
use styx_net::client::Connection;
use styx_net::frame::Request;

/// Deposits the start balance into every account, pipelined over all
/// connections (exactly-once client, so a retry cannot double a deposit).
pub async fn deposit(conns: &[Connection], keys: u64) -> Result<(), String> {
    let client = 0x10ad_0000_0000_0001;
    let mut tasks = Vec::new();
    for (i, conn) in conns.iter().enumerate() {
        let conn = conn.clone();
        let n = conns.len() as u64;
        tasks.push(glommio::spawn_local(async move {
            let mut pending = Vec::new();
            for k in (i as u64..keys).step_by(n as usize) {
                let req = Request {
                    client,
                    seq: k + 1,
                    ack: 0,
                    operator: ycsbt::OPERATOR.into(),
                    function: "deposit".into(),
                    target: Address::Entity(Key::from(k)),
                    args: Payload::encode(&START_BALANCE),
                };
                let c = conn.clone();
                pending.push(glommio::spawn_local(async move { c.request(req).await }));
                if pending.len() >= 256 {
                    for p in pending.drain(..) {
                        p.await.map_err(|e| format!("load: {e}"))?;
                    }
                }
            }
            for p in pending {
                p.await.map_err(|e| format!("load: {e}"))?;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await?;
    }
    Ok(())
}

/// Reads every balance: returns problems found and the total.
pub async fn verify(conn: &Connection, keys: u64) -> Result<(Vec<String>, i64), String> {
    let mut errors = Vec::new();
    let mut total = 0i64;
    let mut pending = Vec::new();
    for k in 0..keys {
        let c = conn.clone();
        pending.push((k, glommio::spawn_local(async move { c.get(ycsbt::OPERATOR, k).await })));
        if pending.len() >= 512 || k + 1 == keys {
            for (k, p) in pending.drain(..) {
                let v = p.await.map_err(|e| format!("reading account {k}: {e}"))?;
                let b = match v {
                    None => 0,
                    Some(bytes) => match <[u8; 8]>::try_from(bytes.as_slice()) {
                        Ok(b) => i64::from_le_bytes(b),
                        Err(_) => {
                            errors.push(format!("account {k}: state is not an i64 ({} bytes)", bytes.len()));
                            0
                        }
                    },
                };
                if b < 0 && errors.len() < 10 {
                    errors.push(format!("account {k} is overdrawn: {b}"));
                }
                total += b;
            }
        }
    }
    Ok((errors, total))
}
