//! Between wire frames and the engine's requests and outcomes.
//!
//! The wire names operators and functions; the engine numbers them. A
//! server resolves each REQUEST against its [`App`] and answers what does not
//! resolve with an ERROR: such a request never reaches the engine, so it did
//! not run. Outcomes go back as COMMITTED or ABORTED, which are final and
//! which the engine remembers for exactly-once; a refusal before running
//! (`AbortKind::Rejected`) goes back as ERROR `OVERLOADED` instead, since the
//! request did not run and a retry may succeed.

use crate::error::{Error, ErrorCode, error_frame};
use crate::frame::{Body, Frame, Request};
use styx_engine::{
    AbortKind, Address, App, ClientSeq, FnId, FnKind, HANDOVER_FUNCTION, HANDOVER_FUNCTION_INDEX, MOVE_FUNCTION,
    MOVE_FUNCTION_INDEX, OpId, Outcome, PAYLOAD_LEN_MAX, Reply, Tid,
};

impl Request {
    /// The engine's request for this one: names resolved in `app`, the
    /// target checked against the function's kind and the operator's
    /// partitions. `corr` addresses the error, if any.
    pub fn resolve(&self, corr: u32, app: &App) -> Result<styx_engine::Request, Error> {
        let op = resolve_operator(corr, app, &self.operator)?;
        if self.function == MOVE_FUNCTION {
            return self.resolve_builtin(corr, app, op, MOVE_FUNCTION, MOVE_FUNCTION_INDEX);
        }
        if self.function == HANDOVER_FUNCTION {
            return self.resolve_builtin(corr, app, op, HANDOVER_FUNCTION, HANDOVER_FUNCTION_INDEX);
        }
        let Some(function) = app.resolve(&self.operator, &self.function) else {
            return Err(Error::UnknownFunction {
                corr,
                operator: self.operator.clone(),
                function: self.function.clone(),
            });
        };
        let kind = app.function_info(function).kind();
        match (&self.target, kind) {
            (Address::Entity(_), FnKind::Entity) => {}
            (Address::Partition(p), FnKind::Partition) => {
                let partitions = app.operator_info(op).partitions();
                if *p >= partitions {
                    return Err(Error::BadPartition {
                        corr,
                        operator: self.operator.clone(),
                        partition: *p,
                        partitions,
                    });
                }
            }
            (_, kind) => {
                return Err(Error::WrongTarget {
                    corr,
                    function: app.describe(function),
                    expected: match kind {
                        FnKind::Entity => "an entity key",
                        FnKind::Partition => "a partition",
                    },
                });
            }
        }
        Ok(styx_engine::Request {
            function,
            address: self.target.clone(),
            args: self.args.clone(),
            client: self.client_seq(),
        })
    }

    /// A built-in on any operator with a partition target: a partition move
    /// (`__move`: the target shard, `u16`, optionally followed by the
    /// move's pace, three `u32`) or a shard's handover to another node
    /// (`__handover`: `(shard, node)` as two `u16`; the partition names
    /// none). The engine checks the argument when it takes the request (an
    /// abort, nothing run).
    fn resolve_builtin(
        &self,
        corr: u32,
        app: &App,
        op: OpId,
        name: &str,
        index: u16,
    ) -> Result<styx_engine::Request, Error> {
        let Address::Partition(partition) = self.target else {
            return Err(Error::WrongTarget {
                corr,
                function: format!("{}.{name}", self.operator),
                expected: "a partition",
            });
        };
        let partitions = app.operator_info(op).partitions();
        if partition >= partitions {
            return Err(Error::BadPartition {
                corr,
                operator: self.operator.clone(),
                partition,
                partitions,
            });
        }
        Ok(styx_engine::Request {
            function: FnId { op, index },
            address: self.target.clone(),
            args: self.args.clone(),
            client: self.client_seq(),
        })
    }

    /// Client 0 opts out of exactly-once.
    fn client_seq(&self) -> Option<ClientSeq> {
        (self.client != 0).then_some(ClientSeq {
            client: self.client,
            seq: self.seq,
            ack: self.ack,
        })
    }
}

