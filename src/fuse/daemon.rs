//! `warcfs mount`: options, daemonizing, logging and clean shutdown.
//!
//! The parent forks before any thread exists (RocksDB starts threads when the store opens),
//! and returns only once the child reports the mount live, or reports why it is not.
//! SIGTERM, SIGINT and SIGHUP unmount; so do `fusermount3 -u` and `umount`. Either way the
//! session ends, queued ingests finish, the open pack is sealed and the process exits 0.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use fuser::{Config, MountOption, Session, SessionACL};
use nix::sys::signal::{SigSet, Signal};

use super::guard::Guarded;
use super::WarcFs;
use crate::LockExt;
use crate::store::Store;

pub struct MountArgs {
    pub store: PathBuf,
    pub mountpoint: PathBuf,
    pub foreground: bool,
    /// Comma-separated `-o` options, as mount(8) passes them.
    pub options: Vec<String>,
}

struct Parsed {
    acl: SessionACL,
    read_only: bool,
    /// `min_free=SIZE`: the free space data must leave on the store's disk.
    min_free: Option<u64>,
    /// `cache_size=SIZE`: the node's cache of object-store pack ranges.
    cache_size: Option<u64>,
}

/// A size: bytes, or with a K, M, G or T suffix (powers of 1024).
fn parse_size(s: &str) -> Option<u64> {
    let (num, shift) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 10),
        (i, 'm' | 'M') => (&s[..i], 20),
        (i, 'g' | 'G') => (&s[..i], 30),
        (i, 't' | 'T') => (&s[..i], 40),
        _ => (s, 0),
    };
    num.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

fn parse_options(opts: &[String]) -> Result<Parsed> {
    let mut p = Parsed { acl: SessionACL::Owner, read_only: false, min_free: None, cache_size: None };
    for o in opts.iter().flat_map(|s| s.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
        match o {
            "allow_other" => p.acl = SessionACL::All,
            "allow_root" => p.acl = SessionACL::RootAndOwner,
            "ro" => p.read_only = true,
            o if o.starts_with("min_free=") => {
                let v = &o["min_free=".len()..];
                p.min_free = Some(parse_size(v).with_context(|| format!("mount option '{o}': not a size (bytes, or with K, M, G or T)"))?);
            }
            o if o.starts_with("cache_size=") => {
                let v = &o["cache_size=".len()..];
                p.cache_size = Some(parse_size(v).with_context(|| format!("mount option '{o}': not a size (bytes, or with K, M, G or T)"))?);
            }
            // Generic mount(8)/fstab options that mean nothing more here.
            "rw" | "defaults" | "auto" | "noauto" | "user" | "nouser" | "users" | "_netdev" | "nofail" | "dev" | "nodev" | "suid"
            | "nosuid" | "exec" | "noexec" | "atime" | "noatime" | "relatime" | "default_permissions" => {}
            o if o.starts_with("x-") || o.starts_with("comment=") || o.starts_with("fsname=") || o.starts_with("subtype=") => {}
            o => bail!("unknown mount option '{o}' (known: allow_other, allow_root, ro, rw, min_free=SIZE, cache_size=SIZE and the generic fstab options)"),
        }
    }
    Ok(p)
}

/// The log file grows to this size, then is renamed `warcfs.log.1` (the older ones move up
/// to `.4`, the oldest is dropped): a long-running mount's log stays under 80 MiB.
const LOG_FILE_BYTES: usize = 16 << 20;
const LOG_FILES_KEPT: usize = 4;

/// Writes log lines to the store's log file (rotated by size: the `file-rotate` crate), and
/// to stderr in the foreground.
struct LogSink {
    file: Mutex<file_rotate::FileRotate<file_rotate::suffix::AppendCount>>,
    stderr: bool,
}

impl Write for &LogSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.stderr {
            let _ = io::stderr().write_all(buf);
        }
        self.file.locked().write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.locked().flush()
    }
}

fn init_logging(store: &Path, foreground: bool) -> Result<()> {
    let path = crate::store::layout::log(store);
    // Opened here first so that a log that cannot be written is an error at mount.
    OpenOptions::new().create(true).append(true).open(&path).with_context(|| format!("{}: cannot open log", path.display()))?;
    let file = file_rotate::FileRotate::new(
        &path,
        file_rotate::suffix::AppendCount::new(LOG_FILES_KEPT),
        file_rotate::ContentLimit::BytesSurpassed(LOG_FILE_BYTES),
        file_rotate::compression::Compression::None,
        None,
    );
    let sink: &'static LogSink = Box::leak(Box::new(LogSink { file: Mutex::new(file), stderr: foreground }));
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .target(env_logger::Target::Pipe(Box::new(sink)))
        .try_init();
    // The daemon's stderr is /dev/null once it detaches: a panicking thread (a bug) must
    // still leave a line in the log.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        log::error!("panic in thread {}: {info}", std::thread::current().name().unwrap_or("?"));
        default_hook(info);
    }));
    Ok(())
}

