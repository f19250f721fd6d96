//! skiff-actors: every actor of a skiff node and the typed messages between them.

pub mod logic;