/// The operator named `name` (for GET), or `UNKNOWN_OPERATOR`.
pub fn resolve_operator(corr: u32, app: &App, name: &str) -> Result<OpId, Error> {
    app.op_id(name).ok_or_else(|| Error::UnknownOperator {
        corr,
        operator: name.to_string(),
    })
}

/// The frame answering request `corr` with the engine's outcome.
///
/// # Panics
/// On an abort of kind `Drift`, which the engine never releases to clients.
pub fn outcome_frame(corr: u32, tid: Tid, outcome: &Outcome) -> Frame {
    match outcome {
        Outcome::Committed(result) if result.len() > PAYLOAD_LEN_MAX => error_frame(
            corr,
            ErrorCode::RESULT_TOO_LARGE,
            &format!(
                "transaction {tid} committed, but its result of {} bytes exceeds the limit of {PAYLOAD_LEN_MAX}",
                result.len()
            ),
        ),
        Outcome::Committed(result) => Frame {
            corr,
            body: Body::Committed {
                tid,
                result: result.clone(),
            },
        },
        Outcome::Aborted(abort) => match abort.kind() {
            AbortKind::Rejected => error_frame(corr, ErrorCode::OVERLOADED, abort.message()),
            AbortKind::Forgotten => error_frame(corr, ErrorCode::SEQ_FORGOTTEN, abort.message()),
            AbortKind::Drift => panic!("a drift abort reached a client: {abort:?}"),
            _ => Frame {
                corr,
                body: Body::Aborted {
                    tid,
                    abort: abort.clone(),
                },
            },
        },
    }
}

/// The frame answering request `corr` with a released engine reply.
pub fn reply_frame(corr: u32, reply: &Reply) -> Frame {
    outcome_frame(corr, reply.tid, &reply.outcome)
}

/// The frame answering GET `corr` with an entity's state bytes.
pub fn state_frame(corr: u32, value: Option<&[u8]>) -> Frame {
    match value {
        Some(v) if v.len() > PAYLOAD_LEN_MAX => error_frame(
            corr,
            ErrorCode::RESULT_TOO_LARGE,
            &format!("state of {} bytes exceeds the limit of {PAYLOAD_LEN_MAX}", v.len()),
        ),
        _ => Frame {
            corr,
            body: Body::State {
                value: value.map(<[u8]>::to_vec),
            },
        },
    }
}

