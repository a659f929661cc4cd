//! The wire protocol between clients and the engine. (Being built.)
