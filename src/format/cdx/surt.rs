//! SURT keys (Sort-friendly URI Reordering Transform), exactly as Python's `surt.surt(url)`
//! (surt 0.3.1, default options) computes them for cdxj-indexer: URL parsing as `handyurl`,
//! Google's and the Internet Archive's canonicalisation, session-id stripping, query
//! reordering. Kept by hand: no crate reproduces surt 0.3.1's quirks byte for byte. One
//! file over 600 lines on purpose: it follows surt's and handyurl's Python function by function,
//! so it can be read beside them.

use super::*;


/// SURT form of a URL exactly as Python `surt.surt(url)` (surt 0.3.1, default options) returns it.
///
/// Where Python's `surt.surt` raises (e.g. a port that is not a number or above 65535, a URL
/// that is only whitespace), this returns `url` unchanged, which is what cdxj-indexer's
/// `get_url_key` falls back to.
pub fn surt(url: &str) -> String {
    surt_or_url(url)
}

pub(super) fn surt_or_url(url: &str) -> String {
    match surt_bytes(url.as_bytes()) {
        // The result is ASCII (everything else is %-escaped) except for `filedesc` URLs.
        Some(b) => String::from_utf8(b).unwrap_or_else(|_| url.to_string()),
        None => url.to_string(),
    }
}

pub(super) struct HandyUrl {
    scheme: Vec<u8>,
    host: Option<Vec<u8>>,
    port: Option<u32>,
    path: Option<Vec<u8>>,
    query: Option<Vec<u8>>,
}

pub(super) fn surt_bytes(url: &[u8]) -> Option<Vec<u8>> {
    if url.is_empty() {
        return Some(b"-".to_vec());
    }
    if url.starts_with(b"filedesc") {
        return Some(url.to_vec());
    }
    let mut h = handyurl_parse(url)?;
    google_canonicalize(&mut h);
    ia_canonicalize(&mut h);

    // geturl_bytes(surt=True, with_scheme=False)
    let host = h.host.as_ref().filter(|x| !x.is_empty());
    let mut s = Vec::new();
    match host {
        None => {
            s.extend_from_slice(&h.scheme);
            s.push(b':');
        }
        Some(host) => {
            // hostToSURT
            let parts: Vec<&[u8]> = host.split(|&b| b == b'.').rev().collect();
            s.extend_from_slice(&parts.join(&b","[..]));
            if let Some(p) = h.port {
                s.extend_from_slice(format!(":{p}").as_bytes());
            }
            s.push(b')');
        }
    }
    match &h.path {
        Some(p) if !p.is_empty() => s.extend_from_slice(p),
        _ => {
            if h.query.is_some() {
                s.push(b'/');
            }
        }
    }
    if let Some(q) = &h.query {
        s.push(b'?');
        s.extend_from_slice(q);
    }
    Some(s)
}