fn pipe() -> Result<(File, File)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two descriptors that we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error()).context("pipe");
    }
    // SAFETY: fresh descriptors from pipe2.
    unsafe { Ok((File::from(OwnedFd::from_raw_fd(fds[0])), File::from(OwnedFd::from_raw_fd(fds[1])))) }
}

/// The kernel offers FUSE 128 KiB of readahead and refuses more at INIT; the mount's own
/// backing-device setting can be raised (root only), so sequential reads arrive as 1 MiB
/// requests: a quarter of the round trips.
fn raise_readahead(mountpoint: &Path) {
    // Not stat(): the session does not serve requests yet, so that would wait forever.
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return };
    let want = mountpoint.to_string_lossy();
    let Some(dev) = info.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.len() > 4 && f[4] == want).then(|| f[2].to_string())
    }) else {
        return;
    };
    let path = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    match std::fs::write(&path, "1024") {
        Ok(()) => log::info!("readahead raised to 1 MiB ({path})"),
        Err(e) => log::info!("readahead left at the kernel's default ({path}: {e})"),
    }
}

pub fn mount(args: MountArgs) -> Result<i32> {
    let md = std::fs::metadata(&args.mountpoint).with_context(|| format!("{}: mount point not found", args.mountpoint.display()))?;
    if !md.is_dir() {
        bail!("{}: mount point is not a directory", args.mountpoint.display());
    }
    let opts = parse_options(&args.options)?;
    let mountpoint = args.mountpoint.canonicalize().with_context(|| format!("{}: cannot resolve", args.mountpoint.display()))?;
    // Right after an unmount, the previous daemon may still be storing what was written.
    super::unmount::wait_for_draining_daemon(&args.store);
    if args.foreground {
        return run(&args.store, &mountpoint, &opts, None);
    }
    let (mut rx, tx) = pipe()?;
    // SAFETY: no other threads exist yet in this process (nothing has been opened).
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()).context("fork"),
        0 => {
            drop(rx);
            // SAFETY: setsid in the child, detaching from the terminal's session.
            unsafe { libc::setsid() };
            let code = match run(&args.store, &mountpoint, &opts, Some(tx)) {
                Ok(c) => c,
                Err(e) => {
                    log::error!("{e:#}");
                    1
                }
            };
            crate::failpoint::crash_at("unmounted");
            std::process::exit(code);
        }
        _child => {
            drop(tx);
            let mut msg = String::new();
            let _ = rx.read_to_string(&mut msg);
            match msg.strip_prefix("ok") {
                Some(_) => Ok(0),
                None if msg.is_empty() => bail!("{}: mount failed (see {}/warcfs.log)", mountpoint.display(), args.store.display()),
                None => bail!("{}", msg.trim()),
            }
        }
    }
}

/// On a bucket-backed store, the thread that keeps this node and the bucket in step
/// (`Store::keep_in_step`): a follower takes in what the writer published, the writer
/// publishes its open packs, and a writer of a store several nodes write does both (see
/// `nodes`). Every inode that another node's records changed is dropped from the kernel's
/// caches (`notifier`): a file rewritten elsewhere may keep its size and times, which is all
/// the kernel checks before it serves its cached pages again. It runs until the process
/// ends; a store without a bucket starts none.
fn bucket_thread(store: Arc<Store>, notifier: fuser::Notifier) -> Result<()> {
    let Some((every, what)) = store.in_step_every() else { return Ok(()) };
    std::thread::Builder::new()
        .name("warcfs-bucket".into())
        .spawn(move || {
            // While the object store is down this fails every round: logged once a minute.
            let mut logged: Option<std::time::Instant> = None;
            loop {
                std::thread::sleep(every);
                let r = store.keep_in_step(&mut |inodes| forget(&notifier, inodes));
                match r {
                    Err(e) if logged.is_none_or(|t| t.elapsed().as_secs() >= 60) => {
                        log::error!("{what}: {e}");
                        logged = Some(std::time::Instant::now());
                    }
                    Err(_) => {}
                    Ok(()) => logged = None,
                }
            }
        })
        .context("bucket thread")?;
    Ok(())
}

/// Has the kernel drop its attributes and cached pages of every inode another node's records
/// changed. (fuser reports an inode the kernel does not hold as done.) A failure (the mount
/// going away) ends the round with one log line: the next round's inodes are other ones.
fn forget(notifier: &fuser::Notifier, inodes: &[u64]) {
    for (i, &ino) in inodes.iter().enumerate() {
        if let Err(e) = notifier.inval_inode(fuser::INodeNo(ino), 0, 0) {
            log::warn!("following the bucket: the kernel could not be told to forget inode {ino} and {} more changed by other nodes: {e}", inodes.len() - i - 1);
            return;
        }
    }
}

