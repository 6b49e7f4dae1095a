//! The text of a payload, as a search indexes it: an HTTP response's body (or a resource
//! record's block) of an HTML, XHTML or plain-text type, its transfer and content encodings
//! undone (chunked; gzip, deflate, br), decoded from its charset (the HTTP header's, a BOM,
//! an HTML `<meta>`'s, else chardetng's guess, as Firefox does), HTML reduced to its words:
//! scripts, styles and comments dropped, entities decoded, the title kept apart. Bounded:
//! at most `MAX_INPUT` bytes of body are decoded and `MAX_TEXT` bytes of text kept, so a
//! 100 MB page or a decompression bomb is indexed as far as that, never held whole.
//! With the feature `pdf`, a PDF (`application/pdf`) is a text too, its encodings undone
//! the same way (to at most `pdf::MAX_PDF` bytes) and its text extracted by `pdf`.

use std::io::Read;

/// The most bytes of a decoded body looked at.
pub const MAX_INPUT: usize = 8 << 20;
/// The most bytes of text kept of one payload (warc-indexer keeps 512 K characters).
pub const MAX_TEXT: usize = 512 << 10;

/// What a payload says, for the index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Text {
    pub title: String,
    pub body: String,
}

/// What kind of text a MIME type holds, if one the search reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Html,
    Plain,
    #[cfg(feature = "pdf")]
    Pdf,
}

/// The kind of `mime` (a Content-Type value, parameters and all).
pub fn kind_of(mime: &str) -> Option<Kind> {
    let m = mime.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match m.as_str() {
        "text/html" | "application/xhtml+xml" => Some(Kind::Html),
        "text/plain" => Some(Kind::Plain),
        #[cfg(feature = "pdf")]
        "application/pdf" | "application/x-pdf" => Some(Kind::Pdf),
        _ => None,
    }
}

/// An HTTP header's fields (names lowercased), after its status line.
pub fn http_fields(head: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(head)
        .split("\r\n")
        .skip(1)
        .filter_map(|l| l.split_once(':').map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string())))
        .collect()
}

/// The text of `body` of type `mime` (its Content-Type), sent with `transfer` and
/// `content` encodings (the header values, empty if none). None if it is not a kind the
/// search reads, or its encoding cannot be undone (a broken gzip or brotli body: as much as
/// decodes is used).
pub fn text_of(mime: &str, transfer: &str, content: &str, body: &[u8]) -> Option<Text> {
    text_from("", mime, transfer, content, body)
}

/// `text_of`, for the payload `from` names (its URL and record): the log line of a PDF
/// skipped (`pdf::text_or_skip`) says which it was.
pub fn text_from(from: &str, mime: &str, transfer: &str, content: &str, body: &[u8]) -> Option<Text> {
    let kind = kind_of(mime)?;
    // A PDF is read whole or not at all (its cross-reference table is at its end): one byte
    // past its bound says it is too large.
    #[cfg(feature = "pdf")]
    let limit = if kind == Kind::Pdf { super::pdf::MAX_PDF + 1 } else { MAX_INPUT };
    #[cfg(not(feature = "pdf"))]
    let (limit, _) = (MAX_INPUT, from);
    // A body stored already decoded (some crawlers write it so, headers unchanged) is
    // read as it is: as warcio does, what does not decode is taken raw.
    let dechunked;
    let body = if transfer.to_ascii_lowercase().contains("chunked") {
        dechunked = dechunk(body, limit);
        if dechunked.is_empty() { body } else { &dechunked[..] }
    } else {
        body
    };
    let mut decoded = decode_content(content, body, limit)?;
    if decoded.is_empty() && !body.is_empty() {
        decoded = body[..body.len().min(limit)].to_vec();
    }
    let html = match kind {
        Kind::Html => true,
        Kind::Plain => false,
        #[cfg(feature = "pdf")]
        Kind::Pdf => return super::pdf::text_or_skip(from, &decoded),
    };
    let charset = mime.split(';').skip(1).find_map(|p| {
        let (name, value) = p.split_once('=')?;
        name.trim().eq_ignore_ascii_case("charset").then(|| value.trim().trim_matches('"').to_string())
    });
    let text = decode_charset(&decoded, charset.as_deref(), html);
    Some(if html { html_text(&text) } else { Text { title: String::new(), body: squeeze(&text) } })
}

/// A chunked body's data, as far as its chunks are whole (at most `limit` bytes).
fn dechunk(mut b: &[u8], limit: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&b[..eol]).ok().and_then(|l| usize::from_str_radix(l.split(';').next().unwrap_or("").trim(), 16).ok());
        let Some(size) = size.filter(|&s| s > 0) else { break };
        let start = eol + 2;
        let end = start.saturating_add(size).min(b.len());
        out.extend_from_slice(&b[start..end]);
        if out.len() >= limit || end + 2 > b.len() {
            break;
        }
        b = &b[end + 2..];
    }
    out.truncate(limit);
    out
}

