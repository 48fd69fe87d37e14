//! libgit2's socket stream, with `TCP_NODELAY` set once it is connected.
//!
//! libgit2 writes an HTTP request's headers and its body in two writes.
//! Without `TCP_NODELAY`, the body waits until the server acknowledges the
//! headers, which Linux delays by 40 ms: every POST of a fetch paid that
//! (curl, under git, sets it). libgit2 has no setting for it, so tend
//! registers a socket stream of its own: libgit2's, whose connect is
//! followed by the option. The stream keeps libgit2's layout
//! (`git_socket_stream` in `streams/socket.h`): its ssh transport reads the
//! socket from it, and its free releases it with libgit2's allocator
//! (malloc, which tend leaves as it is).

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

/// `git_stream` (`include/git2/sys/stream.h`, version 1).
#[repr(C)]
#[derive(Clone, Copy)]
struct GitStream {
    version: c_int,
    /// `encrypted: 1, proxy_support: 1`.
    flags: u32,
    timeout: c_int,
    connect_timeout: c_int,
    connect: Option<unsafe extern "C" fn(*mut GitStream) -> c_int>,
    certificate: *const c_void,
    set_proxy: *const c_void,
    read: *const c_void,
    write: *const c_void,
    close: Option<unsafe extern "C" fn(*mut GitStream) -> c_int>,
    free: Option<unsafe extern "C" fn(*mut GitStream)>,
}

/// `git_socket_stream` (`src/libgit2/streams/socket.h`).
#[repr(C)]
struct SocketStream {
    parent: GitStream,
    host: *mut c_char,
    port: *mut c_char,
    socket: c_int,
}

/// `git_stream_registration`.
#[repr(C)]
struct Registration {
    version: c_int,
    init: Option<unsafe extern "C" fn(*mut *mut GitStream, *const c_char, *const c_char) -> c_int>,
    wrap: *const c_void,
}

const GIT_STREAM_STANDARD: c_int = 1;
const GIT_STREAM_VERSION: c_int = 1;

extern "C" {
    fn git_stream_register(kind: c_int, registration: *mut Registration) -> c_int;
    /// libgit2's own constructor (internal, linked statically): the
    /// registered stream if any, else libgit2's default one.
    fn git_socket_stream_new(
        out: *mut *mut GitStream,
        host: *const c_char,
        port: *const c_char,
    ) -> c_int;
}

/// libgit2's default socket stream as it is made (its functions, its
/// timeouts), taken before tend's is registered.
struct Template(GitStream);
// SAFETY: function pointers and plain integers, never written after.
unsafe impl Send for Template {}
unsafe impl Sync for Template {}

static TEMPLATE: OnceLock<Template> = OnceLock::new();

/// Registers the stream, once; after the timeouts are set, which libgit2
/// copies into each stream it makes. Says whether it is in place.
///
/// # Safety
///
/// No other thread may use libgit2 while it runs.
pub(super) unsafe fn register() -> bool {
    if TEMPLATE.get().is_some() {
        return true;
    }
    // Started (any libgit2 call starts it), so that its registry is.
    // SAFETY: as the caller guarantees.
    let _ = unsafe { git2::opts::get_mwindow_size() };
    let mut made: *mut GitStream = std::ptr::null_mut();
    // SAFETY: host and port are NUL-terminated; the stream is not
    // connected, and freed by its own free.
    let template = unsafe {
        if git_socket_stream_new(&mut made, c"localhost".as_ptr(), c"0".as_ptr()) != 0
            || made.is_null()
        {
            return false;
        }
        let template = *made;
        if let Some(free) = template.free {
            free(made);
        }
        template
    };
    if template.version != GIT_STREAM_VERSION || template.connect.is_none() {
        return false;
    }
    let _ = TEMPLATE.set(Template(template));
    let mut registration = Registration {
        version: 1,
        init: Some(init),
        wrap: std::ptr::null(),
    };
    // SAFETY: libgit2 copies the registration.
    unsafe { git_stream_register(GIT_STREAM_STANDARD, &mut registration) == 0 }
}

/// A stream as libgit2 makes one, connecting through [`connect`].
unsafe extern "C" fn init(
    out: *mut *mut GitStream,
    host: *const c_char,
    port: *const c_char,
) -> c_int {
    let Some(Template(template)) = TEMPLATE.get() else {
        return -1;
    };
    // SAFETY: libgit2 passes NUL-terminated host and port and a place for
    // the stream; it frees the stream with `free` (libc's free).
    unsafe {
        let st = libc::calloc(1, std::mem::size_of::<SocketStream>()) as *mut SocketStream;
        if st.is_null() {
            return -1;
        }
        (*st).parent = *template;
        (*st).parent.connect = Some(connect);
        (*st).host = libc::strdup(host);
        (*st).port = if port.is_null() {
            std::ptr::null_mut()
        } else {
            libc::strdup(port)
        };
        (*st).socket = -1;
        if (*st).host.is_null() || (!port.is_null() && (*st).port.is_null()) {
            libc::free((*st).host.cast());
            libc::free((*st).port.cast());
            libc::free(st.cast());
            return -1;
        }
        *out = st.cast();
    }
    0
}

/// libgit2's connect, then `TCP_NODELAY` (for a TCP socket; a failure to
/// set it only costs the delay).
unsafe extern "C" fn connect(stream: *mut GitStream) -> c_int {
    let Some(libgit2_connect) = TEMPLATE.get().and_then(|t| t.0.connect) else {
        return -1;
    };
    // SAFETY: `stream` is one `init` made, a `SocketStream`.
    unsafe {
        let rc = libgit2_connect(stream);
        if rc == 0 {
            let on: c_int = 1;
            libc::setsockopt(
                (*stream.cast::<SocketStream>()).socket,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&on as *const c_int).cast(),
                std::mem::size_of::<c_int>() as libc::socklen_t,
            );
        }
        rc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connected_stream_has_tcp_nodelay() {
        // SAFETY: registration takes libgit2's registry lock; a stream
        // made meanwhile by another test is libgit2's or this one.
        assert!(unsafe { register() });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port =
            std::ffi::CString::new(listener.local_addr().unwrap().port().to_string()).unwrap();
        let mut made: *mut GitStream = std::ptr::null_mut();
        // SAFETY: as libgit2's http client uses a stream: made, connected,
        // closed, freed.
        unsafe {
            assert_eq!(
                git_socket_stream_new(&mut made, c"127.0.0.1".as_ptr(), port.as_ptr()),
                0
            );
            let connect = (*made).connect.unwrap();
            assert_eq!(connect(made), 0);
            let socket = (*made.cast::<SocketStream>()).socket;
            let (mut on, mut len): (c_int, libc::socklen_t) = (0, 4);
            assert_eq!(
                libc::getsockopt(
                    socket,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    (&mut on as *mut c_int).cast(),
                    &mut len
                ),
                0
            );
            assert_eq!(on, 1, "TCP_NODELAY on the connected socket");
            let (_peer, _) = listener.accept().unwrap();
            (*made).close.unwrap()(made);
            (*made).free.unwrap()(made);
        }
    }
}