/// Raises the soft limit on open files to the hard one, as a file server should: every file
/// open through the mount holds a staging descriptor (files waiting for their ingest let
/// theirs go: `Staged::file`), besides the pack cache's share.
fn raise_open_file_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                log::warn!("raising the open file limit to {}: {}", lim.rlim_max, io::Error::last_os_error());
            }
        }
    }
}

/// Opens the store, mounts it, and serves until unmounted. `ready` hears "ok" once the mount
/// is live, or the error that prevented it.
fn run(store_path: &Path, mountpoint: &Path, opts: &Parsed, mut ready: Option<File>) -> Result<i32> {
    // Signals go to one waiting thread; block them before any thread starts.
    let mut signals = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(s);
    }
    signals.thread_block().context("blocking signals")?;
    raise_open_file_limit();
    let result = (|| -> Result<Session<Guarded>> {
        // Read-only on a bucket-backed store: a follower of the node that writes there.
        let store = Arc::new(if opts.read_only { Store::open_follower(store_path)? } else { Store::open(store_path, true)? });
        let in_step = store.clone();
        if let Some(bytes) = opts.min_free {
            store.space().set_floor(bytes);
        }
        if let Some(bytes) = opts.cache_size {
            store.set_pack_cache(bytes);
        }
        init_logging(store_path, ready.is_none())?;
        super::control::serve(store.clone()).context("control socket")?;
        let fs = WarcFs::new(store, opts.read_only)?;
        let mut options = vec![
            MountOption::FSName(store_path.canonicalize().unwrap_or(store_path.to_path_buf()).display().to_string()),
            MountOption::Subtype("warcfs".into()),
            MountOption::DefaultPermissions,
            MountOption::NoAtime,
        ];
        if opts.read_only {
            options.push(MountOption::RO);
        }
        let mut cfg = Config::default();
        cfg.mount_options = options;
        cfg.acl = match opts.acl {
            SessionACL::All => SessionACL::All,
            SessionACL::RootAndOwner => SessionACL::RootAndOwner,
            SessionACL::Owner => SessionACL::Owner,
        };
        // Three threads on two cores: a reader's close ends in a FLUSH it waits for and a
        // RELEASE it does not, which holds a thread while the reader's next open arrives; with
        // two, that open often waited for a thread. Measured (bench-mount's store, 2,000
        // record reads, five alternating runs): lookup p50 0.259-0.265 ms with two threads,
        // 0.230-0.243 with three; `cp` in 626-648 against 664-675 MB/s; sequential `.warc.gz`
        // reads the same (205-207 MB/s). One thread: 0.36-0.38 ms.
        cfg.n_threads = Some(3);
        cfg.clone_fd = true;
        let session = Session::new(Guarded(fs), mountpoint, &cfg).with_context(|| format!("{}: cannot mount", mountpoint.display()))?;
        // Only once mounted: a mount that fails must let the store go (and its bucket lock).
        bucket_thread(in_step, session.notifier())?;
        Ok(session)
    })();
    let mut session = match result {
        Ok(s) => s,
        Err(e) => {
            if let Some(r) = ready.as_mut() {
                let _ = write!(r, "{e:#}");
            }
            return Err(e);
        }
    };
    log::info!("mounted {} at {}", store_path.display(), mountpoint.display());
    raise_readahead(mountpoint);
    if let Some(mut r) = ready.take() {
        let _ = r.write_all(b"ok");
        drop(r);
        // The daemon keeps no terminal: logs go to the store's log file.
        if let Ok(null) = OpenOptions::new().read(true).write(true).open("/dev/null") {
            for fd in 0..3 {
                // SAFETY: dup2 onto the standard descriptors.
                unsafe { libc::dup2(null.as_raw_fd(), fd) };
            }
        }
    } else {
        eprintln!("warcfs: mounted {} at {}", store_path.display(), mountpoint.display());
    }
    let mut unmounter = session.unmount_callable();
    std::thread::Builder::new()
        .name("warcfs-signals".into())
        .spawn(move || {
            if let Ok(sig) = signals.wait() {
                log::info!("{sig:?}: unmounting");
                if let Err(e) = unmounter.unmount() {
                    log::error!("unmount: {e}");
                }
            }
        })
        .context("signal thread")?;
    // When the session ends it drops the filesystem: queued ingests finish, the pack is sealed.
    let r = session.run();
    match r {
        Ok(()) => {
            log::info!("unmounted {}", mountpoint.display());
            Ok(0)
        }
        Err(e) => {
            log::error!("session ended with an error: {e}");
            Ok(1)
        }
    }
}
