//! Where a chunked message body ends, found without decoding it.
//!
//! The fast path forwards a chunked response as the bytes it received; it
//! must still know when the message is over (to keep the client connection
//! and to pool the upstream one) and refuse a malformed one. Pure: no IO.
//! Grammar: RFC 9112 §7.1 (chunk-size, extensions, data, last-chunk,
//! trailer section, final CRLF); line ends must be CRLF.

/// Result of feeding bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// Everything fed belongs to the body; it is not over yet.
    More,
    /// The body ends after this many bytes of the last feed.
    Done(usize),
    /// Not a chunked body.
    Invalid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// Hex digits of a chunk size (`digits` read so far).
    Size,
    /// After the size: extensions up to CR.
    Ext,
    /// LF ending the size line.
    SizeLf,
    /// Chunk data still to come.
    Data,
    DataCr,
    DataLf,
    /// Start of a trailer line, or the final CRLF.
    TrailerStart,
    TrailerLine,
    TrailerLf,
    EndLf,
    Done,
}

/// Incremental scanner over one chunked body.
#[derive(Debug, Clone)]
pub struct ChunkedScanner {
    st: St,
    size: u64,
    digits: u8,
}

impl Default for ChunkedScanner {
    fn default() -> Self {
        ChunkedScanner {
            st: St::Size,
            size: 0,
            digits: 0,
        }
    }
}

impl ChunkedScanner {
    /// Feeds the next bytes of the body.
    pub fn feed(&mut self, buf: &[u8]) -> Scan {
        let mut i = 0;
        while i < buf.len() {
            if self.st == St::Data {
                // Skip data in one step: bodies are mostly data.
                let take = (buf.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                i += take;
                self.size -= take as u64;
                if self.size == 0 {
                    self.st = St::DataCr;
                }
                continue;
            }
            let b = buf[i];
            i += 1;
            self.st = match (self.st, b) {
                (St::Size, b) if b.is_ascii_hexdigit() => {
                    // 16 hex digits fill a u64; more is no size we can serve.
                    if self.digits == 16 {
                        return Scan::Invalid;
                    }
                    self.digits += 1;
                    self.size = self.size << 4 | u64::from(hex(b));
                    St::Size
                }
                (St::Size, b';' | b' ' | b'\t') if self.digits > 0 => St::Ext,
                (St::Size, b'\r') if self.digits > 0 => St::SizeLf,
                (St::Ext, b'\r') => St::SizeLf,
                (St::Ext, b'\n') => return Scan::Invalid,
                (St::Ext, _) => St::Ext,
                (St::SizeLf, b'\n') if self.size == 0 => St::TrailerStart,
                (St::SizeLf, b'\n') => St::Data,
                (St::DataCr, b'\r') => St::DataLf,
                (St::DataLf, b'\n') => {
                    self.digits = 0;
                    St::Size
                }
                (St::TrailerStart, b'\r') => St::EndLf,
                (St::TrailerStart | St::TrailerLine, b'\n') => return Scan::Invalid,
                (St::TrailerLine, b'\r') => St::TrailerLf,
                (St::TrailerStart | St::TrailerLine, _) => St::TrailerLine,
                (St::TrailerLf, b'\n') => St::TrailerStart,
                (St::EndLf, b'\n') => {
                    self.st = St::Done;
                    return Scan::Done(i);
                }
                _ => return Scan::Invalid,
            };
        }
        Scan::More
    }
}

fn hex(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}
