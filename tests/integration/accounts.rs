//! Accounts (decisions.md §4, §15): sign-up, sign-in, sign-out, get-session, the cookie,
//! sliding expiry, failures with better-auth bodies, the Origin check and the rate limit; the
//! owner and invitations, password changes and one-time passwords.

use crate::common;
use crate::on_both_engines;

use common::{parts, session_cookie_of, set_cookie_header, spawn_with, Body, Engine, TestApp};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::Row;

const PW: &str = "correct-horse-battery";

async fn sign_up(app: &TestApp, body: Value) -> (StatusCode, Value, Option<String>) {
    let r = app.post("/api/auth/sign-up/email", None, body).await;
    let cookie = session_cookie_of(&r);
    let (s, b) = parts(r).await;
    (s, b, cookie)
}

fn failure(code: &str, message: &str) -> Value {
    json!({ "code": code, "message": message })
}

async fn sign_up_returns_token_user_and_cookie(app: TestApp) {
    let r = app
        .post(
            "/api/auth/sign-up/email",
            None,
            json!({ "name": "Ada", "email": "Ada@Example.com", "password": PW }),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let set_cookie = set_cookie_header(r.headers()).expect("cookie set");
    for attr in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(
            set_cookie.split("; ").any(|a| a == attr),
            "{set_cookie} lacks {attr}"
        );
    }
    let cookie = session_cookie_of(&r).expect("cookie value");
    let (_, body) = parts(r).await;
    let token = body["token"].as_str().expect("token").to_owned();
    let id = body["user"]["id"].as_str().expect("id").to_owned();
    assert_eq!(
        body,
        json!({ "token": token, "user": { "id": id, "email": "ada@example.com", "name": "Ada" } })
    );
    assert!(
        cookie.starts_with(&format!("{token}.")),
        "cookie is the signed token"
    );

    // The session row keeps only a hash of the token.
    let rows = sqlx::query("SELECT token_hash FROM sessions")
        .fetch_all(&app.state.db.pool)
        .await
        .expect("rows");
    assert_eq!(rows.len(), 1);
    let stored: String = rows[0].get("token_hash");
    assert_ne!(stored, token);
    assert_eq!(stored, streamwatch::accounts::token::sha256_hex(&token));
    // And the password only as an argon2id hash.
    let pw: String = sqlx::query("SELECT password_hash FROM users")
        .fetch_one(&app.state.db.pool)
        .await
        .expect("row")
        .get(0);
    assert!(pw.starts_with("$argon2id$"));

    let (s, b) = parts(app.get("/api/auth/get-session", Some(&cookie)).await).await;
    assert_eq!(s, StatusCode::OK);
    // The first account owns the instance, whatever the sign-up mode.
    assert_eq!(
        b["user"],
        json!({ "id": id, "email": "ada@example.com", "name": "Ada", "role": "owner", "mustChangePassword": false })
    );
    assert_eq!(b["session"]["userId"], json!(id));
    assert!(common::is_iso_ms(&b["session"]["expiresAt"]));
}

async fn sign_up_failures_mirror_better_auth(app: TestApp) {
    let cases = [
        (
            json!({ "email": "a@b.io", "password": PW }),
            400,
            failure(
                "VALIDATION_ERROR",
                "[body.name] Invalid input: expected string, received undefined",
            ),
        ),
        (
            json!({ "name": "A", "password": PW }),
            400,
            failure(
                "VALIDATION_ERROR",
                "[body.email] Invalid input: expected string, received undefined",
            ),
        ),
        (
            json!({ "name": "A", "email": "a@b.io" }),
            400,
            failure(
                "VALIDATION_ERROR",
                "[body.password] Invalid input: expected string, received undefined",
            ),
        ),
        (
            json!({ "name": 7, "email": "a@b.io", "password": PW }),
            400,
            failure(
                "VALIDATION_ERROR",
                "[body.name] Invalid input: expected string, received number",
            ),
        ),
        (
            json!({ "name": "A", "email": "not-an-email", "password": PW }),
            400,
            failure("VALIDATION_ERROR", "[body.email] Invalid email address"),
        ),
        (
            json!({ "name": "A", "email": "a@b.io", "password": "short" }),
            400,
            failure("PASSWORD_TOO_SHORT", "Password too short"),
        ),
        (
            json!({ "name": "A", "email": "a@b.io", "password": "x".repeat(129) }),
            400,
            failure("PASSWORD_TOO_LONG", "Password too long"),
        ),
    ];
    for (body, status, expected) in cases {
        let (s, b, cookie) = sign_up(&app, body.clone()).await;
        assert_eq!((s.as_u16(), &b), (status, &expected), "{body}");
        assert!(cookie.is_none());
    }
    for raw in ["{not json", "[]", ""] {
        let r = app
            .send(
                Method::POST,
                "/api/auth/sign-up/email",
                None,
                Some(Body::Raw(raw.into())),
            )
            .await;
        assert_eq!(
            parts(r).await,
            (
                StatusCode::BAD_REQUEST,
                failure("BAD_REQUEST", "Invalid JSON in request body")
            )
        );
    }
    let n: i64 = sqlx::query("SELECT COUNT(*) FROM users")
        .fetch_one(&app.state.db.pool)
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 0, "nothing stored");

    // 8 and 128 characters are both fine.
    assert_eq!(
        sign_up(
            &app,
            json!({ "name": "A", "email": "min@b.io", "password": "12345678" })
        )
        .await
        .0,
        StatusCode::OK
    );
    assert_eq!(
        sign_up(
            &app,
            json!({ "name": "A", "email": "max@b.io", "password": "y".repeat(128) })
        )
        .await
        .0,
        StatusCode::OK
    );
    let (s, b, _) = sign_up(
        &app,
        json!({ "name": "B", "email": "MIN@b.io", "password": PW }),
    )
    .await;
    assert_eq!(
        (s, b),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            failure(
                "USER_ALREADY_EXISTS_USE_ANOTHER_EMAIL",
                "User already exists. Use another email."
            )
        )
    );
}

