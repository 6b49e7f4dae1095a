//! zstd dictionaries for chunk compression (format 5).
//!
//! Each chunk is compressed on its own, so that a read decodes only what it asks for; but the
//! pages of one site share most of their markup, and a chunk on its own cannot point at its
//! neighbours. A dictionary trained on the store's own chunks gives that back: on the crawl
//! corpus, zstd level 3 with a 112 KiB dictionary stores payloads 19-25 % smaller than
//! without, at the same speed both ways (docs/BENCHMARKS.md).
//!
//! The writer samples the first bytes of the new chunks it stores until it has
//! `SAMPLE_TARGET` of them, then trains a dictionary and stores it as a chunk of kind `Dict`,
//! committed with the ingest in progress (refcount 1 for good: no recipe names a dictionary,
//! and gc keeps it while the store lives). That ingest's later chunks are compressed with it
//! (they commit, or are garbage, together with it); other ingests only once that commit is
//! durable (`activate`), so no committed chunk ever names a dictionary that is not committed
//! too. The index's meta record `zstd_dict` names the dictionary in
//! use, so a new process goes on with it; after `RENEW_AFTER` bytes compressed with one (by
//! one process: the count starts again when a store is opened), the writer samples for the
//! next (the content of an archive drifts over years). Dictionary
//! blobs name their dictionary by digest (`pack::Codec::ZstdDict`); the pack reader finds
//! it through the index.

use crate::digest::Digest;

/// The index meta record naming the dictionary new chunks are compressed with.
pub(in crate::store) const META_KEY: &str = "zstd_dict";
/// Sample bytes to train on (zstd wants 10-100x the dictionary's size).
const SAMPLE_TARGET: usize = 4 << 20;
/// The first bytes of a chunk that go into the samples.
const SAMPLE_MAX: usize = 32 << 10;
/// zstd's default dictionary size, and the best of those tried on the corpus.
const DICT_SIZE: usize = 112 << 10;
/// Raw bytes compressed with one dictionary before the writer samples for the next.
const RENEW_AFTER: u64 = 4 << 30;

/// The writer's dictionaries: samples, the one being committed, the one in use.
pub(in crate::store) struct Dicts {
    enabled: bool,
    /// The zstd level chunks are compressed at with a dictionary (the store's ingest level).
    level: i32,
    samples: Vec<u8>,
    sizes: Vec<usize>,
    /// Trained and stored by the ingest in progress, which compresses with it; in use for
    /// every ingest once that one commits.
    candidate: Option<Active>,
    /// The candidate of an ingest that has ended, its commit perhaps still to come (another
    /// ingest may start before it): used by no one, in use once that commit is durable.
    awaiting: Option<Active>,
    active: Option<Active>,
}

struct Active {
    digest: Digest,
    cdict: zstd::zstd_safe::CDict<'static>,
    /// Raw bytes compressed with it by this process.
    compressed: u64,
}

impl Active {
    /// None if zstd cannot prepare the bytes (a damaged dictionary).
    fn new(digest: Digest, bytes: &[u8], level: i32) -> Option<Active> {
        let cdict = zstd::zstd_safe::CDict::try_create(bytes, level)?;
        Some(Active { digest, cdict, compressed: 0 })
    }
}

impl Dicts {
    /// `enabled`: the store's format has dictionaries (5 on) and compresses chunks, at zstd
    /// `level`, and this node writes.
    pub fn new(enabled: bool, level: i32) -> Dicts {
        Dicts { enabled, level, samples: Vec::new(), sizes: Vec::new(), candidate: None, awaiting: None, active: None }
    }

