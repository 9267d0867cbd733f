//! The hello-agent example against its local OpenAI-compatible server:
//! the answer, the journal, and the resuming subscriber.

#[path = "../examples/hello_agent.rs"]
#[allow(dead_code, reason = "main is the example's; the test calls run")]
mod hello_agent;

use keel::observers::JournalReader;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_agent_answers_journals_and_resumes_without_gap() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hello.db");
    let summary = hello_agent::run(hello_agent::Config {
        base_url: None,
        model: "demo-1".to_owned(),
        question: "What is the weather in Oslo?".to_owned(),
        db: db.clone(),
        read_before_disconnect: 3,
    })
    .await
    .unwrap();
    assert_eq!(summary.answer, "It is 3 °C and raining in Oslo.");

    // The subscriber disconnected after 3 events and resumed at its
    // cursor: every seq exactly once, in order.
    assert_eq!(summary.resumed_after, 3);
    let last = *summary.seen.last().unwrap();
    assert_eq!(summary.seen, (1..=last).collect::<Vec<u64>>());

    // The journal holds the same events, the tool's among them.
    let reader = JournalReader::open(&db).unwrap();
    let lines = reader
        .events_after(summary.run_id.as_str(), 0, 10_000)
        .unwrap();
    assert_eq!(lines.len() as u64, last);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"tool.completed\"") && l.contains("3 °C, light rain"))
    );
    assert!(lines.last().unwrap().contains("\"run.completed\""));
}
