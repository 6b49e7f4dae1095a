//! A window of a file made ready to store: its gzip members found and inflated (`source`),
//! its text segmented into WARC/ARC records, and every member's deflate parse recorded and
//! proven to replay to the member's exact bytes in the form it will be stored in. None of it
//! needs the store, so it runs ahead of storing, on threads of its own (split on one, proven
//! from another: `ingest::windows_ahead`); an importer splits a file's first window earlier
//! still, while the file before is stored (`Presplit`).

use crate::store::ingest::source::{plain_room, split_window_in, SplitWindow, Spares, MAX_MEMBER_PLAIN, WINDOWS};
use crate::format::deflate;
use crate::format::gzip::{self, Member, Region};
use crate::format::warc::{self, SpanKind};
use crate::sync::{each_of, Workers};
use crate::store::ingest::tails::{KnownTail, KnownTails};
use std::sync::Arc;

/// A member's parse is shared from this many plain bytes into its payload on: by then the
/// writer's parse has (nearly always) stopped depending on the headers before the payload,
/// so copies of one payload store their parse tail once (see `format::deflate`).
const PARSE_SHARED_FROM: u64 = 4 << 10;
/// The most text whose matches a member keeps in its recipe (about 10-20 KiB of parse).
const PARSE_INLINE_TEXT: u64 = 64 << 10;

/// Text after a payload, to its member's end, that a tail's identity carries (a record's
/// closing CRLFs): a member that goes on past it (into other records) names no tail.
const MAX_AFTER_PAYLOAD: u64 = 64;

/// Where a member's parse is cut, and the payload whose copies may share its tail: its
/// plain range in the window's text, when it starts inside the member and ends at most
/// MAX_AFTER_PAYLOAD before the member does.
#[derive(Clone, Copy, Debug)]
pub(in crate::store) struct Place {
    pub cut: deflate::Cut,
    pub payload: Option<(u64, u64)>,
}

/// How a proven member's parse tail is stored.
pub(in crate::store) enum TailFrom {
    /// Encoded here (in `stored.tail`, if the parse has one), with what its bytes follow
    /// from when copies of its payload may name it (`tails`).
    Encoded(Option<Box<[u8]>>),
    /// A tail stored before, named by this member's parse (which then has no `stored.tail`):
    /// its identity is this member's, byte for byte; whether its payload is, the ingest
    /// checks against the member's own chunks.
    Named(Arc<KnownTail>),
}

/// A member whose parse is proven: the parse in its stored form, the CRC-32 of the member's
/// compressed bytes (what a rebuild is checked against), its trailer where the text does
/// not give it (a lying CRC or ISIZE, which zlib's inflate took), and how its tail is stored.
pub(in crate::store) struct Proof {
    pub stored: deflate::Stored,
    pub crc: u32,
    pub trailer: Option<[u8; 8]>,
    pub tail: TailFrom,
    pub place: Place,
}

/// A member's parse, recorded while inflating it (by `split_window_in`, or here when that left it
/// to zlib) and proven to replay to its exact bytes in the form it is stored in; None
/// if it does not (the member is then kept raw). With `known`, a tail stored before for the
/// same identity is named rather than encoded again.
pub(in crate::store) fn prove_member(data: &[u8], window_plain: &[u8], m: &Member, place: Place, longest: bool, known: Option<&KnownTails>) -> Option<Proof> {
    if !m.plain_kept || m.plain_len > MAX_MEMBER_PLAIN {
        return None;
    }
    let d0 = m.start as usize + m.header_len;
    let stream = data.get(d0..d0 + m.deflate_len as usize)?;
    let p0 = m.plain_start as usize;
    let plain = window_plain.get(p0..p0 + m.plain_len as usize)?;
    // The inflater recorded most members' parses already.
    let recorded;
    let parse = match &m.parse {
        Some(p) => p,
        None => {
            recorded = deflate::record(stream, plain).ok()?;
            &recorded
        }
    };
    let crc = crc32fast::hash(data.get(m.start as usize..(m.start + m.comp_len) as usize)?);
    // warcfs's inflater took its text only with a trailer that matches it; zlib's may not.
    let trailer = (m.parse.is_none() && gzip::trailer_for(plain) != m.trailer).then_some(m.trailer);
    let proven = |back: &deflate::Parse| {
        let mut again = Vec::with_capacity(stream.len());
        deflate::replay(back, plain, &mut again).is_ok() && again == stream
    };
    // An optimal parser's choices weigh its whole block, headers included, so its parse of a
    // payload differs from one copy to the next (zopfli's and 7-Zip's in 2 % of the tokens
    // after the cut): a tail would share nothing and cost a chunk of its own, so its matches
    // stay in the recipe as far as any member's may. (A match with no candidate within the
    // longest form's walk leaves the ranked form, cut where every other member is.)
    let optimal = longest && deflate::is_optimal(parse, plain);
    let identity = match (optimal, place.payload, known) {
        (false, Some((_, end)), Some(_)) => deflate::tail_identity(parse, plain, place.cut).map(|mut id| {
            id.extend_from_slice(&window_plain[end as usize..p0 + plain.len()]);
            // Payloads that differ only in literals (a date, a token of the same length)
            // share every match: told apart here, they are not proven again in the ingest.
            id.extend_from_slice(&crc32fast::hash(&plain[place.cut.base..]).to_le_bytes());
            id.into_boxed_slice()
        }),
        _ => None,
    };
    if let Some(k) = identity.as_deref().and_then(|id| known?.find(id)) {
        // The proof of the prefix as stored, and of the member's matches replayed: the tail
        // named holds these matches from the cut on (see `tails`).
        if let Ok(Some((stored, back))) = deflate::encode_prefix_read_back(parse, plain, place.cut) {
            if proven(&back) {
                return Some(Proof { stored, crc, trailer, tail: TailFrom::Named(k), place });
            }
        }
    }
    // The proof: the stored form, read back and replayed, gives the member's exact bytes.
    let first_cut = if optimal { deflate::Cut::at(PARSE_INLINE_TEXT as usize) } else { place.cut };
    // (Passing `optimal` rather than `longest` spares zlib's members a second test.)
    let (stored, back) = deflate::encode_read_back_at(parse, plain, Some(first_cut), optimal).ok()?;
    let (stored, back) = if optimal && !stored.longest { deflate::encode_read_back_at(parse, plain, Some(place.cut), false).ok()? } else { (stored, back) };
    let identity = identity.filter(|_| stored.tail.is_some() && !stored.longest);
    proven(&back).then_some(Proof { stored, crc, trailer, tail: TailFrom::Encoded(identity), place })
}

