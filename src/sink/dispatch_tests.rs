//! The dispatch against a scripted client (a unit test: the sinks' own tests meet real servers).

use std::sync::Mutex;

use super::*;

/// Answers by event id from a script (default `Acked`), and logs what it was offered.
struct Scripted {
    batch: usize,
    script: Mutex<HashMap<String, VecDeque<Published>>>,
    offered: Mutex<Vec<Vec<String>>>,
}

impl Scripted {
    fn new(batch: usize, script: &[(&str, Published)]) -> Scripted {
        let mut map: HashMap<String, VecDeque<Published>> = HashMap::new();
        for (id, p) in script {
            map.entry(id.to_string()).or_default().push_back(p.clone());
        }
        Scripted { batch, script: Mutex::new(map), offered: Mutex::new(Vec::new()) }
    }
}

impl Publish for Arc<Scripted> {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn max_batch(&self) -> usize {
        self.batch
    }
    async fn publish(&self, records: &[Arc<Record>]) -> Vec<Published> {
        self.offered.lock().unwrap().push(records.iter().map(|r| r.event_id.clone()).collect());
        let mut script = self.script.lock().unwrap();
        records
            .iter()
            .map(|r| {
                script.get_mut(&r.event_id).and_then(|q| q.pop_front()).unwrap_or(Published::Acked)
            })
            .collect()
    }
}

fn record(id: &str, key: Option<&str>) -> Arc<Record> {
    let mut r = Record::bare("t", id);
    r.key = key.map(|k| Bytes::copy_from_slice(k.as_bytes()));
    Arc::new(r)
}

/// Collects outcomes until `n` records are settled (acked or refused).
async fn settled(dispatch: &Dispatch, n: usize) -> Vec<Outcome> {
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        while all.iter().filter(|o| !matches!(o, Outcome::Retrying { .. })).count() < n {
            dispatch.ready().await;
            dispatch.take(&mut all);
        }
    })
    .await
    .expect("outcomes within 10 s");
    all
}

fn retry() -> Published {
    Published::Retry { reason: "broker away".into(), after: Some(Duration::from_millis(20)) }
}

#[tokio::test]
async fn a_retried_record_is_never_overtaken_by_a_later_one_of_its_key() {
    let client = Arc::new(Scripted::new(1, &[("a1", retry()), ("a1", retry())]));
    let dispatch = Dispatch::spawn(client.clone());
    for (seq, id) in ["a1", "a2", "a3"].iter().enumerate() {
        dispatch.send(seq as u64, record(id, Some("A")));
    }
    let outcomes = settled(&dispatch, 3).await;
    let acked: Vec<_> = outcomes
        .iter()
        .filter_map(|o| if let Outcome::Acked(s) = o { Some(*s) } else { None })
        .collect();
    assert_eq!(acked, vec![0, 1, 2]);
    let offered: Vec<String> = client.offered.lock().unwrap().concat();
    assert_eq!(offered, ["a1", "a1", "a1", "a2", "a3"], "a2 waited for a1's retries");
    assert!(outcomes
        .iter()
        .any(|o| matches!(o, Outcome::Retrying { reason } if reason == "broker away")));
}

#[tokio::test]
async fn other_keys_go_on_while_one_key_retries() {
    let client = Arc::new(Scripted::new(1, &[("a1", retry()), ("a1", retry()), ("a1", retry())]));
    let dispatch = Dispatch::spawn(client.clone());
    dispatch.send(0, record("a1", Some("A")));
    dispatch.send(1, record("b1", Some("B")));
    dispatch.send(2, record("b2", Some("B")));
    let outcomes = settled(&dispatch, 3).await;
    let acked: Vec<_> = outcomes
        .iter()
        .filter_map(|o| if let Outcome::Acked(s) = o { Some(*s) } else { None })
        .collect();
    assert_eq!(acked, vec![1, 2, 0], "B's records were not held behind A's retries");
}

#[tokio::test]
async fn a_refusal_settles_its_record_and_the_next_of_its_key_goes_out() {
    let client = Arc::new(Scripted::new(1, &[("a1", Published::Refused("too large".into()))]));
    let dispatch = Dispatch::spawn(client.clone());
    dispatch.send(7, record("a1", Some("A")));
    dispatch.send(8, record("a2", Some("A")));
    let outcomes = settled(&dispatch, 2).await;
    assert!(
        matches!(&outcomes[0], Outcome::Refused { seq: 7, reason, record } if reason == "too large" && record.event_id == "a1"),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[1], Outcome::Acked(8));
}

#[tokio::test]
async fn a_batch_carries_distinct_keys_only_and_keyless_records_wait_on_nothing() {
    let client = Arc::new(Scripted::new(10, &[]));
    let dispatch = Dispatch::spawn(client.clone());
    let records =
        [("a1", Some("A")), ("a2", Some("A")), ("b1", Some("B")), ("n1", None), ("n2", None)];
    for (seq, (id, key)) in records.iter().enumerate() {
        dispatch.send(seq as u64, record(id, *key));
    }
    settled(&dispatch, 5).await;
    for call in client.offered.lock().unwrap().iter() {
        assert!(!(call.contains(&"a1".into()) && call.contains(&"a2".into())), "{call:?}");
    }
    let offered: Vec<String> = client.offered.lock().unwrap().concat();
    let pos = |id: &str| offered.iter().position(|o| o == id).unwrap();
    assert!(pos("a1") < pos("a2"), "{offered:?}");
}

#[tokio::test]
async fn a_batch_takes_the_records_of_one_destination_and_the_others_keep_their_turn() {
    let client = Arc::new(Scripted::new(10, &[]));
    let dispatch = Dispatch::spawn(client.clone());
    // One send of all of them, so they wait together when the first batch is made.
    for (seq, (id, topic)) in
        [("a", "q1"), ("b", "q2"), ("c", "q1"), ("d", "q2"), ("e", "q1")].iter().enumerate()
    {
        let mut r = Record::bare(topic, id);
        r.key = Some(Bytes::copy_from_slice(id.as_bytes()));
        dispatch.send(seq as u64, Arc::new(r));
    }
    settled(&dispatch, 5).await;
    let calls = client.offered.lock().unwrap().clone();
    assert_eq!(calls.concat().len(), 5, "{calls:?}");
    let topic = |id: &str| if "ace".contains(id) { "q1" } else { "q2" };
    for call in &calls {
        assert!(
            call.iter().all(|id| topic(id) == topic(&call[0])),
            "a batch mixed queues: {calls:?}"
        );
    }
}
