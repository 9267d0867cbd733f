//! `cargo xtask`: repository chores. See `usage()`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use xtask::rfc::{self, Rule};
use xtask::{arch, modules};

/// Violations found (`rfc check`, `modules check`, `arch check`).
const EXIT_VIOLATIONS: u8 = 1;
/// Bad arguments, or the check could not run at all.
const EXIT_ERROR: u8 = 2;

fn usage() -> &'static str {
    "usage: cargo xtask <command>\n\
     \n\
     commands:\n\
     \x20 rfc check [--root DIR]   validate every RFC under docs/rfc and the freshness of docs/rfc/INDEX.md\n\
     \x20 rfc index [--root DIR]   regenerate docs/rfc/INDEX.md\n\
     \x20 rfc rules                list the rules `rfc check` enforces\n\
     \x20 modules check [--root DIR] [--crate NAME]...\n\
     \x20                          fail on a cycle between the top-level modules of a library\n\
     \x20                          crate (every crates/*, or each crates/NAME given)\n\
     \x20 arch check [--root DIR]  fail when ARCHITECTURE.md is over 450 lines or its invariant\n\
     \x20                          table names a function or a test that does not exist\n\
     \x20 help                     print this message\n\
     \n\
     DIR is the repository root (the directory containing docs/rfc and crates); by default it is\n\
     found from CARGO_MANIFEST_DIR or the current directory."
}

enum Command {
    Check(Option<PathBuf>),
    Index(Option<PathBuf>),
    Rules,
    Modules(Option<PathBuf>, Vec<String>),
    Arch(Option<PathBuf>),
    Help,
}

fn parse(args: &[String]) -> Result<Command, String> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let (command, rest) = match words.as_slice() {
        [] | ["help" | "--help" | "-h", ..] => return Ok(Command::Help),
        ["rfc", "check", rest @ ..] => ("check", rest),
        ["rfc", "index", rest @ ..] => ("index", rest),
        ["arch", "check", rest @ ..] => ("arch", rest),
        ["arch", ..] => return Err("unknown arch command (only `check`)".to_owned()),
        ["modules", "check", rest @ ..] => return parse_modules(rest),
        ["modules", ..] => return Err("unknown modules command (only `check`)".to_owned()),
        ["rfc", "rules"] => return Ok(Command::Rules),
        ["rfc", other, ..] => return Err(format!("unknown rfc command `{other}`")),
        ["rfc"] => return Err("missing rfc command (check, index or rules)".to_owned()),
        [other, ..] => return Err(format!("unknown command `{other}`")),
    };
    let root = match rest {
        [] => None,
        ["--root", dir] => Some(PathBuf::from(dir)),
        ["--root"] => return Err("--root needs a directory".to_owned()),
        [arg, ..] => return Err(format!("unexpected argument `{arg}`")),
    };
    Ok(match command {
        "check" => Command::Check(root),
        "arch" => Command::Arch(root),
        _ => Command::Index(root),
    })
}

