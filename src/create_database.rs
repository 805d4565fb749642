//! A PostgreSQL database named by `DATABASE_URL` that does not exist yet is created at
//! start-up (decisions.md §15), through the server's `postgres` maintenance database, as
//! `createdb` does. When the role may not create databases, the cause is kept for `/readyz`
//! and the log line says how an administrator creates it.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};

/// SQLSTATE `invalid_catalog_name`: the database does not exist.
const MISSING_DATABASE: &str = "3D000";
/// SQLSTATE `duplicate_database`: another instance created it first.
const DUPLICATE_DATABASE: &str = "42P04";

/// What start-up found about the configured database.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// It exists, or the server cannot be asked (unreachable, bad password): nothing to do here.
    Nothing,
    /// It was missing and this process created it.
    Created { database: String },
    /// It is missing and cannot be created now: `cause` for readiness, `how` for the log.
    Missing { cause: String, how: String },
}

/// Creates the database of `url` when the server says it does not exist.
pub async fn create_if_missing(url: &str) -> Found {
    let Ok(opts) = PgConnectOptions::from_str(url) else {
        return Found::Nothing;
    };
    let opts = opts.disable_statement_logging();
    let database = opts
        .get_database()
        .unwrap_or_else(|| opts.get_username())
        .to_owned();
    match PgConnection::connect_with(&opts).await {
        Ok(conn) => {
            let _ = conn.close().await;
            return Found::Nothing;
        }
        Err(e) if sqlstate(&e).as_deref() == Some(MISSING_DATABASE) => {}
        Err(_) => return Found::Nothing,
    }
    let role = opts.get_username().to_owned();
    let how = format!(
        "create it as a role that may (e.g. the postgres superuser): CREATE DATABASE {} OWNER {};",
        quote_ident(&database),
        quote_ident(&role)
    );
    let mut maintenance = match PgConnection::connect_with(&opts.clone().database("postgres")).await {
        Ok(conn) => conn,
        Err(e) => {
            return Found::Missing {
                cause: format!(
                    "database \"{database}\" does not exist, and the `postgres` database to create it from cannot be reached ({})",
                    short(&e)
                ),
                how,
            }
        }
    };
    let created = sqlx::query(&format!("CREATE DATABASE {}", quote_ident(&database)))
        .execute(&mut maintenance)
        .await;
    let _ = maintenance.close().await;
    match created {
        Ok(_) => Found::Created { database },
        Err(e) if sqlstate(&e).as_deref() == Some(DUPLICATE_DATABASE) => Found::Nothing,
        Err(e) => Found::Missing {
            cause: format!(
                "database \"{database}\" does not exist, and role \"{role}\" may not create it ({})",
                short(&e)
            ),
            how,
        },
    }
}

fn sqlstate(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

/// The server's words without sqlx's prefix.
fn short(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => db.message().to_owned(),
        other => other.to_string(),
    }
}

/// An SQL identifier in double quotes (`"` doubled).
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::quote_ident;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("streamwatch"), "\"streamwatch\"");
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
    }
}