async fn sign_in_issues_a_fresh_session_each_time(app: TestApp) {
    let first = app.user("grace@example.com").await;
    let creds = json!({ "email": "grace@example.com", "password": PW });
    let r1 = app
        .post("/api/auth/sign-in/email", None, creds.clone())
        .await;
    assert_eq!(r1.status(), StatusCode::OK);
    let c1 = session_cookie_of(&r1).expect("cookie");
    let (_, b1) = parts(r1).await;
    assert_eq!(b1["user"]["email"], "grace@example.com");
    assert!(b1["token"].is_string());
    let c2 =
        session_cookie_of(&app.post("/api/auth/sign-in/email", None, creds).await).expect("cookie");
    assert!(first != c1 && c1 != c2, "new token at every sign-in");
    for c in [&first, &c1, &c2] {
        assert_eq!(
            app.get("/api/v1/streams", Some(c)).await.status(),
            StatusCode::OK
        );
    }
}

async fn sign_in_failures_are_indistinguishable(app: TestApp) {
    app.user("grace@example.com").await;
    let bad = failure("INVALID_EMAIL_OR_PASSWORD", "Invalid email or password");
    for body in [
        json!({ "email": "grace@example.com", "password": "wrong-password" }),
        json!({ "email": "nobody@example.com", "password": PW }),
    ] {
        let r = app.post("/api/auth/sign-in/email", None, body).await;
        assert!(session_cookie_of(&r).is_none());
        assert_eq!(parts(r).await, (StatusCode::UNAUTHORIZED, bad.clone()));
    }
    let (s, b) = parts(
        app.post(
            "/api/auth/sign-in/email",
            None,
            json!({ "email": "grace@example.com" }),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, b),
        (
            StatusCode::BAD_REQUEST,
            failure(
                "VALIDATION_ERROR",
                "[body.password] Invalid input: expected string, received undefined"
            )
        )
    );
    let (s, b) = parts(
        app.post(
            "/api/auth/sign-in/email",
            None,
            json!({ "email": "nope", "password": PW }),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, b),
        (
            StatusCode::BAD_REQUEST,
            failure("VALIDATION_ERROR", "[body.email] Invalid email address")
        )
    );
}

async fn sign_out_ends_the_session(app: TestApp) {
    let cookie = app.user("a@example.com").await;
    let r = app
        .post("/api/auth/sign-out", Some(&cookie), json!({}))
        .await;
    let cleared = set_cookie_header(r.headers()).expect("cookie cleared");
    assert!(cleared.contains("Max-Age=0"));
    assert_eq!(parts(r).await, (StatusCode::OK, json!({ "success": true })));
    assert_eq!(
        parts(app.get("/api/v1/streams", Some(&cookie)).await).await,
        (StatusCode::UNAUTHORIZED, json!({ "error": "Unauthorized" }))
    );
    assert_eq!(
        parts(app.get("/api/auth/get-session", Some(&cookie)).await).await,
        (StatusCode::OK, Value::Null)
    );
    assert_eq!(
        parts(app.get("/api/auth/get-session", None).await).await,
        (StatusCode::OK, Value::Null)
    );
}

async fn tampered_and_expired_cookies_are_unauthorized(app: TestApp) {
    let cookie = app.user("a@example.com").await;
    let (token, sig) = cookie.split_once('.').expect("signed");
    let other_token = streamwatch::accounts::token::new_token();
    for bad in [
        format!("{token}.AAAA{sig}"),
        format!("{other_token}.{sig}"),
        token.to_owned(),
        "garbage".into(),
        String::new(),
    ] {
        assert_eq!(
            parts(app.get("/api/v1/agents", Some(&bad)).await).await,
            (StatusCode::UNAUTHORIZED, json!({ "error": "Unauthorized" })),
            "{bad}"
        );
    }
    let session_id: String = sqlx::query("SELECT id FROM sessions")
        .fetch_one(&app.state.db.pool)
        .await
        .expect("row")
        .get(0);
    app.state
        .accounts
        .age_session(&session_id, 8 * 24 * 3600 * 1000)
        .await
        .expect("age");
    assert_eq!(
        app.get("/api/v1/agents", Some(&cookie)).await.status(),
        StatusCode::UNAUTHORIZED
    );
}

async fn sessions_slide_when_used_after_a_day(app: TestApp) {
    let cookie = app.user("a@example.com").await;
    let (session_id, before): (String, i64) = {
        let r = sqlx::query("SELECT id, expires_at FROM sessions")
            .fetch_one(&app.state.db.pool)
            .await
            .expect("row");
        (r.get(0), r.get(1))
    };
    // Used within the first day: no refresh.
    let r = app.get("/api/v1/streams", Some(&cookie)).await;
    assert!(set_cookie_header(r.headers()).is_none());
    // Six days old (one left): the next use extends it to 7 days from now and re-sends the cookie.
    app.state
        .accounts
        .age_session(&session_id, 6 * 24 * 3600 * 1000)
        .await
        .expect("age");
    let r = app.get("/api/v1/streams", Some(&cookie)).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(set_cookie_header(r.headers())
        .expect("refreshed")
        .contains("Max-Age=604800"));
    let after: i64 = sqlx::query("SELECT expires_at FROM sessions")
        .fetch_one(&app.state.db.pool)
        .await
        .expect("row")
        .get(0);
    assert!(
        after >= before,
        "expiry moved forward again: {before} -> {after}"
    );
}

async fn foreign_origin_makes_the_cookie_absent(app: TestApp) {
    let cookie = app.user("a@example.com").await;
    let host = app.base.trim_start_matches("http://").to_owned();
    let send = |origin: &'static str| {
        app.http
            .post(app.url("/api/v1/keys"))
            .header("cookie", format!("auth.session_token={cookie}"))
            .header("origin", origin)
            .json(&json!({ "label": "x" }))
            .send()
    };
    assert_eq!(
        parts(send("https://evil.example").await.expect("send")).await,
        (StatusCode::UNAUTHORIZED, json!({ "error": "Unauthorized" }))
    );
    let own = app
        .http
        .post(app.url("/api/v1/keys"))
        .header("cookie", format!("auth.session_token={cookie}"))
        .header("origin", format!("http://{host}"))
        .json(&json!({ "label": "x" }))
        .send()
        .await
        .expect("send");
    assert_eq!(own.status(), StatusCode::CREATED);
    // Safe methods are not affected.
    let r = app
        .http
        .get(app.url("/api/v1/keys"))
        .header("cookie", format!("auth.session_token={cookie}"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::OK);
}

