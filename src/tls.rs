//! TLS for both protocols: a configured certificate chain and key (PEM files), or, with none, a
//! self-signed certificate made at start for `localhost` and the loopback addresses, as the
//! proxy's test mode does (RocketMQ 5 clients enable TLS by default and trust any certificate).
//!
//! ALPN offers `h2`. A client that agrees on it speaks gRPC; one that offers no ALPN (the Java
//! remoting client with `tls.enable`) speaks remoting. [`TlsMode`] says whether plaintext, TLS
//! or both are served, as RocketMQ's `tls.server.mode`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the TLS certificate chain {path}")]
    Certificate {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("the TLS certificate file {path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("cannot read the TLS private key {path}")]
    Key {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("generating a self-signed certificate failed")]
    Generate(#[source] rcgen::Error),
    #[error("the TLS certificate and key do not make a server configuration")]
    Config(#[source] rustls::Error),
}

/// Where the certificate comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TlsIdentity {
    /// A self-signed certificate made at start.
    #[default]
    SelfSigned,
    /// PEM files: the certificate chain, then the private key.
    Files { cert: PathBuf, key: PathBuf },
}

/// The first byte of a TLS record carrying a handshake (a ClientHello): how a port tells a
/// TLS connection from a plaintext one.
pub const HANDSHAKE_RECORD: u8 = 0x16;

/// Which connections the listeners serve, as RocketMQ's `tls.server.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    /// Plaintext only; a TLS ClientHello is closed.
    Disabled,
    /// TLS and plaintext both (the default).
    #[default]
    Permissive,
    /// TLS only; a plaintext connection is closed, with a log line.
    Enforcing,
}

impl TlsMode {
    pub fn serves_tls(self) -> bool {
        self != TlsMode::Disabled
    }

    pub fn serves_plaintext(self) -> bool {
        self != TlsMode::Enforcing
    }
}

/// Whether a TLS connection agreed on gRPC (ALPN `h2`); otherwise it speaks remoting.
pub fn speaks_grpc(stream: &TlsStream<TcpStream>) -> bool {
    stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice())
}

/// The acceptor for `identity`.
pub fn acceptor(identity: &TlsIdentity) -> Result<TlsAcceptor, TlsError> {
    let (chain, key) = match identity {
        TlsIdentity::SelfSigned => self_signed()?,
        TlsIdentity::Files { cert, key } => (read_chain(cert)?, read_key(key)?),
    };
    // ring, not aws-lc-rs: no cmake and C library build in every `cargo build`. Its lack of
    // post-quantum key exchange is why rustls marks it deprecated; a dev broker can wait.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(TlsError::Config)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn self_signed() -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    let certified = rcgen::generate_simple_self_signed(names).map_err(TlsError::Generate)?;
    let key = PrivateKeyDer::try_from(certified.signing_key.serialize_der())
        .map_err(|e| TlsError::Generate(rcgen::Error::PemError(e.to_owned())))?;
    Ok((vec![certified.cert.der().clone()], key))
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Certificate {
            path: path.to_path_buf(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| TlsError::Key {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_identity_makes_an_acceptor() {
        assert!(acceptor(&TlsIdentity::SelfSigned).is_ok());
    }

    #[test]
    fn a_missing_certificate_file_is_named_in_the_error() {
        let identity = TlsIdentity::Files {
            cert: "/nonexistent/cert.pem".into(),
            key: "/nonexistent/key.pem".into(),
        };
        let Err(e) = acceptor(&identity) else {
            panic!("a missing file must fail");
        };
        assert!(e.to_string().contains("/nonexistent/cert.pem"), "{e}");
    }
}