/// `body` with its Content-Encoding undone (at most `limit` bytes); None for an encoding
/// not known here.
fn decode_content(content: &str, body: &[u8], limit: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (cut, limit) = (limit, limit as u64);
    // A body that stops decoding part way gives what it decoded (the error is dropped).
    match content.trim().to_ascii_lowercase().as_str() {
        "" | "identity" => out.extend_from_slice(&body[..body.len().min(cut)]),
        "gzip" | "x-gzip" => {
            let _ = flate2::read::MultiGzDecoder::new(body).take(limit).read_to_end(&mut out);
        }
        "deflate" => {
            // Servers send zlib streams, some raw deflate.
            if flate2::read::ZlibDecoder::new(body).take(limit).read_to_end(&mut out).is_err() && out.is_empty() {
                let _ = flate2::read::DeflateDecoder::new(body).take(limit).read_to_end(&mut out);
            }
        }
        "br" => {
            let _ = brotli_decompressor::Decompressor::new(body, 4096).take(limit).read_to_end(&mut out);
        }
        _ => return None,
    }
    Some(out)
}

/// `bytes` as text: from `charset` if it names one, else a BOM's, else (HTML) a `<meta>`
/// charset in its first 1024 bytes, else chardetng's guess. Invalid bytes are replaced.
fn decode_charset(bytes: &[u8], charset: Option<&str>, html: bool) -> String {
    let named = charset.and_then(|c| encoding_rs::Encoding::for_label(c.as_bytes()));
    let enc = named.or_else(|| encoding_rs::Encoding::for_bom(bytes).map(|(e, _)| e)).or_else(|| if html { meta_charset(bytes) } else { None }).unwrap_or_else(|| {
        let mut d = chardetng::EncodingDetector::new(chardetng::Iso2022JpDetection::Deny);
        d.feed(&bytes[..bytes.len().min(64 << 10)], true);
        d.guess(None, chardetng::Utf8Detection::Allow)
    });
    enc.decode(bytes).0.into_owned()
}

/// The charset an HTML `<meta charset=...>` or `<meta http-equiv ... content="...;
/// charset=...">` in the first 1024 bytes names.
fn meta_charset(bytes: &[u8]) -> Option<&'static encoding_rs::Encoding> {
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(1024)]).to_ascii_lowercase();
    let at = head.find("charset=")? + "charset=".len();
    let v: String = head[at..].trim_start_matches(['"', '\'']).chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
    encoding_rs::Encoding::for_label(v.as_bytes())
}

/// Elements whose content is no text of the page.
const SKIPPED: [&str; 5] = ["script", "style", "noscript", "template", "svg"];
/// Elements inside a word's run: no space where they start or end ("wor<b>d</b>" is "word").
const INLINE: [&str; 19] = ["a", "abbr", "b", "bdi", "bdo", "cite", "code", "em", "font", "i", "kbd", "mark", "q", "s", "small", "span", "strong", "sub", "sup"];

/// The words of an HTML page, its title apart.
pub fn html_text(html: &str) -> Text {
    let mut body = String::with_capacity(html.len().min(MAX_TEXT) / 2);
    let mut title = String::new();
    let mut in_title = false;
    let mut rest = html;
    while !rest.is_empty() && body.len() < MAX_TEXT {
        let Some(lt) = rest.find('<') else {
            push_text(if in_title { &mut title } else { &mut body }, rest);
            break;
        };
        push_text(if in_title { &mut title } else { &mut body }, &rest[..lt]);
        rest = &rest[lt..];
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = after.find("-->").map_or("", |e| &after[e + 3..]);
            continue;
        }
        let Some(gt) = rest.find('>') else { break };
        let tag = &rest[1..gt];
        rest = &rest[gt + 1..];
        let closing = tag.starts_with('/');
        let name: String = tag.trim_start_matches('/').chars().take_while(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase();
        if name == "title" {
            in_title = !closing;
            continue;
        }
        if !closing && SKIPPED.contains(&name.as_str()) {
            // Its content, to its end tag, is no text.
            let end = format!("</{name}");
            let lower_at = find_ascii_ci(rest, &end);
            rest = match lower_at {
                Some(i) => rest[i..].find('>').map_or("", |g| &rest[i + g + 1..]),
                None => "",
            };
            continue;
        }
        if !INLINE.contains(&name.as_str()) {
            body.push(' ');
        }
    }
    Text { title: squeeze(&title), body: squeeze(&body) }
}

