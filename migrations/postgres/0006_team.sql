-- decisions.md v1.3 §15 (PostgreSQL): the instance's owner, invitations, one-time
-- passwords.
--
-- * users.role: `owner` (one per instance: the first account) or `member`. An existing install
--   has accounts and no owner yet: its earliest account becomes the owner (docs/decisions.md).
-- * users.must_change_password: 1 for an account made by `streamwatch users add` until its
--   one-time password is replaced.
-- * invitations: one-time sign-up links minted by the owner. Only a SHA-256 of the link's
--   secret is stored; `used_at`/`used_by` are set in the transaction that creates the account.

ALTER TABLE users ADD COLUMN role TEXT NOT NULL DEFAULT 'member';
ALTER TABLE users ADD COLUMN must_change_password BIGINT NOT NULL DEFAULT 0;
UPDATE users SET role = 'owner'
    WHERE id = (SELECT id FROM users ORDER BY created_at, id LIMIT 1);
-- At most one owner, whatever the races between first sign-ups.
CREATE UNIQUE INDEX users_one_owner ON users (role) WHERE role = 'owner';

CREATE TABLE invitations (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,
    secret_hash TEXT NOT NULL,
    created_by  TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    revoked_at  BIGINT,
    used_at     BIGINT,
    used_by     TEXT REFERENCES users (id) ON DELETE SET NULL
);
CREATE INDEX invitations_recent ON invitations (created_at DESC, seq DESC);