/// The parse forms a store's format allows a writer: the longest form (7 and later) and the
/// predicted form (10), whose cut falls where a match ends.
#[derive(Clone, Copy, Debug)]
pub(in crate::store) struct Forms {
    pub longest: bool,
    pub predicted: bool,
    /// A member that holds no record's header (a WACZ's CDXJ index, any other gzip text)
    /// takes the predicted form where zlib wrote it, whatever the store is made for: such
    /// a member is read rarely and whole, and its ranked parse is most of its size (the
    /// CDXJ index of crawl-1's WACZ: 0.39 MB of ranked parse for 0.69 MB of gzip). Format 10
    /// and later, which every warcfs that reads them can decode (a single-writer store: 10,
    /// 11, 12).
    pub predicted_rare: bool,
}

impl Forms {
    pub(in crate::store) fn of(version: u32) -> Forms {
        let predicted = crate::store::predicted_parses(version);
        Forms { longest: crate::store::longest_parses(version), predicted, predicted_rare: predicted || version == crate::store::PACKED_V11 }
    }

    /// The forms ingest writes in a store of `config`: its format's, but a store that
    /// rewrites them at gc (`Config::compact_at_gc`) takes the fast forms of version 11 first.
    pub(in crate::store) fn at_ingest(config: &crate::store::Config) -> Forms {
        Forms::of(if config.compact_at_gc { crate::store::PACKED_V11 } else { config.version })
    }
}

/// Each member's proof, in member order; None for a member kept raw.
pub(in crate::store) type Proofs = Vec<Option<Proof>>;

/// A window made ready: split (`sw`'s regions tile the first `sw.consumed` bytes of the
/// window), segmented, its members' parses proven.
pub(in crate::store) struct Ready {
    pub sw: SplitWindow,
    pub seg: warc::Segmentation,
    pub parses: Proofs,
}

impl Ready {
    /// Segments and proves `sw`, the split of the window `data` (the file's first if
    /// `first`); `arc_mode` carries the segmenter's state from one window to the next. A
    /// window of which nothing could be used is left as it is (the ingest reads it again,
    /// larger). With `longest` (a store of format 7 or 8), an optimal parser's members'
    /// parses are stored in the longest form.
    pub(in crate::store) fn make(data: &[u8], mut sw: SplitWindow, first: bool, arc_mode: &mut bool, forms: Forms, known: &KnownTails) -> Ready {
        if sw.consumed == 0 {
            return Ready { sw, seg: warc::Segmentation::default(), parses: Vec::new() };
        }
        let seg = warc::segment_window(&sw.plain, first, true, arc_mode).0;
        let parses = prove_members(&data[..sw.consumed], &sw, &seg, forms, known);
        // The parses as recorded are done with: the window waits for its storing without them.
        for r in &mut sw.regions {
            if let Region::Member(m) = r {
                m.parse = None;
            }
        }
        Ready { sw, seg, parses }
    }
}

/// The first window of a gzip file, split (members found and inflated) ahead of its ingest:
/// that needs no store, so an importer can do it for the next file on another core while
/// this one is stored. (Proving its parses there too gained 1 % of an import for 76 MiB more
/// peak RSS: docs/BENCHMARKS.md.)
pub struct Presplit {
    first: Option<SplitWindow>,
}

