//! Per (topic, queue id) consume-queue index files (implementation pending).
