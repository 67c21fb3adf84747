//! S3's XML: the error document, the few result documents the files fake answers, and the
//! two request bodies it reads (`DeleteObjects`, `CompleteMultipartUpload`). Text is escaped
//! with quick-xml, never by hand.

use std::borrow::Cow;

use bytes::Bytes;
use quick_xml::events::Event;

use crate::core::ApiError;
use crate::wire::FakeResponse;

/// The namespace of every S3 result document.
pub(crate) const S3_XMLNS: &str = "http://s3.amazonaws.com/doc/2006-03-01/";

const DECLARATION: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";

/// The end of every error document before the answer is stamped: the stamp fills in the
/// request's id (see [`fill_request_id`]), which the error's builder does not know.
const UNSTAMPED_TAIL: &str = "<RequestId></RequestId><HostId></HostId></Error>";

/// An error as S3 writes it: status, `Code`, `Message` and the extra elements some codes carry
/// (`Condition`, `Key`, `BucketName`, `Method`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Error {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    pub extra: Vec<(&'static str, String)>,
}

impl S3Error {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        S3Error { status, code, message: message.into(), extra: Vec::new() }
    }

    pub fn with(mut self, element: &'static str, value: impl Into<String>) -> Self {
        self.extra.push((element, value.into()));
        self
    }

    /// The error document, with `Content-Type: application/xml`. A HEAD answer carries no
    /// body, as S3's does not: the status is all a client gets.
    pub fn response(&self, method: &str) -> FakeResponse {
        let body = if method == "HEAD" { Bytes::new() } else { Bytes::from(self.document()) };
        FakeResponse { status: self.status, headers: vec![content_type_xml()], body }
    }

    fn document(&self) -> String {
        let mut xml = String::with_capacity(256);
        xml.push_str(DECLARATION);
        xml.push_str("<Error>");
        leaf(&mut xml, "Code", self.code);
        leaf(&mut xml, "Message", &self.message);
        for (element, value) in &self.extra {
            leaf(&mut xml, element, value);
        }
        xml.push_str(UNSTAMPED_TAIL);
        xml
    }

    /// S3's rendering of an error raised by the shared pipeline (a fault's 500, a `reject`,
    /// the transport's 413): its code follows the status, and the pipeline's generic message
    /// gives way to S3's own.
    pub fn from_api(error: &ApiError) -> Self {
        let (code, standard) = standard_for(error.status);
        let code = error.code.unwrap_or(code);
        // Only the pipeline's own words for a bare status give way; an error the fake words
        // itself (a bound reached, say) keeps them.
        let generic = error.standard;
        let message = if generic { standard.to_string() } else { error.message.clone() };
        S3Error::new(error.status, code, message)
    }
}

/// The code and message S3 uses for a bare status.
fn standard_for(status: u16) -> (&'static str, &'static str) {
    match status {
        400 => ("InvalidArgument", "Invalid Argument"),
        // S3 itself answers 403 for credentials it does not accept; a 401 comes from what
        // stands in front of it (a proxy, a gateway), in the words S3-compatible stores use.
        401 => ("Unauthorized", "The request was not authenticated."),
        403 => ("AccessDenied", "Access Denied"),
        404 => ("NoSuchKey", "The specified key does not exist."),
        405 => ("MethodNotAllowed", "The specified method is not allowed against this resource."),
        408 => (
            "RequestTimeout",
            "Your socket connection to the server was not read from or written to within the timeout period. Idle connections will be closed.",
        ),
        409 => (
            "OperationAborted",
            "A conflicting conditional operation is currently in progress against this resource. Try again.",
        ),
        411 => ("MissingContentLength", "You must provide the Content-Length HTTP header."),
        412 => ("PreconditionFailed", "At least one of the pre-conditions you specified did not hold"),
        413 => ("EntityTooLarge", "Your proposed upload exceeds the maximum allowed object size."),
        414 => ("InvalidURI", "Couldn't parse the specified URI."),
        416 => ("InvalidRange", "The requested range is not satisfiable"),
        431 => {
            ("RequestHeaderSectionTooLarge", "Your request header section exceeds the maximum allowed size.")
        }
        422 => ("UnprocessableEntity", "The request was well formed but could not be processed."),
        429 | 503 => ("SlowDown", "Please reduce your request rate."),
        501 => ("NotImplemented", "A header you provided implies functionality that is not implemented."),
        500..=599 => ("InternalError", "We encountered an internal error. Please try again."),
        _ => ("InvalidRequest", "The request was rejected."),
    }
}

