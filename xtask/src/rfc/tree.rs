//! Walking `docs/rfc`: which files are RFCs, where they may live, how they
//! are named.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use super::document::check_document;
use super::{Entry, Error, INDEX_FILE, Lifecycle, README_FILE, RFC_DIR, Rule, Violation};

/// Every RFC (sorted by path) and every violation found while reading them.
#[derive(Debug)]
pub(crate) struct Scan {
    pub(crate) rfcs: Vec<Entry>,
    pub(crate) violations: Vec<Violation>,
}

/// A directory entry, with its path relative to `docs/rfc`.
struct Item {
    name: String,
    rel: String,
    is_dir: bool,
}

pub(crate) fn scan(root: &Path) -> Result<Scan, Error> {
    let rfc_dir = root.join(RFC_DIR);
    if !rfc_dir.is_dir() {
        return Err(Error::NoRfcDir(rfc_dir));
    }
    let mut violations = Vec::new();
    let mut files: Vec<(String, Lifecycle)> = Vec::new();

    for item in list(&rfc_dir, "")? {
        if item.is_dir {
            match Lifecycle::from_folder(&item.name) {
                Some(lifecycle) => {
                    walk_lifecycle(&rfc_dir, &item.rel, lifecycle, &mut files, &mut violations)?;
                }
                None => walk_stray(&rfc_dir, &item.rel, &mut violations)?,
            }
        } else if is_markdown(&item.name) && item.name != README_FILE && item.name != INDEX_FILE {
            violations.push(stray(&item.rel));
        }
    }

    files.sort();
    let mut by_name: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (rel, _) in &files {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        by_name.entry(name).or_default().push(rel);
    }

    let mut rfcs = Vec::with_capacity(files.len());
    for (rel, lifecycle) in &files {
        let display = format!("{RFC_DIR}/{rel}");
        let name = rel.rsplit('/').next().unwrap_or(rel);
        if let Err(why) = check_file_name(name) {
            violations.push(Violation::new(&display, Rule::FileName, why));
        }
        if let Some(all) = by_name.get(name).filter(|all| all.len() > 1) {
            let others: Vec<String> = all
                .iter()
                .filter(|other| **other != rel.as_str())
                .map(|other| format!("{RFC_DIR}/{other}"))
                .collect();
            violations.push(Violation::new(
                &display,
                Rule::DuplicateRfc,
                format!(
                    "the same file name also exists at {}; an RFC lives in exactly one \
                     place (move it with git mv instead of copying)",
                    others.join(", ")
                ),
            ));
        }
        let full = rfc_dir.join(rel);
        let bytes = fs::read(&full).map_err(|err| Error::io(&full, err))?;
        let (title, status) = match String::from_utf8(bytes) {
            Ok(text) => {
                let (doc, found) = check_document(&display, *lifecycle, &text);
                violations.extend(found);
                (doc.title, doc.status)
            }
            Err(err) => {
                violations.push(Violation::new(
                    &display,
                    Rule::NotUtf8,
                    format!("invalid UTF-8 at byte {}", err.utf8_error().valid_up_to()),
                ));
                (None, None)
            }
        };
        rfcs.push(Entry {
            path: rel.clone(),
            lifecycle: *lifecycle,
            title,
            status,
        });
    }

    // Stable: the order within one file stays the order the rules ran in.
    violations.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Scan { rfcs, violations })
}

fn walk_lifecycle(
    rfc_dir: &Path,
    rel: &str,
    lifecycle: Lifecycle,
    files: &mut Vec<(String, Lifecycle)>,
    violations: &mut Vec<Violation>,
) -> Result<(), Error> {
    for item in list(&rfc_dir.join(rel), rel)? {
        if item.is_dir {
            if !is_slug(&item.name) {
                violations.push(Violation::new(
                    &format!("{RFC_DIR}/{}", item.rel),
                    Rule::TopicName,
                    format!(
                        "topic folder `{}` is not a lowercase slug (a-z, 0-9, single hyphens)",
                        item.name
                    ),
                ));
            }
            walk_lifecycle(rfc_dir, &item.rel, lifecycle, files, violations)?;
        } else if is_markdown(&item.name) {
            files.push((item.rel, lifecycle));
        }
    }
    Ok(())
}

