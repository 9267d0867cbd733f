//! The little Markdown the rules need: which lines are prose (outside fenced
//! code blocks), `##` headings, and text with its inline code spans removed.
//!
//! Quoting a heading, a marker or a table row inside a code block is how an
//! RFC talks *about* the format, so only prose counts for the rules.

/// One line outside fenced code blocks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProseLine<'a> {
    /// 1-based line number in the file.
    pub(crate) number: usize,
    /// The line as written (without its line ending).
    pub(crate) text: &'a str,
    /// Whether this line opens a fenced code block (the block itself is not
    /// prose, but it is content of the section it sits in).
    pub(crate) opens_fence: bool,
}

/// Every line outside fenced code blocks, plus the lines that open one
/// (flagged), in order. A fence is three or more backticks or tildes,
/// indented at most three spaces, closed by a run of the same character at
/// least as long.
pub(crate) fn prose_lines<'a>(lines: &[&'a str]) -> Vec<ProseLine<'a>> {
    let mut out = Vec::new();
    let mut fence: Option<(u8, usize)> = None;
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        if let Some((ch, len)) = fence {
            let run = trimmed.bytes().take_while(|&b| b == ch).count();
            let closes = indent <= 3
                && run >= len
                && trimmed
                    .get(run..)
                    .is_some_and(|rest| rest.trim().is_empty());
            if closes {
                fence = None;
            }
            continue;
        }
        let opens = if indent <= 3 {
            fence_open(trimmed)
        } else {
            None
        };
        fence = opens;
        out.push(ProseLine {
            number: i + 1,
            text: line,
            opens_fence: opens.is_some(),
        });
    }
    out
}

fn fence_open(line: &str) -> Option<(u8, usize)> {
    let ch = *line.as_bytes().first()?;
    if ch != b'`' && ch != b'~' {
        return None;
    }
    let run = line.bytes().take_while(|&b| b == ch).count();
    (run >= 3).then_some((ch, run))
}

/// The text of a `##` heading (without an optional closing run of `#`s),
/// if `line` is one. Leading indentation of up to three spaces is allowed.
pub(crate) fn h2(line: &str) -> Option<String> {
    let trimmed = line.trim_start_matches(' ');
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let text = trimmed.strip_prefix("## ")?.trim();
    let without_closing = text.trim_end_matches('#');
    let text = if without_closing.len() < text.len()
        && (without_closing.is_empty() || without_closing.ends_with(' '))
    {
        without_closing.trim_end()
    } else {
        text
    };
    Some(text.to_owned())
}

/// `line` with every inline code span (a backtick run, up to the next run
/// of the same length) replaced by a single space. An unclosed run is kept
/// as literal text, as CommonMark does.
pub(crate) fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let run = after.bytes().take_while(|&b| b == b'`').count();
        let body = &after[run..];
        match find_closing_run(body, run) {
            Some(end) => {
                out.push(' ');
                rest = &body[end + run..];
            }
            None => {
                out.push_str(&after[..run]);
                rest = body;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The byte offset in `text` of the first backtick run exactly `len` long.
fn find_closing_run(text: &str, len: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'`' {
            let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
            if run == len {
                return Some(i);
            }
            i += run;
        } else {
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prose(text: &str) -> Vec<(usize, &str, bool)> {
        let lines: Vec<&str> = text.lines().collect();
        prose_lines(&lines)
            .into_iter()
            .map(|l| (l.number, l.text, l.opens_fence))
            .collect()
    }

    #[test]
    fn fenced_lines_are_not_prose() {
        assert_eq!(
            prose("a\n```md\n## X\n```\nb\n~~~~\n```\n~~~~\nc"),
            [
                (1, "a", false),
                (2, "```md", true),
                (5, "b", false),
                (6, "~~~~", true),
                (9, "c", false)
            ]
        );
    }

    #[test]
    fn code_spans_are_removed() {
        assert_eq!(without_code_spans("a `XXX` b"), "a   b");
        assert_eq!(without_code_spans("a ``x ` y`` b"), "a   b");
        assert_eq!(without_code_spans("a `open XXX"), "a `open XXX");
        assert_eq!(without_code_spans("plain"), "plain");
    }

    #[test]
    fn headings() {
        assert_eq!(h2("## Problem ##").as_deref(), Some("Problem"));
        assert_eq!(h2("   ## C#").as_deref(), Some("C#"));
        assert_eq!(h2("    ## Indented code"), None);
        assert_eq!(h2("### Sub"), None);
    }
}