impl Body {
    /// The transaction's id and outcome, for a COMMITTED or ABORTED body
    /// (the final ones); `None` for any other.
    pub fn outcome(&self) -> Option<(Tid, Outcome)> {
        match self {
            Body::Committed { tid, result } => Some((*tid, Outcome::Committed(result.clone()))),
            Body::Aborted { tid, abort } => Some((*tid, Outcome::Aborted(abort.clone()))),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use styx_engine::{Abort, Key, Payload};

    fn app() -> App {
        let mut app = App::new("bank");
        let account = app.operator("account", 4);
        app.function(account, "deposit", |_ctx, amount: i64| async move { Ok(amount) });
        app.partition_function(account, "total", |_ctx, ()| async move { Ok(0i64) });
        app
    }

    fn request(operator: &str, function: &str, target: Address) -> Request {
        Request {
            client: 1,
            seq: 1,
            ack: 1,
            operator: operator.into(),
            function: function.into(),
            target,
            args: Payload::encode(&5i64),
        }
    }

    #[test]
    fn requests_resolve_or_say_why_not() {
        let app = app();
        let key = Address::Entity(Key::from(1u64));
        let ok = request("account", "deposit", key.clone()).resolve(3, &app).unwrap();
        assert_eq!(ok.function, app.resolve("account", "deposit").unwrap());
        assert_eq!(ok.args, Payload::encode(&5i64));
        request("account", "total", Address::Partition(3))
            .resolve(3, &app)
            .unwrap();

        let code = |r: Request| r.resolve(3, &app).unwrap_err().code();
        assert_eq!(
            code(request("acct", "deposit", key.clone())),
            ErrorCode::UNKNOWN_OPERATOR
        );
        assert_eq!(
            code(request("account", "dep", key.clone())),
            ErrorCode::UNKNOWN_FUNCTION
        );
        assert_eq!(code(request("account", "total", key)), ErrorCode::WRONG_TARGET);
        assert_eq!(
            code(request("account", "deposit", Address::Partition(0))),
            ErrorCode::WRONG_TARGET
        );
        assert_eq!(
            code(request("account", "total", Address::Partition(4))),
            ErrorCode::BAD_PARTITION
        );
        assert_eq!(
            request("x", "y", Address::Partition(0))
                .resolve(9, &app)
                .unwrap_err()
                .corr(),
            9
        );
    }

    #[test]
    fn a_move_resolves_to_the_engines_move_request() {
        let app = app();
        let mut r = request("account", MOVE_FUNCTION, Address::Partition(2));
        r.args = Payload::encode(&1u16);
        let resolved = r.resolve(3, &app).unwrap();
        let mut expected = styx_engine::Move {
            op: OpId(0),
            partition: 2,
            to: 1,
            share: None,
        }
        .request();
        expected.client = resolved.client;
        assert_eq!(resolved, expected);
        assert_eq!(resolved.client.map(|c| (c.client, c.seq)), Some((1, 1)));
        let code = |r: Request| r.resolve(3, &app).unwrap_err().code();
        let key = Address::Entity(Key::from(1u64));
        assert_eq!(code(request("account", MOVE_FUNCTION, key)), ErrorCode::WRONG_TARGET);
        assert_eq!(
            code(request("account", MOVE_FUNCTION, Address::Partition(4))),
            ErrorCode::BAD_PARTITION
        );
        assert_eq!(
            code(request("acct", MOVE_FUNCTION, Address::Partition(0))),
            ErrorCode::UNKNOWN_OPERATOR
        );
    }

    #[test]
    fn a_handover_resolves_to_the_engines_handover_request() {
        let app = app();
        let mut r = request("account", HANDOVER_FUNCTION, Address::Partition(0));
        r.args = Payload::encode(&(3u16, 1u16));
        let resolved = r.resolve(3, &app).unwrap();
        let mut expected = styx_engine::Handover { shard: 3, node: 1 }.request();
        expected.client = resolved.client;
        assert_eq!(resolved, expected);
        assert_eq!(
            styx_engine::Handover::of(&resolved),
            Some(Ok(styx_engine::Handover { shard: 3, node: 1 }))
        );
        let code = |r: Request| r.resolve(3, &app).unwrap_err().code();
        let key = Address::Entity(Key::from(1u64));
        assert_eq!(
            code(request("account", HANDOVER_FUNCTION, key)),
            ErrorCode::WRONG_TARGET
        );
        assert_eq!(
            code(request("acct", HANDOVER_FUNCTION, Address::Partition(0))),
            ErrorCode::UNKNOWN_OPERATOR
        );
    }

    #[test]
    fn outcomes_map_both_ways() {
        for outcome in [
            Outcome::Committed(Payload::encode(&7u64)),
            Outcome::Aborted(Abort::new("insufficient credit")),
            Outcome::Aborted(Abort::with_kind(AbortKind::Panic, "boom")),
        ] {
            let frame = outcome_frame(4, 99, &outcome);
            assert_eq!(frame.corr, 4);
            assert_eq!(frame.body.outcome(), Some((99, outcome)));
        }
    }

    #[test]
    fn refusals_are_errors_not_outcomes() {
        let frame = outcome_frame(4, 0, &Outcome::Aborted(Abort::with_kind(AbortKind::Rejected, "full")));
        assert!(matches!(
            frame.body,
            Body::Error {
                code: ErrorCode::OVERLOADED,
                ..
            }
        ));
        assert_eq!(frame.body.outcome(), None);
        let big = Outcome::Committed(Payload::from_vec(vec![0; PAYLOAD_LEN_MAX + 1]));
        assert!(matches!(
            outcome_frame(4, 1, &big).body,
            Body::Error {
                code: ErrorCode::RESULT_TOO_LARGE,
                ..
            }
        ));
        assert!(matches!(
            state_frame(1, Some(&vec![0; PAYLOAD_LEN_MAX + 1])).body,
            Body::Error { .. }
        ));
        assert_eq!(state_frame(1, None).body, Body::State { value: None });
    }
}