pub(super) fn is_ascii_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// handyurl.parse; None where Python raises.
pub(super) fn handyurl_parse(url: &[u8]) -> Option<HandyUrl> {
    // bytes.strip(), then remove [\n\r\t]
    let start = url
        .iter()
        .position(|&b| !is_ascii_ws(b))
        .unwrap_or(url.len());
    let end = url
        .iter()
        .rposition(|&b| !is_ascii_ws(b))
        .map_or(start, |p| p + 1);
    let mut u: Vec<u8> = url[start..end]
        .iter()
        .copied()
        .filter(|b| !matches!(b, b'\n' | b'\r' | b'\t'))
        .collect();
    if u.is_empty() {
        return None; // scheme None -> AttributeError
    }
    // addDefaultSchemeIfNeeded
    if scheme_len(&u).is_none() {
        let mut v = b"http://".to_vec();
        v.extend_from_slice(&u);
        u = v;
    }
    // _RE_MULTIPLE_PROTOCOLS: ^(https?://)+ -> last repetition
    {
        let mut pos = 0;
        let mut last = None;
        loop {
            let r = &u[pos..];
            let n = if r.starts_with(b"http://") {
                7
            } else if r.starts_with(b"https://") {
                8
            } else {
                break;
            };
            last = Some((pos, n));
            pos += n;
        }
        if let Some((lp, n)) = last {
            let mut v = u[lp..lp + n].to_vec();
            v.extend_from_slice(&u[pos..]);
            u = v;
        }
    }
    // RFC2396REGEX split
    let (scheme, rest) = match scheme_len(&u) {
        Some(n) => (u[..n].to_vec(), &u[n + 1..]),
        None => (Vec::new(), &u[..]),
    };
    let (before_frag, _frag) = match rest.iter().position(|&b| b == b'#') {
        Some(p) => (&rest[..p], Some(&rest[p + 1..])),
        None => (rest, None),
    };
    let (mut netloc, after_auth): (&[u8], &[u8]) = if before_frag.starts_with(b"//") {
        let r = &before_frag[2..];
        let e = r
            .iter()
            .position(|&b| b == b'/' || b == b'?')
            .unwrap_or(r.len());
        (&r[..e], &r[e..])
    } else {
        (b"", before_frag)
    };
    let (path, query) = match after_auth.iter().position(|&b| b == b'?') {
        Some(p) => (&after_auth[..p], &after_auth[p + 1..]),
        None => (after_auth, &b""[..]),
    };
    if scheme.is_empty() {
        return None;
    }
    let query = if query.is_empty() {
        None
    } else {
        Some(query.to_vec())
    };
    while netloc.ends_with(b":") {
        netloc = &netloc[..netloc.len() - 1];
    }
    // urllib _hostinfo
    let hostinfo = match netloc.iter().rposition(|&b| b == b'@') {
        Some(p) => &netloc[p + 1..],
        None => netloc,
    };
    let (hostname, port): (&[u8], &[u8]) = match hostinfo.iter().position(|&b| b == b'[') {
        Some(p) => {
            let br = &hostinfo[p + 1..];
            match br.iter().position(|&b| b == b']') {
                Some(q) => {
                    let after = &br[q + 1..];
                    let port = match after.iter().position(|&b| b == b':') {
                        Some(c) => &after[c + 1..],
                        None => &b""[..],
                    };
                    (&br[..q], port)
                }
                None => (br, &b""[..]),
            }
        }
        None => match hostinfo.iter().position(|&b| b == b':') {
            Some(c) => (&hostinfo[..c], &hostinfo[c + 1..]),
            None => (hostinfo, &b""[..]),
        },
    };
    let port = if port.is_empty() {
        None
    } else {
        if !port.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let t: Vec<u8> = port.iter().copied().skip_while(|&b| b == b'0').collect();
        if t.len() > 5 {
            return None;
        }
        let n: u32 = if t.is_empty() {
            0
        } else {
            std::str::from_utf8(&t).ok()?.parse().ok()?
        };
        if n > 65535 {
            return None;
        }
        if n == 0 {
            None
        } else {
            Some(n)
        }
    };
    let mut host = if hostname.is_empty() {
        None
    } else {
        // lowercased except an IPv6 zone after '%'
        let mut h = hostname.to_vec();
        let z = h.iter().position(|&b| b == b'%').unwrap_or(h.len());
        h[..z].make_ascii_lowercase();
        Some(h)
    };
    let mut path = if path.is_empty() {
        None
    } else {
        Some(path.to_vec())
    };
    if scheme.starts_with(b"http") && host.is_none() {
        if let Some(p) = &path {
            let s = &p[p.iter().position(|&b| b != b'/').unwrap_or(p.len())..];
            let (h, rest) = match s.iter().position(|&b| b == b'/') {
                Some(i) => (&s[..i], &s[i + 1..]),
                None => (s, &b""[..]),
            };
            let mut np = b"/".to_vec();
            np.extend_from_slice(rest);
            host = Some(h.to_vec());
            path = Some(np);
        }
    }
    Some(HandyUrl {
        scheme,
        host,
        port,
        path,
        query,
    })
}

/// Length of a leading `[a-zA-Z][a-zA-Z0-9+.-]*` followed by ':'.
pub(super) fn scheme_len(u: &[u8]) -> Option<usize> {
    if !u.first()?.is_ascii_alphabetic() {
        return None;
    }
    let n = u
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'+' || b == b'-' || b == b'.'))?;
    (u[n] == b':').then_some(n)
}

