//! The decoders skiff's fuzz targets drive, from the `skiff` crate itself: the remoting codes,
//! frame codec, typed headers and JSON bodies, and the gRPC front door's messages and
//! conversions.

pub use skiff::grpc;
pub use skiff::remoting::{body, codes, frame, headers};
