//! Red team: the interception CA's files as another local user could arrange them. A CA whose
//! key or certificate someone else can plant or replace lets that someone read every intercepted
//! request (secrets included), so the CA is used only when it is this user's alone.

use std::os::unix::fs::PermissionsExt as _;

use sandgate_proxy::ca::{CaError, CertificateAuthority, ca_dir};

#[test]
fn a_ca_someone_else_could_write_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let dir = ca_dir(data.path());
    let made = CertificateAuthority::load_or_create(&dir).unwrap();
    let key = dir.join("ca-key.pem");
    let cert = dir.join("ca.pem");
    // Control: the files as made load again.
    assert_eq!(CertificateAuthority::load_or_create(&dir).unwrap().cert_pem(), made.cert_pem());

    // A directory others may write to: they could swap the certificate the sandboxes trust.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = CertificateAuthority::load_or_create(&dir).unwrap_err();
    assert!(matches!(e, CaError::NotOwn { .. }), "{e}");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();

    // A key that is a symbolic link (to a key someone else chose).
    let elsewhere = data.path().join("planted-key.pem");
    std::fs::rename(&key, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &key).unwrap();
    let e = CertificateAuthority::load_or_create(&dir).unwrap_err();
    assert!(matches!(e, CaError::NotOwn { .. }), "{e}");
    std::fs::remove_file(&key).unwrap();
    std::fs::rename(&elsewhere, &key).unwrap();
    assert!(CertificateAuthority::load_or_create(&dir).is_ok());

    // Files of another user (root can read them, which is the danger: a key planted 0600 by a
    // user in a shared data directory would be used by root's daemon).
    if !nix::unistd::geteuid().is_root() {
        assert!(std::env::var("CI").is_err(), "root is needed in CI to chown the CA's files");
        eprintln!("SKIPPED a_ca_someone_else_could_write_is_refused (chown rows): not root");
        return;
    }
    let nobody = Some(nix::unistd::Uid::from_raw(65534));
    for path in [&key, &cert, &dir] {
        nix::unistd::chown(path.as_path(), nobody, None).unwrap();
        let e = CertificateAuthority::load_or_create(&dir).unwrap_err();
        assert!(matches!(e, CaError::NotOwn { .. }), "{}: {e}", path.display());
        nix::unistd::chown(path.as_path(), Some(nix::unistd::geteuid()), None).unwrap();
    }
    assert!(CertificateAuthority::load_or_create(&dir).is_ok());
}
