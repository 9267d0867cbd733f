//! The built-in run viewer: a small single-page app that `keel serve`
//! serves at `/` (the run list) and `/runs/{id}` (one run, followed over
//! its SSE stream), with its script and style at `/ui/app.js` and
//! `/ui/app.css`.
//!
//! The assets are embedded in the binary (`include_str!` of
//! `crates/serve/assets/viewer/`): no CDN, no network, no build step. They
//! hold no data, so these routes sit outside the token check (the page
//! asks for the token and sends it on its own API requests); the daemon's
//! Host check still applies.
//!
//! Everything the page shows from a run (model text, tool arguments and
//! results, errors) is untrusted: a model can be prompted to emit
//! `<script>` or `<img onerror=…>`. The script therefore renders all of it
//! as text (`textContent`, `createTextNode`) and never parses strings as
//! HTML or code; a unit test below fails if the assets use an HTML or code
//! sink. The responses also carry a strict Content-Security-Policy (no
//! inline script or style, no other origin), so a mistake there would
//! still not run injected script.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

/// The page (the run list and the run page are the same document).
const INDEX_HTML: &str = include_str!("../assets/viewer/index.html");
/// The script.
const APP_JS: &str = include_str!("../assets/viewer/app.js");
/// The style sheet.
const APP_CSS: &str = include_str!("../assets/viewer/app.css");

/// The Content-Security-Policy of every viewer response: scripts, styles
/// and API requests from this origin only, no inline script or style, no
/// plugins, frames, forms or base rewriting. Images only from `blob:` URLs
/// the page made from a run's bytes (never `data:`, never a URL a run
/// names, never SVG: the script only makes blobs of raster types).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; connect-src 'self'; img-src blob:; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

/// The viewer's routes: `GET /`, `GET /runs/{id}`, `GET /ui/app.js` and
/// `GET /ui/app.css` (HEAD too). [`super::router`] merges them outside
/// the token layer (they hold no data), inside the cross-site checks.
pub fn routes() -> Router<Arc<super::Daemon>> {
    assets()
}

/// The routes, for any router state (they use none).
fn assets<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/runs/{id}", get(index))
        .route("/ui/app.js", get(script))
        .route("/ui/app.css", get(style))
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

/// One embedded asset with the viewer's headers.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves the viewer's routes on an ephemeral loopback port.
    async fn serve() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, assets::<()>()).await;
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn serves_each_asset_with_its_type_and_the_security_headers() {
        let base = serve().await;
        let client = reqwest::Client::new();
        for (path, content_type, body) in [
            ("/", "text/html; charset=utf-8", INDEX_HTML),
            ("/runs/run_abc", "text/html; charset=utf-8", INDEX_HTML),
            ("/ui/app.js", "text/javascript; charset=utf-8", APP_JS),
            ("/ui/app.css", "text/css; charset=utf-8", APP_CSS),
        ] {
            let response = client.get(format!("{base}{path}")).send().await.unwrap();
            assert_eq!(response.status(), 200, "{path}");
            let headers = response.headers().clone();
            let get = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            assert_eq!(get("content-type").as_deref(), Some(content_type), "{path}");
            assert_eq!(
                get("content-security-policy").as_deref(),
                Some(CONTENT_SECURITY_POLICY),
                "{path}"
            );
            assert_eq!(get("x-content-type-options").as_deref(), Some("nosniff"));
            assert_eq!(get("referrer-policy").as_deref(), Some("no-referrer"));
            assert_eq!(get("cache-control").as_deref(), Some("no-cache"));
            assert_eq!(response.text().await.unwrap(), body, "{path}");
        }
        let missing = client
            .get(format!("{base}/ui/other.js"))
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status(), 404);
    }

    #[test]
    fn the_policy_allows_this_origin_only_and_nothing_inline() {
        let directives: Vec<&str> = CONTENT_SECURITY_POLICY.split(';').map(str::trim).collect();
        for expected in [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "connect-src 'self'",
            "img-src blob:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ] {
            assert!(directives.contains(&expected), "missing {expected}");
        }
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
        assert!(!CONTENT_SECURITY_POLICY.contains("data:"));
        assert!(!CONTENT_SECURITY_POLICY.contains('*'));
        assert!(HeaderValue::from_str(CONTENT_SECURITY_POLICY).is_ok());
    }

    #[test]
    fn the_assets_use_no_html_or_code_sink() {
        let sinks = [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "setHTMLUnsafe",
            "parseFromString",
            "createContextualFragment",
        ];
        for (name, text) in [("app.js", APP_JS), ("index.html", INDEX_HTML)] {
            for sink in sinks {
                assert!(!text.contains(sink), "{name} uses {sink}");
            }
        }
        // A string passed to a timer is evaluated as code too.
        for timer in [
            "setTimeout(\"",
            "setTimeout('",
            "setInterval(\"",
            "setInterval('",
        ] {
            assert!(!APP_JS.contains(timer), "app.js passes a string to a timer");
        }
    }

    /// Whether `html` has an attribute like ` onclick=`.
    fn has_inline_handler(html: &str) -> bool {
        html.match_indices(" on").any(|(i, _)| {
            let rest = &html[i + 3..];
            let name_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            name_len > 0 && rest[name_len..].trim_start().starts_with('=')
        })
    }

    #[test]
    fn the_inline_handler_check_finds_one() {
        assert!(has_inline_handler("<img src=x onerror=alert(1)>"));
        assert!(has_inline_handler("<body onload = \"f()\">"));
        assert!(!has_inline_handler("<p>Runs on this daemon</p>"));
    }

    #[test]
    fn the_page_is_self_contained() {
        // No inline script or style (the policy would block them), no
        // other origin.
        assert!(!INDEX_HTML.contains("<style"));
        assert!(!INDEX_HTML.contains("style="));
        assert!(!has_inline_handler(INDEX_HTML), "no inline event handlers");
        assert_eq!(INDEX_HTML.matches("<script").count(), 1);
        assert!(INDEX_HTML.contains("<script src=\"/ui/app.js\""));
        for text in [INDEX_HTML, APP_JS, APP_CSS] {
            assert!(!text.contains("http://"), "no absolute URL");
            assert!(!text.contains("https://"), "no absolute URL");
            assert!(!text.contains("@import"));
        }
    }
}
