//! Compiles the RocketMQ 5 gRPC schema (`src/grpc/proto`) into Rust with prost and tonic.
//! protox parses the `.proto` files in Rust, so building skiff needs no `protoc` binary.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const ROOT: &str = "src/grpc/proto";
    println!("cargo:rerun-if-changed={ROOT}");
    let descriptors = protox::compile(["apache/rocketmq/v2/service.proto"], [ROOT])?;
    tonic_prost_build::configure()
        .build_server(true)
        // Bodies as `bytes::Bytes`: the store hands them over without a copy.
        .bytes(".apache.rocketmq.v2.Message.body")
        // The client half serves the crate's tests and embedders' tests.
        .build_client(true)
        // No `connect` helper: the client half is generic over its channel.
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}