/// Soak: an unknown e-mail costs a password verification too (a dummy hash), so response time
/// does not reveal which e-mails have accounts. (Timing-based: `./scripts/soak`.)
async fn unknown_email_takes_as_long_as_a_wrong_password(app: TestApp) {
    app.user("grace@example.com").await;
    let attempt = |email: &'static str| {
        let app = &app;
        async move {
            let t = std::time::Instant::now();
            let r = app
                .post(
                    "/api/auth/sign-in/email",
                    None,
                    json!({ "email": email, "password": "wrong-password" }),
                )
                .await;
            assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
            t.elapsed()
        }
    };
    // Interleaved, so both kinds share the machine's noise; the minimum is the intrinsic cost.
    let (mut known, mut unknown) = (std::time::Duration::MAX, std::time::Duration::MAX);
    for _ in 0..9 {
        known = known.min(attempt("grace@example.com").await);
        unknown = unknown.min(attempt("nobody@example.com").await);
    }
    // Skipping the hash would make the unknown case ~30x faster; allow 3x for noise.
    assert!(
        unknown * 3 >= known && known * 3 >= unknown,
        "known {known:?} vs unknown {unknown:?}"
    );
}

mod unknown_email_takes_as_long_as_a_wrong_password {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "soak: run with ./scripts/soak"]
    async fn sqlite() {
        super::unknown_email_takes_as_long_as_a_wrong_password(
            super::common::spawn_app(super::common::Engine::Sqlite).await,
        )
        .await
    }
}

/// Sign-in and sign-up from another site's page are refused (login CSRF), whether the
/// credentials are right or not; a same-origin or Origin-less request goes through.
async fn sign_in_and_sign_up_refuse_a_foreign_origin(app: TestApp) {
    app.user("ada@example.com").await;
    let invalid = (
        StatusCode::BAD_REQUEST,
        failure("INVALID_ORIGIN", "Invalid origin"),
    );
    for origin in ["https://evil.example", "null", "http://127.0.0.1:1"] {
        for (path, body) in [
            (
                "/api/auth/sign-in/email",
                json!({ "email": "ada@example.com", "password": PW }),
            ),
            (
                "/api/auth/sign-up/email",
                json!({ "name": "Eve", "email": "eve@example.com", "password": PW }),
            ),
        ] {
            let r = app
                .http
                .post(app.url(path))
                .header("origin", origin)
                .json(&body)
                .send()
                .await
                .expect("send");
            assert!(set_cookie_header(r.headers()).is_none(), "no cookie is set");
            assert_eq!(parts(r).await, invalid, "{origin} {path}");
        }
    }
    let count: i64 = sqlx::query("SELECT COUNT(*) FROM users WHERE email = 'eve@example.com'")
        .fetch_one(&app.state.db.pool)
        .await
        .expect("count")
        .get(0);
    assert_eq!(count, 0, "the foreign sign-up created nothing");
    let own = app.base.clone();
    let r = app
        .http
        .post(app.url("/api/auth/sign-in/email"))
        .header("origin", own)
        .json(&json!({ "email": "ada@example.com", "password": PW }))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::OK);
}

/// E-mails with zero-width or BOM characters are invalid, so they cannot make a second account
/// that looks like the first; names are 1–120 characters without control or format characters.
async fn look_alike_emails_and_bad_names_are_refused(app: TestApp) {
    app.user("ada@example.com").await;
    let bad_email = (
        StatusCode::BAD_REQUEST,
        failure("VALIDATION_ERROR", "[body.email] Invalid email address"),
    );
    for email in [
        "ada\u{200b}@example.com",
        "\u{feff}ada@example.com",
        "ada@exam\u{200d}ple.com",
    ] {
        let (s, b, cookie) = sign_up(
            &app,
            json!({ "name": "Ada", "email": email, "password": PW }),
        )
        .await;
        assert_eq!(((s, b), cookie), (bad_email.clone(), None), "{email:?}");
        let r = app
            .post(
                "/api/auth/sign-in/email",
                None,
                json!({ "email": email, "password": PW }),
            )
            .await;
        assert_eq!(parts(r).await, bad_email, "sign-in {email:?}");
    }
    for (name, message) in [
        ("", "[body.name] String must contain at least 1 character(s)"),
        (
            &"n".repeat(121)[..],
            "[body.name] Too big: expected string to have <=120 characters",
        ),
        (
            "Ada\u{0}",
            "[body.name] Invalid input: must not contain control or invisible formatting characters",
        ),
        (
            "A\u{202e}da",
            "[body.name] Invalid input: must not contain control or invisible formatting characters",
        ),
    ] {
        let (s, b, _) = sign_up(&app, json!({ "name": name, "email": "new@example.com", "password": PW })).await;
        assert_eq!((s, b), (StatusCode::BAD_REQUEST, failure("VALIDATION_ERROR", message)), "{name:?}");
    }
    let (s, _, _) = sign_up(
        &app,
        json!({ "name": "n".repeat(120), "email": "new@example.com", "password": PW }),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "120 characters is the limit");
    let users: i64 = sqlx::query("SELECT COUNT(*) FROM users")
        .fetch_one(&app.state.db.pool)
        .await
        .expect("count")
        .get(0);
    assert_eq!(users, 2);
}

/// A request with two session cookies (one planted for a parent domain, say) is not signed in,
/// whichever of them is valid.
async fn two_session_cookies_are_no_session(app: TestApp) {
    let good = app.user("ada@example.com").await;
    let other = app.user("eve@example.com").await;
    for header in [
        format!("auth.session_token={good}; auth.session_token={other}"),
        format!("auth.session_token={other}; auth.session_token={good}"),
        format!("auth.session_token=x.y; auth.session_token={good}"),
    ] {
        let r = app
            .http
            .get(app.url("/api/v1/keys"))
            .header("cookie", &header)
            .send()
            .await
            .expect("send");
        assert_eq!(
            parts(r).await,
            (StatusCode::UNAUTHORIZED, json!({ "error": "Unauthorized" }))
        );
        let r = app
            .http
            .get(app.url("/api/auth/get-session"))
            .header("cookie", &header)
            .send()
            .await
            .expect("send");
        assert_eq!(parts(r).await, (StatusCode::OK, Value::Null));
    }
}

