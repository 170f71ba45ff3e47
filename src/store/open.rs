//! [`open`]: the store a [`StoreUrl`] names, opened with its writer thread.
//! Apart from `url` so that parsing a URL does not import the writer, which
//! imports the URL to connect with.

use super::cluster::ClusterSettings;
use super::url::StoreUrl;
use super::writer::{self, StoreHandle, WriterSettings};

/// Opens the store `url` names: connects, runs the migrations, and starts
/// the writer thread. A store that cannot be reached, or whose schema is
/// newer than this build knows, is an error naming why.
///
/// A PostgreSQL store makes this process a node of a cluster (`cluster`,
/// or a fresh node id and the default lease): it joins before this returns.
pub fn open(url: &StoreUrl, settings: WriterSettings, cluster: Option<ClusterSettings>) -> Result<StoreHandle, String> {
    match url {
        StoreUrl::Memory => Ok(StoreHandle::memory()),
        StoreUrl::Sqlite(_) => writer::start(url.clone(), settings, None),
        StoreUrl::Postgres(_) => {
            writer::start(url.clone(), settings, Some(cluster.unwrap_or_else(ClusterSettings::fresh)))
        }
    }
}
