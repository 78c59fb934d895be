//! The logical decoding messages the assembler selected: routed as rows are, or refused. A
//! message outside any transaction (non-transactional) has no Commit after it, so it is
//! confirmed at its own position once what it produced is acknowledged.

use std::sync::Arc;

use super::assembler::SelectedMessage;
use super::Session;
use crate::delivery::Failed;
use crate::envelope::Txn;
use crate::error::Result;
use crate::metrics::unix_micros;
use crate::router::message_event_id;

const KIND: &str = "logical message";

impl Session<'_> {
    /// Publishes the record of `message`, its dead letter, or — `refused` — refuses it.
    pub(super) async fn on_message(
        &mut self,
        message: SelectedMessage,
        refused: bool,
    ) -> Result<()> {
        if message.alone {
            self.delivery.begin_alone(message.lsn);
        }
        let source = format!("message:{}", message.prefix);
        let failed = |reason: String| Failed {
            value: Some(message.content.clone()),
            event_id: message_event_id(&message.content),
            ..Failed::new(Arc::from(source.as_str()), message.lsn, reason)
        };
        if refused {
            let refusal = failed(
                "it is non-transactional (pg_logical_emit_message(false, …)), and PostgreSQL sends \
                 those even when their transaction rolls back"
                    .into(),
            );
            let hint = "emit events with pg_logical_emit_message(true, …); set [outbox] \
                        non_transactional_messages = \"relay\" only if events of rolled-back \
                        transactions are acceptable";
            self.delivery.refuse(refusal, hint).await?;
        } else {
            // A non-transactional message has no transaction: its own time and position.
            let txn = match message.alone {
                true => Txn { commit_micros: unix_micros(), commit_lsn: message.lsn, xid: 0 },
                false => self.txn,
            };
            let routed = self.encoder.message(&message.content, &source, &message.prefix, &txn);
            match routed {
                Ok(record) => {
                    self.delivery.publish(record, &Arc::from(source.as_str()), message.lsn).await?
                }
                Err(e) => {
                    let hint = "fix what the application emits (see the reason), or configure \
                                [dead_letter] topic";
                    let letter = failed(e.to_string());
                    self.delivery.undeliverable(letter, KIND, hint, Some(Box::new(e))).await?;
                }
            }
        }
        if message.alone {
            self.delivery.end_alone(message.lsn).await?;
        }
        Ok(())
    }
}