/// The pipeline's error shape for the files fake.
pub fn error_body(error: &ApiError) -> FakeResponse {
    S3Error::from_api(error).response("")
}

/// Puts the request's id into an error document that does not carry one yet.
pub(crate) fn fill_request_id(body: &Bytes, request_id: &str, host_id: &str) -> Option<Bytes> {
    let text = std::str::from_utf8(body).ok()?;
    let head = text.strip_suffix(UNSTAMPED_TAIL)?;
    let mut xml = String::with_capacity(text.len() + 128);
    xml.push_str(head);
    leaf(&mut xml, "RequestId", request_id);
    leaf(&mut xml, "HostId", host_id);
    xml.push_str("</Error>");
    Some(Bytes::from(xml))
}

pub(crate) fn content_type_xml() -> (String, String) {
    ("content-type".into(), "application/xml".into())
}

/// A result document: the declaration and a root element in S3's namespace.
pub(crate) struct Document {
    xml: String,
    root: &'static str,
}

impl Document {
    pub(crate) fn new(root: &'static str) -> Self {
        let mut xml = String::with_capacity(512);
        xml.push_str(DECLARATION);
        xml.push_str(&format!("<{root} xmlns=\"{S3_XMLNS}\">"));
        Document { xml, root }
    }

    pub(crate) fn open(&mut self, element: &str) -> &mut Self {
        self.xml.push_str(&format!("<{element}>"));
        self
    }

    pub(crate) fn close(&mut self, element: &str) -> &mut Self {
        self.xml.push_str(&format!("</{element}>"));
        self
    }

    pub(crate) fn leaf(&mut self, element: &str, text: &str) -> &mut Self {
        leaf(&mut self.xml, element, text);
        self
    }

    pub(crate) fn finish(mut self) -> Bytes {
        self.xml.push_str(&format!("</{}>", self.root));
        Bytes::from(self.xml)
    }
}

fn leaf(xml: &mut String, element: &str, text: &str) {
    xml.push('<');
    xml.push_str(element);
    xml.push('>');
    xml.push_str(&quick_xml::escape::escape(xml_chars(text)));
    xml.push_str("</");
    xml.push_str(element);
    xml.push('>');
}

/// `text` with every character that XML 1.0 cannot carry, even escaped (most control
/// characters), replaced by U+FFFD, so that a key with such a character still gives a
/// document every parser reads.
fn xml_chars(text: &str) -> Cow<'_, str> {
    let allowed =
        |c: char| matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{fffe}' && c != '\u{ffff}');
    if text.chars().all(allowed) {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(text.chars().map(|c| if allowed(c) { c } else { '\u{fffd}' }).collect())
    }
}

/// The body of `POST /{bucket}?delete`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeleteRequest {
    pub keys: Vec<String>,
    pub quiet: bool,
}

/// S3 deletes at most this many keys per request.
pub(crate) const DELETE_KEYS_MAX: usize = 1000;

/// The characters a text, CDATA or reference event stands for (a character reference, or one
/// of XML's five predefined entities); empty for any other event.
fn character_data(event: &Event<'_>) -> Result<String, S3Error> {
    Ok(match event {
        Event::Text(t) => t.xml10_content().map_err(|_| malformed())?.into_owned(),
        Event::CData(c) => c.decode().map_err(|_| malformed())?.into_owned(),
        Event::GeneralRef(r) => match r.resolve_char_ref().map_err(|_| malformed())? {
            Some(c) => c.to_string(),
            None => {
                let name = r.decode().map_err(|_| malformed())?;
                quick_xml::escape::resolve_predefined_entity(&name).ok_or_else(malformed)?.to_string()
            }
        },
        _ => String::new(),
    })
}

fn malformed() -> S3Error {
    S3Error::new(
        400,
        "MalformedXML",
        "The XML you provided was not well-formed or did not validate against our published schema",
    )
}

