//! Logging for the binary: `log` + `env_logger` to stderr, never blocking.
//!
//! A client that pipes the host's stderr and never reads it (the A2E SDK's
//! subprocess transport does) would block a plain stderr write once the pipe
//! is full. Records are instead handed to a dedicated thread through a
//! bounded queue and dropped when it is full. The default level is `warn`,
//! which logs nothing per request, with one exception: each MCP server's
//! connection (starting, ready with its tools, failed and why) is `info`,
//! so an operator sees whether the tools are there. `RUST_LOG` overrides
//! it.
//!
//! Records are text (env_logger's format) or, for log shippers, one JSON
//! object per line: `{"ts", "level", "target", "message"}`.

use std::io::Write;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};

/// The filter without `RUST_LOG`: warnings, and the MCP servers' state.
const DEFAULT_FILTER: &str = "warn,subagent_host::tools::connection=info";

/// Log records queued for stderr before new ones are dropped.
const QUEUE: usize = 1_024;
/// Bytes buffered before a record without a newline is sent anyway.
const MAX_PENDING: usize = 64 * 1024;

/// How log records are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// env_logger's text: `[ts LEVEL target] message`.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the logger. Call once, first thing in `main`.
pub fn init(format: LogFormat) {
    let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE);
    let spawned = std::thread::Builder::new().name("stderr-log".into()).spawn(move || {
        let stderr = std::io::stderr();
        for chunk in rx {
            let mut out = stderr.lock();
            let _ = out.write_all(&chunk);
            let _ = out.flush();
        }
    });
    if spawned.is_err() {
        return;
    }
    let writer = NonBlockingStderr { tx, pending: Vec::new() };
    let mut builder = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(DEFAULT_FILTER));
    builder.target(env_logger::Target::Pipe(Box::new(writer)));
    if format == LogFormat::Json {
        builder.format(|out, record| {
            let line = serde_json::json!({
                "ts": out.timestamp_millis().to_string(),
                "level": record.level().as_str(),
                "target": record.target(),
                "message": record.args().to_string(),
            });
            writeln!(out, "{line}")
        });
    }
    let _ = builder.try_init();
}

struct NonBlockingStderr {
    // To the stderr thread.
    tx: SyncSender<Vec<u8>>,
    // The record being written.
    pending: Vec<u8>,
}

impl NonBlockingStderr {
    fn send(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let chunk = std::mem::take(&mut self.pending);
        // Full: the reader of stderr is not keeping up; drop the record.
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(chunk) {}
    }
}

impl Write for NonBlockingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        if self.pending.ends_with(b"\n") || self.pending.len() >= MAX_PENDING {
            self.send();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send();
        Ok(())
    }
}
