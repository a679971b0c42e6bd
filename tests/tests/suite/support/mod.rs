//! Fixtures shared by the suite's modules, one module per kind of test.

pub mod daemon;
pub mod git;
pub mod hook;
pub mod intercept;
pub mod sandbox;