/// Where `needle` (ASCII, lowercase) is in `hay`, ignoring ASCII case.
fn find_ascii_ci(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    (0..h.len().saturating_sub(n.len() - 1)).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// Appends text with its character references decoded.
fn push_text(out: &mut String, s: &str) {
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let end = rest[1..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '#')).map(|e| e + 1);
        let (name, used) = match end {
            Some(e) if rest[e..].starts_with(';') => (&rest[1..e], e + 1),
            Some(e) => (&rest[1..e], e),
            None => (&rest[1..], rest.len()),
        };
        match entity(name) {
            Some(c) => {
                out.push(c);
                rest = &rest[used..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
}

/// The character an entity names (numeric, or one of the common names).
fn entity(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let n = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return char::from_u32(n).filter(|c| *c != '\0').or(Some('\u{FFFD}'));
    }
    Some(match name {
        "amp" | "AMP" => '&',
        "lt" | "LT" => '<',
        "gt" | "GT" => '>',
        "quot" | "QUOT" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        "copy" => '©',
        "reg" => '®',
        "trade" => '™',
        "hellip" => '…',
        "mdash" => '—',
        "ndash" => '–',
        "lsquo" => '‘',
        "rsquo" => '’',
        "ldquo" => '“',
        "rdquo" => '”',
        "laquo" => '«',
        "raquo" => '»',
        "middot" => '·',
        "bull" => '•',
        "deg" => '°',
        "euro" => '€',
        "pound" => '£',
        "sect" => '§',
        "para" => '¶',
        "times" => '×',
        "eacute" => 'é',
        "egrave" => 'è',
        "agrave" => 'à',
        "aacute" => 'á',
        "ccedil" => 'ç',
        "ouml" => 'ö',
        "uuml" => 'ü',
        "auml" => 'ä',
        "szlig" => 'ß',
        _ => return None,
    })
}

/// Whitespace runs as one space, trimmed, at most `MAX_TEXT` bytes (at a character's end).
pub(crate) fn squeeze(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_TEXT));
    for w in s.split_whitespace() {
        if out.len() + w.len() + 1 > MAX_TEXT {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_gives_its_words_and_title() {
        let t = html_text("<html><head><title>A &amp; B</title><style>p{color:red}</style><script>var x = '<p>';</script></head><body><p>Hello,&nbsp;wor<b>ld</b>!</p><!-- a <p>comment</p> --><div>caf&eacute; &#233;t&#xE9; &unknown; 5 &lt; 6</div></body></html>");
        assert_eq!(t.title, "A & B");
        assert_eq!(t.body, "Hello, world! café été &unknown; 5 < 6");
    }

    #[test]
    fn scripts_end_at_their_end_tag_whatever_its_case() {
        let t = html_text("<p>a</p><SCRIPT type=x>if (a < b) { x = '</p>' }</Script><p>b</p><noscript>c</noscript>");
        assert_eq!(t.body, "a b");
    }

    #[test]
    fn charsets_from_the_header_a_meta_or_a_guess() {
        let latin1 = b"<html><body>caf\xe9</body></html>";
        assert_eq!(text_of("text/html; charset=iso-8859-1", "", "", latin1).unwrap().body, "café");
        let meta = b"<html><head><meta charset=\"windows-1252\"></head><body>caf\xe9 \x93q\x94</body></html>";
        assert_eq!(text_of("text/html", "", "", meta).unwrap().body, "café “q”");
        // A page that claims UTF-8 and is not: replaced characters, no failure.
        assert_eq!(text_of("text/html; charset=utf-8", "", "", latin1).unwrap().body, "caf\u{FFFD}");
        assert_eq!(text_of("text/plain", "", "", "plain   text\n here".as_bytes()).unwrap().body, "plain text here");
        assert!(text_of("image/png", "", "", b"x").is_none());
    }

    #[test]
    fn encodings_are_undone_and_broken_ones_give_what_decodes() {
        use std::io::Write;
        let page = b"<p>compressed words</p>";
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(page).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(text_of("text/html", "", "gzip", &gz).unwrap().body, "compressed words");
        // Chunked, then gzip.
        let chunked = [format!("{:x}\r\n", 5).as_bytes(), &gz[..5], b"\r\n", format!("{:x}\r\n", gz.len() - 5).as_bytes(), &gz[5..], b"\r\n0\r\n\r\n"].concat();
        assert_eq!(text_of("text/html", "chunked", "gzip", &chunked).unwrap().body, "compressed words");
        // Cut short: no panic, nothing or a part.
        let cut = text_of("text/html", "", "gzip", &gz[..gz.len() / 2]).unwrap();
        assert!(cut.body.len() <= "compressed words".len());
        assert!(text_of("text/html", "", "br", b"not brotli at all").is_some());
        assert!(text_of("text/html", "", "zstd-unknown", page).is_none());
    }

    #[test]
    fn a_huge_page_is_cut_at_the_bound() {
        let page = "<p>word </p>".repeat(1 << 20);
        let t = html_text(&page);
        assert!(t.body.len() <= MAX_TEXT && t.body.len() > MAX_TEXT / 2, "{}", t.body.len());
    }
}
