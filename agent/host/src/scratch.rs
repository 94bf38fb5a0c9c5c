//! A scratch directory for the crate's unit tests, removed when dropped.

/// A fresh directory under the system's temporary directory.
pub(crate) struct Dir(std::path::PathBuf);

impl Dir {
    pub(crate) fn new(prefix: &str) -> Self {
        let mut raw = [0u8; 8];
        pap_shared::Rng::fill(&pap_shared::SystemRng, &mut raw);
        let path = std::env::temp_dir().join(format!("{prefix}-{}", u64::from_le_bytes(raw)));
        #[allow(clippy::unwrap_used, reason = "tests fail loudly")]
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
