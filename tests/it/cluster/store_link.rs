//! A TCP relay to PostgreSQL that a test can cut (every connection through
//! it dropped, new ones refused at once), stall (nothing goes through,
//! nothing fails: a store that hangs) and mend.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// The relay; see the module docs.
pub(super) struct StoreLink {
    /// The port the relay listens on, in place of PostgreSQL's.
    pub(super) port: u16,
    // Set while cut: new connections are dropped at once.
    down: Arc<AtomicBool>,
    // Held by every relaying thread while stalled.
    stall: Arc<Stall>,
    // Both ends of every relayed connection, to drop them at a cut.
    open: Arc<Mutex<Vec<TcpStream>>>,
}

/// Whether the relay holds every byte, and the wake-up of the threads
/// holding them when it stops.
#[derive(Default)]
struct Stall {
    stalled: Mutex<bool>,
    lifted: Condvar,
}

impl Stall {
    fn set(&self, stalled: bool) {
        *self.stalled.lock().unwrap() = stalled;
        self.lifted.notify_all();
    }

    /// Returns at once when not stalled, else once the stall is lifted.
    fn pass(&self) {
        let stalled = self.stalled.lock().unwrap();
        drop(self.lifted.wait_while(stalled, |stalled| *stalled).unwrap());
    }
}

/// Copies `from` to `to` until either closes, holding every byte while
/// the relay is stalled.
fn relay_bytes(mut from: TcpStream, mut to: TcpStream, stall: &Stall) {
    use std::io::{Read, Write};
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        stall.pass();
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

impl StoreLink {
    /// A relay to the machine's PostgreSQL (127.0.0.1:5432) on a free port.
    pub(super) fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let port = listener.local_addr().expect("addr").port();
        let down = Arc::new(AtomicBool::new(false));
        let stall = Arc::new(Stall::default());
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (accept_down, accept_open, accept_stall) = (down.clone(), open.clone(), stall.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if accept_down.load(Ordering::Acquire) {
                    continue; // dropped at once: the connection fails
                }
                let Ok(server) = TcpStream::connect("127.0.0.1:5432") else { continue };
                let mut sockets = accept_open.lock().unwrap();
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (from, to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
                    let stall = accept_stall.clone();
                    std::thread::spawn(move || relay_bytes(from, to, &stall));
                }
                sockets.extend([client, server]);
            }
        });
        Self { port, down, stall, open }
    }

    /// Holds every byte from now on (`true`), or lets them through again.
    pub(super) fn stall(&self, stalled: bool) {
        self.stall.set(stalled);
    }

    /// Drops every relayed connection and refuses new ones.
    pub(super) fn cut(&self) {
        self.down.store(true, Ordering::Release);
        for socket in self.open.lock().unwrap().drain(..) {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Takes new connections again.
    pub(super) fn mend(&self) {
        self.down.store(false, Ordering::Release);
    }
}
