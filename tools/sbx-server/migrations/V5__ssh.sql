-- SSH (issue 43): a project made with "ssh": true has its own key pair.
-- Only the public half is kept here, with sshd's host key (and its
-- fingerprint) that clients pin; the private key is in the create (or
-- rotate) response alone, unlike the seed's ssh_private_key column.
ALTER TABLE projects ADD COLUMN ssh_public_key TEXT;
ALTER TABLE projects ADD COLUMN ssh_host_key TEXT;
ALTER TABLE projects ADD COLUMN ssh_host_key_fingerprint TEXT;
-- Where the running sandbox's sshd is published, as of its last start.
ALTER TABLE projects ADD COLUMN ssh_host TEXT;
ALTER TABLE projects ADD COLUMN ssh_host_port INT;
