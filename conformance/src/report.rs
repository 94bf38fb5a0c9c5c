//! Results as text, JSON and JUnit XML.

use std::time::Duration;

/// How a case ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every check held.
    Passed,
    /// A check failed, or the case could not run (which is not a pass).
    Failed,
}

/// One case's result.
#[derive(Clone, Debug)]
pub struct CaseResult {
    /// The case id.
    pub id: &'static str,
    /// The requirements it shows.
    pub requirements: &'static [&'static str],
    /// Passed or failed.
    pub outcome: Outcome,
    /// How long it took.
    pub duration: Duration,
    /// Why it failed (names the requirement), empty on a pass.
    pub message: String,
}

impl CaseResult {
    /// Runs a case's `body` within `limit` and records how it ended: passed, failed with the
    /// body's message, or failed for running past `limit` (a case that cannot finish is not a
    /// pass).
    pub async fn timed(
        id: &'static str,
        requirements: &'static [&'static str],
        limit: Duration,
        body: impl std::future::Future<Output = Result<(), String>>,
    ) -> Self {
        let started = std::time::Instant::now();
        let (outcome, message) = match tokio::time::timeout(limit, body).await {
            Ok(Ok(())) => (Outcome::Passed, String::new()),
            Ok(Err(message)) => (Outcome::Failed, message),
            Err(_) => (Outcome::Failed, format!("{id} took longer than {} s", limit.as_secs())),
        };
        Self {
            id,
            requirements,
            outcome,
            duration: started.elapsed(),
            message,
        }
    }
}

/// A run's results.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// In run order.
    pub results: Vec<CaseResult>,
}

impl Report {
    /// Passed and failed counts.
    pub fn counts(&self) -> (usize, usize) {
        let passed = self.results.iter().filter(|r| r.outcome == Outcome::Passed).count();
        (passed, self.results.len() - passed)
    }

    /// Whether there was at least one case and every case passed.
    pub fn all_passed(&self) -> bool {
        !self.results.is_empty() && self.counts().1 == 0
    }

    /// One line per case, then `N passed, N failed`.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for r in &self.results {
            let outcome = match r.outcome {
                Outcome::Passed => "passed",
                Outcome::Failed => "failed",
            };
            out.push_str(&format!(
                "{outcome:8} {:50} {:6.2}s {}\n",
                r.id,
                r.duration.as_secs_f64(),
                r.message
            ));
        }
        let (passed, failed) = self.counts();
        out.push_str(&format!("{passed} passed, {failed} failed\n"));
        out
    }

    /// The report as JSON.
    pub fn json(&self) -> serde_json::Value {
        let (passed, failed) = self.counts();
        serde_json::json!({
            "passed": passed,
            "failed": failed,
            "results": self.results.iter().map(|r| serde_json::json!({
                "id": r.id,
                "requirements": r.requirements,
                "outcome": if r.outcome == Outcome::Passed { "passed" } else { "failed" },
                "duration_seconds": r.duration.as_secs_f64(),
                "message": r.message,
            })).collect::<Vec<_>>(),
        })
    }

    /// The report as JUnit XML.
    pub fn junit(&self, suite: &str) -> String {
        let (_, failed) = self.counts();
        let mut out = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"{}\" tests=\"{}\" failures=\"{failed}\">\n",
            xml(suite),
            self.results.len()
        );
        for r in &self.results {
            out.push_str(&format!(
                "  <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\">",
                xml(suite),
                xml(r.id),
                r.duration.as_secs_f64()
            ));
            if r.outcome == Outcome::Failed {
                out.push_str(&format!("<failure message=\"{}\"/>", xml(&r.message)));
            }
            out.push_str("</testcase>\n");
        }
        out.push_str("</testsuite>\n");
        out
    }
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
