//! Durability: the input log (WAL), epoch-aligned incremental snapshots and
//! recovery. (Being built.)
