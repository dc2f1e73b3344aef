//! A few named threads serving one queue, for the blocking or long CPU work the runtime must not
//! do (the stream readers' `pread`, the escalation checks): started once, shared by every call.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};

/// Starts `count` threads (at least one) named `name-N`, each taking the next job from the
/// returned queue and handing it to `serve`, until every sender is gone.
pub(super) fn start<J: Send + 'static>(
    name: &str,
    count: usize,
    serve: impl Fn(J) + Send + Sync + 'static,
) -> std::io::Result<mpsc::Sender<J>> {
    let (tx, rx) = mpsc::channel::<J>();
    let rx = Arc::new(Mutex::new(rx));
    let serve = Arc::new(serve);
    for n in 0..count.max(1) {
        let (rx, serve) = (rx.clone(), serve.clone());
        std::thread::Builder::new().name(format!("{name}-{n}")).spawn(move || {
            loop {
                let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                let Ok(job) = job else { return };
                serve(job);
            }
        })?;
    }
    Ok(tx)
}
