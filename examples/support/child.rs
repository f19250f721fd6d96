//! What the benchmark examples that drive a `skiff serve` child process share: the child
//! (killed when dropped), remoting requests built from header fields, and /proc figures.

use std::process::Child;

use skiff::remoting::frame::RemotingCommand;

/// A `skiff serve` child process, killed and reaped when dropped.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A request with these extension (header) fields.
pub fn request(code: i32, ext: &[(&str, &str)]) -> RemotingCommand {
    let mut cmd = RemotingCommand::new_request(code);
    for (k, v) in ext {
        cmd.ext_fields.insert((*k).to_owned(), (*v).to_owned());
    }
    cmd
}

/// A figure in KiB from /proc/PID/status (`VmRSS:`, `VmHWM:`); 0 when unreadable.
pub fn proc_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
