//! The SSE reader shared by the `keel serve` tests.
#![allow(dead_code)]

use futures_util::StreamExt;

#[derive(Debug, Clone)]
pub struct Sse {
    pub id: Option<u64>,
    pub event: String,
    pub data: String,
}

/// Reads SSE messages until the stream ends or `stop` says so.
pub async fn read_sse(resp: reqwest::Response, mut stop: impl FnMut(&Sse) -> bool) -> Vec<Sse> {
    let mut out = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut body = resp.bytes_stream();
    let (mut id, mut event, mut data) = (None, String::new(), String::new());
    while let Some(chunk) = body.next().await {
        let Ok(chunk) = chunk else { break };
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let line = String::from_utf8(line).unwrap();
            let line = line.trim_end_matches('\n');
            if line.is_empty() {
                if !event.is_empty() || !data.is_empty() {
                    let msg = Sse {
                        id: id.take(),
                        event: std::mem::take(&mut event),
                        data: std::mem::take(&mut data),
                    };
                    let done = stop(&msg);
                    out.push(msg);
                    if done {
                        return out;
                    }
                }
            } else if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.parse().unwrap());
            } else if let Some(v) = line.strip_prefix("event: ") {
                event = v.to_owned();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data.push_str(v);
            }
        }
    }
    out
}
