-- The version of mia's Lua code; the native library must report the same
-- one (build.rs checks Cargo.toml against this line).
return { version = "0.1.0", protocol = 1 }
