//! A stream that first yields bytes already read from it: how the fast path
//! hands a connection to hyper with the request it has started reading.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// `io`, with `pre` read first.
pub struct Rewind<IO> {
    pre: Vec<u8>,
    pos: usize,
    io: IO,
}

impl<IO> Rewind<IO> {
    /// Reads yield `pre`, then what `io` yields.
    pub fn new(pre: Vec<u8>, io: IO) -> Self {
        Rewind { pre, pos: 0, io }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Rewind<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos < this.pre.len() {
            let n = (this.pre.len() - this.pos).min(buf.remaining());
            buf.put_slice(&this.pre[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.pre.len() {
                // Given back: an idle connection keeps no copy.
                this.pre = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

forward_async_write!(Rewind);
