//! What a directory entry is: the word shared by the tree scan (`tree.rs`) and the kernel calls
//! that list a directory (`sys.rs`, Linux), below both so that neither needs the other's module.

/// What a directory entry is, as its listing says (a symbolic link is not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A directory.
    Dir,
    /// A symbolic link.
    Link,
    /// Anything else (a file, a socket, ...).
    Other,
}
