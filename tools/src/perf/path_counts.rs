//! The per-path part of a report on a multipath head: the policy, and the commands each path
//! (controller) carried over the whole run, failovers included.

use serde_json::{json, Value};

/// I/Os per path of a run on a head.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathCounts {
    /// The path policy (`numa`, `round-robin`, `queue-depth`).
    pub policy: &'static str,
    /// Each path's controller name, by controller index.
    pub names: Vec<String>,
    /// Commands sent per path, by controller index.
    pub ios: Vec<u64>,
}

impl PathCounts {
    /// Adds a worker's per-path counts (indices past the known paths are dropped).
    pub fn add(&mut self, per_path: &[u64]) {
        for (i, n) in per_path.iter().enumerate().take(self.names.len()) {
            if let Some(slot) = self.ios.get_mut(i) {
                *slot += n;
            }
        }
    }

    /// Commands on every path together.
    pub fn total(&self) -> u64 {
        self.ios.iter().sum()
    }

    fn share(&self, n: u64) -> f64 {
        match self.total() {
            0 => 0.0,
            t => n as f64 * 100.0 / t as f64,
        }
    }

    /// The text table: one line per path with its commands and share.
    pub fn text(&self) -> String {
        let width = self
            .names
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(0)
            .max(10);
        let mut s = format!(
            "I/Os per path (policy {}, whole run, failovers included):\n  {:<4} {:<width$} {:>12} {:>7}\n",
            self.policy, "path", "controller", "I/Os", "share"
        );
        for (i, (name, n)) in self.names.iter().zip(&self.ios).enumerate() {
            s += &format!("  {i:<4} {name:<width$} {n:>12} {:>6.1}%\n", self.share(*n));
        }
        s += &format!("  {:<4} {:<width$} {:>12}\n", "all", "", self.total());
        s
    }

    /// The JSON: `{"policy", "total", "paths": [{"path", "controller", "ios", "share_pct"}]}`.
    pub fn json(&self) -> Value {
        json!({
            "policy": self.policy,
            "total": self.total(),
            "paths": self.names.iter().zip(&self.ios).enumerate().map(|(i, (name, n))| json!({
                "path": i,
                "controller": name,
                "ios": n,
                "share_pct": self.share(*n),
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_and_show_shares() {
        let mut c = PathCounts {
            policy: "round-robin",
            names: vec!["a".into(), "bb".into()],
            ios: vec![0, 0],
        };
        c.add(&[3, 1, 99]);
        c.add(&[1, 3]);
        assert_eq!(c.ios, [4, 4]);
        assert_eq!(c.total(), 8);
        let t = c.text();
        assert!(t.starts_with("I/Os per path (policy round-robin"), "{t}");
        assert!(
            t.contains("  0    a                     4   50.0%\n"),
            "{t}"
        );
        let v = c.json();
        assert_eq!(v["total"], 8);
        assert_eq!(v["paths"][1]["controller"], "bb");
        assert_eq!(v["paths"][1]["share_pct"], 50.0);
        assert_eq!(PathCounts::default().share(0), 0.0);
    }
}
