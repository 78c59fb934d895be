//! Reading one partition from an offset to an end with librdkafka's simple consumer
//! (`rd_kafka_consume_start`), which needs no consumer group.
//!
//! librdkafka's high-level consumer wants a `group.id` even for `assign()`, and with one it
//! looks up the group's coordinator, which a secured cluster refuses without a group ACL that
//! walrelay has no other use for. Exactly-once's progress topic and the audit read this way.
//!
//! A read never waits on EOF alone: EOF comes only when a fetch finds nothing new, so on a
//! partition that someone keeps writing it may never come. It ends at `end` (an offset taken
//! by the caller before the read): at EOF at or past it, or at the first record at or past it
//! ([`read_past_end`] reads on to EOF, or to a record written after the end was asked for).
//! Under `read_committed`, EOF carries the next offset past transaction markers, which no record
//! reports.

use std::ffi::{CStr, CString};
use std::time::{Duration, Instant};

use rdkafka::bindings as rdsys;
use rdkafka::client::{Client, ClientContext};
use rdkafka::error::KafkaError;

use crate::error::Error;

/// Records asked of librdkafka at once.
const BATCH: usize = 1_000;
/// How long one ask waits for records before the caller's `wait` is consulted.
const POLL: Duration = Duration::from_millis(200);
/// The same, once a read past its end ([`read_past_end`]) reached that end.
const POLL_PAST_END: Duration = Duration::from_millis(10);

/// Why a read stopped before its end.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The principal may not Read the topic.
    NotAllowed,
    /// librdkafka could not read it.
    Failed(KafkaError),
    /// The caller's `wait` or `visit` said to stop.
    Caller(Error),
}

/// One record of a read, borrowed from librdkafka until `visit` returns.
pub(crate) struct Raw<'m> {
    pub key: &'m [u8],
    pub value: &'m [u8],
    pub offset: i64,
    /// The record's timestamp (Unix ms), when it has one.
    pub timestamp_ms: Option<i64>,
    headers: *mut rdsys::rd_kafka_headers_t,
}

impl<'m> Raw<'m> {
    /// The record's headers, in order: (name, value; `None` for a null value).
    pub fn headers(&self) -> impl Iterator<Item = (&'m str, Option<&'m [u8]>)> + '_ {
        let mut i = 0;
        std::iter::from_fn(move || {
            if self.headers.is_null() {
                return None;
            }
            let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0usize);
            // SAFETY: the headers belong to the message, alive while `self` is.
            let err = unsafe {
                rdsys::rd_kafka_header_get_all(self.headers, i, &mut name, &mut value, &mut size)
            };
            if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                return None;
            }
            i += 1;
            // SAFETY: librdkafka's header names are NUL-terminated, values `size` bytes long.
            let name = unsafe { CStr::from_ptr(name) }.to_str().unwrap_or("");
            let value = (!value.is_null()).then(|| unsafe { bytes_of(value, size) });
            Some((name, value))
        })
    }
}

/// Hands `visit` every record of `topic` [`partition`] from offset `from` up to `end`
/// (exclusive; committed records only when the client reads `read_committed`), after at least
/// one fetch. The client must have `enable.partition.eof` on. `wait` is
/// called after every ask that brought nothing, with the time since the last record; its
/// error stops the read.
pub(crate) fn read<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    partition: i32,
    from: i64,
    end: i64,
    wait: &mut dyn FnMut(Duration) -> Result<(), Error>,
    visit: &mut dyn FnMut(&Raw<'_>) -> Result<(), Error>,
) -> Result<(), Stop> {
    read_until(client, topic, partition, from, Until::Offset(end), wait, visit)
}

/// As [`read`], but past `end` too: up to the first EOF at or past it, or the first record past
/// it timestamped at or after `asked_ms` (when the caller asked for `end`: the partition is
/// being written, and EOF may not come). A reader that checks the end offset it was told: a
/// broker whose end offsets lag its records hides none of them from it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_past_end<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    partition: i32,
    from: i64,
    end: i64,
    asked_ms: i64,
    wait: &mut dyn FnMut(Duration) -> Result<(), Error>,
    visit: &mut dyn FnMut(&Raw<'_>) -> Result<(), Error>,
) -> Result<(), Stop> {
    read_until(client, topic, partition, from, Until::Eof { end, asked_ms }, wait, visit)
}

/// Where a read ends.
#[derive(Debug, Clone, Copy)]
enum Until {
    /// At EOF at or past the offset, or at the first record at or past it.
    Offset(i64),
    /// At EOF at or past `end`, or at a record past it timestamped at or after `asked_ms`.
    Eof { end: i64, asked_ms: i64 },
}

