//! Forwarding a response body to the client as it arrives, by its framing
//! (`head::Framing`): no body, a length, chunks as received, or re-framed
//! as chunked when the upstream ends it by closing.

use super::chunked::{ChunkedScanner, Scan};
use super::head::Framing;
use std::io::{self, IoSlice};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest single read while forwarding a response body.
const BODY_READ: usize = 64 * 1024;

/// Writes the client head and the body that follows `rbuf[from..]`.
/// `Ok(true)`: done, and the upstream sent nothing after the body (its
/// connection may be reused); `Ok(false)`: done, but do not reuse it.
pub(super) async fn forward_body(
    client: &mut TcpStream,
    up: &mut TcpStream,
    head: &[u8],
    rbuf: &mut Vec<u8>,
    from: usize,
    framing: Framing,
    idle: Duration,
) -> io::Result<bool> {
    let avail = &rbuf[from..];
    match framing {
        Framing::Empty => {
            client.write_all(head).await?;
            Ok(avail.is_empty())
        }
        Framing::Length(n) => {
            let first = avail.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            let mut clean = avail.len() == first;
            write_slices(client, &mut [head, &avail[..first]]).await?;
            let mut left = n - first as u64;
            while left > 0 {
                let got = read_more(up, rbuf, idle).await?;
                let take = got.min(usize::try_from(left).unwrap_or(usize::MAX));
                clean &= take == got;
                client.write_all(&rbuf[..take]).await?;
                left -= take as u64;
            }
            Ok(clean)
        }
        Framing::Chunked => {
            let mut scan = ChunkedScanner::default();
            let mut head = Some(head);
            let mut from = from;
            loop {
                let avail = &rbuf[from..];
                let (send, done) = match scan.feed(avail) {
                    Scan::More => (avail.len(), None),
                    Scan::Done(k) => (k, Some(k == avail.len())),
                    Scan::Invalid => return Err(io::Error::other("invalid chunked body")),
                };
                match head.take() {
                    Some(h) => write_slices(client, &mut [h, &avail[..send]]).await?,
                    None => client.write_all(&avail[..send]).await?,
                }
                if let Some(clean) = done {
                    return Ok(clean);
                }
                read_more(up, rbuf, idle).await?;
                from = 0;
            }
        }
        Framing::UntilClose => {
            let mut head = Some(head);
            let mut from = from;
            loop {
                let avail = &rbuf[from..];
                let size = format!("{:x}\r\n", avail.len());
                let mut parts: [&[u8]; 4] = [head.take().unwrap_or(b""), b"", b"", b""];
                if !avail.is_empty() {
                    parts[1..].copy_from_slice(&[size.as_bytes(), avail, b"\r\n"]);
                }
                write_slices(client, &mut parts).await?;
                if read_some(up, rbuf, idle).await? == 0 {
                    client.write_all(b"0\r\n\r\n").await?;
                    return Ok(false);
                }
                from = 0;
            }
        }
    }
}

/// Replaces `rbuf` with the next bytes from the upstream (within `idle`);
/// 0 at the end of the stream.
async fn read_some(up: &mut TcpStream, rbuf: &mut Vec<u8>, idle: Duration) -> io::Result<usize> {
    rbuf.clear();
    rbuf.reserve(BODY_READ);
    tokio::time::timeout(idle, up.read_buf(rbuf))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "response body idle"))?
}

/// [`read_some`] where the end of the stream is an error (the body is not complete).
async fn read_more(up: &mut TcpStream, rbuf: &mut Vec<u8>, idle: Duration) -> io::Result<usize> {
    let got = read_some(up, rbuf, idle).await?;
    if got == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "upstream closed inside the body",
        ));
    }
    Ok(got)
}

/// Writes every slice (at most 4), in order, with as few `writev`s as the
/// socket allows.
async fn write_slices(s: &mut TcpStream, parts: &mut [&[u8]]) -> io::Result<()> {
    let mut i = 0;
    while i < parts.len() {
        if parts[i].is_empty() {
            i += 1;
            continue;
        }
        let mut slices = [IoSlice::new(&[]); 4];
        let k = (parts.len() - i).min(slices.len());
        for (slot, p) in slices.iter_mut().zip(&parts[i..i + k]) {
            *slot = IoSlice::new(p);
        }
        let mut n = s.write_vectored(&slices[..k]).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        while n > 0 && i < parts.len() {
            let take = n.min(parts[i].len());
            parts[i] = &parts[i][take..];
            n -= take;
            if parts[i].is_empty() {
                i += 1;
            }
        }
    }
    Ok(())
}
