-- The web terminal (issue 42): when a project's terminal was last
-- connected (the idle check reads it), and each terminal session, whose
-- asciicast recording is in the project's directory.
ALTER TABLE projects ADD COLUMN last_connection_at TIMESTAMPTZ;

CREATE TABLE terminal_sessions (
    id         UUID PRIMARY KEY,
    project_id UUID NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    user_id    UUID NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    ended_at   TIMESTAMPTZ,
    end_reason TEXT
);
CREATE INDEX terminal_sessions_project ON terminal_sessions (project_id, started_at);
