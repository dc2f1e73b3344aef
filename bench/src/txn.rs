//! Transactions against separate calls: one `Transact` replacing N files of 4 KiB (N = 1, 10,
//! 100) against the same N writes as separate `WriteText` calls, one after another, same run,
//! same daemon, same connection, alternating. A transaction stages and syncs every file, then
//! one intent record and each directory once; N writes sync each file and its directory.

use std::time::Instant;

use fsd_proto::v1::{self, transact_operation::Kind};
use fsd_tool_client::connect;

use crate::fixtures;
use crate::procs::{Server, Transport};
use crate::report::Section;
use crate::stats::PerRun;
use crate::{Common, Res};

const SIZES: [usize; 3] = [1, 10, 100];

pub fn run(common: &Common) -> Res<Section> {
    let dir = tempfile::Builder::new().prefix("fsd-bench-txn-").tempdir_in("/tmp")?;
    let root = dir.path().join("ws");
    let state = dir.path().join("state");
    std::fs::create_dir(&root)?;
    let root = std::fs::canonicalize(&root)?;
    let groups: Vec<Vec<String>> = SIZES
        .iter()
        .map(|&n| {
            let sub = root.join(format!("t{n}"));
            std::fs::create_dir(&sub)?;
            (0..n)
                .map(|i| {
                    let path = sub.join(format!("f{i:03}.txt"));
                    std::fs::write(&path, fixtures::four_k())?;
                    Ok(path.to_string_lossy().into_owned())
                })
                .collect::<Res<Vec<String>>>()
        })
        .collect::<Res<_>>()?;
    let config = format!(
        "state_dir = \"{}\"\n[budgets]\ncalls_per_second = 1000000\ncall_burst = 1000000\n",
        state.display()
    );
    let fsd = Server::fsd_config(&common.bin_dir()?, &root, &config)?;
    let rt = crate::client_runtime()?;
    let (mut client, _) = rt.block_on(connect::connect(&fsd.endpoint(Transport::Unix)))?;
    let contents = [fixtures::four_k(), fixtures::four_k_b()];
    let mut flip = 0usize;
    let mut next = || {
        flip += 1;
        contents[flip % 2].clone()
    };
    let write = |path: &str, content: String| v1::WriteTextRequest {
        path: path.to_owned(),
        content,
        ..Default::default()
    };

    let mut separate: Vec<PerRun> = SIZES.iter().map(|_| PerRun::default()).collect();
    let mut together: Vec<PerRun> = SIZES.iter().map(|_| PerRun::default()).collect();
    let rounds = if common.quick { 2 } else { 10 };
    for run in 0..common.runs + 1 {
        note!("  transactions: run {}/{} ({})", run + 1, common.runs + 1, crate::report::loadavg());
        for (g, paths) in groups.iter().enumerate() {
            let (mut calls_ms, mut txn_ms) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                let content = next();
                let started = Instant::now();
                for path in paths {
                    rt.block_on(client.write_text(write(path, content.clone())))?;
                }
                calls_ms.push(started.elapsed().as_secs_f64() * 1e3);
                let content = next();
                let operations = paths
                    .iter()
                    .map(|p| v1::TransactOperation { kind: Some(Kind::Write(write(p, content.clone()))) })
                    .collect();
                let started = Instant::now();
                rt.block_on(client.transact(v1::TransactRequest { context: None, operations }))?;
                txn_ms.push(started.elapsed().as_secs_f64() * 1e3);
            }
            // The first run warms the daemon and the page cache: not counted.
            if run > 0 {
                separate[g].push(median(&mut calls_ms));
                together[g].push(median(&mut txn_ms));
            }
        }
    }

    let mut md = String::from("### Transactions against separate calls\n\n");
    md.push_str(
        "One Transact replacing N files of 4 KiB against the same N replaces as separate WriteText \
         calls, one after another, same daemon, same connection, alternating (Unix socket; the median \
         of 10 rounds per run). The transaction syncs each staged file, then its intent record and \
         each directory once; separate writes sync each file and its directory.\n\n",
    );
    md.push_str("| files | separate calls | one transaction | transaction ÷ separate |\n|---|---|---|---|\n");
    for ((n, calls), txn) in SIZES.iter().zip(&separate).zip(&together) {
        md.push_str(&format!(
            "| {n} | {} | {} | {} |\n",
            calls.with_unit("ms"),
            txn.with_unit("ms"),
            txn.ratio(calls).times()
        ));
    }
    let ten = together[1].ratio(&separate[1]);
    let mut section = Section::default();
    section.verdict(
        "a 10-file transaction takes at most 1.2× the 10 separate calls",
        ten.times(),
        ten.median() <= 1.2,
    );
    section.markdown = md;
    Ok(section)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
