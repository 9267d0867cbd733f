#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The secret screen measured against public rule sets (docs/SECURITY.md
//! §3.2 holds the figures this test prints).
//!
//! - `tests/corpus/gitleaks.json`: three samples for each rule of gitleaks'
//!   default configuration, generated from the rule's own regex
//!   (`generate_gitleaks.py`), marked self-identifying when the regex
//!   matches the bare token.
//! - `tests/corpus/detect_secrets.json`: the same for detect-secrets'
//!   plugin patterns (`generate_detect_secrets.py`).
//! - `tests/corpus/benign.json`: ids, fingerprints, model names and header
//!   values from the shared provider fixtures, other providers' documented
//!   ids, and generated UUIDs and hashes (`generate_benign.py`).
//!
//! Each sample is placed in provider metadata three ways: under a neutral
//! key, under the service's own key name (`<service>_key`) and under the
//! rule's id. Samples are stored in two halves so that no complete
//! credential shape sits in the repository.

use keel_stream::ProviderMetadata;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
struct Corpus {
    rules: Vec<CorpusRule>,
}

#[derive(Deserialize)]
struct CorpusRule {
    rule: String,
    service: String,
    self_identifying: bool,
    samples: Vec<[String; 2]>,
}

impl CorpusRule {
    fn samples(&self) -> impl Iterator<Item = String> + '_ {
        self.samples.iter().map(|[a, b]| format!("{a}{b}"))
    }
}

#[derive(Deserialize)]
struct Benign {
    values: Vec<String>,
}

fn corpus(name: &str) -> Vec<CorpusRule> {
    let path = format!("{}/tests/corpus/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str::<Corpus>(&text).unwrap().rules
}

fn all_rules() -> Vec<CorpusRule> {
    let mut rules = corpus("gitleaks.json");
    rules.extend(corpus("detect_secrets.json"));
    rules
}

/// Whether metadata holding `value` under `key` is refused; a refusal
/// must not echo the value.
fn check(key: &str, value: &str) -> bool {
    match ProviderMetadata::from_value(&json!({"openai": {key: value}})) {
        Ok(_) => false,
        Err(e) => {
            for shown in [e.to_string(), format!("{e:?}")] {
                assert!(!shown.contains(value), "{key}: echoed in {shown}");
            }
            true
        }
    }
}

/// A share, in tenths of a percent, and the line it prints.
fn share(what: &str, hit: usize, of: usize, misses: &[String]) -> usize {
    let permille = hit * 1000 / of.max(1);
    eprintln!(
        "{what}: {hit}/{of} ({}.{}%); misses: {misses:?}",
        permille / 10,
        permille % 10
    );
    permille
}

#[test]
fn the_corpus_covers_both_rule_sets() {
    let gitleaks = corpus("gitleaks.json");
    let detect = corpus("detect_secrets.json");
    assert!(gitleaks.len() >= 200, "{}", gitleaks.len());
    assert!(detect.len() >= 30, "{}", detect.len());
    let identifying = gitleaks.iter().filter(|r| r.self_identifying).count();
    assert!(identifying >= 100, "{identifying}");
    assert!(
        gitleaks
            .iter()
            .chain(&detect)
            .all(|r| (1..=3).contains(&r.samples.len()))
    );
}

/// The self-identifying rules of `rules` not blocked under a neutral key
/// (a format counts as blocked when every sample is), and how many there
/// are.
fn neutral_key_misses(rules: &[CorpusRule]) -> (Vec<String>, usize) {
    let identifying: Vec<&CorpusRule> = rules.iter().filter(|r| r.self_identifying).collect();
    let misses = identifying
        .iter()
        .filter(|r| !r.samples().all(|s| check("value", &s)))
        .map(|r| r.rule.clone())
        .collect();
    (misses, identifying.len())
}

#[test]
fn self_identifying_formats_are_blocked_under_a_neutral_key() {
    let mut all_misses = Vec::new();
    let mut all = 0;
    for set in ["gitleaks.json", "detect_secrets.json"] {
        let (misses, of) = neutral_key_misses(&corpus(set));
        share(set, of - misses.len(), of, &misses);
        all += of;
        all_misses.extend(misses);
    }
    let permille = share(
        "self-identifying formats, neutral key",
        all - all_misses.len(),
        all,
        &all_misses,
    );
    assert!(permille >= 950, "below 95%");
}

#[test]
fn vendor_key_placements_are_blocked() {
    let rules = all_rules();
    let mut placements = 0;
    let mut misses = Vec::new();
    for rule in &rules {
        for sample in rule.samples() {
            for key in [format!("{}_key", rule.service), rule.rule.clone()] {
                placements += 1;
                if !check(&key, &sample) {
                    misses.push(key);
                }
            }
        }
    }
    misses.dedup();
    let permille = share(
        "vendor-key placements",
        placements - misses.len(),
        placements,
        &misses,
    );
    assert!(permille >= 900, "below 90%");
}

#[test]
fn no_benign_provider_value_is_refused() {
    let path = format!("{}/tests/corpus/benign.json", env!("CARGO_MANIFEST_DIR"));
    let benign: Benign = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(benign.values.len() >= 300, "{}", benign.values.len());
    let refused: Vec<&String> = benign
        .values
        .iter()
        .filter(|v| check("value", v) || check("request_id", v))
        .collect();
    share(
        "benign values refused",
        refused.len(),
        benign.values.len(),
        &[],
    );
    assert!(refused.is_empty(), "refused: {refused:?}");
}