/// decisions.md §14: a session slides by 7 days when used, but ends 30 days after sign-in
/// however active it is; the cookie's Max-Age never reaches past that.
async fn sessions_end_thirty_days_after_sign_in_however_active(app: TestApp) {
    let cookie = app.user("a@example.com").await;
    let day = 24 * 3600 * 1000_i64;
    let now = streamwatch::time::now_ms();
    // Signed in 28 days ago, used every day since: it slides by two days, not seven.
    sqlx::query("UPDATE sessions SET created_at = $1, updated_at = $2, expires_at = $3")
        .bind(now - 28 * day)
        .bind(now - 2 * day)
        .bind(now + day)
        .execute(&app.state.db.pool)
        .await
        .expect("age");
    let r = app.get("/api/v1/streams", Some(&cookie)).await;
    assert_eq!(r.status(), StatusCode::OK);
    let set = set_cookie_header(r.headers()).unwrap_or_default();
    let max_age: i64 = set
        .split("; ")
        .find_map(|a| a.strip_prefix("Max-Age="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(i64::MAX);
    assert!(max_age <= 2 * 24 * 3600 && max_age > 24 * 3600, "{set}");
    let (expires, created): (i64, i64) = {
        let r = sqlx::query("SELECT expires_at, created_at FROM sessions")
            .fetch_one(&app.state.db.pool)
            .await
            .expect("row");
        (r.get(0), r.get(1))
    };
    assert_eq!(expires, created + 30 * day);
    // Past 30 days: over, whatever its expiry says.
    sqlx::query("UPDATE sessions SET created_at = $1, updated_at = $2, expires_at = $3")
        .bind(now - 30 * day - 1000)
        .bind(now - 3_600_000)
        .bind(now + 6 * day)
        .execute(&app.state.db.pool)
        .await
        .expect("age");
    assert_eq!(
        app.get("/api/v1/streams", Some(&cookie)).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        parts(app.get("/api/auth/get-session", Some(&cookie)).await).await,
        (StatusCode::OK, Value::Null)
    );
}

/// decisions.md §14: with an https `STREAMWATCH_PUBLIC_URL` the session cookie (set, slid and
/// cleared) carries `Secure`; over plain http it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cookie_is_secure_behind_an_https_public_url() {
    for (public, secure) in [
        (Some("https://watch.example.com"), true),
        (Some("http://10.0.0.5:8080"), false),
        (None, false),
    ] {
        let app = spawn_with(Engine::Sqlite, |c| {
            c.public_url = public.map(|u| streamwatch::config::PublicUrl::parse(u).expect("url"));
        })
        .await;
        let r = app
            .post(
                "/api/auth/sign-up/email",
                None,
                json!({ "name": "Ada", "email": "ada@example.com", "password": PW }),
            )
            .await;
        let set = set_cookie_header(r.headers()).expect("cookie");
        assert_eq!(
            set.split("; ").any(|a| a == "Secure"),
            secure,
            "{public:?}: {set}"
        );
        let cookie = session_cookie_of(&r).expect("cookie");
        let out = app
            .post("/api/auth/sign-out", Some(&cookie), json!({}))
            .await;
        let cleared = set_cookie_header(out.headers()).expect("cleared");
        assert_eq!(
            cleared.split("; ").any(|a| a == "Secure"),
            secure,
            "{cleared}"
        );
        app.shutdown().await;
    }
}

on_both_engines!(
    sessions_end_thirty_days_after_sign_in_however_active,
    sign_in_and_sign_up_refuse_a_foreign_origin,
    look_alike_emails_and_bad_names_are_refused,
    two_session_cookies_are_no_session,
    sign_up_returns_token_user_and_cookie,
    sign_up_failures_mirror_better_auth,
    sign_in_issues_a_fresh_session_each_time,
    sign_in_failures_are_indistinguishable,
    sign_out_ends_the_session,
    tampered_and_expired_cookies_are_unauthorized,
    sessions_slide_when_used_after_a_day,
    foreign_origin_makes_the_cookie_absent,
);

#[tokio::test]
async fn sign_in_and_sign_up_are_rate_limited_per_ip() {
    let app = spawn_with(Engine::Sqlite, |c| {
        c.auth_rate_limit = streamwatch::config::RateLimit::PerWindow {
            max: 3,
            window: std::time::Duration::from_secs(60),
        };
    })
    .await;
    let body = json!({ "email": "x@example.com", "password": "wrong-password" });
    for _ in 0..3 {
        assert_eq!(
            app.post("/api/auth/sign-in/email", None, body.clone())
                .await
                .status(),
            StatusCode::UNAUTHORIZED
        );
    }
    let r = app
        .post(
            "/api/auth/sign-up/email",
            None,
            json!({ "name": "x", "email": "x@example.com", "password": PW }),
        )
        .await;
    let retry: u64 = r
        .headers()
        .get("x-retry-after")
        .expect("X-Retry-After")
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&retry));
    // The standard header too, with the same seconds (decisions.md §15).
    assert_eq!(
        r.headers()
            .get("retry-after")
            .expect("Retry-After")
            .to_str()
            .expect("ascii"),
        retry.to_string()
    );
    assert_eq!(
        parts(r).await,
        (
            StatusCode::TOO_MANY_REQUESTS,
            failure(
                "TOO_MANY_REQUESTS",
                "Too many requests. Please try again later."
            )
        )
    );
    let n: i64 = sqlx::query("SELECT COUNT(*) FROM users")
        .fetch_one(&app.state.db.pool)
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 0, "a limited sign-up stores nothing");
}

