//! The transaction id a gRPC producer holds for a half message, and sends back with
//! EndTransaction: opaque to the client, to the broker the half's commit-log offset and its
//! offset in the half queue (what END_TRANSACTION carries over remoting).

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionId {
    pub commit_log_offset: u64,
    pub tran_state_table_offset: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("transaction id {id:?} is not one this broker gave out")]
pub struct InvalidTransactionId {
    pub id: String,
}

impl TransactionId {
    pub fn parse(id: &str) -> Result<TransactionId, InvalidTransactionId> {
        let invalid = || InvalidTransactionId { id: id.to_owned() };
        if id.len() != 32 || !id.is_ascii() {
            return Err(invalid());
        }
        let (commit, table) = id.split_at(16);
        Ok(TransactionId {
            commit_log_offset: u64::from_str_radix(commit, 16).map_err(|_| invalid())?,
            tran_state_table_offset: u64::from_str_radix(table, 16).map_err(|_| invalid())?,
        })
    }
}

impl fmt::Display for TransactionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:016X}{:016X}",
            self.commit_log_offset, self.tran_state_table_offset
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_id_round_trips_and_a_forged_one_is_refused() {
        let id = TransactionId {
            commit_log_offset: 0x1234_5678,
            tran_state_table_offset: 9,
        };
        assert_eq!(TransactionId::parse(&id.to_string()), Ok(id));
        for forged in ["", "xyz", "0123456789ABCDEF0123456789ABCDEZ", "é"] {
            assert!(TransactionId::parse(forged).is_err(), "{forged}");
        }
    }
}
