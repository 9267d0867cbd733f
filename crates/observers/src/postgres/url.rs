//! [`PgUrl`]: a validated PostgreSQL connection URL whose password is
//! never shown.

use postgres::Config;
use std::str::FromStr;

/// Why a text is not a PostgreSQL URL this journal takes. The text itself
/// is never echoed (it may hold a password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PgUrlError {
    /// It does not start with `postgres://` or `postgresql://`.
    #[error("a PostgreSQL store URL starts with postgres:// or postgresql:// (rule postgres.url)")]
    Scheme,
    /// The driver could not parse it (a bad port, an unknown option, bad
    /// percent-encoding).
    #[error("not a valid PostgreSQL URL (rule postgres.url, {len} bytes)")]
    Invalid {
        /// Its length in bytes.
        len: usize,
    },
    /// It names no host.
    #[error("a PostgreSQL URL must name a host (rule postgres.url)")]
    NoHost,
}

/// A PostgreSQL connection URL: `postgres://` or `postgresql://`, parsed
/// by the driver. The password comes from the URL or, when it has none,
/// from `PGPASSWORD` at parse time.
///
/// Its `Debug` and `Display` show the URL with the password (in the user
/// info or a `password=` query parameter) replaced by `***`; nothing this
/// crate prints or returns in an error contains the password.
#[derive(Clone)]
pub struct PgUrl {
    config: Config,
    shown: String,
    password: Option<Vec<u8>>,
}

impl PgUrl {
    /// Parses and validates `text`.
    pub fn parse(text: &str) -> Result<PgUrl, PgUrlError> {
        let rest = text
            .strip_prefix("postgres://")
            .or_else(|| text.strip_prefix("postgresql://"))
            .ok_or(PgUrlError::Scheme)?;
        let mut config =
            Config::from_str(text).map_err(|_| PgUrlError::Invalid { len: text.len() })?;
        if config.get_hosts().is_empty() {
            return Err(PgUrlError::NoHost);
        }
        if config.get_password().is_none()
            && let Some(password) = std::env::var_os("PGPASSWORD")
        {
            config.password(password.as_encoded_bytes());
        }
        let password = config.get_password().map(<[u8]>::to_vec);
        let scheme_len = text.len() - rest.len();
        Ok(PgUrl {
            shown: redact(&text[..scheme_len], rest),
            config,
            password,
        })
    }

    /// The driver's connection settings.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// `text` with the password, if it appears in it, replaced by `***`
    /// (for driver and server messages, which should not contain it).
    pub(crate) fn scrub(&self, text: &str) -> String {
        match &self.password {
            Some(p) if !p.is_empty() => match std::str::from_utf8(p) {
                Ok(p) => text.replace(p, "***"),
                Err(_) => text.to_owned(),
            },
            _ => text.to_owned(),
        }
    }
}

/// `scheme` + `rest` with the password of the user info and of any
/// `password=` query parameter replaced by `***`.
fn redact(scheme: &str, rest: &str) -> String {
    let (authority_and_path, query) = match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    };
    let authority_end = authority_and_path
        .find('/')
        .unwrap_or(authority_and_path.len());
    let (authority, path) = authority_and_path.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{hosts}"),
            None => format!("{userinfo}@{hosts}"),
        },
        None => authority.to_owned(),
    };
    let mut shown = format!("{scheme}{authority}{path}");
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        shown.push('?');
        shown.push_str(&params.join("&"));
    }
    shown
}

impl std::fmt::Display for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl std::fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PgUrl").field(&self.shown).finish()
    }
}

impl FromStr for PgUrl {
    type Err = PgUrlError;

    fn from_str(text: &str) -> Result<PgUrl, PgUrlError> {
        PgUrl::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One case: the input, and what parsing gives (its Display, or the error).
    fn check(input: &str, expected: Result<&str, PgUrlError>) {
        let got = PgUrl::parse(input).map(|u| u.to_string());
        assert_eq!(got, expected.map(str::to_owned), "{input}");
        if let Ok(url) = PgUrl::parse(input) {
            assert!(!format!("{url:?}").contains("s3cret"), "{input}");
            assert!(!url.to_string().contains("s3cret"), "{input}");
        }
        if let Err(e) = PgUrl::parse(input) {
            assert!(!e.to_string().contains("s3cret"), "{input}");
        }
    }

    #[test]
    fn urls_are_validated_and_shown_without_their_password() {
        let cases: [(&str, Result<&str, PgUrlError>); 9] = [
            (
                "postgres://u:s3cret@db:5432/keel",
                Ok("postgres://u:***@db:5432/keel"),
            ),
            (
                "postgresql://u:s3cret@db/keel",
                Ok("postgresql://u:***@db/keel"),
            ),
            ("postgres://u@db/keel", Ok("postgres://u@db/keel")),
            (
                "postgres://u@db/keel?password=s3cret&sslmode=disable",
                Ok("postgres://u@db/keel?password=***&sslmode=disable"),
            ),
            ("postgres://u:p%40s3cret@db/k", Ok("postgres://u:***@db/k")),
            ("mysql://u:s3cret@db/keel", Err(PgUrlError::Scheme)),
            ("/var/lib/keel.db", Err(PgUrlError::Scheme)),
            (
                "postgres://u:s3cret@db:notaport/k",
                Err(PgUrlError::Invalid { len: 33 }),
            ),
            ("postgres:///keel", Err(PgUrlError::NoHost)),
        ];
        for (input, expected) in cases {
            check(input, expected);
        }
    }

    #[test]
    fn scrub_removes_the_password_from_any_text() {
        let url = PgUrl::parse("postgres://u:s3cret@db/keel").map_err(|e| e.to_string());
        assert_eq!(
            url.map(|u| u.scrub("auth failed for s3cret")),
            Ok("auth failed for ***".to_owned())
        );
    }
}
