//! What the broker lets walrelay's principal do, as Kafka itself says (KIP-430: DescribeTopics
//! and DescribeCluster with the principal's authorized operations), so `check` names a missing
//! ACL without trying the operation. rust-rdkafka does not wrap these calls: they are
//! librdkafka's C API, used here and nowhere else.

use std::ffi::{CStr, CString};
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, Producer};

use crate::delivery::exactly_once::progress_topic::Quiet;

pub use rdsys::rd_kafka_AclOperation_t as Operation;

/// A topic's name and what the principal may do on it; `Err` names why it could not be told
/// (the topic does not exist, or the principal may not even describe it).
pub type TopicOperations = (String, Result<Vec<Operation>, String>);

/// The operations the principal of `config` may perform on each of `topics`. Blocking.
pub fn on_topics(
    config: &ClientConfig,
    topics: &[&str],
    timeout: Duration,
) -> Result<Vec<TopicOperations>, String> {
    let client: BaseProducer<Quiet> =
        config.create_with_context(Quiet).map_err(|e| format!("a Kafka client: {e}"))?;
    let rk = client.client().native_ptr();
    let names: Vec<CString> = topics
        .iter()
        .map(|t| CString::new(*t).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let mut pointers: Vec<*const std::ffi::c_char> = names.iter().map(|n| n.as_ptr()).collect();
    // SAFETY: every handle made here is destroyed below, after the result has been read; the
    // result's strings and arrays are copied out before the event is destroyed.
    unsafe {
        let collection =
            rdsys::rd_kafka_TopicCollection_of_topic_names(pointers.as_mut_ptr(), pointers.len());
        let options = options(rk, rdsys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS);
        let queue = rdsys::rd_kafka_queue_new(rk);
        rdsys::rd_kafka_DescribeTopics(rk, collection, options, queue);
        let event = rdsys::rd_kafka_queue_poll(queue, timeout.as_millis() as i32);
        let read = if event.is_null() {
            Err(format!("no answer within {timeout:?}"))
        } else if rdsys::rd_kafka_event_error(event)
            != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            Err(text(rdsys::rd_kafka_event_error_string(event)))
        } else {
            let result = rdsys::rd_kafka_event_DescribeTopics_result(event);
            let mut count = 0;
            let described = rdsys::rd_kafka_DescribeTopics_result_topics(result, &mut count);
            let described = std::slice::from_raw_parts(described, count);
            Ok(described
                .iter()
                .map(|&d| {
                    let name = text(rdsys::rd_kafka_TopicDescription_name(d));
                    let error = rdsys::rd_kafka_TopicDescription_error(d);
                    let ops = if !error.is_null()
                        && rdsys::rd_kafka_error_code(error)
                            != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
                    {
                        Err(text(rdsys::rd_kafka_error_string(error)))
                    } else {
                        let mut n = 0;
                        let ops = rdsys::rd_kafka_TopicDescription_authorized_operations(d, &mut n);
                        Ok(if ops.is_null() {
                            Vec::new()
                        } else {
                            std::slice::from_raw_parts(ops, n).to_vec()
                        })
                    };
                    (name, ops)
                })
                .collect())
        };
        if !event.is_null() {
            rdsys::rd_kafka_event_destroy(event);
        }
        rdsys::rd_kafka_queue_destroy(queue);
        rdsys::rd_kafka_AdminOptions_destroy(options);
        rdsys::rd_kafka_TopicCollection_destroy(collection);
        read
    }
}

/// The operations the principal of `config` may perform on the cluster. Blocking.
pub fn on_cluster(config: &ClientConfig, timeout: Duration) -> Result<Vec<Operation>, String> {
    let client: BaseProducer<Quiet> =
        config.create_with_context(Quiet).map_err(|e| format!("a Kafka client: {e}"))?;
    let rk = client.client().native_ptr();
    // SAFETY: as in `on_topics`.
    unsafe {
        let options = options(rk, rdsys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECLUSTER);
        let queue = rdsys::rd_kafka_queue_new(rk);
        rdsys::rd_kafka_DescribeCluster(rk, options, queue);
        let event = rdsys::rd_kafka_queue_poll(queue, timeout.as_millis() as i32);
        let read = if event.is_null() {
            Err(format!("no answer within {timeout:?}"))
        } else if rdsys::rd_kafka_event_error(event)
            != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            Err(text(rdsys::rd_kafka_event_error_string(event)))
        } else {
            let result = rdsys::rd_kafka_event_DescribeCluster_result(event);
            let mut n = 0;
            let ops = rdsys::rd_kafka_DescribeCluster_result_authorized_operations(result, &mut n);
            Ok(if ops.is_null() { Vec::new() } else { std::slice::from_raw_parts(ops, n).to_vec() })
        };
        if !event.is_null() {
            rdsys::rd_kafka_event_destroy(event);
        }
        rdsys::rd_kafka_queue_destroy(queue);
        rdsys::rd_kafka_AdminOptions_destroy(options);
        read
    }
}

/// Admin options that ask for the authorized operations.
///
/// # Safety
/// `rk` is a live client handle.
unsafe fn options(
    rk: *mut rdsys::rd_kafka_t,
    op: rdsys::rd_kafka_admin_op_t,
) -> *mut rdsys::rd_kafka_AdminOptions_t {
    let options = rdsys::rd_kafka_AdminOptions_new(rk, op);
    let error = rdsys::rd_kafka_AdminOptions_set_include_authorized_operations(options, 1);
    if !error.is_null() {
        rdsys::rd_kafka_error_destroy(error);
    }
    options
}

/// # Safety
/// `ptr` is null or a NUL-terminated string.
unsafe fn text(ptr: *const std::ffi::c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    CStr::from_ptr(ptr).to_string_lossy().into_owned()
}

/// The names of the operations `needed` that `granted` lacks. Kafka's authorizer implies
/// Describe from Read, Write, Delete or Alter: the broker already reports it so.
pub fn missing(granted: &[Operation], needed: &[Operation]) -> Vec<&'static str> {
    let all = granted.contains(&Operation::RD_KAFKA_ACL_OPERATION_ALL);
    needed.iter().filter(|op| !all && !granted.contains(op)).map(|op| name(*op)).collect()
}

pub fn name(op: Operation) -> &'static str {
    use Operation::*;
    match op {
        RD_KAFKA_ACL_OPERATION_READ => "Read",
        RD_KAFKA_ACL_OPERATION_WRITE => "Write",
        RD_KAFKA_ACL_OPERATION_CREATE => "Create",
        RD_KAFKA_ACL_OPERATION_DESCRIBE => "Describe",
        RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE => "IdempotentWrite",
        RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS => "DescribeConfigs",
        RD_KAFKA_ACL_OPERATION_ALTER => "Alter",
        _ => "another operation",
    }
}
