//! Frames of the external dataplane protocol: each message is an 8-byte little-endian length
//! followed by that many bytes of protobuf (`ToDataplane` from felix, `FromDataplane` from the
//! driver), as upstream's `ext_dataplane.go` writes them.
//!
//! # Invariants
//! * `a_malformed_frame_is_a_typed_error_never_a_panic`: a stream that ends inside a length or
//!   a body, a length above [`MAX_FRAME`], bytes that do not decode and a message without a
//!   payload each give their own [`FrameError`]; the reader never allocates more than the
//!   announced length, and never more than [`MAX_FRAME`].
//! * A clean end of stream (between frames) is `Ok(None)`, not an error.
//! * [`write_frame`] then [`FrameReader::read`] gives back the message written.

use std::io::{self, Read, Write};

use felix_proto::{FromDataplane, ToDataplane};
use prost::Message;

/// The largest frame accepted (256 MiB): far above any one message (a full IP set of a
/// million members is about 20 MiB), low enough that a corrupt length cannot exhaust memory.
pub const MAX_FRAME: u64 = 256 << 20;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream ended inside a frame (`what`: the length or the body).
    #[error("{what} truncated: got {got} of {want} bytes before the end of the stream")]
    Truncated {
        /// `length` or `body`.
        what: &'static str,
        /// Bytes read.
        got: u64,
        /// Bytes announced.
        want: u64,
    },
    /// The announced length is above [`MAX_FRAME`].
    #[error("frame length {len} is over the maximum of {MAX_FRAME} bytes")]
    TooLong {
        /// The announced length.
        len: u64,
    },
    /// The body is not a valid protobuf message of the expected type.
    #[error("frame of {len} bytes does not decode as {msg}: {source}")]
    Decode {
        /// The expected message type.
        msg: &'static str,
        /// The body's length.
        len: u64,
        /// The decoder's error.
        source: prost::DecodeError,
    },
    /// The message decoded but carries no payload this protocol knows (an empty message or
    /// an unknown oneof field).
    #[error("{msg} #{seq} has no payload this felix knows (empty, or an unknown message type)")]
    NoPayload {
        /// The message type.
        msg: &'static str,
        /// Its sequence number.
        seq: u64,
    },
    /// Reading failed.
    #[error("reading a frame: {0}")]
    Io(#[from] io::Error),
}

/// A message type carried in frames.
pub trait Framed: Message + Default + Sized {
    /// The type's name in errors.
    const NAME: &'static str;
    /// Its sequence number.
    fn seq(&self) -> u64;
    /// Whether it carries a known payload.
    fn has_payload(&self) -> bool;
}

impl Framed for ToDataplane {
    const NAME: &'static str = "ToDataplane";
    fn seq(&self) -> u64 {
        self.sequence_number
    }
    fn has_payload(&self) -> bool {
        self.payload.is_some()
    }
}

impl Framed for FromDataplane {
    const NAME: &'static str = "FromDataplane";
    fn seq(&self) -> u64 {
        self.sequence_number
    }
    fn has_payload(&self) -> bool {
        self.payload.is_some()
    }
}

/// Writes `msg` as one frame (length, then body) and flushes.
pub fn write_frame<M: Message>(w: &mut impl Write, msg: &M) -> io::Result<()> {
    let body = msg.encode_to_vec();
    w.write_all(&(body.len() as u64).to_le_bytes())?;
    w.write_all(&body)?;
    w.flush()
}

/// Writes numbered frames: each message gets the next sequence number, starting at 0 and
/// increasing by one per message, as upstream numbers them. Frames are buffered until
/// [`SeqWriter::flush`] (one batch, one flush).
#[derive(Debug)]
pub struct SeqWriter<W: Write> {
    w: io::BufWriter<W>,
    next: u64,
}

impl<W: Write> SeqWriter<W> {
    /// A writer over `inner` whose first message is number 0.
    pub fn new(inner: W) -> Self {
        Self {
            w: io::BufWriter::with_capacity(256 << 10, inner),
            next: 0,
        }
    }

