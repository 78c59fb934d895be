//! The logical decoding messages the assembler selected: routed as rows are, or refused. A
//! message outside any transaction (non-transactional) has no Commit after it, so it is
//! confirmed at its own position once what it produced is acknowledged.

use std::sync::Arc;

use super::assembler::SelectedMessage;
use super::Session;
use crate::clock::unix_micros;
use crate::delivery::Failed;
use crate::error::Result;
use crate::registry::FrameError;
use crate::router::message_event_id;
use crate::txn::Txn;

const KIND: &str = "logical message";

impl Session<'_> {
    /// Publishes the record of `message`, its dead letter, or — `refused` — refuses it.
    pub(super) async fn on_message(
        &mut self,
        message: SelectedMessage,
        refused: bool,
    ) -> Result<()> {
        // A non-transactional message is a transaction of its own: its position, read now.
        let (txn, alone) = match message.txn {
            Some(txn) => (txn, false),
            None => (Txn { commit_micros: unix_micros(), commit_lsn: message.lsn, xid: 0 }, true),
        };
        if alone {
            self.delivery.begin_alone(&txn);
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
            self.delivery.refuse(refusal, &txn, hint).await?;
        } else {
            let routed = self.encoder.message(&message.content, &source, &message.prefix, &txn);
            let refused = match routed {
                Ok(record) => match self.encoder.frame(record).await {
                    Ok(framed) => {
                        let source = Arc::from(source.as_str());
                        self.delivery.publish(framed, &source, message.lsn, &txn).await?;
                        None
                    }
                    Err(FrameError::Refused(why)) => Some((why, None)),
                    Err(e) => return Err(super::step::frame_error(e)),
                },
                Err(e) => Some((e.to_string(), Some(Box::new(e) as _))),
            };
            if let Some((reason, cause)) = refused {
                let hint = "fix what the application emits (see the reason), or configure \
                            [dead_letter] topic";
                self.delivery.undeliverable(failed(reason), &txn, KIND, hint, cause).await?;
            }
        }
        if alone {
            self.delivery.end_alone(message.lsn).await?;
        }
        Ok(())
    }
}