/// Reads `<Delete><Quiet>..</Quiet><Object><Key>..</Key>..</Object>..</Delete>`; anything
/// else, or XML that is not well-formed, is S3's `MalformedXML`.
pub(crate) fn parse_delete(body: &[u8]) -> Result<DeleteRequest, S3Error> {
    let text = std::str::from_utf8(body).map_err(|_| malformed())?;
    let mut reader = quick_xml::Reader::from_str(text);
    // Elements open from the root down; `text` gathers a leaf's content.
    let mut open: Vec<String> = Vec::new();
    let mut text = String::new();
    let mut request = DeleteRequest { keys: Vec::new(), quiet: false };
    let mut key: Option<String> = None;
    let mut seen_root = false;
    loop {
        let event = reader.read_event().map_err(|_| malformed())?;
        match event {
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) => {}
            // A DTD could declare entities; S3 takes none, and neither does the fake.
            Event::DocType(_) => return Err(malformed()),
            Event::Start(start) => {
                let name = std::str::from_utf8(start.local_name().into_inner()).map_err(|_| malformed())?;
                let parent = open.last().map(String::as_str);
                let allowed = match (parent, name) {
                    (None, "Delete") => !seen_root,
                    (Some("Delete"), "Object" | "Quiet") => true,
                    (Some("Object"), "Key" | "VersionId" | "ETag" | "LastModifiedTime" | "Size") => true,
                    _ => false,
                };
                if !allowed {
                    return Err(malformed());
                }
                seen_root = true;
                if name == "Object" {
                    key = None;
                }
                text.clear();
                open.push(name.to_string());
            }
            Event::Empty(start) => {
                // `<Quiet/>` or `<VersionId/>` say nothing; an empty `<Key/>` is no key.
                let name = std::str::from_utf8(start.local_name().into_inner()).map_err(|_| malformed())?;
                match (open.last().map(String::as_str), name) {
                    (Some("Delete"), "Quiet") => {}
                    (Some("Object"), "VersionId" | "ETag" | "LastModifiedTime" | "Size") => {}
                    _ => return Err(malformed()),
                }
            }
            Event::Text(_) | Event::CData(_) | Event::GeneralRef(_) => {
                text_in(&open, &character_data(&event)?, &mut text)?;
            }
            Event::End(_) => {
                let Some(name) = open.pop() else { return Err(malformed()) };
                match name.as_str() {
                    "Key" => {
                        if key.is_some() || text.is_empty() {
                            return Err(malformed());
                        }
                        key = Some(std::mem::take(&mut text));
                    }
                    "Quiet" => {
                        request.quiet = match text.trim() {
                            "true" => true,
                            "false" => false,
                            _ => return Err(malformed()),
                        };
                    }
                    "Object" => {
                        let Some(k) = key.take() else { return Err(malformed()) };
                        if request.keys.len() == DELETE_KEYS_MAX {
                            return Err(malformed());
                        }
                        request.keys.push(k);
                    }
                    _ => {}
                }
                text.clear();
            }
            Event::Eof => break,
        }
    }
    if !open.is_empty() || !seen_root || request.keys.is_empty() {
        return Err(malformed());
    }
    Ok(request)
}

/// One `<Part>` of a `CompleteMultipartUpload` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CompletedPart {
    pub part_number: u32,
    /// As the client wrote it, quotes and all.
    pub etag: String,
    /// `<ChecksumCRC32>`, if the client sent one.
    pub checksum_crc32: Option<String>,
}

/// S3 takes part numbers 1 to 10 000, so a complete lists at most this many parts.
pub(crate) const PARTS_MAX: usize = 10_000;

/// The elements a `<Part>` may hold: its number, its tag, and one checksum.
const PART_LEAVES: &[&str] = &[
    "PartNumber",
    "ETag",
    "ChecksumCRC32",
    "ChecksumCRC32C",
    "ChecksumCRC64NVME",
    "ChecksumSHA1",
    "ChecksumSHA256",
];

