//! The one migration runner of streamwatch: the numbered SQL files of every engine's
//! folder `migrations/<engine>/`, found and embedded at compile time ([`CLICKHOUSE`],
//! [`POSTGRES`], [`SQLITE`], [`TELEMETRY_SQLITE`]), the SHA-256 of each, and the plan that
//! says what to apply and refuses a file changed since it was applied.
//!
//! Every engine migrates by the same rule; a driver beside each connection does the I/O
//! (the server's `db.rs` for the relational store on PostgreSQL and SQLite, and the ingest
//! sinks for the telemetry store, which also holds the tables of the `analytics` crate:
//! `view_batches`' readers, `qoe_views` and `qoe_refresh_state` are migrated there on its
//! behalf, from the same folder):
//!
//! 1. create the table of applied migrations when missing; one made before checksums gets
//!    its `checksum` column;
//! 2. read what is applied: each version and its recorded checksum (none for rows written
//!    before checksums);
//! 3. [`Set::plan`]: when an applied file's SHA-256 differs from the recorded one, refuse
//!    with one line naming the file ([`Changed`]); else the files not applied yet, in
//!    version order, and the applied ones whose checksum is not recorded yet;
//! 4. apply each pending file, its statements then its row with its checksum (in one
//!    transaction where the engine has them), and record the missing checksums: of the
//!    files as they are now, since the runner before checksums kept no trace of what it
//!    applied.
//!
//! Several instances starting at once: serialised where the engine can (PostgreSQL: an
//! advisory lock; SQLite: the writer's lock), and idempotent where it cannot (ClickHouse:
//! `IF NOT EXISTS` statements and a column check before each `ADD COLUMN`, so a file applied
//! twice is harmless, and its row recorded twice is read once).

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

include!(concat!(env!("OUT_DIR"), "/sets.rs"));

/// The migrations of one engine's folder.
#[derive(Debug)]
pub struct Set {
    /// The folder's name under `migrations/`, e.g. `postgres`.
    pub engine: &'static str,
    /// Every file, in version order.
    pub migrations: &'static [Migration],
}

/// One file `migrations/<engine>/<version>_<name>.sql`.
#[derive(Debug, PartialEq, Eq)]
pub struct Migration {
    /// The number the file name starts with.
    pub version: i64,
    /// The file name without `.sql`, e.g. `0002_qoe_views`.
    pub name: &'static str,
    /// The file's text.
    pub sql: &'static str,
}

impl Migration {
    /// Lowercase hex SHA-256 of the file's bytes: what is recorded when it is applied.
    pub fn checksum(&self) -> String {
        let mut hex = String::with_capacity(64);
        for b in Sha256::digest(self.sql.as_bytes()) {
            let _ = write!(hex, "{b:02x}");
        }
        hex
    }

    /// The file's statements, for drivers that send one at a time: split at a `;` that ends
    /// a line, `--` comment lines and blank lines dropped. (Migration files keep to that
    /// layout; a client that binds `?` must not see one inside a comment.)
    pub fn statements(&self) -> Vec<String> {
        statements(self.sql)
    }
}

/// An applied migration as its engine's table records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub version: i64,
    /// `None` for a row written before checksums were recorded.
    pub checksum: Option<String>,
}

/// What a start-up has to do.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan<'a> {
    /// Files not applied yet, in version order.
    pub pending: Vec<&'a Migration>,
    /// Files applied without a recorded checksum: record theirs.
    pub unrecorded: Vec<&'a Migration>,
}

/// An applied migration whose file changed since: the start-up is refused (a changed file
/// would leave this database and a fresh one with different schemas).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "migration {name} of migrations/{engine}/ was changed after it was applied \
     (SHA-256 {found:.12}…, recorded {recorded:.12}…): restore the file and make the change a new migration"
)]
pub struct Changed {
    pub engine: &'static str,
    pub name: &'static str,
    pub recorded: String,
    pub found: String,
}

impl Set {
    /// What to do given what is `applied`; [`Changed`] for the first applied file (by
    /// version) whose checksum differs from the recorded one. Applied versions with no file
    /// (a newer build's) are left alone.
    pub fn plan(&self, applied: &[Applied]) -> Result<Plan<'static>, Changed> {
        let mut plan = Plan {
            pending: Vec::new(),
            unrecorded: Vec::new(),
        };
        for m in self.migrations {
            match applied.iter().find(|a| a.version == m.version) {
                None => plan.pending.push(m),
                Some(Applied { checksum: None, .. }) => plan.unrecorded.push(m),
                Some(Applied {
                    checksum: Some(recorded),
                    ..
                }) => {
                    let found = m.checksum();
                    if *recorded != found {
                        return Err(Changed {
                            engine: self.engine,
                            name: m.name,
                            recorded: recorded.clone(),
                            found,
                        });
                    }
                }
            }
        }
        Ok(plan)
    }
}