    /// Whether chunks are compressed with dictionaries here at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn wanted(&self) -> bool {
        self.enabled && self.candidate.is_none() && self.active.as_ref().is_none_or(|a| a.compressed >= RENEW_AFTER)
    }

    /// Whether `train` would train a dictionary now.
    pub fn ready(&self) -> bool {
        self.wanted() && self.samples.len() >= SAMPLE_TARGET
    }

    /// Offers the bytes of a new chunk as a sample, while a dictionary is wanted.
    pub fn sample(&mut self, data: &[u8]) {
        if !self.wants(data) {
            return;
        }
        let s = &data[..data.len().min(SAMPLE_MAX)];
        self.samples.extend_from_slice(s);
        self.sizes.push(s.len());
    }

    /// Whether `sample` would take (some of) `data`.
    pub fn wants(&self, data: &[u8]) -> bool {
        self.wanted() && self.samples.len() < SAMPLE_TARGET && data.len() >= 64
    }

    /// A new dictionary trained on the samples, once there are enough (they are used up
    /// either way). None if not yet, or if zstd could not train one (then sampling starts
    /// again).
    pub fn train(&mut self) -> Option<Vec<u8>> {
        if !self.ready() {
            return None;
        }
        let (samples, sizes) = (std::mem::take(&mut self.samples), std::mem::take(&mut self.sizes));
        match train_fast_cover(&samples, &sizes, DICT_SIZE) {
            Ok(d) => Some(d),
            Err(e) => {
                log::warn!("training a zstd dictionary on {} samples failed: {e}; chunks stay compressed without one", sizes.len());
                None
            }
        }
    }

    /// Notes the dictionary just stored (`digest`) by the ingest in progress, which
    /// compresses with it from now on.
    pub fn stored(&mut self, digest: Digest, bytes: &[u8]) {
        self.candidate = if self.enabled { Active::new(digest, bytes, self.level) } else { None };
    }

    /// A new ingest begins: the dictionary the last one stored is used no more until that
    /// ingest's commit makes it durable (`activate`); if it never commits, a later one is
    /// trained instead. Returns the digest of the one it replaces as awaiting, if any: no
    /// commit will make that one durable any more.
    pub fn forget_candidate(&mut self) -> Option<Digest> {
        let c = self.candidate.take()?;
        self.awaiting.replace(c).map(|a| a.digest)
    }

    /// The dictionary `digest` is committed: chunks are compressed with it from now on.
    pub fn activate(&mut self, digest: &Digest) {
        if let Some(a) = self.candidate.take_if(|a| a.digest == *digest).or_else(|| self.awaiting.take_if(|a| a.digest == *digest)) {
            self.active = Some(a);
        }
    }

    /// Compresses with dictionary `bytes` (committed, `digest`) from now on; false if
    /// zstd cannot prepare them.
    pub fn use_dictionary(&mut self, digest: Digest, bytes: &[u8]) -> bool {
        if !self.enabled {
            return true;
        }
        self.active = Active::new(digest, bytes, self.level);
        self.active.is_some()
    }

    /// `data` compressed with the dictionary in use, as a `Codec::ZstdDict` blob stores it
    /// (the dictionary's digest, then the frame); None without one.
    /// (The writer compresses on its threads with `shared`; this is the tests' shorthand.)
    #[cfg(test)]
    pub fn compress(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        let which = self.in_use()?;
        let out = self.shared(which)?.compress(&mut zstd::zstd_safe::CCtx::try_create()?, data)?;
        self.count(which, data.len() as u64);
        Some(out)
    }

    /// Which dictionary new chunks are compressed with now, if any.
    pub fn in_use(&self) -> Option<InUse> {
        match (&self.candidate, &self.active) {
            (Some(_), _) => Some(InUse::Candidate),
            (None, Some(_)) => Some(InUse::Active),
            (None, None) => None,
        }
    }

    fn get(&self, which: InUse) -> Option<&Active> {
        match which {
            InUse::Candidate => self.candidate.as_ref(),
            InUse::Active => self.active.as_ref(),
        }
    }

    fn get_mut(&mut self, which: InUse) -> Option<&mut Active> {
        match which {
            InUse::Candidate => self.candidate.as_mut(),
            InUse::Active => self.active.as_mut(),
        }
    }

    /// Dictionary `which`, for other threads to compress with while the writer waits for
    /// them (each with a context of its own). None if that dictionary is gone.
    pub fn shared(&self, which: InUse) -> Option<Shared<'_>> {
        self.get(which).map(|a| Shared { digest: &a.digest, cdict: &a.cdict })
    }

    /// Counts `n` raw bytes compressed with `which` elsewhere (towards `RENEW_AFTER`).
    pub fn count(&mut self, which: InUse, n: u64) {
        if let Some(a) = self.get_mut(which) {
            a.compressed += n;
        }
    }
}

/// One of the writer's dictionaries, as `Dicts::in_use` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InUse {
    Candidate,
    Active,
}

/// A dictionary borrowed from the writer for compressing on other threads.
#[derive(Clone, Copy)]
pub struct Shared<'a> {
    digest: &'a Digest,
    cdict: &'a zstd::zstd_safe::CDict<'static>,
}