/// `modules check`'s arguments: `--root DIR` once, `--crate NAME` any number
/// of times.
fn parse_modules(mut rest: &[&str]) -> Result<Command, String> {
    let (mut root, mut crates) = (None, Vec::new());
    loop {
        rest = match rest {
            [] => return Ok(Command::Modules(root, crates)),
            ["--root", dir, tail @ ..] if root.is_none() => {
                root = Some(PathBuf::from(dir));
                tail
            }
            ["--crate", name, tail @ ..] => {
                crates.push((*name).to_owned());
                tail
            }
            ["--root" | "--crate"] => return Err(format!("{} needs a value", rest[0])),
            [arg, ..] => return Err(format!("unexpected argument `{arg}`")),
        };
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let command = match parse(&args) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("xtask: {message}\n\n{}", usage());
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let result = match command {
        Command::Help => {
            println!("{}", usage());
            Ok(ExitCode::SUCCESS)
        }
        Command::Rules => {
            for rule in Rule::ALL {
                println!("{:<24} {}", rule.name(), rule.summary());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check(root) => resolve_root(root).and_then(|root| run_check(&root)),
        Command::Index(root) => resolve_root(root).and_then(|root| run_index(&root)),
        Command::Modules(root, crates) => return run_modules(resolve_root(root), &crates),
        Command::Arch(root) => return run_arch(resolve_root(root)),
    };
    result.unwrap_or_else(|err| {
        eprintln!("xtask: {err}");
        ExitCode::from(EXIT_ERROR)
    })
}

fn run_check(root: &Path) -> Result<ExitCode, rfc::Error> {
    let report = rfc::check(root)?;
    let n = report.rfcs.len();
    if report.is_ok() {
        println!("rfc check: {n} RFCs ok");
        return Ok(ExitCode::SUCCESS);
    }
    for violation in &report.violations {
        eprintln!("{violation}");
    }
    eprintln!(
        "rfc check: {} violation(s) in {n} RFCs; the format is described in {}/README.md",
        report.violations.len(),
        rfc::RFC_DIR
    );
    Ok(ExitCode::from(EXIT_VIOLATIONS))
}

fn run_index(root: &Path) -> Result<ExitCode, rfc::Error> {
    let written = rfc::write_index(root)?;
    let what = if written.changed {
        "wrote"
    } else {
        "up to date:"
    };
    println!(
        "rfc index: {what} {}/{} ({} RFCs)",
        rfc::RFC_DIR,
        rfc::INDEX_FILE,
        written.rfc_count
    );
    Ok(ExitCode::SUCCESS)
}

fn run_modules(root: Result<PathBuf, rfc::Error>, crates: &[String]) -> ExitCode {
    let report = match root.map(|root| modules::check_crates(&root, crates)) {
        Ok(Ok(report)) => report,
        Ok(Err(err)) => return fail(&err),
        Err(err) => return fail(&err),
    };
    let n = report.graphs().len();
    if report.is_ok() {
        println!("modules check: {n} crates, no module cycle");
        return ExitCode::SUCCESS;
    }
    for cycle in report.cycles() {
        eprint!("{cycle}");
    }
    eprintln!(
        "modules check: {} cycle(s) in {n} crates; move the shared piece into the lower module",
        report.cycles().len()
    );
    ExitCode::from(EXIT_VIOLATIONS)
}

fn run_arch(root: Result<PathBuf, rfc::Error>) -> ExitCode {
    let report = match root.map(|root| arch::check(&root)) {
        Ok(Ok(report)) => report,
        Ok(Err(err)) => return fail(&err),
        Err(err) => return fail(&err),
    };
    let (lines, rows) = (report.lines(), report.rows());
    if report.is_ok() {
        println!("arch check: {lines} lines, {rows} invariant rows, every name found");
        return ExitCode::SUCCESS;
    }
    for violation in report.violations() {
        eprintln!("{violation}");
    }
    eprintln!(
        "arch check: {} problem(s) in {lines} lines, {rows} invariant rows; the table's format is in xtask/src/arch.rs",
        report.violations().len()
    );
    ExitCode::from(EXIT_VIOLATIONS)
}

fn fail(err: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("xtask: {err}");
    ExitCode::from(EXIT_ERROR)
}

/// `--root` as given; otherwise the workspace root cargo ran us from, the
/// nearest ancestor of the current directory with docs/rfc, or the root this
/// binary was built from.
fn resolve_root(explicit: Option<PathBuf>) -> Result<PathBuf, rfc::Error> {
    if let Some(root) = explicit {
        return Ok(root);
    }
    let from_manifest = |dir: &Path| dir.parent().and_then(rfc::find_root);
    env::var_os("CARGO_MANIFEST_DIR")
        .and_then(|dir| from_manifest(Path::new(&dir)))
        .or_else(|| env::current_dir().ok().and_then(|dir| rfc::find_root(&dir)))
        .or_else(|| from_manifest(Path::new(env!("CARGO_MANIFEST_DIR"))))
        .ok_or(rfc::Error::RootNotFound)
}
