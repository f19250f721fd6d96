//! TLS on the remoting protocol, as the Java client's `tls.enable` uses it: `skiff serve` with a
//! certificate from files serves a remoting request over TLS (no ALPN) on its main port, and a
//! plaintext one beside it in the default `permissive` mode; with `tls_mode = enforcing` the
//! plaintext client is turned away and the TLS one still served.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context};
use bytes::BytesMut;
use common::{request, spawn_serve, wait_serving};
use skiff::remoting::codes::{request as rc, response as code, AUTO_CREATE_TOPIC_KEY};
use skiff::remoting::{decode_frame, encode, ClientConfig, RemotingClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

/// A certificate for `localhost` in `dir` (cert.pem, key.pem); answers its DER form.
fn certificate(dir: &std::path::Path) -> anyhow::Result<CertificateDer<'static>> {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
    std::fs::write(dir.join("cert.pem"), made.cert.pem())?;
    std::fs::write(dir.join("key.pem"), made.signing_key.serialize_pem())?;
    Ok(made.cert.der().clone())
}

/// One route request over TLS, as a remoting client with TLS on sends it (no ALPN).
async fn route_over_tls(addr: &str, trusted: &CertificateDer<'static>) -> anyhow::Result<i32> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.clone())?;
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await?;
    let mut tls = connector
        .connect(ServerName::try_from("localhost")?, tcp)
        .await
        .context("TLS handshake")?;
    let mut route = request(
        rc::GET_ROUTEINFO_BY_TOPIC,
        &[("topic", AUTO_CREATE_TOPIC_KEY)],
    );
    route.opaque = 77;
    let mut out = BytesMut::new();
    encode(&route, &mut out)?;
    tls.write_all(&out).await?;
    let mut buf = BytesMut::new();
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(answer) = decode_frame(&mut buf, 1 << 24)? {
                return Ok::<_, anyhow::Error>(answer);
            }
            ensure!(tls.read_buf(&mut buf).await? > 0, "closed before an answer");
        }
    })
    .await
    .context("no answer over TLS")??;
    ensure!(answer.opaque == 77, "answer to another request: {answer:?}");
    Ok(answer.code)
}

async fn route_in_plaintext(addr: &str) -> anyhow::Result<i32> {
    let client = RemotingClient::new(ClientConfig::default());
    let route = request(
        rc::GET_ROUTEINFO_BY_TOPIC,
        &[("topic", AUTO_CREATE_TOPIC_KEY)],
    );
    let answer = client.invoke(addr, route, Duration::from_secs(5)).await;
    client.shutdown();
    Ok(answer?.code)
}

fn serve_with_certificate(
    dir: &std::path::Path,
    mode: &str,
) -> anyhow::Result<(common::ServeChild, String)> {
    let addr = format!("127.0.0.1:{}", common::free_port()?);
    let child = spawn_serve(
        dir,
        &addr,
        &[
            (
                "SKIFF_TLS_CERT_FILE",
                dir.join("cert.pem").display().to_string(),
            ),
            (
                "SKIFF_TLS_KEY_FILE",
                dir.join("key.pem").display().to_string(),
            ),
            ("SKIFF_TLS_MODE", mode.to_string()),
            ("SKIFF_GRPC_LISTEN", "off".to_string()),
            ("SKIFF_METRICS_LISTEN", "off".to_string()),
        ],
    )?;
    Ok((child, addr))
}

/// Waits until the node answers over TLS (plaintext may be refused).
async fn wait_serving_tls(addr: &str, trusted: &CertificateDer<'static>) -> anyhow::Result<()> {
    common::poll_until(
        "skiff serve answers over TLS",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async { Ok(route_over_tls(addr, trusted).await.is_ok()) },
    )
    .await
}

#[test]
fn remoting_over_tls_beside_plaintext_and_alone_when_enforced() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;

    let permissive = tempfile::tempdir()?;
    let trusted = certificate(permissive.path())?;
    let (serve, addr) = serve_with_certificate(permissive.path(), "permissive")?;
    runtime.block_on(async {
        let client = RemotingClient::new(ClientConfig::default());
        wait_serving(&client, &addr, "InPlaintext").await?;
        client.shutdown();
        let over_tls = route_over_tls(&addr, &trusted).await?;
        ensure!(over_tls == code::SUCCESS, "over TLS: {over_tls}");
        let plaintext = route_in_plaintext(&addr).await?;
        ensure!(plaintext == code::SUCCESS, "in plaintext: {plaintext}");
        Ok::<_, anyhow::Error>(())
    })?;
    drop(serve);

    let enforcing = tempfile::tempdir()?;
    let trusted = certificate(enforcing.path())?;
    let (serve, addr) = serve_with_certificate(enforcing.path(), "enforcing")?;
    runtime.block_on(async {
        wait_serving_tls(&addr, &trusted).await?;
        let over_tls = route_over_tls(&addr, &trusted).await?;
        ensure!(over_tls == code::SUCCESS, "over TLS: {over_tls}");
        let plaintext = route_in_plaintext(&addr).await;
        ensure!(
            plaintext.is_err(),
            "a plaintext client was answered while TLS is enforced: {plaintext:?}"
        );
        Ok::<_, anyhow::Error>(())
    })?;
    drop(serve);
    let log = std::fs::read_to_string(enforcing.path().join("serve.log"))?;
    ensure!(
        log.contains("plaintext connection closed: tls_mode is enforcing"),
        "the refusal of the plaintext client is not in the log"
    );
    Ok(())
}
