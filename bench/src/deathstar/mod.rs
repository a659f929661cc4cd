//! Deathstar movie review and travel reservation. (Being built.)
