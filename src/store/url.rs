//! [`StoreUrl`]: which store to open, parsed from `--store` or `[store]`,
//! and described for logs with any password hidden (`open` opens it).

use std::path::{Path, PathBuf};

/// Which store to open, from `--store` or `[store]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// Keep nothing.
    Memory,
    /// An SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL URL (`postgres://…` or `postgresql://…`).
    Postgres(String),
}

impl StoreUrl {
    /// Parses `memory`, `sqlite:PATH` (or `sqlite://PATH`) or `postgres://…`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "memory" {
            return Ok(Self::Memory);
        }
        if let Some(path) = text.strip_prefix("sqlite://").or_else(|| text.strip_prefix("sqlite:")) {
            if path.is_empty() {
                return Err("store `sqlite:` needs a file path (sqlite:PATH)".into());
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Self::Postgres(text.to_owned()));
        }
        Err(format!("unknown store `{}`: expected memory, sqlite:PATH or postgres://…", redact(text)))
    }

    /// The default SQLite file under `data_dir`.
    pub fn default_sqlite(data_dir: &Path) -> Self {
        Self::Sqlite(data_dir.join("subagentd.sqlite3"))
    }

    /// For logs: the kind and where, with any password hidden.
    pub fn describe(&self) -> String {
        match self {
            Self::Memory => "memory (nothing kept across restarts)".into(),
            Self::Sqlite(path) => format!("sqlite:{}", path.display()),
            Self::Postgres(url) => redact(url),
        }
    }
}

/// A URL with its password (between `:` and `@` of the authority) hidden.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_passwords_never_show() {
        assert_eq!(StoreUrl::parse("memory").unwrap(), StoreUrl::Memory);
        assert_eq!(StoreUrl::parse("sqlite:/tmp/x.db").unwrap(), StoreUrl::Sqlite("/tmp/x.db".into()));
        assert_eq!(StoreUrl::parse("sqlite:///tmp/x.db").unwrap(), StoreUrl::Sqlite("/tmp/x.db".into()));
        let pg = StoreUrl::parse("postgres://me:secret@db:5432/test").unwrap();
        assert_eq!(pg.describe(), "postgres://me:***@db:5432/test");
        assert!(StoreUrl::parse("mysql://x").unwrap_err().contains("unknown store"));
        assert!(!StoreUrl::parse("redis://u:pw@h").unwrap_err().contains("pw"));
        assert!(StoreUrl::parse("sqlite:").is_err());
    }
}
