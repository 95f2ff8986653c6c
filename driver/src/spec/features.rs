//! Feature results.

/// The result of Set/Get Features, Number of Queues (CQE DW0), as counts (not 0's based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumberOfQueues {
    /// I/O submission queues allocated.
    pub sq: u32,
    /// I/O completion queues allocated.
    pub cq: u32,
}

impl NumberOfQueues {
    /// Decodes CQE DW0.
    pub const fn from_dw0(dw0: u32) -> Self {
        NumberOfQueues {
            sq: (dw0 & 0xffff) + 1,
            cq: (dw0 >> 16) + 1,
        }
    }
    /// The number of usable queue pairs (an SQ with its own CQ).
    pub fn pairs(&self) -> u32 {
        self.sq.min(self.cq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn decode() {
        let n = NumberOfQueues::from_dw0(3 | (7 << 16));
        assert_eq!((n.sq, n.cq, n.pairs()), (4, 8, 4));
        assert_eq!(NumberOfQueues::from_dw0(0xffff_ffff).sq, 65536);
    }
}
