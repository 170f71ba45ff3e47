//! `subagentd serve` without the process: the library's `server::run` on a
//! thread and actix system of its own, on port 0 and the memory store, with
//! the settings a config file gives, as the binary builds them. For tests of
//! what the service does over TCP and HTTP; what only the process does
//! (stdio, signals, crash and restart, its stderr and memory, start-up
//! checks, the process-wide metrics) keeps the real binary
//! ([`super::Server`]).

use std::net::TcpListener;
use std::thread::JoinHandle;
use subagent_host::config::FileConfig;
use subagent_host::server::{self, Listeners, Settings};
use tokio::sync::oneshot;

/// A server running in this process; shut down (as by SIGTERM) when
/// dropped.
pub struct InProcess {
    /// The TCP address, with `--tcp`.
    pub tcp: Option<String>,
    /// The HTTP address, with `--http`.
    pub http: Option<String>,
    /// The metrics address, with `--metrics`.
    pub metrics: Option<String>,
    // Fires the shutdown `server::run` waits for.
    stop: Option<oneshot::Sender<()>>,
    // The server's thread; it returns what `server::run` returned.
    thread: Option<JoinHandle<Result<(), String>>>,
}

// A loopback listener on port 0 when `flag` is in `args`.
fn listener(args: &[&str], flag: &str) -> Option<TcpListener> {
    args.contains(&flag).then(|| TcpListener::bind("127.0.0.1:0").expect("bind port 0"))
}

fn address(listener: &Option<TcpListener>) -> Option<String> {
    listener.as_ref().map(|listener| listener.local_addr().expect("bound").to_string())
}

impl InProcess {
    /// Serves as `subagentd serve ARGS` would (`--tcp`, `--http` and
    /// `--metrics`, each on a port of its own; the store is memory) with the
    /// config text `config`.
    pub fn start(args: &[&str], config: Option<&str>) -> Self {
        let known = ["--tcp", "--http", "--metrics", "127.0.0.1:0", "--store", "memory"];
        assert!(args.iter().all(|arg| known.contains(arg)), "not served in process: {args:?}");
        let file = FileConfig::parse(config.unwrap_or("")).expect("a valid config");
        let settings = Settings::from_file(&file).expect("settings");
        let (tcp, http, metrics) = (listener(args, "--tcp"), listener(args, "--http"), listener(args, "--metrics"));
        let (tcp_addr, http_addr, metrics_addr) = (address(&tcp), address(&http), address(&metrics));
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            actix_rt::System::new().block_on(async move {
                let listeners = Listeners { tcp, http, metrics, ..Listeners::default() };
                server::run(settings, listeners, async move {
                    let _ = stopped.await;
                })
                .await
            })
        });
        Self { tcp: tcp_addr, http: http_addr, metrics: metrics_addr, stop: Some(stop), thread: Some(thread) }
    }

    /// Shuts down (as SIGTERM does) and returns what `server::run` returned.
    pub fn shutdown(mut self) -> Result<(), String> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), String> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(thread) = self.thread.take() else { return Ok(()) };
        // Bounded: a server that does not stop fails the test, not hangs it.
        crate::common::eventually_blocking("the in-process server stops", super::PATIENCE, || {
            thread.is_finished().then_some(())
        });
        thread.join().unwrap_or_else(|_| Err("the server thread panicked".into()))
    }

    /// `GET /health`'s session count.
    pub fn sessions(&self) -> u64 {
        super::health_sessions(self.http.as_deref().expect("http"))
    }

    /// Waits until `/health` reports `n` sessions.
    pub fn wait_sessions(&self, n: u64) {
        super::wait_health_sessions(self.http.as_deref().expect("http"), n)
    }

    /// Waits until `/health` reports `n` attached streams.
    pub fn wait_streams(&self, n: u64) {
        super::wait_health_streams(self.http.as_deref().expect("http"), n)
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Leave a failing test's server to the process's end.
            let _ = self.stop.take().map(|stop| stop.send(()));
            return;
        }
        if let Err(err) = self.stop_and_join() {
            panic!("the in-process server: {err}");
        }
    }
}