/// `STREAMWATCH_SIGNUP=closed`: sign-up answers SIGNUP_DISABLED and creates nothing; an
/// operator adds users with `streamwatch users add`, which prints a one-time password that
/// signs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_sign_up_and_users_add() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().to_str().expect("utf-8");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_streamwatch"))
        .args([
            "users",
            "add",
            "--email",
            "Grace@Example.com",
            "--name",
            "Grace",
            "--data-dir",
            data,
        ])
        .env_clear()
        .output()
        .expect("run users add");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        stdout.starts_with("created user grace@example.com ("),
        "{stdout}"
    );
    let password = stdout
        .lines()
        .find_map(|l| l.strip_prefix("one-time password (shown once, not stored): "))
        .expect("password line")
        .to_owned();
    assert!(password.len() >= 32, "{password}");
    // The same e-mail twice is refused with one clear line.
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_streamwatch"))
        .args([
            "users",
            "add",
            "--email",
            "grace@example.com",
            "--name",
            "G",
            "--data-dir",
            data,
        ])
        .env_clear()
        .output()
        .expect("run users add");
    assert!(!again.status.success());
    assert_eq!(
        String::from_utf8_lossy(&again.stderr).trim(),
        "error: a user with e-mail grace@example.com already exists"
    );

    let mut p = common::Process::start(dir.path(), &[("STREAMWATCH_SIGNUP", "closed")]).await;
    let http = reqwest::Client::new();
    let r = http
        .post(p.url("/api/auth/sign-up/email"))
        .json(&json!({ "name": "Eve", "email": "eve@example.com", "password": PW }))
        .send()
        .await
        .expect("sign up");
    assert_eq!(
        parts(r).await,
        (
            StatusCode::BAD_REQUEST,
            failure("SIGNUP_DISABLED", "Sign-up is disabled")
        )
    );
    let r = http
        .post(p.url("/api/auth/sign-in/email"))
        .json(&json!({ "email": "grace@example.com", "password": password }))
        .send()
        .await
        .expect("sign in");
    assert_eq!(r.status(), StatusCode::OK);
    let cookie = session_cookie_of(&r).expect("cookie");
    // The first account, made by an operator, owns the instance.
    let get = |path: &str| {
        let req = http
            .get(p.url(path))
            .header("cookie", format!("auth.session_token={cookie}"));
        async move { req.send().await.expect("get") }
    };
    let (_, session) = parts(get("/api/auth/get-session").await).await;
    assert_eq!(session["user"]["role"], "owner");
    // The one-time password must be replaced first (decisions.md §15): the JSON API refuses
    // the session and every page leads to the account page, which asks for a new password.
    assert_eq!(session["user"]["mustChangePassword"], true);
    assert_eq!(
        parts(get("/api/v1/streams").await).await,
        (StatusCode::UNAUTHORIZED, json!({ "error": "Unauthorized" }))
    );
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    for page in ["/app", "/app/streams", "/app/team"] {
        let r = no_redirects
            .get(p.url(page))
            .header("cookie", format!("auth.session_token={cookie}"))
            .send()
            .await
            .expect("page");
        assert_eq!(r.status(), StatusCode::FOUND, "{page}");
        assert_eq!(r.headers()["location"], "/app/account", "{page}");
    }
    let account = get("/app/account").await;
    assert_eq!(account.status(), StatusCode::OK);
    assert!(account
        .text()
        .await
        .expect("html")
        .contains("Choose your own password to continue."));
    let changed = http
        .post(p.url("/api/auth/change-password"))
        .header("cookie", format!("auth.session_token={cookie}"))
        .json(&json!({ "currentPassword": password, "newPassword": PW }))
        .send()
        .await
        .expect("change");
    assert_eq!(changed.status(), StatusCode::OK);
    let cookie = session_cookie_of(&changed).expect("new cookie");
    let r = http
        .get(p.url("/api/v1/streams"))
        .header("cookie", format!("auth.session_token={cookie}"))
        .send()
        .await
        .expect("streams");
    assert_eq!(r.status(), StatusCode::OK);
    // The one-time password is spent.
    let r = http
        .post(p.url("/api/auth/sign-in/email"))
        .json(&json!({ "email": "grace@example.com", "password": password }))
        .send()
        .await
        .expect("sign in");
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(p.terminate().success());
}

/// `users add --help` lists its own flags, not every flag of `serve`.
#[test]
fn users_add_help_lists_only_its_flags() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_streamwatch"))
        .args(["users", "add", "--help"])
        .env_clear()
        .output()
        .expect("run");
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).expect("utf-8");
    for flag in ["--email", "--name", "--data-dir", "--database-url"] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    for serve_only in [
        "--listen",
        "--probe-interval",
        "--clickhouse-url",
        "--signup",
        "--secret",
    ] {
        assert!(
            !help.contains(serve_only),
            "{serve_only} listed in:\n{help}"
        );
    }
}

// ---- Invitations (decisions.md §15) ----

/// The service with the default sign-up mode (`invite`) and no prober.
async fn invite_app(engine: Engine) -> TestApp {
    common::spawn_quiet(engine, |c| {
        c.signup = streamwatch::config::Config::defaults(&c.data_dir).signup;
    })
    .await
}

async fn count_users(app: &TestApp) -> i64 {
    sqlx::query("SELECT CAST(COUNT(*) AS BIGINT) FROM users")
        .fetch_one(&app.state.db.pool)
        .await
        .expect("count")
        .get(0)
}

fn needs_invitation() -> (StatusCode, Value) {
    (
        StatusCode::BAD_REQUEST,
        failure("SIGNUP_DISABLED", "Sign-up needs an invitation"),
    )
}

async fn sign_up_with(
    app: &TestApp,
    email: &str,
    token: Option<&str>,
) -> (StatusCode, Value, Option<String>) {
    let mut body = json!({ "name": "Invitee", "email": email, "password": PW });
    if let Some(t) = token {
        body["inviteToken"] = json!(t);
    }
    sign_up(app, body).await
}

