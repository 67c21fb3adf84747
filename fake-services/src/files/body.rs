//! What a PUT's body is: plain bytes or `aws-chunked` framing with trailers, and the digests
//! and checksums that vouch for it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use md5::{Digest, Md5};
use sha1::Sha1;
use sha2::Sha256;

/// A decoded `aws-chunked` body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Chunked {
    pub payload: Vec<u8>,
    /// Trailer fields after the last chunk, names lowercased, in order.
    pub trailers: Vec<(String, String)>,
}

/// Why an `aws-chunked` body could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChunkError {
    /// The body ends before its framing does.
    Incomplete,
    /// A chunk header or a chunk's end is not what the framing says.
    Framing(String),
    /// A trailer line is not `name:value`, or bytes follow the trailers.
    Trailer,
}

/// Longest chunk header or trailer line read, so a body without line ends is refused early.
const LINE_BYTES_MAX: usize = 8 * 1024;

/// Decodes `aws-chunked`: `SIZE-IN-HEX[;ext=value]\r\nDATA\r\n` chunks, a `0` chunk, then
/// trailer lines and an empty line. Chunk extensions (`chunk-signature=`) are accepted and
/// not verified, like the rest of SigV4.
pub(crate) fn decode_aws_chunked(raw: &[u8]) -> Result<Chunked, ChunkError> {
    let mut out = Chunked::default();
    let mut pos = 0;
    loop {
        let line = line_at(raw, pos)?;
        pos += line.len() + 2;
        let line = std::str::from_utf8(line)
            .map_err(|_| ChunkError::Framing("a chunk header is not text".into()))?;
        let size_text = line.split(';').next().unwrap_or_default().trim();
        if size_text.is_empty() || size_text.len() > 16 || !size_text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ChunkError::Framing(format!("invalid chunk size \"{}\"", truncate(size_text))));
        }
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| ChunkError::Framing(format!("chunk size {size_text} is too large")))?;
        if size == 0 {
            break;
        }
        let end = pos.checked_add(size).ok_or(ChunkError::Incomplete)?;
        let data = raw.get(pos..end).ok_or(ChunkError::Incomplete)?;
        out.payload.extend_from_slice(data);
        pos = end;
        match raw.get(pos..pos + 2) {
            Some(b"\r\n") => pos += 2,
            Some(_) => return Err(ChunkError::Framing("a chunk is longer than its size".into())),
            None if raw.len() > pos => {
                return Err(ChunkError::Framing("a chunk is longer than its size".into()));
            }
            None => return Err(ChunkError::Incomplete),
        }
    }
    // Trailers, until an empty line; a body that stops right after the last trailer line
    // (or right after the `0` chunk) is accepted, since nothing is missing from it.
    while pos < raw.len() {
        let line = line_at(raw, pos)?;
        pos += line.len() + 2;
        if line.is_empty() {
            if pos < raw.len() {
                return Err(ChunkError::Trailer);
            }
            break;
        }
        let line = std::str::from_utf8(line).map_err(|_| ChunkError::Trailer)?;
        let (name, value) = line.split_once(':').ok_or(ChunkError::Trailer)?;
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(ChunkError::Trailer);
        }
        out.trailers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok(out)
}

/// The line starting at `pos`, without its `\r\n`.
fn line_at(raw: &[u8], pos: usize) -> Result<&[u8], ChunkError> {
    let rest = raw.get(pos..).unwrap_or_default();
    let window = &rest[..rest.len().min(LINE_BYTES_MAX)];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(n) => Ok(&rest[..n]),
        None if rest.len() > LINE_BYTES_MAX => {
            Err(ChunkError::Framing("a chunk header has no line end".into()))
        }
        None => Err(ChunkError::Incomplete),
    }
}

fn truncate(text: &str) -> String {
    text.chars().take(24).collect()
}

/// The checksum algorithms S3 takes in `x-amz-checksum-*`, with their digest sizes.
pub(crate) const CHECKSUMS: &[(&str, usize)] =
    &[("crc32", 4), ("crc32c", 4), ("crc64nvme", 8), ("sha1", 20), ("sha256", 32)];

/// Whether a checksum the client sent matches the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Matches,
    Differs,
}

/// CRC-32C (Castagnoli, the iSCSI polynomial), as S3's `crc32c`.
const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
/// CRC-64/NVME, as S3's `crc64nvme`.
const CRC64NVME: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_NVME);

