//! Keeps the Lua side's version and the crate version in step: a library built
//! from one and loaded by the other would be refused at run time anyway, so
//! catching the mismatch at build time saves a confusing round trip.

use std::fs;

fn main() {
    println!("cargo:rerun-if-changed=lua/mia/version.lua");
    let crate_version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let lua = fs::read_to_string("lua/mia/version.lua").expect("lua/mia/version.lua is part of the crate");
    let quoted = format!("\"{crate_version}\"");
    if !lua.contains(&quoted) {
        panic!("lua/mia/version.lua does not hold version {quoted} from Cargo.toml: update one of them");
    }
}