/// The statements of `sql` as [`Migration::statements`] splits a file.
pub fn statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut push = |current: &mut String| {
        let stmt = current.trim().trim_end_matches(';').trim();
        if !stmt.is_empty() {
            out.push(stmt.to_owned());
        }
        current.clear();
    };
    for line in sql.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("--") || trimmed.is_empty() {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if trimmed.ends_with(';') {
            push(&mut current);
        }
    }
    push(&mut current);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Migration = Migration {
        version: 1,
        name: "0001_a",
        sql: "CREATE TABLE a (x INT);\n",
    };
    const B: Migration = Migration {
        version: 2,
        name: "0002_b",
        sql: "CREATE TABLE b (x INT);\n",
    };
    static SET: Set = Set {
        engine: "test",
        migrations: &[A, B],
    };

    fn applied(version: i64, checksum: Option<String>) -> Applied {
        Applied { version, checksum }
    }

    #[test]
    fn every_engine_folder_is_found_in_version_order() {
        for set in [&CLICKHOUSE, &POSTGRES, &SQLITE, &TELEMETRY_SQLITE] {
            assert!(!set.migrations.is_empty(), "{}", set.engine);
            for pair in set.migrations.windows(2) {
                assert!(pair[0].version < pair[1].version, "{}", set.engine);
            }
            assert_eq!(set.migrations[0].version, 1, "{}", set.engine);
            for m in set.migrations {
                assert!(
                    m.name.starts_with(&format!("{:04}_", m.version)),
                    "{}",
                    m.name
                );
            }
        }
        assert_eq!(POSTGRES.engine, "postgres");
        assert_eq!(TELEMETRY_SQLITE.engine, "telemetry-sqlite");
        assert_eq!(CLICKHOUSE.migrations[1].name, "0002_qoe_views");
        assert!(CLICKHOUSE.migrations[1].sql.contains("qoe_views"));
        // The relational engines have the same history, file by file.
        let names = |s: &Set| s.migrations.iter().map(|m| m.name).collect::<Vec<_>>();
        assert_eq!(names(&POSTGRES), names(&SQLITE));
    }

    #[test]
    fn checksums_are_the_sha256_of_the_file() {
        assert_eq!(
            Migration {
                version: 1,
                name: "0001_x",
                sql: "abc"
            }
            .checksum(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_ne!(A.checksum(), B.checksum());
    }

    #[test]
    fn a_fresh_database_applies_everything_in_order() {
        let plan = SET.plan(&[]).expect("plan");
        assert_eq!(plan.pending, vec![&A, &B]);
        assert!(plan.unrecorded.is_empty());
    }

    #[test]
    fn an_up_to_date_database_has_nothing_to_do() {
        let plan = SET
            .plan(&[
                applied(1, Some(A.checksum())),
                applied(2, Some(B.checksum())),
                // A newer build's migration: left alone.
                applied(3, Some("f".repeat(64))),
            ])
            .expect("plan");
        assert!(plan.pending.is_empty() && plan.unrecorded.is_empty());
    }

    #[test]
    fn rows_from_before_checksums_get_theirs_recorded() {
        let plan = SET.plan(&[applied(1, None)]).expect("plan");
        assert_eq!(plan.pending, vec![&B]);
        assert_eq!(plan.unrecorded, vec![&A]);
    }

    #[test]
    fn a_changed_file_is_refused_with_one_line_naming_it() {
        let recorded = "0".repeat(64);
        let e = SET
            .plan(&[applied(1, Some(A.checksum())), applied(2, Some(recorded))])
            .expect_err("changed");
        assert_eq!(e.name, "0002_b");
        let line = e.to_string();
        assert!(!line.contains('\n'));
        assert_eq!(
            line,
            format!(
                "migration 0002_b of migrations/test/ was changed after it was applied \
                 (SHA-256 {}…, recorded 000000000000…): restore the file and make the change a new migration",
                &B.checksum()[..12]
            )
        );
    }

    #[test]
    fn migration_files_split_into_their_statements() {
        for set in [&CLICKHOUSE, &POSTGRES, &SQLITE, &TELEMETRY_SQLITE] {
            for m in set.migrations {
                let parts = m.statements();
                assert!(!parts.is_empty(), "{}", m.name);
                for p in &parts {
                    assert!(!p.ends_with(';') && !p.trim().is_empty(), "{}: {p}", m.name);
                    assert!(!p.contains("--"), "{}: comment left in {p}", m.name);
                }
            }
        }
        assert_eq!(
            statements("-- c\nCREATE TABLE a (x INT);\n\nCREATE INDEX i\n  ON a (x);\nSELECT 1"),
            vec![
                "CREATE TABLE a (x INT)",
                "CREATE INDEX i\n  ON a (x)",
                "SELECT 1"
            ]
        );
        assert!(statements("-- only a comment\n\n").is_empty());
    }
}