    /// Writes one `ToDataplane` carrying `p`.
    pub fn to_dataplane(&mut self, p: felix_proto::to_dataplane::Payload) -> io::Result<()> {
        let msg = ToDataplane {
            sequence_number: self.next,
            payload: Some(p),
        };
        self.next += 1;
        self.put(&msg)
    }

    /// Writes one `FromDataplane` carrying `p`.
    pub fn from_dataplane(&mut self, p: felix_proto::from_dataplane::Payload) -> io::Result<()> {
        let msg = FromDataplane {
            sequence_number: self.next,
            payload: Some(p),
        };
        self.next += 1;
        self.put(&msg)
    }

    fn put<M: Message>(&mut self, msg: &M) -> io::Result<()> {
        let len = msg.encoded_len();
        self.w.write_all(&(len as u64).to_le_bytes())?;
        let mut body = Vec::with_capacity(len);
        msg.encode(&mut body)
            .map_err(|e| io::Error::other(e.to_string()))?;
        self.w.write_all(&body)
    }

    /// Sends what is buffered.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// The number the next message gets.
    pub fn next_seq(&self) -> u64 {
        self.next
    }
}

/// Reads up to `buf.len()` bytes; returns how many were read before the end of the stream.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads frames of `M` from a stream.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
}

impl<R: Read> FrameReader<R> {
    /// A reader over `inner`.
    pub fn new(inner: R) -> Self {
        Self { inner }
    }

    /// The next message; `Ok(None)` at a clean end of stream.
    pub fn read<M: Framed>(&mut self) -> Result<Option<M>, FrameError> {
        let mut len = [0u8; 8];
        let got = read_full(&mut self.inner, &mut len)?;
        if got == 0 {
            return Ok(None);
        }
        if got < len.len() {
            return Err(FrameError::Truncated {
                what: "length",
                got: got as u64,
                want: 8,
            });
        }
        let len = u64::from_le_bytes(len);
        if len > MAX_FRAME {
            return Err(FrameError::TooLong { len });
        }
        // Grow as bytes arrive rather than trusting the length with one allocation.
        let mut body = Vec::new();
        let got = (&mut self.inner).take(len).read_to_end(&mut body)? as u64;
        if got < len {
            return Err(FrameError::Truncated {
                what: "body",
                got,
                want: len,
            });
        }
        let msg = M::decode(body.as_slice()).map_err(|source| FrameError::Decode {
            msg: M::NAME,
            len,
            source,
        })?;
        if !msg.has_payload() {
            return Err(FrameError::NoPayload {
                msg: M::NAME,
                seq: msg.seq(),
            });
        }
        Ok(Some(msg))
    }
}

