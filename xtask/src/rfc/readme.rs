//! The curated `docs/rfc/README.md`: it explains the process and the format,
//! and never lists RFCs. The list is the generated INDEX.md; a copied index
//! row in the README is a second list that goes stale.

use super::markdown::prose_lines;
use super::tree::check_file_name;
use super::{Lifecycle, Rule, Violation};

/// Checks the README's text (`path` labels the violations): every table row
/// outside fenced code that names an RFC file (a dated `YYYY-MM-DD-slug.md`
/// under a lifecycle folder) is an index-shaped row.
pub fn check_readme(path: &str, text: &str) -> Vec<Violation> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines: Vec<&str> = text.lines().collect();
    prose_lines(&lines)
        .into_iter()
        .filter(|line| line.text.trim_start().starts_with('|'))
        .filter_map(|line| {
            let rfc = rfc_reference(line.text)?;
            Some(Violation::at(
                path,
                line.number,
                Rule::ReadmeIndexRow,
                format!(
                    "this table row lists the RFC `{rfc}`, as an index row does; the README \
                     is curated prose and the list of RFCs is the generated INDEX.md \
                     (`cargo xtask rfc index`), so remove the row"
                ),
            ))
        })
        .collect()
}

/// The first RFC path in `row`: a lifecycle folder, optional topic folders,
/// and a file named like an RFC.
fn rfc_reference(row: &str) -> Option<&str> {
    Lifecycle::ALL.into_iter().find_map(|lifecycle| {
        let folder = format!("{}/", lifecycle.folder());
        row.match_indices(&folder).find_map(|(at, _)| {
            let starts_path = row[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '-' && c != '_');
            let rest = &row[at..];
            let end = rest
                .find(|c: char| c.is_whitespace() || matches!(c, ')' | '`' | '|' | '#' | '"'))
                .unwrap_or(rest.len());
            let candidate = &rest[..end];
            let name = candidate.rsplit('/').next().unwrap_or(candidate);
            (starts_path && check_file_name(name).is_ok()).then_some(candidate)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> Vec<(usize, Rule)> {
        check_readme("README.md", text)
            .iter()
            .map(|v| (v.line().unwrap_or(0), v.rule()))
            .collect()
    }

    #[test]
    fn index_rows_are_found_in_any_shape() {
        let text = "\
| RFC | Status | Path |
| --- | --- | --- |
| [A](implemented/2026-11-30-a.md) | implemented | `docs/rfc/implemented/2026-11-30-a.md` |
| B | proposed | `docs/rfc/proposed/topic/2026-12-01-b.md` |
";
        assert_eq!(
            rules(text),
            [(3, Rule::ReadmeIndexRow), (4, Rule::ReadmeIndexRow)]
        );
    }

    #[test]
    fn format_tables_links_and_fences_are_not_index_rows() {
        let text = "\
| section | `proposed/` | `implemented/` | `rejected/` |
| `file-name` | an RFC file is named `YYYY-MM-DD-slug.md` |
See [the process RFC](implemented/2026-11-30-rfc-process.md).
```
| [A](implemented/2026-11-30-a.md) | implemented | x |
```
| notimplemented/2026-11-30-a.md | x |
";
        assert_eq!(rules(text), []);
    }
}
