//! TPC-C NewOrder and Payment as entity functions. (Being built.)
