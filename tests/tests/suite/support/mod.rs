//! Fixtures shared by the suite's modules, one module per kind of test.

pub mod daemon;
pub mod dns;
pub mod git;
pub mod hook;
pub mod intercept;
pub mod sandbox;
pub mod ssh;

/// Waits until something accepts TCP connections on `listen` (`sandgate proxy` started as
/// `child`); fails if `child` exits first or nothing listens within 20 s.
pub fn until_listening(listen: &str, child: &mut std::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(listen).is_err() {
        assert!(std::time::Instant::now() < deadline, "the proxy did not start listening");
        assert!(child.try_wait().unwrap().is_none(), "the proxy exited early");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
