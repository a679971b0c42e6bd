//! The `sandgate` command line (placeholder while the workspace is being laid out).

fn main() {}
