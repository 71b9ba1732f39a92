//! Shrinks a sequence whose request `index` differs unexplained to a short reproducer: the
//! requests before it are dropped in halves, then one by one, keeping each cut after which the
//! last request still differs unexplained (each try on fresh servers). Prints the requests
//! left, their differences, and the config.

use crate::explain::{Explained, Ledger};
use crate::generate::{self, Request};
use crate::{Error, Runner, Seed};

/// At most this many runs per reproducer: each starts both servers again.
const MAX_TRIES: usize = 40;

pub async fn shrink(runner: &Runner<'_>, seed: &Seed, index: usize) -> Result<String, Error> {
    let target = seed.requests[index].clone();
    let mut before: Vec<Request> = seed.requests[..index].to_vec();
    let mut tries = 0;
    let mut chunk = before.len().div_ceil(2).max(1);
    while chunk >= 1 && tries < MAX_TRIES && !before.is_empty() {
        let mut start = 0;
        let mut cut_any = false;
        while start < before.len() && tries < MAX_TRIES {
            let end = (start + chunk).min(before.len());
            let mut candidate: Vec<Request> = before[..start].to_vec();
            candidate.extend_from_slice(&before[end..]);
            tries += 1;
            if differs_last(runner, seed, &candidate, &target).await? {
                before = candidate;
                cut_any = true;
            } else {
                start = end;
            }
        }
        if chunk == 1 && !cut_any {
            break;
        }
        chunk = (chunk / 2).max(1);
    }
    before.push(target);
    let exchanges = runner.run(&seed.config, &before).await?;
    let mut text = String::new();
    for (request, exchange) in before.iter().zip(&exchanges) {
        text.push_str(&format!("  {request}\n"));
        for d in &exchange.differences {
            text.push_str(&format!(
                "      {}: reference {} / sluice {}\n",
                d.field, d.reference, d.sluice
            ));
        }
    }
    text.push_str("  config:\n");
    for file in &seed.config.files {
        for line in generate::yaml(file).lines() {
            text.push_str(&format!("    {line}\n"));
        }
    }
    Ok(text)
}

async fn differs_last(
    runner: &Runner<'_>,
    seed: &Seed,
    before: &[Request],
    target: &Request,
) -> Result<bool, Error> {
    let mut requests = before.to_vec();
    requests.push(target.clone());
    let exchanges = runner.run(&seed.config, &requests).await?;
    let mut ledger = Ledger::new(runner.mode, &seed.config);
    let mut last = Explained::Agreed;
    for (request, exchange) in requests.iter().zip(&exchanges) {
        last = ledger.explain(request, exchange);
    }
    Ok(matches!(last, Explained::Unexplained { .. }))
}