fn read_until<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    partition: i32,
    from: i64,
    until: Until,
    wait: &mut dyn FnMut(Duration) -> Result<(), Error>,
    visit: &mut dyn FnMut(&Raw<'_>) -> Result<(), Error>,
) -> Result<(), Stop> {
    // Started even when `from` is `end`: a missing Read ACL shows at the first fetch, not later.
    let name = CString::new(topic).map_err(|_| {
        Stop::Caller(Error::transient_msg(format!("topic name {topic:?} holds a NUL")))
    })?;
    // SAFETY: the topic handle and every message are released before returning; the simple
    // consumer of this partition is used from this one thread.
    unsafe {
        let rkt =
            rdsys::rd_kafka_topic_new(client.native_ptr(), name.as_ptr(), std::ptr::null_mut());
        if rkt.is_null() {
            return Err(Stop::Failed(KafkaError::MessageConsumption(
                rdkafka::types::RDKafkaErrorCode::UnknownTopic,
            )));
        }
        let read = if rdsys::rd_kafka_consume_start(rkt, partition, from) == -1 {
            Err(Stop::Failed(KafkaError::MessageConsumption(rdsys::rd_kafka_last_error().into())))
        } else {
            let read = consume(rkt, partition, until, wait, visit);
            rdsys::rd_kafka_consume_stop(rkt, partition);
            read
        };
        rdsys::rd_kafka_topic_destroy(rkt);
        read
    }
}

/// # Safety
/// `rkt` is a topic handle whose `partition` is being consumed.
unsafe fn consume(
    rkt: *mut rdsys::rd_kafka_topic_t,
    partition: i32,
    until: Until,
    wait: &mut dyn FnMut(Duration) -> Result<(), Error>,
    visit: &mut dyn FnMut(&Raw<'_>) -> Result<(), Error>,
) -> Result<(), Stop> {
    use rdsys::rd_kafka_resp_err_t as E;
    let mut batch: Vec<*mut rdsys::rd_kafka_message_t> = vec![std::ptr::null_mut(); BATCH];
    let mut last_record = Instant::now();
    // Past the end, what is left to come is an EOF or a few records: an ask that waited the
    // whole POLL for a full batch would cost that much per partition read.
    let mut poll = POLL;
    loop {
        let n = rdsys::rd_kafka_consume_batch(
            rkt,
            partition,
            poll.as_millis() as i32,
            batch.as_mut_ptr(),
            BATCH,
        );
        if n <= 0 {
            wait(last_record.elapsed()).map_err(Stop::Caller)?;
            continue;
        }
        last_record = Instant::now();
        let mut outcome: Option<Result<(), Stop>> = None;
        for &m in &batch[..n as usize] {
            if outcome.is_none() {
                outcome = step(m, until, visit);
            }
            if let Until::Eof { end, .. } = until {
                if (*m).offset + 1 >= end {
                    poll = POLL_PAST_END;
                }
            }
            rdsys::rd_kafka_message_destroy(m);
        }
        if let Some(outcome) = outcome {
            return outcome;
        }
    }

    /// One message: `Some` when the read ends with it.
    unsafe fn step(
        m: *mut rdsys::rd_kafka_message_t,
        until: Until,
        visit: &mut dyn FnMut(&Raw<'_>) -> Result<(), Error>,
    ) -> Option<Result<(), Stop>> {
        let (err, offset) = ((*m).err, (*m).offset);
        match err {
            E::RD_KAFKA_RESP_ERR_NO_ERROR => {
                let mut headers = std::ptr::null_mut();
                if rdsys::rd_kafka_message_headers(m, &mut headers) != E::RD_KAFKA_RESP_ERR_NO_ERROR
                {
                    headers = std::ptr::null_mut();
                }
                let mut kind = rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
                let ts = rdsys::rd_kafka_message_timestamp(m, &mut kind);
                let raw = Raw {
                    key: bytes_of((*m).key, (*m).key_len),
                    value: bytes_of((*m).payload, (*m).len),
                    offset,
                    timestamp_ms: (ts >= 0).then_some(ts),
                    headers,
                };
                match until {
                    // Written after the end was asked for: no record the caller wants.
                    Until::Eof { end, asked_ms } if offset >= end && ts >= asked_ms => {
                        return Some(Ok(()));
                    }
                    _ => {}
                }
                if let Err(e) = visit(&raw) {
                    return Some(Err(Stop::Caller(e)));
                }
                match until {
                    Until::Offset(end) => (offset + 1 >= end).then_some(Ok(())),
                    Until::Eof { .. } => None,
                }
            }
            // EOF carries the next offset to fetch.
            E::RD_KAFKA_RESP_ERR__PARTITION_EOF => match until {
                Until::Offset(end) | Until::Eof { end, .. } => (offset >= end).then_some(Ok(())),
            },
            E::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED => Some(Err(Stop::NotAllowed)),
            other => Some(Err(Stop::Failed(KafkaError::MessageConsumption(other.into())))),
        }
    }
}

/// # Safety
/// `ptr` points to `len` bytes (or is null).
unsafe fn bytes_of<'a>(ptr: *const std::ffi::c_void, len: usize) -> &'a [u8] {
    if ptr.is_null() {
        return &[];
    }
    std::slice::from_raw_parts(ptr as *const u8, len)
}
