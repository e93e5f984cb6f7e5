//! No code. Its manifest gives the statically linked tools' dependencies
//! the features the rest of the release build gives them, so that a first
//! build compiles each crate once (see Cargo.toml).