/// Reads `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"…"</ETag></Part>…
/// </CompleteMultipartUpload>`, in the order written (the order is the caller's to get right:
/// `InvalidPartOrder` is decided against the upload, not here). Anything else, no part at all,
/// or a part without its number or tag is `MalformedXML`.
pub(crate) fn parse_complete(body: &[u8]) -> Result<Vec<CompletedPart>, S3Error> {
    let text = std::str::from_utf8(body).map_err(|_| malformed())?;
    let mut reader = quick_xml::Reader::from_str(text);
    let mut open: Vec<String> = Vec::new();
    let mut text = String::new();
    let mut parts = Vec::new();
    // The leaves of the `<Part>` being read.
    let mut leaves: Vec<(String, String)> = Vec::new();
    let mut seen_root = false;
    loop {
        let event = reader.read_event().map_err(|_| malformed())?;
        match event {
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) => {}
            Event::DocType(_) => return Err(malformed()),
            Event::Start(start) => {
                let name = std::str::from_utf8(start.local_name().into_inner()).map_err(|_| malformed())?;
                let allowed = match (open.last().map(String::as_str), name) {
                    (None, "CompleteMultipartUpload") => !seen_root,
                    (Some("CompleteMultipartUpload"), "Part") => true,
                    (Some("Part"), leaf) => PART_LEAVES.contains(&leaf),
                    _ => false,
                };
                if !allowed {
                    return Err(malformed());
                }
                seen_root = true;
                if name == "Part" {
                    leaves.clear();
                }
                text.clear();
                open.push(name.to_string());
            }
            Event::Empty(start) => {
                let name = std::str::from_utf8(start.local_name().into_inner()).map_err(|_| malformed())?;
                if !(open.last().map(String::as_str) == Some("Part") && name.starts_with("Checksum")) {
                    return Err(malformed());
                }
            }
            Event::Text(_) | Event::CData(_) | Event::GeneralRef(_) => {
                part_text(&open, &character_data(&event)?, &mut text)?;
            }
            Event::End(_) => {
                let Some(name) = open.pop() else { return Err(malformed()) };
                if name == "Part" {
                    let leaf =
                        |wanted: &str| leaves.iter().find(|(n, _)| n == wanted).map(|(_, v)| v.clone());
                    let number = leaf("PartNumber").and_then(|n| n.trim().parse::<u32>().ok());
                    let (Some(part_number), Some(etag)) = (number, leaf("ETag")) else {
                        return Err(malformed());
                    };
                    if parts.len() == PARTS_MAX {
                        return Err(malformed());
                    }
                    parts.push(CompletedPart {
                        part_number,
                        etag: etag.trim().to_string(),
                        checksum_crc32: leaf("ChecksumCRC32").map(|c| c.trim().to_string()),
                    });
                } else if open.last().map(String::as_str) == Some("Part") {
                    if leaves.iter().any(|(n, _)| *n == name) {
                        return Err(malformed());
                    }
                    leaves.push((name, std::mem::take(&mut text)));
                }
                text.clear();
            }
            Event::Eof => break,
        }
    }
    if !open.is_empty() || !seen_root || parts.is_empty() {
        return Err(malformed());
    }
    Ok(parts)
}

/// Text is content only inside a part's leaves; elsewhere it may only be whitespace.
fn part_text(open: &[String], content: &str, text: &mut String) -> Result<(), S3Error> {
    match open.last().map(String::as_str) {
        Some(leaf) if PART_LEAVES.contains(&leaf) => {
            text.push_str(content);
            Ok(())
        }
        _ if content.trim().is_empty() => Ok(()),
        _ => Err(malformed()),
    }
}

/// Checks that `body` is one well-formed XML document and returns its root element's local
/// name (for `CreateBucketConfiguration`, whose content the fake does not need).
pub(crate) fn root_of(body: &[u8]) -> Result<String, S3Error> {
    let text = std::str::from_utf8(body).map_err(|_| malformed())?;
    let mut reader = quick_xml::Reader::from_str(text);
    let mut depth = 0usize;
    let mut root: Option<String> = None;
    loop {
        match reader.read_event().map_err(|_| malformed())? {
            Event::DocType(_) => return Err(malformed()),
            event @ (Event::Start(_) | Event::Empty(_)) if depth == 0 => {
                let (Event::Start(start) | Event::Empty(start)) = &event else { return Err(malformed()) };
                if root.is_some() {
                    return Err(malformed());
                }
                let name = std::str::from_utf8(start.local_name().into_inner()).map_err(|_| malformed())?;
                root = Some(name.to_string());
                depth += usize::from(matches!(event, Event::Start(_)));
            }
            Event::Start(_) => depth += 1,
            Event::End(_) => depth = depth.checked_sub(1).ok_or_else(malformed)?,
            Event::Text(t) if depth == 0 && !t.xml10_content().is_ok_and(|c| c.trim().is_empty()) => {
                return Err(malformed());
            }
            Event::GeneralRef(_) | Event::CData(_) if depth == 0 => return Err(malformed()),
            Event::Eof => break,
            _ => {}
        }
    }
    match root {
        Some(root) if depth == 0 => Ok(root),
        _ => Err(malformed()),
    }
}