/// Checks `value` (base64, as in `x-amz-checksum-ALGO`) against `payload`; `Err` when the
/// value is not base64 of the algorithm's size or the algorithm is unknown.
pub(crate) fn check_checksum(algorithm: &str, value: &str, payload: &[u8]) -> Result<Verdict, ()> {
    let (_, size) = CHECKSUMS.iter().find(|(name, _)| *name == algorithm).ok_or(())?;
    let given = BASE64.decode(value.trim()).map_err(|_| ())?;
    if given.len() != *size {
        return Err(());
    }
    // Each value as S3 writes it: the digest's bytes, CRCs big-endian, in base64.
    let computed = match algorithm {
        "crc32" => crc32fast::hash(payload).to_be_bytes().to_vec(),
        "crc32c" => CRC32C.checksum(payload).to_be_bytes().to_vec(),
        "crc64nvme" => CRC64NVME.checksum(payload).to_be_bytes().to_vec(),
        "sha1" => Sha1::digest(payload).to_vec(),
        "sha256" => Sha256::digest(payload).to_vec(),
        _ => return Err(()),
    };
    Ok(if computed == given { Verdict::Matches } else { Verdict::Differs })
}

/// CRC32 of `payload`, as S3 writes it in `x-amz-checksum-crc32`.
pub(crate) fn crc32_base64(payload: &[u8]) -> String {
    BASE64.encode(crc32fast::hash(payload).to_be_bytes())
}

pub(crate) fn md5(payload: &[u8]) -> [u8; 16] {
    Md5::digest(payload).into()
}

pub(crate) fn sha256_hex(payload: &[u8]) -> String {
    hex(&Sha256::digest(payload))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

pub(crate) fn base64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

pub(crate) fn unbase64(text: &str) -> Option<Vec<u8>> {
    BASE64.decode(text.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_decode_with_extensions_and_trailers() {
        let raw =
            b"5;chunk-signature=abc\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n";
        let decoded = decode_aws_chunked(raw).unwrap();
        assert_eq!(decoded.payload, b"hello world");
        assert_eq!(decoded.trailers, vec![("x-amz-checksum-crc32".to_string(), "DUoRhQ==".to_string())]);
        assert_eq!(check_checksum("crc32", "DUoRhQ==", b"hello world"), Ok(Verdict::Matches));
        assert_eq!(crc32_base64(b"hello world"), "DUoRhQ==");
        assert_eq!(decode_aws_chunked(b"0\r\n").unwrap(), Chunked::default());
    }

    #[test]
    fn broken_framing_is_told_apart_from_a_short_body() {
        let cases: [(&[u8], ChunkError); 7] = [
            (b"5\r\nhel", ChunkError::Incomplete),
            (b"5\r\nhello", ChunkError::Incomplete),
            (b"5\r\nhello world\r\n0\r\n\r\n", ChunkError::Framing("a chunk is longer than its size".into())),
            (b"zz\r\nhello\r\n", ChunkError::Framing("invalid chunk size \"zz\"".into())),
            (b"ffffffffffffffff\r\nx\r\n", ChunkError::Incomplete),
            (b"0\r\nno colon\r\n\r\n", ChunkError::Trailer),
            (b"0\r\n\r\nextra", ChunkError::Trailer),
        ];
        for (raw, want) in cases {
            assert_eq!(decode_aws_chunked(raw), Err(want), "{}", String::from_utf8_lossy(raw));
        }
        assert_eq!(decode_aws_chunked(b""), Err(ChunkError::Incomplete));
    }

    #[test]
    fn checksums_check_size_and_value() {
        assert_eq!(check_checksum("crc32", "AAAAAA==", b"x"), Ok(Verdict::Differs));
        assert_eq!(check_checksum("crc32", "AAAA", b"x"), Err(()));
        assert_eq!(check_checksum("crc32", "not base64!", b"x"), Err(()));
        // The catalogue's check values, over "123456789".
        let check = b"123456789";
        let crc32c = base64(&0xE306_9283_u32.to_be_bytes());
        assert_eq!(check_checksum("crc32c", &crc32c, check), Ok(Verdict::Matches));
        assert_eq!(check_checksum("crc32c", "AAAAAA==", check), Ok(Verdict::Differs));
        let crc64 = base64(&0xAE8B_1486_0A79_9888_u64.to_be_bytes());
        assert_eq!(check_checksum("crc64nvme", &crc64, check), Ok(Verdict::Matches));
        assert_eq!(check_checksum("crc64nvme", "AAAAAAAAAAA=", check), Ok(Verdict::Differs));
        assert_eq!(check_checksum("crc64nvme", "AAAAAA==", check), Err(()));
        let sha1 = base64(&[
            0xa9, 0x99, 0x3e, 0x36, 0x47, 0x06, 0x81, 0x6a, 0xba, 0x3e, 0x25, 0x71, 0x78, 0x50, 0xc2, 0x6c,
            0x9c, 0xd0, 0xd8, 0x9d,
        ]);
        assert_eq!(check_checksum("sha1", &sha1, b"abc"), Ok(Verdict::Matches));
        assert_eq!(check_checksum("sha1", &sha1, b"abd"), Ok(Verdict::Differs));
        assert_eq!(check_checksum("md5", "AAAAAA==", b"x"), Err(()));
        let sha = base64(&Sha256::digest(b"x"));
        assert_eq!(check_checksum("sha256", &sha, b"x"), Ok(Verdict::Matches));
        assert_eq!(hex(&md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
    }
}
