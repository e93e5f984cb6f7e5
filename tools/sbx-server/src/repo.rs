//! All database access. Every project method takes the caller's user id
//! and filters by it: tenancy is enforced here, once, not per handler.
//! Another user's project is simply not found.

use std::time::Duration;

use deadpool_postgres::Pool;
use serde::Serialize;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::ApiError;

#[derive(Debug, Clone)]
pub struct Repo {
    pool: Pool,
}

/// A project as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Project {
    pub id: Uuid,
    pub name: String,
    /// creating | running | stopping | deleting | stopped | error |
    /// snapshotting | restoring
    pub status: String,
    /// Why the project is in `error`.
    pub status_reason: Option<String>,
    pub repo: Option<String>,
    /// The sandbox's container, once started.
    pub container: Option<String>,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// How to reach the sandbox's sshd; none for a project made without
    /// `"ssh": true`. Never a private key.
    pub ssh: Option<Ssh>,
}

/// A project's SSH endpoint and the keys a client pins; the private key
/// is in the create and rotate responses only.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Ssh {
    /// Where sshd is published, as of the last start (none before one).
    pub host: Option<String>,
    pub port: Option<u16>,
    /// Always `agent`: the session is the agent's, under every guard.
    pub user: &'static str,
    /// The project's public key, the one key let in.
    pub public_key: String,
    /// sshd's public host key and its SHA256 fingerprint, as
    /// `ssh-keygen -lf` prints it.
    pub host_key: String,
    pub host_key_fingerprint: String,
    /// A known_hosts line pinning the host key at `[host]:port`, for
    /// `StrictHostKeyChecking yes`; none before the first start.
    pub known_hosts: Option<String>,
    /// The new private key (OpenSSH format): only in the response that
    /// made it, never stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_key: Option<String>,
}

const PROJECT_COLUMNS: &str = "id, name, status, status_reason, repo, container_name, \
     to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), \
     ssh_public_key, ssh_host_key, ssh_host_key_fingerprint, ssh_host, ssh_host_port";

fn project(r: &Row) -> Project {
    let public: Option<String> = r.get(7);
    let ssh = public.map(|public_key| {
        let host_key: String = r.get::<_, Option<String>>(8).unwrap_or_default();
        let host: Option<String> = r.get(10);
        let port = r
            .get::<_, Option<i32>>(11)
            .and_then(|p| u16::try_from(p).ok());
        let known_hosts = match (&host, port) {
            (Some(h), Some(p)) if !host_key.is_empty() => Some(format!("[{h}]:{p} {host_key}")),
            _ => None,
        };
        Ssh {
            host,
            port,
            user: "agent",
            public_key,
            host_key,
            host_key_fingerprint: r.get::<_, Option<String>>(9).unwrap_or_default(),
            known_hosts,
            private_key: None,
        }
    });
    Project {
        id: r.get(0),
        name: r.get(1),
        status: r.get(2),
        status_reason: r.get(3),
        repo: r.get(4),
        container: r.get(5),
        created_at: r.get(6),
        ssh,
    }
}

/// Why a refresh token was not accepted.
#[derive(Debug, PartialEq, Eq)]
pub enum Refresh {
    /// Rotated: the user it belongs to and its family (the session).
    Rotated(Uuid, Uuid),
    /// Used before (or its family revoked): the family (named) is now
    /// revoked.
    Reused(Uuid),
    Invalid,
}

#[derive(Debug)]
pub enum CreateError {
    Limit(u32),
    Duplicate,
    Db(ApiError),
}

impl From<tokio_postgres::Error> for CreateError {
    fn from(e: tokio_postgres::Error) -> Self {
        if e.code() == Some(&SqlState::UNIQUE_VIOLATION) {
            Self::Duplicate
        } else {
            Self::Db(e.into())
        }
    }
}

impl From<deadpool_postgres::PoolError> for CreateError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        Self::Db(e.into())
    }
}