/// Mints an invitation as `owner`; returns `(id, token)`.
async fn invite(app: &TestApp, owner: &str) -> (String, String) {
    let (s, b) = parts(
        app.post("/api/v1/invitations", Some(owner), json!({}))
            .await,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let url = b["url"].as_str().expect("url");
    let token = url
        .strip_prefix(&format!("{}/signup?invite=", app.base))
        .unwrap_or_else(|| panic!("{url} is not a sign-up link of {}", app.base))
        .to_owned();
    (b["id"].as_str().expect("id").to_owned(), token)
}

async fn role_of(app: &TestApp, cookie: &str) -> Value {
    let (_, b) = parts(app.get("/api/auth/get-session", Some(cookie)).await).await;
    b["user"]["role"].clone()
}

/// The default mode: the first account signs up freely and owns the instance; the next one
/// needs an invitation, which works once.
async fn first_account_owns_and_the_next_needs_an_invitation(app: TestApp) {
    assert_eq!(
        streamwatch::config::Config::defaults(".").signup,
        streamwatch::config::Signup::Invite,
        "invitations are the default"
    );
    let (s, _, owner) = sign_up_with(&app, "owner@example.com", None).await;
    assert_eq!(s, StatusCode::OK);
    let owner = owner.expect("cookie");
    assert_eq!(role_of(&app, &owner).await, "owner");

    // Without a token: refused before anything else is judged, and nothing is stored.
    for body in [
        json!({ "name": "Eve", "email": "eve@example.com", "password": PW }),
        json!({ "name": "Eve", "email": "eve@example.com", "password": PW, "inviteToken": null }),
        json!({ "email": "not an email" }),
    ] {
        let (s, b, cookie) = sign_up(&app, body).await;
        assert_eq!((s, b), needs_invitation());
        assert!(cookie.is_none());
    }
    assert_eq!(count_users(&app).await, 1);

    let before = app.state.accounts.has_users().await.expect("users");
    assert!(before);
    let minted = app
        .post("/api/v1/invitations", Some(&owner), json!({}))
        .await;
    let (s, b) = parts(minted).await;
    assert_eq!(s, StatusCode::CREATED);
    let keys: Vec<&str> = b
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["expiresAt", "id", "url"]);
    assert!(common::is_iso_ms(&b["expiresAt"]));
    let expires = chrono::DateTime::parse_from_rfc3339(b["expiresAt"].as_str().expect("str"))
        .expect("time")
        .timestamp_millis();
    let week = 7 * 24 * 3600 * 1000;
    let now = chrono::Utc::now().timestamp_millis();
    assert!(
        (now + week - 60_000..=now + week).contains(&expires),
        "valid 7 days"
    );
    let url = b["url"].as_str().expect("url");
    let token = url
        .strip_prefix(&format!("{}/signup?invite=", app.base))
        .expect("a sign-up link on this origin")
        .to_owned();

    // Hashed at rest: the link's secret is stored nowhere.
    let (_, secret) = token.split_once('.').expect("<id>.<secret>");
    let stored: String = sqlx::query("SELECT secret_hash FROM invitations")
        .fetch_one(&app.state.db.pool)
        .await
        .expect("row")
        .get(0);
    assert_eq!(stored, streamwatch::accounts::token::sha256_hex(secret));
    assert!(!stored.contains(secret));

    // A wrong secret, a malformed token or a non-string is no invitation.
    let (id, _) = token.split_once('.').expect("id");
    for bad in [
        format!("{id}.wrong-secret"),
        format!("{id}."),
        "x".into(),
        format!("nope.{secret}"),
    ] {
        let (s, b, _) = sign_up_with(&app, "eve@example.com", Some(&bad)).await;
        assert_eq!((s, b), needs_invitation(), "{bad}");
    }
    let (s, b, _) = sign_up(
        &app,
        json!({ "name": "Eve", "email": "eve@example.com", "password": PW, "inviteToken": 7 }),
    )
    .await;
    assert_eq!(
        (s, b),
        (
            StatusCode::BAD_REQUEST,
            failure(
                "VALIDATION_ERROR",
                "[body.inviteToken] Invalid input: expected string, received number"
            )
        )
    );

    // A taken e-mail does not spend the token.
    let (s, _, _) = sign_up_with(&app, "owner@example.com", Some(&token)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    // A bad password does not either.
    let (s, _, _) = sign_up(
        &app,
        json!({ "name": "M", "email": "member@example.com", "password": "short", "inviteToken": token }),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);

    let (s, b, member) = sign_up_with(&app, "Member@Example.com", Some(&token)).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    // The contract's answer, unchanged.
    let keys: Vec<&str> = b["user"]
        .as_object()
        .expect("user")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["email", "id", "name"]);
    let member = member.expect("cookie");
    assert_eq!(role_of(&app, &member).await, "member");

    // Spent: the same link again is refused.
    let (s, b, _) = sign_up_with(&app, "third@example.com", Some(&token)).await;
    assert_eq!((s, b), needs_invitation());
    assert_eq!(count_users(&app).await, 2);

    let (s, list) = parts(app.get("/api/v1/invitations", Some(&owner)).await).await;
    assert_eq!(s, StatusCode::OK);
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["state"], "used");
    assert_eq!(items[0]["usedBy"]["email"], "member@example.com");
    assert!(common::is_iso_ms(&items[0]["usedAt"]));
    assert_eq!(items[0]["revokedAt"], Value::Null);
}

