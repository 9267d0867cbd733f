//! The `keel` binary. All logic lives in the `keel_cli` library.

fn main() {
    std::process::exit(keel_cli::main());
}