pub(super) fn unquote_to_bytes(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%'
            && i + 2 < s.len()
            && s[i + 1].is_ascii_hexdigit()
            && s[i + 2].is_ascii_hexdigit()
        {
            let hv = |b: u8| (b as char).to_digit(16).unwrap() as u8;
            out.push(hv(s[i + 1]) * 16 + hv(s[i + 2]));
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

pub(super) fn unescape_repeatedly(s: &[u8]) -> Vec<u8> {
    let mut cur = s.to_vec();
    loop {
        let un = unquote_to_bytes(&cur);
        if un == cur {
            return cur;
        }
        cur = un;
    }
}

/// quote_from_bytes with safe = `!"$&'()*+,-./:;<=>?@[\]^_`{|}~` (plus alnum and `_.-~`).
pub(super) fn escape_once(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for &b in s {
        if b > 0x20 && b < 0x7f && b != b'#' && b != b'%' {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{:02X}", b).as_bytes());
        }
    }
    out
}

pub(super) fn google_canonicalize(u: &mut HandyUrl) {
    if let Some(q) = u.query.take() {
        u.query = Some(escape_once(&unescape_repeatedly(&q)));
    }
    if let Some(h) = u.host.take().filter(|h| !h.is_empty()) {
        let mut host = unescape_repeatedly(&h);
        if !host.is_ascii() {
            let decoded = decode_utf8_ignore(&host);
            if let Some(enc) = idna_encode(&decoded) {
                host = enc;
            }
        }
        // replace(b'..', b'.') (non-overlapping, left to right), strip(b'.')
        let mut r = Vec::with_capacity(host.len());
        let mut i = 0;
        while i < host.len() {
            if host[i] == b'.' && host.get(i + 1) == Some(&b'.') {
                r.push(b'.');
                i += 2;
            } else {
                r.push(host[i]);
                i += 1;
            }
        }
        let s = r.iter().position(|&b| b != b'.').unwrap_or(r.len());
        let e = r.iter().rposition(|&b| b != b'.').map_or(s, |p| p + 1);
        let host = r[s..e].to_vec();
        u.host = Some(match attempt_ip_formats(&host) {
            Some(ip) => ip,
            None => escape_once(&host.to_ascii_lowercase()),
        });
    }
    let path = u.path.as_deref().map(unescape_repeatedly);
    let has_host = u.host.as_ref().is_some_and(|h| !h.is_empty());
    let path = if has_host {
        Some(normalize_path(path.as_deref()))
    } else {
        path
    };
    u.path = path.map(|p| escape_once(&p));
}

pub(super) fn decode_utf8_ignore(b: &[u8]) -> String {
    let mut out = String::new();
    for chunk in b.utf8_chunks() {
        out.push_str(chunk.valid());
    }
    out
}

pub(super) fn normalize_path(path: Option<&[u8]>) -> Vec<u8> {
    let path = match path {
        Some(p) if !p.is_empty() => p,
        _ => return b"/".to_vec(),
    };
    let mut kept: Vec<&[u8]> = Vec::new();
    for p in path.split(|&b| b == b'/').skip(1) {
        if p == b"." {
            continue;
        } else if p == b".." {
            if kept.pop().is_none() {
                kept.push(p);
            }
        } else {
            kept.push(p);
        }
    }
    let mut out = b"/".to_vec();
    if let Some((last, init)) = kept.split_last() {
        for p in init {
            if !p.is_empty() {
                out.extend_from_slice(p);
                out.push(b'/');
            }
        }
        out.extend_from_slice(last);
    }
    out
}

/// attemptIPFormats: all digits -> masked 32-bit address; dotted decimal/octal forms that
/// glibc's inet_aton accepts (what gethostbyname_ex answers for them) -> dotted quad.
pub(super) fn attempt_ip_formats(host: &[u8]) -> Option<Vec<u8>> {
    if !host.is_empty() && host.iter().all(u8::is_ascii_digit) {
        let mut n: u32 = 0;
        for &b in host {
            n = n.wrapping_mul(10).wrapping_add((b - b'0') as u32);
        }
        return Some(dotted(n));
    }
    let parts: Vec<&[u8]> = host.split(|&b| b == b'.').collect();
    if parts.len() > 4
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.iter().all(u8::is_ascii_digit))
    {
        return None;
    }
    let decimal = parts[0][0] != b'0';
    let octal = parts[0][0] == b'0' && parts.iter().all(|p| p.iter().all(|&b| b <= b'7'));
    if !decimal && !octal {
        return None;
    }
    // inet_aton: each part strtoul base 0
    let mut vals = Vec::new();
    for p in &parts {
        let (digits, radix) = if p.len() > 1 && p[0] == b'0' {
            (&p[1..], 8)
        } else {
            (&p[..], 10)
        };
        let mut v: u64 = 0;
        for &b in digits {
            let d = (b - b'0') as u64;
            if d >= radix {
                return None;
            }
            v = v * radix + d;
            if v > u32::MAX as u64 {
                return None;
            }
        }
        vals.push(v as u32);
    }
    let n = vals.len();
    let (init, last) = (&vals[..n - 1], vals[n - 1]);
    if init.iter().any(|&v| v > 255) {
        return None;
    }
    let max_last: u64 = [u32::MAX as u64, 0xff_ffff, 0xffff, 0xff][n - 1];
    if last as u64 > max_last {
        return None;
    }
    let mut addr: u32 = last;
    for (i, &v) in init.iter().enumerate() {
        addr |= v << (24 - 8 * i);
    }
    Some(dotted(addr))
}

pub(super) fn dotted(n: u32) -> Vec<u8> {
    let b = n.to_be_bytes();
    format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3]).into_bytes()
}

