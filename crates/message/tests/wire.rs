//! The wire shapes of the reasoning, image and file parts: every seed of
//! the message fuzz targets decodes and re-encodes byte for byte, old
//! messages decode unchanged, and each decoding rule reports its JSON path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_message::*;
use std::path::Path;

fn seeds(target: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// Every seed is a valid value whose encoding is a fixed point, and
/// serde's `Deserialize` agrees with `from_json_with`.
#[test]
fn fuzz_seeds_decode_and_reencode() {
    let limits = Limits::default();
    for (name, json) in seeds("message_json") {
        let m = Message::from_json_with(&json, &limits).unwrap_or_else(|e| panic!("{name}: {e}"));
        let out = serde_json::to_string(&m).unwrap();
        let back = Message::from_json_with(&out, &limits).unwrap();
        assert_eq!(back, m, "{name}");
        assert_eq!(serde_json::to_string(&back).unwrap(), out, "{name}");
        let via_serde: Message = serde_json::from_str(&out).unwrap();
        assert_eq!(via_serde, m, "{name}");
    }
    for (name, json) in seeds("model_request_json") {
        if name == "orphan_result" {
            continue;
        }
        let r =
            ModelRequest::from_json_with(&json, &limits).unwrap_or_else(|e| panic!("{name}: {e}"));
        let out = serde_json::to_string(&r).unwrap();
        assert_eq!(
            ModelRequest::from_json_with(&out, &limits).unwrap(),
            r,
            "{name}"
        );
    }
}