fn walk_stray(rfc_dir: &Path, rel: &str, violations: &mut Vec<Violation>) -> Result<(), Error> {
    for item in list(&rfc_dir.join(rel), rel)? {
        if item.is_dir {
            walk_stray(rfc_dir, &item.rel, violations)?;
        } else if is_markdown(&item.name) {
            violations.push(stray(&item.rel));
        }
    }
    Ok(())
}

fn stray(rel: &str) -> Violation {
    Violation::new(
        &format!("{RFC_DIR}/{rel}"),
        Rule::StrayFile,
        "outside the lifecycle folders; an RFC goes under proposed/, implemented/ or \
         rejected/, and only README.md and INDEX.md sit directly in docs/rfc/",
    )
}

/// The entries of `dir`, sorted by name; `rel` is `dir` relative to
/// `docs/rfc` ("" for `docs/rfc` itself). Symlinks and other special files
/// are skipped.
fn list(dir: &Path, rel: &str) -> Result<Vec<Item>, Error> {
    let mut items = Vec::new();
    let read = fs::read_dir(dir).map_err(|err| Error::io(dir, err))?;
    for entry in read {
        let entry = entry.map_err(|err| Error::io(dir, err))?;
        let file_type = entry
            .file_type()
            .map_err(|err| Error::io(&entry.path(), err))?;
        if !file_type.is_dir() && !file_type.is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        items.push(Item {
            name,
            rel,
            is_dir: file_type.is_dir(),
        });
    }
    items.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(items)
}

fn is_markdown(name: &str) -> bool {
    name.ends_with(".md")
}

/// Lowercase ASCII letters and digits in hyphen-separated, non-empty parts.
fn is_slug(s: &str) -> bool {
    !s.is_empty()
        && s.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// `YYYY-MM-DD-slug.md`, with a date that exists.
pub(crate) fn check_file_name(name: &str) -> Result<(), String> {
    let shape =
        || format!("`{name}` is not named YYYY-MM-DD-slug.md (a lowercase, hyphenated slug)");
    let stem = name.strip_suffix(".md").ok_or_else(shape)?;
    let (date, slug) = match (stem.get(..10), stem.get(10..11), stem.get(11..)) {
        (Some(date), Some("-"), Some(slug)) => (date, slug),
        _ => return Err(shape()),
    };
    let parts: Vec<&str> = date.split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return Err(shape());
    };
    let number = |s: &str, len: usize| {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    let (Some(year), Some(month), Some(day)) = (number(y, 4), number(m, 2), number(d, 2)) else {
        return Err(shape());
    };
    if !is_slug(slug) {
        return Err(shape());
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => 0,
    };
    if day == 0 || day > days {
        return Err(format!("`{name}`: {date} is not a date"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        for ok in [
            "2026-11-30-rfc-process.md",
            "2024-02-29-leap.md",
            "2026-01-01-a1.md",
        ] {
            assert_eq!(check_file_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "rfc-process.md",
            "2026-11-30.md",
            "2026-11-30-.md",
            "2026-11-30-Caps.md",
            "2026-11-30-two--hyphens.md",
            "2026-11-30_slug.md",
            "2026-13-01-month.md",
            "2025-02-29-not-leap.md",
            "2026-04-31-april.md",
            "2026-00-10-zero.md",
            "26-11-30-short-year.md",
            "2026-11-30-slug.markdown",
            "2026-1é-30-x.md",
        ] {
            assert!(check_file_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slugs() {
        assert!(is_slug("eventlog"));
        assert!(is_slug("event-log-2"));
        assert!(!is_slug(""));
        assert!(!is_slug("Event"));
        assert!(!is_slug("event log"));
        assert!(!is_slug("-event"));
    }
}