pub(super) fn ia_canonicalize(u: &mut HandyUrl) {
    if let Some(h) = u.host.as_mut() {
        h.make_ascii_lowercase();
        if u.scheme != b"dns" {
            // www\d*\.
            if h.starts_with(b"www") {
                let d = h[3..].iter().take_while(|b| b.is_ascii_digit()).count();
                if h.get(3 + d) == Some(&b'.') {
                    h.drain(..4 + d);
                }
            }
        }
    }
    let default_port = match u.scheme.to_ascii_lowercase().as_slice() {
        b"http" => Some(80),
        b"https" => Some(443),
        _ => None, // 0, and port 0 is already None
    };
    if u.port.is_some() && u.port == default_port {
        u.port = None;
    }
    if let Some(p) = u.path.as_mut().filter(|p| !p.is_empty()) {
        p.make_ascii_lowercase();
        let mut np = strip_path_session_id(p);
        if np.len() > 1 && np.ends_with(b"/") {
            np.pop();
        }
        *p = np;
    }
    if let Some(q) = u.query.take() {
        let mut q = strip_query_session_id(&q);
        q.make_ascii_lowercase();
        let q = alpha_reorder_query(&q);
        u.query = if q.is_empty() { None } else { Some(q) };
    }
}

/// `[^?]+\.aspx.*$` (case-insensitive) matches all of `rem`.
pub(super) fn aspx_tail(rem: &[u8]) -> bool {
    let lim = rem.iter().position(|&b| b == b'?').unwrap_or(rem.len());
    (1..=lim).any(|p| rem.len() >= p + 5 && rem[p..p + 5].eq_ignore_ascii_case(b".aspx"))
}

pub(super) fn strip_path_session_id(path: &[u8]) -> Vec<u8> {
    let mut path = path.to_vec();
    // pattern 1: ^(.*/)(\((?:[a-z]\([0-9a-z]{24}\))+\)/)([^\?]+\.aspx.*)$
    // pattern 2: ^(.*/)(\([0-9a-z]{24}\)/)([^\?]+\.aspx.*)$
    for pat in 0..2 {
        let m = (0..path.len())
            .rev()
            .filter(|&i| path[i] == b'/')
            .find_map(|i| {
                let r = &path[i + 1..];
                let g2 = if pat == 0 {
                    sid_group_multi(r)
                } else {
                    sid_group_single(r)
                }?;
                aspx_tail(&r[g2..]).then_some((i + 1, i + 1 + g2))
            });
        if let Some((a, b)) = m {
            let mut np = path[..a].to_vec();
            np.extend_from_slice(&path[b..]);
            path = np;
        }
    }
    path
}

pub(super) fn alnum24(r: &[u8]) -> bool {
    r.len() >= 24 && r[..24].iter().all(u8::is_ascii_alphanumeric)
}