impl<'a> Shared<'a> {
    /// Dictionary `digest`, prepared as `cdict` (gc's settling brings its own, at its level).
    pub fn new(digest: &'a Digest, cdict: &'a zstd::zstd_safe::CDict<'static>) -> Shared<'a> {
        Shared { digest, cdict }
    }

    /// `data` as a `Codec::ZstdDict` blob stores it (the dictionary's digest, then the
    /// frame), compressed with a context of the caller's.
    pub fn compress(&self, cctx: &mut zstd::zstd_safe::CCtx<'static>, data: &[u8]) -> Option<Vec<u8>> {
        use zstd::zstd_safe::{CParameter, DictAttachPref, ResetDirective};
        // zstd would copy the dictionary's tables (768 KiB at level 3) into the context for
        // every chunk over 16 KiB and then search it by its slower external-dictionary path;
        // referring to them in place is 2 % of import's CPU less, for the same store size.
        let mut frame = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
        cctx.ref_cdict(self.cdict).ok()?;
        let done = cctx.set_parameter(CParameter::ForceAttachDict(DictAttachPref::ForceAttach)).and_then(|_| cctx.compress2(&mut frame, data));
        // The context must not go on pointing at a dictionary it only borrowed, even after a
        // failure mid-frame (when dropping the reference alone would be refused): a reset of
        // session and parameters cannot be.
        cctx.reset(ResetDirective::SessionAndParameters).ok()?;
        done.ok()?;
        let mut out = Vec::with_capacity(crate::pack::DICT_REF_LEN + frame.len());
        out.extend_from_slice(self.digest);
        out.extend_from_slice(&frame);
        Some(out)
    }
}

/// The segment size (`k`) zstd's trainer chose for the crawl corpus's samples, tried alone.
/// `zstd::dict::from_continuous` (`ZDICT_trainFromBuffer`) tries five sizes from 50 to 1,998,
/// each trained and tested: 220 ms, on the ingest's own thread, with the chunks waiting for
/// the dictionary; this one 70-100 ms for the same dictionary (the store after gc the same
/// to 0.2 KB). Trained on all the samples instead of zstd's three quarters, at this size,
/// the store after gc was 0.2 MB larger.
const DICT_SEGMENT: u32 = 1998;

/// A dictionary of at most `size` bytes trained on `samples` (concatenated, of `sizes`)
/// by zstd's fastCover with `ZDICT_trainFromBuffer`'s settings but one segment size.
pub(in crate::store) fn train_fast_cover(samples: &[u8], sizes: &[usize], size: usize) -> std::io::Result<Vec<u8>> {
    use zstd::zstd_safe::zstd_sys as sys;
    let n = u32::try_from(sizes.len()).map_err(|_| std::io::Error::other("too many samples"))?;
    if sizes.iter().sum::<usize>() != samples.len() {
        return Err(std::io::Error::other("sample sizes do not add up"));
    }
    let mut dict = vec![0u8; size];
    // steps and splitPoint as ZDICT_trainFromBuffer sets them (0: zstd's defaults, a quarter of
    // the samples kept to test on); k fixed, so only that size is tried.
    let mut params = sys::ZDICT_fastCover_params_t {
        k: DICT_SEGMENT,
        d: 8,
        f: 0,
        steps: 4,
        nbThreads: 0,
        splitPoint: 0.0,
        accel: 0,
        shrinkDict: 0,
        shrinkDictMaxRegression: 0,
        zParams: sys::ZDICT_params_t { compressionLevel: 3, notificationLevel: 0, dictID: 0 },
    };
    // SAFETY: `dict` is writable for its length, `samples` readable for the sum of `sizes`
    // (checked above), `sizes` holds `n` entries, and `params` outlives the call; zstd keeps
    // none of the pointers.
    let len = unsafe { sys::ZDICT_optimizeTrainFromBuffer_fastCover(dict.as_mut_ptr().cast(), dict.len(), samples.as_ptr().cast(), sizes.as_ptr(), n, &mut params) };
    // SAFETY: a plain function of the returned code.
    if unsafe { sys::ZDICT_isError(len) } != 0 {
        return Err(std::io::Error::other(format!("zstd dictionary training failed (code {len})")));
    }
    dict.truncate(len);
    Ok(dict)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST_LEVEL: i32 = 3;

    fn page(i: usize) -> Vec<u8> {
        format!("<html><head><title>Page {i}</title><link rel=stylesheet href=/site.css></head><body><nav><a href=/>Home</a> <a href=/about>About</a></nav><p>Item {} costs {} and ships in {} days.</p></body></html>", i * 7919 % 1000, i % 97, i % 13).into_bytes()
    }

    #[test]
    fn trains_once_enough_is_sampled_and_compresses_only_once_active() {
        let mut d = Dicts::new(true, TEST_LEVEL);
        let mut i = 0;
        while d.train().is_none() {
            assert!(d.compress(&page(i)).is_none(), "no dictionary before one is committed");
            d.sample(&page(i));
            i += 1;
            assert!(i < 1_000_000);
        }
        // Trained once: sampling stops until it is committed or forgotten.
        let bytes = zstd::dict::from_samples(&(0..2000).map(page).collect::<Vec<_>>(), 16 << 10).unwrap();
        d.stored([7; 32], &bytes);
        assert!(!d.wanted());
        assert_eq!(d.compress(&page(1)).and_then(|z| crate::pack::dict_of(&z)), Some([7; 32]), "the ingest that stored it uses it");
        assert_eq!(d.forget_candidate(), None, "nothing awaited before");
        assert!(d.wanted());
        assert!(d.compress(&page(1)).is_none(), "a dictionary whose ingest ended uncommitted is not used");
        // Its commit comes after another ingest began: it is taken into use then.
        d.activate(&[7; 32]);
        assert!(d.compress(&page(1)).is_some());
    }

    #[test]
    fn a_dictionary_frame_names_its_dictionary_and_decodes_back() {
        let samples: Vec<Vec<u8>> = (0..2000).map(page).collect();
        let bytes = zstd::dict::from_samples(&samples, 16 << 10).unwrap();
        let mut d = Dicts::new(true, TEST_LEVEL);
        d.stored([9; 32], &bytes);
        d.activate(&[8; 32]);
        assert_eq!(d.forget_candidate(), None);
        assert!(d.compress(&page(1)).is_none(), "another digest activates nothing");
        d.stored([6; 32], &bytes);
        assert_eq!(d.forget_candidate(), Some([9; 32]), "a newer one replaces the one awaiting");
        d.stored([9; 32], &bytes);
        d.activate(&[9; 32]);
        d.forget_candidate();
        let p = page(5000);
        let z = d.compress(&p).unwrap();
        assert_eq!(crate::pack::dict_of(&z), Some([9; 32]));
        let plain = zstd::bulk::compress(&p, TEST_LEVEL).unwrap();
        assert!(z.len() - 32 < plain.len(), "the dictionary helps: {} vs {}", z.len() - 32, plain.len());
        let dict = crate::pack::prepare_dictionary(&bytes).unwrap();
        let back = crate::pack::decode_stored(crate::pack::Codec::ZstdDict as u8, &z, p.len() as u32, crate::pack::Against::Dict(&dict)).unwrap();
        assert_eq!(back, p);
        assert!(crate::pack::decode_stored(crate::pack::Codec::ZstdDict as u8, &z, p.len() as u32, crate::pack::Against::Nothing).is_err());
    }

    #[test]
    fn other_threads_compress_as_the_writer_does() {
        let samples: Vec<Vec<u8>> = (0..2000).map(page).collect();
        let bytes = zstd::dict::from_samples(&samples, 16 << 10).unwrap();
        let mut d = Dicts::new(true, TEST_LEVEL);
        assert_eq!(d.in_use(), None);
        d.stored([5; 32], &bytes);
        assert_eq!(d.in_use(), Some(InUse::Candidate));
        let p = page(4242);
        let theirs = std::thread::scope(|s| {
            let shared = d.shared(InUse::Candidate).unwrap();
            s.spawn(move || shared.compress(&mut zstd::zstd_safe::CCtx::try_create().unwrap(), &p)).join().unwrap()
        });
        assert_eq!(theirs, d.compress(&page(4242)), "the same blob, the dictionary's digest first");
        assert!(d.shared(InUse::Active).is_none(), "none active yet");
    }

    #[test]
    fn disabled_never_samples() {
        let mut d = Dicts::new(false, TEST_LEVEL);
        for i in 0..100_000 {
            d.sample(&page(i));
        }
        assert!(d.train().is_none());
    }
}
