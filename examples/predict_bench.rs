//! Times the decoding of recorded deflate parses in the two forms a store keeps them in: the
//! ranked form (`init --parses fast`) and the predicted one (`--parses compact`), on one
//! thread, over every gzip member of the files given.
//!
//! `cargo run --release --example predict_bench -- FILE.warc.gz...` (`REPS` rounds, 3 by
//! default; `FORM=ranked` or `FORM=predicted` times one form alone, for perf; `SIZES=1` also
//! gives both forms' sizes at zstd level 19).
use std::time::Instant;
use warcfs::format::deflate;

mod common;

/// Picks one form of an item's parse.
type Pick = fn(&Item) -> &deflate::Stored;

struct Item {
    plain: Vec<u8>,
    ranked: deflate::Stored,
    predicted: deflate::Stored,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let reps: usize = std::env::var("REPS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    let form = std::env::var("FORM").unwrap_or_default();
    let mut items = Vec::new();
    // Seconds spent encoding (and proving) each form, as ingest does.
    let mut encode = [0f64; 2];
    for m in common::members(&args) {
        let p = m.plain;
        // The payload's start, and 4 KiB into it: where ingest cuts.
        let base = common::payload_start(&p).unwrap_or(0);
        let cut = |predicted| deflate::Cut { at: (base + 4096).min(p.len()), base, predicted };
        let t = Instant::now();
        let (ranked, _) = deflate::encode_read_back_at(&m.parse, &p, Some(cut(false)), false).unwrap();
        encode[0] += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let (predicted, _) = deflate::encode_read_back_at(&m.parse, &p, Some(cut(true)), false).unwrap();
        encode[1] += t.elapsed().as_secs_f64();
        items.push(Item { plain: p, ranked, predicted });
    }
    let total: usize = items.iter().map(|i| i.plain.len()).sum();
    let size = |f: Pick| items.iter().map(|i| f(i).prefix.len() + f(i).tail.as_ref().map_or(0, Vec::len)).sum::<usize>();
    let z = |f: Pick| zstd::bulk::compress(&items.iter().flat_map(|i| [f(i).prefix.clone(), f(i).tail.clone().unwrap_or_default()]).flatten().collect::<Vec<u8>>(), 19).unwrap().len();
    if std::env::var_os("SIZES").is_some() {
        println!("zstd -19: ranked {} B, predicted {} B", z(|i| &i.ranked), z(|i| &i.predicted));
    }
    println!("{} members, {:.1} MB of text; parses: ranked {} B, predicted {} B (before compression)", items.len(), total as f64 / 1e6, size(|i| &i.ranked), size(|i| &i.predicted));
    println!("encode: ranked {:.0} MB/s, predicted {:.0} MB/s of text (once)", total as f64 / 1e6 / encode[0], total as f64 / 1e6 / encode[1]);
    let forms: [(&str, Pick); 2] = [("ranked", |i| &i.ranked), ("predicted", |i| &i.predicted)];
    for (name, pick) in forms {
        if !form.is_empty() && form != name {
            continue;
        }
        let mut best = f64::MAX;
        for _ in 0..reps {
            let t = Instant::now();
            for i in &items {
                let s = pick(i);
                std::hint::black_box(deflate::decode(&s.prefix, s.tail.as_deref(), &i.plain).unwrap());
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!("{name:9} decode {:.0} MB/s of text (best of {reps})", total as f64 / 1e6 / best);
    }
}