impl Repo {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }

    pub async fn ping(&self) -> Result<(), ApiError> {
        self.pool.get().await?.simple_query("SELECT 1").await?;
        Ok(())
    }

    /// False when the email is taken.
    pub async fn create_user(&self, id: Uuid, email: &str, hash: &str) -> Result<bool, ApiError> {
        let c = self.pool.get().await?;
        match c
            .execute(
                "INSERT INTO users (id, email, password_hash) VALUES ($1, $2, $3)",
                &[&id, &email, &hash],
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// (id, password hash) of the user with this email.
    pub async fn user_by_email(&self, email: &str) -> Result<Option<(Uuid, String)>, ApiError> {
        let c = self.pool.get().await?;
        let r = c
            .query_opt(
                "SELECT id, password_hash FROM users WHERE email = $1",
                &[&email],
            )
            .await?;
        Ok(r.map(|r| (r.get(0), r.get(1))))
    }

    /// A new refresh-token family (a session) for `user`: its id.
    pub async fn insert_refresh(
        &self,
        user: Uuid,
        hash: &str,
        ttl_secs: f64,
    ) -> Result<Uuid, ApiError> {
        let c = self.pool.get().await?;
        let family = Uuid::new_v4();
        c.execute(
            "INSERT INTO refresh_tokens (id, user_id, family_id, token_hash, expires_at) \
             VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))",
            &[&Uuid::new_v4(), &user, &family, &hash, &ttl_secs],
        )
        .await?;
        Ok(family)
    }

    /// Use refresh token `old` once: marked used, `new` issued in its
    /// family. A token used before revokes the whole family, so a stolen
    /// token and its rightful holder both lose the session.
    pub async fn rotate_refresh(
        &self,
        old: &str,
        new: &str,
        ttl_secs: f64,
    ) -> Result<Refresh, ApiError> {
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await?;
        let Some(r) = tx
            .query_opt(
                "SELECT user_id, family_id, used_at IS NOT NULL OR revoked_at IS NOT NULL, \
                 expires_at <= now() FROM refresh_tokens WHERE token_hash = $1 FOR UPDATE",
                &[&old],
            )
            .await?
        else {
            return Ok(Refresh::Invalid);
        };
        let (user, family, spent, expired): (Uuid, Uuid, bool, bool) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        if spent {
            tx.execute(
                "UPDATE refresh_tokens SET revoked_at = now() WHERE family_id = $1 AND revoked_at IS NULL",
                &[&family],
            )
            .await?;
            tx.commit().await?;
            return Ok(Refresh::Reused(family));
        }
        if expired {
            return Ok(Refresh::Invalid);
        }
        tx.execute(
            "UPDATE refresh_tokens SET used_at = now() WHERE token_hash = $1",
            &[&old],
        )
        .await?;
        tx.execute(
            "INSERT INTO refresh_tokens (id, user_id, family_id, token_hash, expires_at) \
             VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))",
            &[&Uuid::new_v4(), &user, &family, &new, &ttl_secs],
        )
        .await?;
        tx.commit().await?;
        Ok(Refresh::Rotated(user, family))
    }

    /// Revoke (logout) `user`'s session `sid` and the family of their
    /// refresh token `hash`: the families revoked now.
    pub async fn revoke_family(
        &self,
        user: Uuid,
        sid: Uuid,
        hash: &str,
    ) -> Result<Vec<Uuid>, ApiError> {
        let c = self.pool.get().await?;
        let rows = c
            .query(
                "UPDATE refresh_tokens SET revoked_at = now() \
                 WHERE revoked_at IS NULL AND user_id = $2 AND (family_id = $3 OR family_id IN \
                 (SELECT family_id FROM refresh_tokens WHERE token_hash = $1 AND user_id = $2)) \
                 RETURNING family_id",
                &[&hash, &user, &sid],
            )
            .await?;
        let mut v: Vec<Uuid> = rows.iter().map(|r| r.get(0)).collect();
        v.sort_unstable();
        v.dedup();
        Ok(v)
    }

    /// The sessions revoked within the last `age` (an access token's
    /// life): at start, for [`crate::auth::Keys::end_sessions`]. Not
    /// scoped to a user: the server's, like retention.
    pub async fn ended_sessions(&self, age: Duration) -> Result<Vec<Uuid>, ApiError> {
        let c = self.pool.get().await?;
        let rows = c
            .query(
                "SELECT DISTINCT family_id FROM refresh_tokens \
                 WHERE revoked_at > now() - make_interval(secs => $1)",
                &[&age.as_secs_f64()],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    pub async fn list(&self, user: Uuid) -> Result<Vec<Project>, ApiError> {
        let c = self.pool.get().await?;
        let rows = c
            .query(
                &format!(
                    "SELECT {PROJECT_COLUMNS} FROM projects WHERE user_id = $1 ORDER BY created_at, id"
                ),
                &[&user],
            )
            .await?;
        Ok(rows.iter().map(project).collect())
    }

    pub async fn get(&self, user: Uuid, id: Uuid) -> Result<Option<Project>, ApiError> {
        let c = self.pool.get().await?;
        let r = c
            .query_opt(
                &format!("SELECT {PROJECT_COLUMNS} FROM projects WHERE user_id = $1 AND id = $2"),
                &[&user, &id],
            )
            .await?;
        Ok(r.as_ref().map(project))
    }

    /// A new project in `creating`, unless the user has `max` already.
    /// The count and the insert hold the user's advisory lock, so two
    /// concurrent creations cannot both pass the limit.
    pub async fn create(
        &self,
        user: Uuid,
        id: Uuid,
        name: &str,
        repo: Option<&str>,
        config: Option<&str>,
        max: u32,
    ) -> Result<Project, CreateError> {
        let mut c = self.pool.get().await?;
        let tx = c.transaction().await?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))",
            &[&user.to_string()],
        )
        .await?;
        let n: i64 = tx
            .query_one("SELECT count(*) FROM projects WHERE user_id = $1", &[&user])
            .await?
            .get(0);
        if n >= i64::from(max) {
            return Err(CreateError::Limit(max));
        }
        let r = tx
            .query_one(
                &format!(
                    "INSERT INTO projects (id, user_id, name, repo, config) \
                     VALUES ($1, $2, $3, $4, $5) RETURNING {PROJECT_COLUMNS}"
                ),
                &[&id, &user, &name, &repo, &config],
            )
            .await?;
        tx.commit().await?;
        Ok(project(&r))
    }

    /// Project `id`'s config text (None: sbx's template), if it is `user`'s.
    pub async fn config(&self, user: Uuid, id: Uuid) -> Result<Option<String>, ApiError> {
        let c = self.pool.get().await?;
        let r = c
            .query_opt(
                "SELECT config FROM projects WHERE user_id = $1 AND id = $2",
                &[&user, &id],
            )
            .await?;
        Ok(r.and_then(|r| r.get(0)))
    }

    pub async fn set_status(
        &self,
        user: Uuid,
        id: Uuid,
        status: &str,
        reason: Option<&str>,
        container: Option<&str>,
    ) -> Result<Option<Project>, ApiError> {
        let c = self.pool.get().await?;
        let r = c
            .query_opt(
                &format!(
                    "UPDATE projects SET status = $3, status_reason = $4, \
                     container_name = COALESCE($5, container_name), last_active_at = now() \
                     WHERE user_id = $1 AND id = $2 RETURNING {PROJECT_COLUMNS}"
                ),
                &[&user, &id, &status, &reason, &container],
            )
            .await?;
        Ok(r.as_ref().map(project))
    }

    /// Set `user`'s project `id`'s SSH keys: the public key let in and
    /// sshd's host key (never a private key).
    pub async fn set_ssh_keys(
        &self,
        user: Uuid,
        id: Uuid,
        public: &str,
        host_key: &str,
        fingerprint: &str,
    ) -> Result<Option<Project>, ApiError> {
        let c = self.pool.get().await?;
        let r = c
            .query_opt(
                &format!(
                    "UPDATE projects SET ssh_public_key = $3, ssh_host_key = $4, \
                     ssh_host_key_fingerprint = $5 \
                     WHERE user_id = $1 AND id = $2 RETURNING {PROJECT_COLUMNS}"
                ),
                &[&user, &id, &public, &host_key, &fingerprint],
            )
            .await?;
        Ok(r.as_ref().map(project))
    }

    /// Where `user`'s project `id`'s sshd is published now.
    pub async fn set_ssh_endpoint(
        &self,
        user: Uuid,
        id: Uuid,
        host: &str,
        port: u16,
    ) -> Result<(), ApiError> {
        let c = self.pool.get().await?;
        c.execute(
            "UPDATE projects SET ssh_host = $3, ssh_host_port = $4 WHERE user_id = $1 AND id = $2",
            &[&user, &id, &host, &i32::from(port)],
        )
        .await?;
        Ok(())
    }

    /// How many of `user`'s projects other than `except` are running or
    /// starting.
    pub async fn running(&self, user: Uuid, except: Uuid) -> Result<i64, ApiError> {
        let c = self.pool.get().await?;
        Ok(c.query_one(
            "SELECT count(*) FROM projects WHERE user_id = $1 AND id <> $2 \
                 AND status IN ('running', 'creating', 'stopping', 'deleting', 'snapshotting', 'restoring')",
            &[&user, &except],
        )
        .await?
        .get(0))
    }

    pub async fn delete(&self, user: Uuid, id: Uuid) -> Result<bool, ApiError> {
        let c = self.pool.get().await?;
        let n = c
            .execute(
                "DELETE FROM projects WHERE user_id = $1 AND id = $2",
                &[&user, &id],
            )
            .await?;
        Ok(n == 1)
    }

    /// At start: (owner, id, status) of every project a server left
    /// mid-transition, for [`crate::api`] to check against Docker. The
    /// only query across users.
    pub async fn stuck(&self) -> Result<Vec<(Uuid, Uuid, String)>, ApiError> {
        let c = self.pool.get().await?;
        let rows = c
            .query(
                "SELECT user_id, id, status FROM projects \
                 WHERE status IN ('creating', 'stopping', 'deleting', 'snapshotting', 'restoring')",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }
}

/// Seed 001's inactivity check: the second query across users, the
/// server's own as `stuck` is.
impl Repo {
    /// (owner, id) of every running project nobody connected to (or
    /// started) for `after`, with no terminal session open.
    pub async fn idle(&self, after: Duration) -> Result<Vec<(Uuid, Uuid)>, ApiError> {
        let c = self.pool.get().await?;
        let rows = c
            .query(
                &format!("SELECT p.user_id, p.id FROM projects p WHERE {IDLE}"),
                &[&after.as_secs_f64()],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// `user`'s project `id` set `stopping` (reason idle) if it is still
    /// running and idle: false when a connection came first, which wins.
    pub async fn claim_idle(
        &self,
        user: Uuid,
        id: Uuid,
        after: Duration,
    ) -> Result<bool, ApiError> {
        let c = self.pool.get().await?;
        let n = c
            .execute(
                &format!(
                    "UPDATE projects p SET status = 'stopping', status_reason = 'idle' \
                     WHERE p.user_id = $2 AND p.id = $3 AND {IDLE}"
                ),
                &[&after.as_secs_f64(), &user, &id],
            )
            .await?;
        Ok(n == 1)
    }
}

/// Running, neither connected to nor started within `$1` seconds, and no
/// terminal open (a session that stays open is use, however quiet).
const IDLE: &str = "p.status = 'running' \
     AND COALESCE(GREATEST(p.last_connection_at, p.last_active_at), p.last_active_at) \
         < now() - make_interval(secs => $1) \
     AND NOT EXISTS (SELECT 1 FROM terminal_sessions t \
         WHERE t.project_id = p.id AND t.ended_at IS NULL)";

/// One terminal session of a project, as `GET /projects/{id}/sessions`
/// lists it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TerminalSession {
    pub id: Uuid,
    pub user_id: Uuid,
    /// RFC 3339, UTC.
    pub started_at: String,
    /// RFC 3339, UTC; none while the session is open (or if the server
    /// stopped during it).
    pub ended_at: Option<String>,
    pub end_reason: Option<String>,
}

const UTC: &str = "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'";

/// The web terminal's rows, scoped to the caller like every other query.
impl Repo {
    /// Mark `user`'s project `id` connected now; false when it is not
    /// theirs or no longer running (an idle stop came first).
    pub async fn touch_connection(&self, user: Uuid, id: Uuid) -> Result<bool, ApiError> {
        let c = self.pool.get().await?;
        let n = c
            .execute(
                "UPDATE projects SET last_connection_at = now() \
                 WHERE user_id = $1 AND id = $2 AND status = 'running'",
                &[&user, &id],
            )
            .await?;
        Ok(n == 1)
    }

    /// A new session `session` on `user`'s project `id`; false when the
    /// project is not theirs (or is gone).
    pub async fn session_started(
        &self,
        user: Uuid,
        id: Uuid,
        session: Uuid,
    ) -> Result<bool, ApiError> {
        let c = self.pool.get().await?;
        let n = c
            .execute(
                "INSERT INTO terminal_sessions (id, project_id, user_id) \
                 SELECT $3, id, user_id FROM projects WHERE user_id = $1 AND id = $2",
                &[&user, &id, &session],
            )
            .await?;
        Ok(n == 1)
    }

    pub async fn session_ended(
        &self,
        user: Uuid,
        session: Uuid,
        reason: &str,
    ) -> Result<(), ApiError> {
        let c = self.pool.get().await?;
        c.execute(
            "UPDATE terminal_sessions SET ended_at = now(), end_reason = $3 \
             WHERE user_id = $1 AND id = $2",
            &[&user, &session, &reason],
        )
        .await?;
        Ok(())
    }

    /// Every session of every user that ended more than `age` ago, deleted;
    /// (project, session) of each, for their recordings. The one query not
    /// scoped to a user: retention is the server's, not a caller's.
    pub async fn expire_sessions(&self, age: Duration) -> Result<Vec<(Uuid, Uuid)>, ApiError> {
        let c = self.pool.get().await?;
        let rows = c
            .query(
                "DELETE FROM terminal_sessions \
                 WHERE ended_at < now() - make_interval(secs => $1) \
                 RETURNING project_id, id",
                &[&age.as_secs_f64()],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// The sessions of `user`'s project `id`, oldest first; None when the
    /// project is not theirs.
    pub async fn sessions(
        &self,
        user: Uuid,
        id: Uuid,
    ) -> Result<Option<Vec<TerminalSession>>, ApiError> {
        if self.get(user, id).await?.is_none() {
            return Ok(None);
        }
        let c = self.pool.get().await?;
        let rows = c
            .query(
                &format!(
                    "SELECT s.id, s.user_id, to_char(s.started_at AT TIME ZONE 'UTC', {UTC}), \
                     to_char(s.ended_at AT TIME ZONE 'UTC', {UTC}), s.end_reason \
                     FROM terminal_sessions s JOIN projects p ON p.id = s.project_id \
                     WHERE p.user_id = $1 AND p.id = $2 ORDER BY s.started_at, s.id"
                ),
                &[&user, &id],
            )
            .await?;
        Ok(Some(
            rows.iter()
                .map(|r| TerminalSession {
                    id: r.get(0),
                    user_id: r.get(1),
                    started_at: r.get(2),
                    ended_at: r.get(3),
                    end_reason: r.get(4),
                })
                .collect(),
        ))
    }
}
