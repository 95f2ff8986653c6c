//! Lists of spans (iovecs): the checks a list gets when a request is made of it, and the walk
//! that cuts it into the pieces each command of the request moves.

use crate::error::SubmitErrorKind;
use vfnvme_hal::DmaSpan;

/// Most spans one request takes: the SGL segment of a command, one descriptor per span, fits
/// the tracker's 4 KiB list page (256 descriptors of 16 bytes).
pub const MAX_SPANS: usize = 256;

/// Checks a list of spans: 1..=[`MAX_SPANS`] of them, none empty. Returns their total length.
pub(crate) fn check(spans: &[DmaSpan]) -> Result<u64, SubmitErrorKind> {
    let bad = || SubmitErrorKind::BadSpanCount {
        count: spans.len(),
        max: MAX_SPANS,
    };
    if spans.is_empty() || spans.len() > MAX_SPANS {
        return Err(bad());
    }
    let mut total = 0u64;
    for s in spans {
        if s.is_empty() {
            return Err(bad());
        }
        total = total.saturating_add(s.len() as u64);
    }
    Ok(total)
}

/// A position in a list of spans, from which commands take their pieces in order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cursor<'a> {
    spans: &'a [DmaSpan],
    /// The span the next piece starts in.
    index: usize,
    /// Bytes of that span already taken.
    offset: usize,
}

impl<'a> Cursor<'a> {
    /// The start of `spans`.
    pub(crate) fn new(spans: &'a [DmaSpan]) -> Self {
        Cursor {
            spans,
            index: 0,
            offset: 0,
        }
    }

    /// Takes the next `bytes` bytes, calling `piece(span_index, iova, len)` for each
    /// contiguous piece in order. Fails with `short` if the spans end first (the request's
    /// checks rule that out) and passes on `piece`'s errors.
    pub(crate) fn take<E>(
        &mut self,
        mut bytes: usize,
        short: E,
        mut piece: impl FnMut(usize, u64, usize) -> Result<(), E>,
    ) -> Result<(), E> {
        while bytes > 0 {
            let Some(span) = self.spans.get(self.index) else {
                return Err(short);
            };
            let left = span.len().saturating_sub(self.offset);
            let n = left.min(bytes);
            if n > 0 {
                piece(self.index, span.iova() + self.offset as u64, n)?;
            }
            bytes -= n;
            self.offset += n;
            if self.offset >= span.len() {
                self.index += 1;
                self.offset = 0;
            }
        }
        Ok(())
    }
}

/// The first `bytes` bytes of `spans`, as (span index, device address, length) pieces.
pub(crate) fn pieces(
    spans: &[DmaSpan],
    bytes: u64,
) -> impl Iterator<Item = (usize, u64, usize)> + '_ {
    let mut left = bytes;
    spans.iter().enumerate().map_while(move |(i, s)| {
        if left == 0 {
            return None;
        }
        let n = (s.len() as u64).min(left);
        left -= n;
        Some((i, s.iova(), n as usize))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_hands_out_pieces_across_spans_in_order() {
        let pool = crate::queue::ring::tests::test_pool();
        let buf = pool.alloc(4096).unwrap();
        let at = |o: usize, l: usize| {
            // SAFETY: `o` lies inside `buf` (the pool refuses the span otherwise).
            pool.span(unsafe { buf.as_ptr().add(o) }, l).unwrap()
        };
        let spans = [at(0, 10), at(100, 5), at(200, 20)];
        assert_eq!(check(&spans), Ok(35));
        assert!(check(&[]).is_err() && check(&[at(0, 0)]).is_err());
        let base = buf.iova();
        let mut c = Cursor::new(&spans);
        let mut got = vec![];
        c.take(12, (), |i, a, n| {
            got.push((i, a - base, n));
            Ok(())
        })
        .unwrap();
        assert_eq!(got, [(0, 0, 10), (1, 100, 2)]);
        got.clear();
        c.take(23, (), |i, a, n| {
            got.push((i, a - base, n));
            Ok(())
        })
        .unwrap();
        assert_eq!(got, [(1, 102, 3), (2, 200, 20)]);
        assert_eq!(c.take(1, "short", |_, _, _| Ok(())), Err("short"));
        let p: Vec<_> = pieces(&spans, 12)
            .map(|(i, a, n)| (i, a - base, n))
            .collect();
        assert_eq!(p, [(0, 0, 10), (1, 100, 2)]);
    }
}