pub(super) fn sid_group_single(r: &[u8]) -> Option<usize> {
    (r.first() == Some(&b'(')
        && alnum24(&r[1..])
        && r.get(25) == Some(&b')')
        && r.get(26) == Some(&b'/'))
    .then_some(27)
}

pub(super) fn sid_group_multi(r: &[u8]) -> Option<usize> {
    if r.first() != Some(&b'(') {
        return None;
    }
    let mut i = 1;
    let mut units = 0;
    while r.get(i).is_some_and(u8::is_ascii_alphabetic)
        && r.get(i + 1) == Some(&b'(')
        && alnum24(&r[i + 2..])
        && r.get(i + 26) == Some(&b')')
    {
        i += 27;
        units += 1;
    }
    (units > 0 && r.get(i) == Some(&b')') && r.get(i + 1) == Some(&b'/')).then_some(i + 2)
}

pub(super) fn strip_query_session_id(q: &[u8]) -> Vec<u8> {
    let mut q = q.to_vec();
    type Matcher = fn(&[u8]) -> Option<usize>;
    fn fixed(r: &[u8], lit: &[u8], n: usize, cls: fn(&u8) -> bool) -> Option<usize> {
        (r.len() >= lit.len() + n
            && r[..lit.len()].eq_ignore_ascii_case(lit)
            && r[lit.len()..lit.len() + n].iter().all(cls))
        .then_some(lit.len() + n)
    }
    let pats: [Matcher; 5] = [
        |r| fixed(r, b"jsessionid=", 32, u8::is_ascii_alphanumeric),
        |r| fixed(r, b"phpsessid=", 32, u8::is_ascii_alphanumeric),
        |r| fixed(r, b"sid=", 32, u8::is_ascii_alphanumeric),
        |r| {
            let n = fixed(r, b"aspsessionid", 8, u8::is_ascii_alphabetic)?;
            Some(n + fixed(&r[n..], b"=", 24, u8::is_ascii_alphabetic)?)
        },
        |r| {
            if r.len() < 5 || !r[..5].eq_ignore_ascii_case(b"cfid=") {
                return None;
            }
            let v = r[5..]
                .iter()
                .position(|&b| b == b'&')
                .unwrap_or(r.len() - 5);
            let i = 5 + v;
            if v == 0 || r.len() < i + 9 || !r[i..i + 9].eq_ignore_ascii_case(b"&cftoken=") {
                return None;
            }
            let j = i + 9;
            let w = r[j..]
                .iter()
                .position(|&b| b == b'&')
                .unwrap_or(r.len() - j);
            (w > 0).then_some(j + w)
        },
    ];
    for pat in pats {
        // ^(.*)(?:PAT)(?:&(.*))?$ : greedy (.*) -> rightmost start that works; '.' excludes \n
        let m = (0..q.len()).rev().find_map(|s| {
            if q[..s].contains(&b'\n') {
                return None;
            }
            let n = pat(&q[s..])?;
            let rest = &q[s + n..];
            if rest.is_empty() {
                Some((s, None))
            } else if rest[0] == b'&' && !rest[1..].contains(&b'\n') {
                Some((s, Some(s + n + 1)))
            } else {
                None
            }
        });
        if let Some((s, g2)) = m {
            let mut nq = q[..s].to_vec();
            if let Some(g) = g2 {
                nq.extend_from_slice(&q[g..]);
            }
            q = nq;
        }
    }
    q
}

pub(super) fn alpha_reorder_query(q: &[u8]) -> Vec<u8> {
    if q.len() <= 1 {
        return q.to_vec();
    }
    let mut qas: Vec<(&[u8], Option<&[u8]>)> = q
        .split(|&b| b == b'&')
        .map(|a| match a.iter().position(|&b| b == b'=') {
            Some(p) => (&a[..p], Some(&a[p + 1..])),
            None => (a, None),
        })
        .collect();
    qas.sort();
    let mut out = Vec::with_capacity(q.len());
    for (i, (k, v)) in qas.iter().enumerate() {
        if i > 0 {
            out.push(b'&');
        }
        out.extend_from_slice(k);
        if let Some(v) = v {
            out.push(b'=');
            out.extend_from_slice(v);
        }
    }
    out
}