/// Revoked and expired links are refused; revoking is idempotent and leaves a used link used.
async fn revoked_and_expired_invitations_are_refused(app: TestApp) {
    let owner = app.user("owner@example.com").await;
    let (revoked_id, revoked) = invite(&app, &owner).await;
    let r = app
        .delete(&format!("/api/v1/invitations/{revoked_id}"), Some(&owner))
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(r.text().await.expect("body"), "");
    let again = app
        .delete(&format!("/api/v1/invitations/{revoked_id}"), Some(&owner))
        .await;
    assert_eq!(again.status(), StatusCode::NO_CONTENT);
    let (s, b, _) = sign_up_with(&app, "late@example.com", Some(&revoked)).await;
    assert_eq!((s, b), needs_invitation());

    let (expired_id, expired) = invite(&app, &owner).await;
    sqlx::query("UPDATE invitations SET expires_at = $1 WHERE id = $2")
        .bind(chrono::Utc::now().timestamp_millis() - 1)
        .bind(&expired_id)
        .execute(&app.state.db.pool)
        .await
        .expect("age");
    let (s, b, _) = sign_up_with(&app, "late@example.com", Some(&expired)).await;
    assert_eq!((s, b), needs_invitation());

    let (used_id, used) = invite(&app, &owner).await;
    assert_eq!(
        sign_up_with(&app, "on-time@example.com", Some(&used))
            .await
            .0,
        StatusCode::OK
    );
    let r = app
        .delete(&format!("/api/v1/invitations/{used_id}"), Some(&owner))
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);

    let (_, list) = parts(app.get("/api/v1/invitations", Some(&owner)).await).await;
    let states: Vec<(&str, &str)> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["id"].as_str().expect("id"),
                i["state"].as_str().expect("state"),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            (used_id.as_str(), "used"),
            (expired_id.as_str(), "expired"),
            (revoked_id.as_str(), "revoked")
        ],
        "newest first"
    );
    assert_eq!(count_users(&app).await, 2);

    // Unknown ids are the JSON 404; no session is 401.
    let (s, b) = parts(
        app.delete("/api/v1/invitations/nosuchinvitation", Some(&owner))
            .await,
    )
    .await;
    assert_eq!(
        (s, b),
        (StatusCode::NOT_FOUND, json!({ "error": "Not Found" }))
    );
    let (s, b) = parts(app.post("/api/v1/invitations", None, json!({})).await).await;
    assert_eq!(
        (s, b),
        (StatusCode::UNAUTHORIZED, json!({ "error": "Unauthorized" }))
    );
}

/// Only the owner mints, lists and revokes: a member gets the 404 of what is not theirs.
async fn a_member_cannot_manage_invitations(app: TestApp) {
    let owner = app.user("owner@example.com").await;
    let (id, token) = invite(&app, &owner).await;
    let (_, _, member) = sign_up_with(&app, "member@example.com", Some(&token)).await;
    let member = member.expect("cookie");
    let (pending_id, _) = invite(&app, &owner).await;
    let not_found = (StatusCode::NOT_FOUND, json!({ "error": "Not Found" }));
    assert_eq!(
        parts(
            app.post("/api/v1/invitations", Some(&member), json!({}))
                .await
        )
        .await,
        not_found
    );
    assert_eq!(
        parts(app.get("/api/v1/invitations", Some(&member)).await).await,
        not_found
    );
    for target in [&id, &pending_id] {
        assert_eq!(
            parts(
                app.delete(&format!("/api/v1/invitations/{target}"), Some(&member))
                    .await
            )
            .await,
            not_found
        );
    }
    // The pending one still works: the member's revoke did nothing.
    let (s, list) = parts(app.get("/api/v1/invitations", Some(&owner)).await).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list["items"][0]["state"], "pending");
    // And the team page is the owner's too.
    let page = app.get("/app/team", Some(&member)).await;
    assert_eq!(page.status(), StatusCode::NOT_FOUND);
    let page = app.get("/app/team", Some(&owner)).await;
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.expect("html");
    assert!(
        html.contains("member@example.com") && html.contains(">pending<"),
        "{html}"
    );
}

/// Two sign-ups racing with one token: exactly one account is made.
async fn one_token_makes_one_account_under_a_race(app: TestApp) {
    let owner = app.user("owner@example.com").await;
    let (_, token) = invite(&app, &owner).await;
    let attempts = (0..8).map(|i| {
        let (http, url, token) = (app.http.clone(), app.url("/api/auth/sign-up/email"), token.clone());
        tokio::spawn(async move {
            http.post(url)
                .json(&json!({ "name": "R", "email": format!("racer{i}@example.com"), "password": PW, "inviteToken": token }))
                .send()
                .await
                .expect("sign up")
                .status()
        })
    });
    let statuses: Vec<StatusCode> = futures_util::future::join_all(attempts)
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();
    let won = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert_eq!(won, 1, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::OK || *s == StatusCode::BAD_REQUEST),
        "{statuses:?}"
    );
    assert_eq!(count_users(&app).await, 2);
}

/// Several first sign-ups at once on an empty instance: one owner, the rest need invitations.
async fn racing_first_sign_ups_make_one_owner(app: TestApp) {
    let attempts = (0..6).map(|i| {
        let (http, url) = (app.http.clone(), app.url("/api/auth/sign-up/email"));
        tokio::spawn(async move {
            http.post(url)
                .json(&json!({ "name": "F", "email": format!("first{i}@example.com"), "password": PW }))
                .send()
                .await
                .expect("sign up")
                .status()
        })
    });
    let statuses: Vec<StatusCode> = futures_util::future::join_all(attempts)
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        1,
        "{statuses:?}"
    );
    let owners: i64 =
        sqlx::query("SELECT CAST(COUNT(*) AS BIGINT) FROM users WHERE role = 'owner'")
            .fetch_one(&app.state.db.pool)
            .await
            .expect("count")
            .get(0);
    assert_eq!((owners, count_users(&app).await), (1, 1));
}

mod invitations {
    macro_rules! both {
        ($($case:ident),* $(,)?) => {$(
            mod $case {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::super::$case(super::super::invite_app(super::super::Engine::Sqlite).await).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::super::$case(super::super::invite_app(super::super::Engine::Postgres).await).await
                }
            }
        )*};
    }

    both!(
        first_account_owns_and_the_next_needs_an_invitation,
        revoked_and_expired_invitations_are_refused,
        a_member_cannot_manage_invitations,
        one_token_makes_one_account_under_a_race,
        racing_first_sign_ups_make_one_owner,
    );
}

/// `STREAMWATCH_SIGNUP=open` is the contract's behaviour: anyone signs up, an `inviteToken`
/// is ignored like any extra field; racing first sign-ups all succeed with one owner.
async fn open_sign_up_is_unchanged(app: TestApp) {
    assert_eq!(app.state.signup, streamwatch::config::Signup::Open);
    let first = app.user("first@example.com").await;
    for (email, token) in [
        ("second@example.com", None),
        ("third@example.com", Some("garbage")),
    ] {
        let (s, b, cookie) = sign_up_with(&app, email, token).await;
        assert_eq!(s, StatusCode::OK, "{b}");
        assert_eq!(role_of(&app, &cookie.expect("cookie")).await, "member");
    }
    assert_eq!(role_of(&app, &first).await, "owner");
}

