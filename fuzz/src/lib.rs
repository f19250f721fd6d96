//! The runtime-free part of skiff's remoting module (codes, frame codec, typed headers, JSON
//! bodies), compiled straight from `src/remoting/` so the fuzz build does not pull in the actor
//! system and storage (and does not rebuild whenever they change).

#[path = "../../src/remoting/body/mod.rs"]
pub mod body;
#[path = "../../src/remoting/codes.rs"]
pub mod codes;
#[path = "../../src/remoting/frame/mod.rs"]
pub mod frame;
#[path = "../../src/remoting/headers/mod.rs"]
pub mod headers;
