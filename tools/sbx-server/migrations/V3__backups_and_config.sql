-- Snapshot and restore get transitional statuses of their own, so a
-- server stopped during one is reconciled at its next start like a start.
ALTER TABLE projects DROP CONSTRAINT projects_status_check;
ALTER TABLE projects ADD CONSTRAINT projects_status_check
    CHECK (status IN ('creating', 'running', 'stopping', 'deleting', 'stopped', 'error',
                      'snapshotting', 'restoring'));

-- The project's .agent-sandbox/config.toml as the request (or the
-- server's default file) gave it, checked; NULL: sbx's template.
ALTER TABLE projects ADD COLUMN config TEXT;
