//! The shared conformance suite, instantiated for both backends of this crate.

mod in_memory {
    use agent_memory::InMemoryBackend;
    use agent_memory::conformance::Fixture;

    agent_memory::memory_conformance_tests!(|embedder, clock| async move {
        let backend = InMemoryBackend::builder()
            .embedder(embedder)
            .clock(clock)
            .build()?;
        Ok(Fixture::new(backend))
    });
}

mod sqlite {
    use agent_memory::SqliteBackend;
    use agent_memory::conformance::Fixture;
    use agent_op::MemoryError;

    agent_memory::memory_conformance_tests!(|embedder, clock| async move {
        let dir = tempfile::tempdir()
            .map_err(|e| MemoryError::Storage(format!("creating a temp dir: {e}")))?;
        let backend = SqliteBackend::builder(dir.path().join("memory.db"))
            .embedder(embedder)
            .clock(clock)
            .open()
            .await?;
        Ok(Fixture::new(backend).with_guard(dir))
    });
}
