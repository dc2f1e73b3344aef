//! The generated services' codec: prost's, except that a message the decoder refuses (invalid
//! UTF-8 in a string field, a malformed body) is `INVALID_ARGUMENT` with an fsd `ErrorInfo`
//! (`FS_INVALID_PATH`, metadata `reason` and `field`), not prost's bare `INTERNAL`: a bad request
//! is the caller's fault, and clients branch on the code, never on text.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

use crate::{ErrorCode, Reason, WireError};

/// Why a body could not be decoded, as the `reason` metadata names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undecodable {
    /// A string field holds bytes that are not UTF-8.
    InvalidUtf8,
    /// Anything else: truncated, bad wire types, garbage.
    Malformed,
}

impl Undecodable {
    /// The `reason` it travels as.
    pub fn reason(self) -> Reason {
        match self {
            Undecodable::InvalidUtf8 => Reason::InvalidUtf8,
            Undecodable::Malformed => Reason::Malformed,
        }
    }
}

/// prost's codec with the decode refusal above; `codec_path` of the generated code.
#[derive(Debug, Clone)]
pub struct FsdCodec<T, U> {
    _types: PhantomData<(T, U)>,
}

impl<T, U> Default for FsdCodec<T, U> {
    fn default() -> Self {
        FsdCodec { _types: PhantomData }
    }
}

impl<T, U> Codec for FsdCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = FsdDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        FsdDecoder { _type: PhantomData }
    }
}

/// Decodes `U` with prost; see the module's rule for failures.
#[derive(Debug, Clone)]
pub struct FsdDecoder<U> {
    _type: PhantomData<U>,
}

impl<U: Message + Default> Decoder for FsdDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf).map(Some).map_err(|error| refusal(&error).into_status())
    }
}

/// The wire error of a decode failure. prost exposes the failure's kind and field only through
/// its `Display` (`failed to decode Protobuf message: Msg.field: ...: description`, innermost
/// field first), which the unit tests below pin.
pub fn refusal(error: &prost::DecodeError) -> WireError {
    let text = error.to_string();
    let detail = text.strip_prefix("failed to decode Protobuf message: ").unwrap_or(&text);
    let why = if detail.ends_with("data is not UTF-8 encoded") {
        Undecodable::InvalidUtf8
    } else {
        Undecodable::Malformed
    };
    // A field segment is `Message.field`; the description has spaces, so it never qualifies.
    let field =
        detail.split(": ").next().filter(|first| first.contains('.') && !first.contains(' ')).unwrap_or("");
    WireError::new(ErrorCode::InvalidPath, "", "the request could not be decoded")
        .with_reason(why.reason())
        .with("field", field)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1;

    fn check(body: &[u8], expected: (Undecodable, &str)) {
        let error = v1::WriteTextRequest::decode(body).expect_err("undecodable");
        let wire = refusal(&error);
        assert_eq!(wire.code, ErrorCode::InvalidPath);
        assert_eq!(wire.clone().into_status().code(), tonic::Code::InvalidArgument);
        assert_eq!(
            (wire.get("reason"), wire.get("field")),
            (Some(expected.0.reason().as_str()), Some(expected.1))
        );
    }

    #[test]
    fn decode_failures_are_invalid_arguments_with_their_field() {
        // Field 2 (path), length 2, bytes that are not UTF-8.
        check(b"\x12\x02\xff\xfe", (Undecodable::InvalidUtf8, "WriteTextRequest.path"));
        // Field 3 (content), likewise.
        check(b"\x1a\x01\xc3", (Undecodable::InvalidUtf8, "WriteTextRequest.content"));
        // Field 1 (the call context), whose session_id is not UTF-8: the innermost field is named.
        check(b"\x0a\x03\x0a\x01\xff", (Undecodable::InvalidUtf8, "CallContext.session_id"));
        // A length running past the end.
        check(b"\x12\x09ab", (Undecodable::Malformed, "WriteTextRequest.path"));
        // Wire type 7 does not exist.
        check(b"\x0f", (Undecodable::Malformed, ""));
    }
}