/// Text is content only inside leaves; between elements it may only be whitespace.
fn text_in(open: &[String], content: &str, text: &mut String) -> Result<(), S3Error> {
    match open.last().map(String::as_str) {
        Some("Key" | "Quiet" | "VersionId" | "ETag" | "LastModifiedTime" | "Size") => {
            text.push_str(content);
            Ok(())
        }
        _ if content.trim().is_empty() => Ok(()),
        _ => Err(malformed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_documents_escape_and_carry_the_request_id() {
        let error =
            S3Error::new(404, "NoSuchKey", "The specified key does not exist.").with("Key", "a<&>\u{1}b");
        let response = error.response("GET");
        let body = fill_request_id(&response.body, "req_1", "host").unwrap();
        let text = std::str::from_utf8(&body).unwrap();
        assert!(
            text.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>")
        );
        assert!(text.contains("<Key>a&lt;&amp;&gt;\u{fffd}b</Key>"), "{text}");
        assert!(text.ends_with("<RequestId>req_1</RequestId><HostId>host</HostId></Error>"), "{text}");
        assert!(error.response("HEAD").body.is_empty());
    }

    #[test]
    fn complete_requests_parse_or_are_malformed() {
        let good = r#"<?xml version="1.0" encoding="UTF-8"?>
            <CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
            <Part><ETag>&quot;aa&quot;</ETag><PartNumber>2</PartNumber><ChecksumCRC32>AAAAAA==</ChecksumCRC32></Part>
            <Part><PartNumber>1</PartNumber><ETag>"bb"</ETag></Part></CompleteMultipartUpload>"#;
        assert_eq!(
            parse_complete(good.as_bytes()).unwrap(),
            vec![
                CompletedPart {
                    part_number: 2,
                    etag: "\"aa\"".into(),
                    checksum_crc32: Some("AAAAAA==".into())
                },
                CompletedPart { part_number: 1, etag: "\"bb\"".into(), checksum_crc32: None },
            ]
        );
        for bad in [
            "",
            "<CompleteMultipartUpload/>",
            "<CompleteMultipartUpload></CompleteMultipartUpload>",
            "<CompleteMultipartUpload><Part><ETag>x</ETag></Part></CompleteMultipartUpload>",
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part></CompleteMultipartUpload>",
            "<CompleteMultipartUpload><Part><PartNumber>one</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>",
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><PartNumber>2</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>",
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag><Size>3</Size></Part></CompleteMultipartUpload>",
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part>",
            "<Other><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></Other>",
            "<CompleteMultipartUpload>text<Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>",
        ] {
            let err = parse_complete(bad.as_bytes()).unwrap_err();
            assert_eq!((err.status, err.code), (400, "MalformedXML"), "{bad}");
        }
    }

    #[test]
    fn delete_requests_parse_or_are_malformed() {
        let good = r#"<?xml version="1.0"?><Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
            <Quiet>true</Quiet><Object><Key>a &amp; b&#x21;</Key><VersionId/></Object>
            <Object><Key><![CDATA[<c>]]></Key></Object></Delete>"#;
        assert_eq!(
            parse_delete(good.as_bytes()).unwrap(),
            DeleteRequest { keys: vec!["a & b!".into(), "<c>".into()], quiet: true }
        );
        for bad in [
            "",
            "<Delete>",
            "<Delete></Delete>",
            "<Delete><Object></Object></Delete>",
            "<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>",
            "<Delete><Object><Key>a</Key></Object></Delete><Delete/>",
            "<Delete><Object><Key>a</Key></Object></Wrong>",
            "<Delete><Object><Key>&bogus;</Key></Object></Delete>",
            "<Delete>text<Object><Key>a</Key></Object></Delete>",
            "<!DOCTYPE d [<!ENTITY x \"y\">]><Delete><Object><Key>&x;</Key></Object></Delete>",
            "<Delete><Quiet>maybe</Quiet><Object><Key>a</Key></Object></Delete>",
            "<Other><Object><Key>a</Key></Object></Other>",
        ] {
            let err = parse_delete(bad.as_bytes()).unwrap_err();
            assert_eq!((err.status, err.code), (400, "MalformedXML"), "{bad}");
        }
        assert!(parse_delete(&[0xff, 0xfe]).is_err());
        let many: String =
            (0..=DELETE_KEYS_MAX).map(|i| format!("<Object><Key>{i}</Key></Object>")).collect();
        assert!(parse_delete(format!("<Delete>{many}</Delete>").as_bytes()).is_err());
    }
}