impl Presplit {
    /// Splits the first window of `data`, a whole file, if it is gzip.
    pub fn new(data: &[u8]) -> Presplit {
        Presplit::from_window(data, data.len() as u64)
    }

    /// Splits `window`, the first bytes of a file of `total` bytes read by the caller, if it
    /// is gzip; ingest uses the split only if it reads the same window. A panic on the way (a
    /// parser bug met by this input) leaves the split to the ingest, which makes it that
    /// file's error: the caller's thread is not the ingest's, and must not die of it.
    pub fn from_window(window: &[u8], total: u64) -> Presplit {
        Presplit::from_window_in(window, total, &Spares::new())
    }

    /// `from_window`, the text written into a buffer from `spares` (an importer's).
    pub fn from_window_in(window: &[u8], total: u64, spares: &Spares) -> Presplit {
        if !gzip::looks_gzip(window) {
            return Presplit::none();
        }
        let n = window.len().min(WINDOWS.bytes);
        let split = crate::store::bug_as_error("presplit", || {
            crate::failpoint::panic_at("presplit");
            Ok(split_window_in(&window[..n], n as u64 == total, WINDOWS, spares.text.take(plain_room(n, WINDOWS))))
        });
        match split {
            Ok(sw) => Presplit { first: Some(sw) },
            Err(e) => {
                log::warn!("{e}; the ingest splits the window itself");
                Presplit::none()
            }
        }
    }

    pub fn none() -> Presplit {
        Presplit { first: None }
    }

    /// The split, if it is of the window the ingest read (`data`, at `offset`).
    pub(in crate::store) fn take_for(&mut self, offset: u64, data: &[u8]) -> Option<SplitWindow> {
        self.first.take().filter(|sw| offset == 0 && sw.len == data.len())
    }
}

/// Records and proves the parse of every member of `sw` (whose regions tile `data`) on two
/// threads: most of the CPU of ingest. Largest members first, so one slow member does not
/// finish alone at the end.
fn prove_members(data: &[u8], sw: &SplitWindow, seg: &warc::Segmentation, forms: Forms, known: &KnownTails) -> Proofs {
    let plain = &sw.plain[..];
    let members: Vec<&Member> = sw
        .regions
        .iter()
        .filter_map(|r| match r {
            Region::Member(m) => Some(m),
            Region::Raw { .. } => None,
        })
        .collect();
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(members[i].plain_len));
    let places = places(&members, seg, forms.predicted, forms.predicted_rare);
    let work = |_: &mut (), i: usize| {
        crate::failpoint::panic_at("prove");
        prove_member(data, plain, members[i], places[i], forms.longest, Some(known))
    };
    let proofs = each_of(Workers::Proving, &order, members.len(), || (), work);
    proofs.into_iter().map(Option::flatten).collect()
}

/// Where each member's parse may start to be shared, relative to its plain text: some way
/// into the first payload that starts in it, or its start if it begins inside a payload
/// (its window then sees nothing but payload). Never past PARSE_INLINE_TEXT: what comes
/// before the cut is kept in the recipe, whose pieces must stay small whatever a member
/// holds (one without a payload, a huge header). The tail's text starts at the payload's
/// start (`Cut::base`), and so does what its copies must share (`Place::payload`).
pub(in crate::store) fn places(members: &[&Member], seg: &warc::Segmentation, predicted: bool, predicted_rare: bool) -> Vec<Place> {
    let payloads: Vec<(u64, u64)> = seg.spans.iter().filter(|s| s.kind == SpanKind::Payload).map(|s| (s.start, s.start + s.len)).collect();
    // (Header spans may run from one record into the next: a request's, then the response's.)
    let headers: Vec<(u64, u64)> = seg.spans.iter().filter(|s| s.kind == SpanKind::Header).map(|s| (s.start, s.start + s.len)).collect();
    members
        .iter()
        .map(|m| {
            let (ps, pe) = (m.plain_start, m.plain_start + m.plain_len);
            let i = payloads.partition_point(|&(_, end)| end <= ps);
            let (at, base) = match payloads.get(i).filter(|&&(a, _)| a < pe) {
                Some(&(a, _)) if a < ps => (0, 0),
                Some(&(a, _)) => (a - ps + PARSE_SHARED_FROM, a - ps),
                None => (PARSE_INLINE_TEXT, 0),
            };
            let at = at.min(PARSE_INLINE_TEXT);
            let j = headers.partition_point(|&(_, end)| end <= ps);
            let holds_header = headers.get(j).is_some_and(|&(start, _)| start < pe);
            let cut = deflate::Cut { at: at as usize, base: base.min(at) as usize, predicted: predicted || (predicted_rare && !holds_header) };
            // (A payload that starts past PARSE_INLINE_TEXT has header text after the cut:
            // no chunk of its payload would stand for that, so its tail is never named.)
            let payload = payloads.get(i).filter(|&&(a, e)| a >= ps && a < pe && a - ps == cut.base as u64 && e <= pe && pe - e <= MAX_AFTER_PAYLOAD).copied();
            Place { cut, payload }
        })
        .collect()
}
