//! The host's cost of protection information per 4 KiB block: the T10-DIF guard alone
//! (CRC-16 over 4096 bytes), generating PI for extended 4096+8 blocks (what a PRACT=0 write
//! costs the host), and verifying it (a PRACT=0 read checked on the host). Several rounds of
//! `--blocks N` blocks each (default 16384, 64 MiB); the median round per row. Prints a table;
//! `--json PATH` also writes the rows as JSON.
//!
//! Run: `cargo bench -p vfnvme --bench pi_guard -- [--rounds 7] [--blocks 16384] [--json out.json]`

mod common;

use common::{arg_value, median};
use std::hint::black_box;
use std::time::Instant;
use vfnvme::hal::pi::{self, PiChecks, PiExpected, PiFormat, PiLocation, PiType};

struct Row {
    what: &'static str,
    ns_per_block: f64,
    gib_per_s: f64,
}

/// Median ns per block of `rounds` runs of `f` over `blocks` blocks.
fn measure(rounds: usize, blocks: usize, mut f: impl FnMut()) -> f64 {
    let mut per_block: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos() as f64 / blocks as f64
        })
        .collect();
    median(&mut per_block)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = arg_value(&args, "--rounds")
        .and_then(|v| v.parse().ok())
        .unwrap_or(7)
        .max(1);
    let blocks: usize = arg_value(&args, "--blocks")
        .and_then(|v| v.parse().ok())
        .unwrap_or(16384)
        .max(1);
    let format = PiFormat::new(4096, 8, true, Some((PiType::Type1, PiLocation::Last)))
        .expect("a valid format");
    let mut buf: Vec<u8> = (0..blocks * 4104).map(|i| (i * 7 + 3) as u8).collect();
    let data: Vec<u8> = buf.iter().copied().take(blocks * 4096).collect();
    let mut rows = Vec::new();
    let ns = measure(rounds, blocks, || {
        for b in data.chunks_exact(4096) {
            black_box(pi::crc16_t10dif(black_box(b)));
        }
    });
    rows.push(("guard (CRC-16 T10-DIF of 4096 B)", ns));
    let ns = measure(rounds, blocks, || {
        pi::generate_extended(&format, black_box(&mut buf), 0, 0x1234, 0).expect("generate");
    });
    rows.push(("generate PI, 4096+8 extended (PRACT=0 write)", ns));
    let expected = PiExpected {
        app_tag: 0x1234,
        app_mask: 0xffff,
        ref_tag: 0,
    };
    let ns = measure(rounds, blocks, || {
        pi::verify_extended(&format, black_box(&buf), 0, PiChecks::ALL, expected)
            .expect("the PI just generated verifies");
    });
    rows.push(("verify PI, 4096+8 extended (PRACT=0 read)", ns));
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|(what, ns)| Row {
            what,
            ns_per_block: ns,
            gib_per_s: 4096.0 / ns / 1.073_741_824,
        })
        .collect();
    println!("host PI per 4 KiB block, median of {rounds} rounds of {blocks} blocks");
    println!("{:>46} | {:>12} | {:>10}", "work", "ns/block", "GiB/s");
    for r in &rows {
        println!(
            "{:>46} | {:>12.1} | {:>10.2}",
            r.what, r.ns_per_block, r.gib_per_s
        );
    }
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{{\"work\":\"{}\",\"ns_per_block\":{:.2},\"gib_per_s\":{:.3}}}",
                r.what, r.ns_per_block, r.gib_per_s
            )
        })
        .collect();
    let text = format!(
        "{{\"bench\":\"pi_guard\",\"rounds\":{rounds},\"blocks\":{blocks},\"rows\":[{}]}}",
        items.join(",")
    );
    println!("{text}");
    if let Some(path) = arg_value(&args, "--json") {
        if let Err(e) = std::fs::write(&path, text + "\n") {
            eprintln!("pi_guard: writing {path}: {e}");
            std::process::exit(1);
        }
    }
}
