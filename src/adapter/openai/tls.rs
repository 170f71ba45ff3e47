//! The TLS side of the openai adapter (feature `tls`): the public roots
//! (webpki), and a route's own CA (`ca_file`: PEM certificates trusted
//! besides them, for a private gateway or a test server).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// The client config of a route with `ca_file`: the public roots and the
/// file's certificates. Fails naming the file when it cannot be read or
/// holds no certificate.
pub(crate) fn with_extra_ca(ca_file: &std::path::Path) -> Result<Arc<rustls::ClientConfig>, String> {
    // awc's rustls connector needs a process-wide crypto provider; installing
    // one that is already there is a harmless error.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pem = std::fs::read(ca_file).map_err(|err| format!("ca_file {}: {err}", ca_file.display()))?;
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|err| format!("ca_file {}: {err}", ca_file.display()))?;
        roots.add(cert).map_err(|err| format!("ca_file {}: {err}", ca_file.display()))?;
        added += 1;
    }
    if added == 0 {
        return Err(format!("ca_file {}: no PEM certificate in it", ca_file.display()));
    }
    let mut config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    // awc speaks HTTP/1.1 here.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
