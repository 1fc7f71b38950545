//! TCP and unix-socket listeners and streams behind one type, so the protocol code does
//! not care which transport a client came in on.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The IANA port for NBD.
pub const DEFAULT_PORT: u16 = 10809;
/// Where `uraid serve --nbd` listens when given no address.
pub const DEFAULT_ADDR: &str = "127.0.0.1:10809";

/// A bound listening socket.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    /// The path is removed again when the listener is dropped.
    Unix(UnixListener, PathBuf),
}

/// Parses `"127.0.0.1:10809"`, `"[::1]:10809"`, `"host"` (port 10809), `"unix:/path"` and
/// binds it. A unix socket path left behind by a dead server is replaced; one that a live
/// server answers on is refused with `AddrInUse`.
pub fn bind(addr: &str) -> io::Result<Listener> {
    if let Some(path) = addr.strip_prefix("unix:") {
        return bind_unix(Path::new(path));
    }
    let addrs: Vec<SocketAddr> = match addr.to_socket_addrs() {
        Ok(a) => a.collect(),
        // No port given ("127.0.0.1", "[::1]", "localhost"): use NBD's port.
        Err(_) => {
            let host = addr.trim_start_matches('[').trim_end_matches(']');
            (host, DEFAULT_PORT).to_socket_addrs()?.collect()
        }
    };
    if addrs.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{addr}: no address to listen on")));
    }
    Ok(Listener::Tcp(TcpListener::bind(&addrs[..])?))
}

fn bind_unix(path: &Path) -> io::Result<Listener> {
    if path.as_os_str().is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "unix: needs a socket path"));
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{}: exists and is not a socket", path.display())));
        }
        // A socket file outlives its server; only replace it if nobody answers.
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(io::ErrorKind::AddrInUse, format!("{}: a server is already listening", path.display())));
        }
        std::fs::remove_file(path)?;
    }
    Ok(Listener::Unix(UnixListener::bind(path)?, path.to_path_buf()))
}

impl Listener {
    /// Where clients connect: `127.0.0.1:10809` or `unix:/path`.
    pub fn local_addr(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| "tcp:?".into()),
            Listener::Unix(_, p) => format!("unix:{}", p.display()),
        }
    }

    /// An `nbd://` / `nbd+unix://` URI for `export` (what nbdinfo, nbdcopy, qemu-img take).
    pub fn uri(&self, export: &str) -> String {
        match self {
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => format!("nbd://{a}/{export}"),
                Err(_) => format!("nbd://localhost/{export}"),
            },
            Listener::Unix(_, p) => format!("nbd+unix:///{export}?socket={}", p.display()),
        }
    }

    pub(crate) fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(on),
            Listener::Unix(l, _) => l.set_nonblocking(on),
        }
    }

    pub(crate) fn accept(&self) -> io::Result<Stream> {
        let s = match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                // Replies are written whole; Nagle would only delay small ones.
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }
            Listener::Unix(l, _) => Stream::Unix(l.accept()?.0),
        };
        // Accepted sockets may inherit the listener's non-blocking mode on some systems.
        s.set_nonblocking(false)?;
        Ok(s)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A connected client.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub(crate) fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }
    pub(crate) fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }
    pub(crate) fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Unix(s) => s.set_write_timeout(t),
        }
    }
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Unix(s) => s.set_nonblocking(on),
        }
    }
    pub(crate) fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}