/// Decodes every frame of `bytes` as `M` until the first error (for the fuzz target and
/// tests): the messages read and the error, if any.
pub fn decode_all<M: Framed>(bytes: &[u8]) -> (Vec<M>, Option<FrameError>) {
    let mut r = FrameReader::new(bytes);
    let mut out = Vec::new();
    loop {
        match r.read::<M>() {
            Ok(Some(m)) => out.push(m),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use felix_proto::to_dataplane::Payload;
    use felix_proto::{InSync, IpSetUpdate};

    fn msg(seq: u64) -> ToDataplane {
        ToDataplane {
            sequence_number: seq,
            payload: Some(Payload::IpsetUpdate(IpSetUpdate {
                id: "s:1".into(),
                members: vec!["10.0.0.1".into()],
                r#type: 0,
            })),
        }
    }

    fn frames(msgs: &[ToDataplane]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in msgs {
            write_frame(&mut out, m).expect("write to a vec");
        }
        out
    }

    #[test]
    fn sequence_numbers_start_at_zero_and_increase_by_one() {
        let mut out = Vec::new();
        {
            let mut w = SeqWriter::new(&mut out);
            w.to_dataplane(Payload::InSync(InSync {})).expect("write");
            w.to_dataplane(Payload::InSync(InSync {})).expect("write");
            assert_eq!(w.next_seq(), 2);
            w.flush().expect("flush");
        }
        let (got, err) = decode_all::<ToDataplane>(&out);
        assert!(err.is_none());
        let seqs: Vec<u64> = got.iter().map(|m| m.sequence_number).collect();
        assert_eq!(seqs, vec![0, 1]);
    }

    #[test]
    fn frames_round_trip_and_a_clean_end_is_not_an_error() {
        let sent = vec![
            msg(1),
            ToDataplane {
                sequence_number: 2,
                payload: Some(Payload::InSync(InSync {})),
            },
        ];
        let bytes = frames(&sent);
        assert_eq!(&bytes[..8], &(msg(1).encoded_len() as u64).to_le_bytes());
        let (got, err) = decode_all::<ToDataplane>(&bytes);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(got, sent);
        assert!(decode_all::<ToDataplane>(&[]).1.is_none());
    }

    #[test]
    fn a_malformed_frame_is_a_typed_error_never_a_panic() {
        let good = frames(&[msg(1)]);
        // The stream ends inside the length, then inside the body.
        let (ok, e) = decode_all::<ToDataplane>(&good[..5]);
        assert!(ok.is_empty());
        assert!(
            matches!(
                e,
                Some(FrameError::Truncated {
                    what: "length",
                    got: 5,
                    want: 8
                })
            ),
            "{e:?}"
        );
        let (_, e) = decode_all::<ToDataplane>(&good[..good.len() - 1]);
        assert!(
            matches!(e, Some(FrameError::Truncated { what: "body", .. })),
            "{e:?}"
        );
        // A length over the maximum, even with no body behind it.
        let (_, e) = decode_all::<ToDataplane>(&u64::MAX.to_le_bytes());
        assert!(
            matches!(e, Some(FrameError::TooLong { len: u64::MAX })),
            "{e:?}"
        );
        // Bytes that are not protobuf (a field with wire type 7).
        let mut bad = 3u64.to_le_bytes().to_vec();
        bad.extend([0x0f, 0xff, 0xff]);
        let (_, e) = decode_all::<ToDataplane>(&bad);
        assert!(
            matches!(
                e,
                Some(FrameError::Decode {
                    msg: "ToDataplane",
                    len: 3,
                    ..
                })
            ),
            "{e:?}"
        );
        // A message with an unknown field only: no payload this felix knows.
        let mut unknown = Vec::new();
        write_frame(
            &mut unknown,
            &ToDataplane {
                sequence_number: 9,
                payload: None,
            },
        )
        .expect("write");
        let (_, e) = decode_all::<ToDataplane>(&unknown);
        assert!(
            matches!(e, Some(FrameError::NoPayload { seq: 9, .. })),
            "{e:?}"
        );
        let text = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("ToDataplane #9"), "{text}");
        // Good frames before a bad one are delivered.
        let mut mixed = good.clone();
        mixed.extend(&bad);
        let (ok, e) = decode_all::<ToDataplane>(&mixed);
        assert_eq!(ok, vec![msg(1)]);
        assert!(e.is_some());
    }

    proptest::proptest! {
        /// Whatever the bytes (valid frames cut, flipped or padded anywhere), the reader
        /// returns messages and at most one error, and every message it accepts survives a
        /// re-encode unchanged (the CI-sized twin of the `frame_decode` fuzz target).
        #[test]
        fn any_bytes_give_messages_or_one_error_never_a_panic(
            seqs in proptest::collection::vec(0u64..1000, 0..4),
            cut in 0usize..200,
            flips in proptest::collection::vec((0usize..200, 0u8..=255), 0..4),
            tail in proptest::collection::vec(0u8..=255, 0..16),
        ) {
            let mut bytes = frames(&seqs.iter().map(|s| msg(*s)).collect::<Vec<_>>());
            bytes.truncate(bytes.len().saturating_sub(cut % 8));
            for (at, b) in flips {
                if let Some(x) = bytes.get_mut(at) {
                    *x ^= b;
                }
            }
            bytes.extend(tail);
            let (ok, _err) = decode_all::<ToDataplane>(&bytes);
            let again = frames(&ok);
            proptest::prop_assert_eq!(decode_all::<ToDataplane>(&again).0, ok);
            let _ = decode_all::<FromDataplane>(&bytes);
        }
    }
}
