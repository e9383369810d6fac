//! TCP_NODELAY on the server's connections.
//!
//! A streamed chat answer is many small writes, one per chunk. With Nagle's
//! algorithm on, the kernel holds a small write while an earlier one is not
//! yet acknowledged, and clients delay their ACKs (40 ms on Linux): measured
//! here, a whole streamed answer arrived ~40 ms late. Dropshot 0.18 accepts
//! connections itself and offers no hook to set TCP_NODELAY on them. On
//! Linux an accepted socket inherits TCP_NODELAY from its listening socket,
//! so it is set once on Dropshot's listener, found among this process's open
//! files by its local address. Elsewhere this does nothing.

use std::io;
use std::net::SocketAddr;

/// Sets TCP_NODELAY on the listening socket bound to `addr`. `Ok(false)`
/// when there is none (or not on Linux).
#[cfg(target_os = "linux")]
pub fn nodelay_on_listener(addr: SocketAddr) -> io::Result<bool> {
    use std::os::fd::{BorrowedFd, RawFd};
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let Some(raw) = entry?.file_name().to_str().and_then(|n| n.parse::<RawFd>().ok()) else {
            continue;
        };
        // SAFETY: `borrow_raw` asks that the descriptor stay open while
        // borrowed. If another thread closes it meanwhile (or its number is
        // reused), the calls below fail with EBADF/ENOTSOCK, or read and set
        // an option of another socket: no memory is touched, only syscalls
        // taking a descriptor number are made.
        #[allow(unsafe_code)]
        let fd = unsafe { BorrowedFd::borrow_raw(raw) };
        let sock = socket2::SockRef::from(&fd);
        let bound_here = sock.local_addr().ok().and_then(|a| a.as_socket()) == Some(addr);
        // A listening socket has no peer; the connections it accepted share its address.
        if bound_here && sock.peer_addr().is_err() {
            sock.set_tcp_nodelay(true)?;
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(not(target_os = "linux"))]
pub fn nodelay_on_listener(_addr: SocketAddr) -> io::Result<bool> {
    Ok(false)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_listener_and_the_connections_it_accepts_get_nodelay() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(!socket2::SockRef::from(&listener).tcp_nodelay().unwrap(), "off by default");
        assert!(nodelay_on_listener(addr).unwrap());
        assert!(socket2::SockRef::from(&listener).tcp_nodelay().unwrap());
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert!(accepted.nodelay().unwrap(), "accepted sockets inherit TCP_NODELAY");
        let unbound = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        drop(listener);
        assert!(!nodelay_on_listener(unbound).unwrap());
    }
}
