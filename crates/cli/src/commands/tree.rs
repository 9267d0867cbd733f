//! `keel runs --tree RUN_ID`: the conversation RUN_ID belongs to, as a
//! tree: the root, then each continuation, fork and sub-run indented under
//! the run it comes from, with its status and, for a fork, `forked at SEQ`,
//! for a sub-run `sub-run of PARENT (call CALL_ID)`.

use crate::error::{CliError, EXIT_OK};
use keel_observers::StoreReader;
use keel_observers::conversation::{self, Origin, TreeNode};
use std::io::{BufWriter, Write};

/// Prints the tree of `run_id`'s conversation.
pub fn print(reader: &StoreReader, run_id: &str) -> Result<i32, CliError> {
    let tree = conversation::tree(reader, run_id)?
        .ok_or_else(|| CliError::bad_input(format!("no stored run {run_id} (rule run.known)")))?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let write = |e: std::io::Error| CliError::failure(format!("writing to stdout: {e}"));
    for node in &tree.nodes {
        writeln!(out, "{}", line(node)).map_err(write)?;
    }
    if tree.truncated {
        writeln!(
            out,
            "… more runs not shown (a tree lists at most {})",
            conversation::MAX_TREE_RUNS
        )
        .map_err(write)?;
    }
    out.flush().map_err(write)?;
    Ok(EXIT_OK)
}

/// `  run_2  completed  forked at 11`: indented two spaces a level.
fn line(node: &TreeNode) -> String {
    let how = match &node.origin {
        Origin::Root => String::new(),
        Origin::Continues(_) => "  continues".to_owned(),
        Origin::Fork(fork) => format!("  forked at {}", fork.seq),
        Origin::SubRun(link) => format!("  sub-run of {} (call {})", link.run_id, link.call_id),
    };
    format!(
        "{}{}  {}{how}",
        "  ".repeat(node.depth),
        node.run.run_id,
        node.run.status.as_str()
    )
}