/// A password change needs the current password, ends every session of the user (other
/// devices too) and gives this device a new one; the old password stops working.
async fn changing_the_password_ends_the_other_sessions(app: TestApp) {
    let laptop = app.user("ada@example.com").await;
    let (s, _) = parts(
        app.post(
            "/api/auth/sign-in/email",
            None,
            json!({ "email": "ada@example.com", "password": PW }),
        )
        .await,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let phone = session_cookie_of(
        &app.post(
            "/api/auth/sign-in/email",
            None,
            json!({ "email": "ada@example.com", "password": PW }),
        )
        .await,
    )
    .expect("cookie");
    let change = |cookie: Option<String>, body: Value| {
        let app = &app;
        async move {
            app.post("/api/auth/change-password", cookie.as_deref(), body)
                .await
        }
    };
    let new_pw = "staple-battery-horse";
    for (body, expected) in [
        (
            json!({ "currentPassword": "wrong-password", "newPassword": new_pw }),
            failure("INVALID_PASSWORD", "Invalid password"),
        ),
        (
            json!({ "currentPassword": PW, "newPassword": "short" }),
            failure("PASSWORD_TOO_SHORT", "Password too short"),
        ),
        (
            json!({ "currentPassword": PW, "newPassword": PW }),
            failure(
                "PASSWORD_UNCHANGED",
                "The new password must differ from the current one",
            ),
        ),
        (
            json!({ "newPassword": new_pw }),
            failure(
                "VALIDATION_ERROR",
                "[body.currentPassword] Invalid input: expected string, received undefined",
            ),
        ),
    ] {
        assert_eq!(
            parts(change(Some(laptop.clone()), body).await).await,
            (StatusCode::BAD_REQUEST, expected)
        );
    }
    let (s, b) = parts(
        change(
            None,
            json!({ "currentPassword": PW, "newPassword": new_pw }),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, b),
        (StatusCode::UNAUTHORIZED, json!({ "error": "Unauthorized" }))
    );

    let r = change(
        Some(laptop.clone()),
        json!({ "currentPassword": PW, "newPassword": new_pw }),
    )
    .await;
    let fresh = session_cookie_of(&r).expect("a new session cookie");
    let (s, b) = parts(r).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["user"]["email"], "ada@example.com");
    assert!(fresh.starts_with(&format!("{}.", b["token"].as_str().expect("token"))));
    for old in [&laptop, &phone] {
        let (s, b) = parts(app.get("/api/auth/get-session", Some(old)).await).await;
        assert_eq!((s, b), (StatusCode::OK, Value::Null), "old sessions end");
    }
    assert_eq!(
        app.get("/api/v1/streams", Some(&fresh)).await.status(),
        StatusCode::OK
    );
    let old_pw = app
        .post(
            "/api/auth/sign-in/email",
            None,
            json!({ "email": "ada@example.com", "password": PW }),
        )
        .await;
    assert_eq!(old_pw.status(), StatusCode::UNAUTHORIZED);
    let new = app
        .post(
            "/api/auth/sign-in/email",
            None,
            json!({ "email": "ada@example.com", "password": new_pw }),
        )
        .await;
    assert_eq!(new.status(), StatusCode::OK);
    // The account page is where a person does it.
    let page = app.get("/app/account", Some(&fresh)).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page
        .text()
        .await
        .expect("html")
        .contains("action=\"/api/auth/change-password\""));
}

on_both_engines!(
    open_sign_up_is_unchanged,
    changing_the_password_ends_the_other_sessions
);

/// An install from before invitations (accounts, no owner) upgrades: its earliest account
/// becomes the owner (docs/decisions.md). The migration files are applied as the runner does.
async fn upgrade_makes_the_earliest_account_owner(engine: Engine) {
    use sqlx::Executor;
    let (folder, url, _dir) = match engine {
        Engine::Sqlite => {
            let dir = tempfile::tempdir().expect("dir");
            let url = format!("sqlite://{}?mode=rwc", dir.path().join("old.db").display());
            ("sqlite", url, Some(dir))
        }
        Engine::Postgres => ("postgres", common::fresh_pg_database().await, None),
    };
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&url).await.expect("connect");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(folder);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("migrations")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let (before, after): (Vec<_>, Vec<_>) = files.into_iter().partition(|f| {
        f.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n < "0006")
    });
    for f in &before {
        pool.execute(sqlx::raw_sql(&std::fs::read_to_string(f).expect("sql")))
            .await
            .expect("old migration");
    }
    for (id, email, at) in [
        ("u2", "second@example.com", 2_000),
        ("u1", "first@example.com", 1_000),
        ("u3", "third@example.com", 3_000),
    ] {
        sqlx::query("INSERT INTO users (id, email, name, password_hash, created_at) VALUES ($1, $2, 'x', 'x', $3)")
            .bind(id)
            .bind(email)
            .bind(at as i64)
            .execute(&pool)
            .await
            .expect("user");
    }
    for f in after
        .iter()
        .filter(|f| f.to_string_lossy().contains("0006"))
    {
        pool.execute(sqlx::raw_sql(&std::fs::read_to_string(f).expect("sql")))
            .await
            .expect("0006");
    }
    let roles: Vec<(String, String)> = sqlx::query_as("SELECT id, role FROM users ORDER BY id")
        .fetch_all(&pool)
        .await
        .expect("roles");
    assert_eq!(
        roles,
        [
            ("u1".into(), "owner".into()),
            ("u2".into(), "member".into()),
            ("u3".into(), "member".into())
        ]
    );
    // And a second owner cannot appear.
    let second = sqlx::query("UPDATE users SET role = 'owner' WHERE id = 'u2'")
        .execute(&pool)
        .await;
    assert!(second.is_err(), "two owners");
}

mod upgrade_makes_the_earliest_account_owner {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::upgrade_makes_the_earliest_account_owner(super::Engine::Sqlite).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::upgrade_makes_the_earliest_account_owner(super::Engine::Postgres).await
    }
}
