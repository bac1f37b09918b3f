//! What a browser gets outside the API: an existing Queen dashboard build
//! served from `QUEEN_WEBAPP_DIR`, or, without one, the small status page
//! built into the binary (`status_page.html`).
//!
//! Rules for the dashboard folder (dashboard-routes.md, "How the reference
//! server serves it"), applied to a `GET` that no route of the table
//! matched:
//! - paths under `/api/`, `/health`, `/metrics` and `/streams` are never
//!   files: they answer the API's 404;
//! - `/assets/*`: the file, `Cache-Control: public, max-age=31536000,
//!   immutable`, or 404;
//! - `/` and `index.html`: `Cache-Control: no-cache, no-store,
//!   must-revalidate`;
//! - any other path: the file if it exists (`public, max-age=3600`), else
//!   `index.html` (the single-page app routes it);
//! - a path that resolves outside the folder (`..`, a symbolic link
//!   pointing out) answers 403;
//! - a path with a segment starting with `.` (`/.env`, `/.git/config`)
//!   answers 404: dot files are never served.
//!
//! A `HEAD` gets the same answer without its body (`routes.rs`).
//!
//! MIME types come from the extension (`mime_guess`). Files are read whole
//! per request, at most [`MAX_FILE_BYTES`]: a dashboard build is small.

use std::path::{Path, PathBuf};

use hyper::StatusCode;

use crate::error::HttpError;
use crate::response::{self, Response};

/// The largest file served.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// The built-in status page.
const STATUS_PAGE: &str = include_str!("status_page.html");

const IMMUTABLE: &str = "public, max-age=31536000, immutable";
const NO_CACHE: &str = "no-cache, no-store, must-revalidate";
const HOUR: &str = "public, max-age=3600";

/// Paths that belong to the API even when no route matched them: those whose
/// first segment is a route's (the route table decides: `/api`, `/health`,
/// `/metrics`, `/streams`), and the reference broker's `/internal`.
fn reserved(path: &str) -> bool {
    let first = path.split('/').find(|segment| !segment.is_empty());
    first == Some("internal") || first.is_some_and(crate::routes::is_route_root)
}

/// A dashboard folder.
#[derive(Debug, Clone)]
pub struct Webapp {
    /// The folder, canonical.
    root: PathBuf,
}

impl Webapp {
    /// The dashboard build in `dir`, which must hold `index.html`.
    pub fn open(dir: &Path) -> std::io::Result<Webapp> {
        let root = dir.canonicalize()?;
        if !root.join("index.html").is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} holds no index.html", root.display()),
            ));
        }
        Ok(Webapp { root })
    }
}

/// The answer to a `GET` of `path` (its decoded `segments`) that no route
/// matched, or `None` when it is the API's 404.
pub(crate) async fn serve(
    webapp: Option<&Webapp>,
    path: &str,
    segments: &[&str],
) -> Option<Response> {
    if reserved(path) {
        return None;
    }
    let Some(webapp) = webapp else {
        return (path == "/" || path == "/index.html").then(|| {
            response::bytes(
                StatusCode::OK,
                "text/html; charset=utf-8",
                STATUS_PAGE,
                Some(NO_CACHE),
            )
        });
    };
    Some(
        serve_file(webapp, path, segments)
            .await
            .unwrap_or_else(HttpError::into_response),
    )
}

async fn serve_file(webapp: &Webapp, path: &str, segments: &[&str]) -> Result<Response, HttpError> {
    if segments
        .iter()
        .any(|segment| *segment == ".." || segment.contains(['\\', '\0']))
    {
        return Err(HttpError::Forbidden(
            "path escapes the dashboard folder".to_owned(),
        ));
    }
    // Dot files (`.env`, `.git/`) are never part of a build: not served,
    // not even as the single-page fallback.
    if segments.iter().any(|segment| segment.starts_with('.')) {
        return Err(HttpError::NotFound(format!("{path} not found")));
    }
    let assets = segments.first() == Some(&"assets");
    let wanted: PathBuf = segments.iter().collect();
    let index = wanted.as_os_str().is_empty() || wanted == Path::new("index.html");
    let candidate = webapp.root.join(&wanted);
    match tokio::fs::canonicalize(&candidate).await {
        Ok(found) if !found.starts_with(&webapp.root) => Err(HttpError::Forbidden(
            "path escapes the dashboard folder".to_owned(),
        )),
        Ok(found) if found.is_file() => {
            let cache = if assets {
                IMMUTABLE
            } else if index {
                NO_CACHE
            } else {
                HOUR
            };
            read(&found, cache).await
        }
        Ok(found) if found.is_dir() && index => {
            read(&webapp.root.join("index.html"), NO_CACHE).await
        }
        _ if assets => Err(HttpError::NotFound(format!("{path} not found"))),
        // The single-page app routes everything else itself.
        _ => read(&webapp.root.join("index.html"), NO_CACHE).await,
    }
}

async fn read(file: &Path, cache: &'static str) -> Result<Response, HttpError> {
    let not_found = || HttpError::NotFound(format!("{} not found", file.display()));
    let size = tokio::fs::metadata(file)
        .await
        .map_err(|_| not_found())?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(HttpError::Forbidden("file too large to serve".to_owned()));
    }
    let body = tokio::fs::read(file).await.map_err(|_| not_found())?;
    let mime = mime_guess::from_path(file).first_or_octet_stream();
    let content_type = content_type_of(mime.essence_str());
    Ok(response::bytes(
        StatusCode::OK,
        content_type,
        body,
        Some(cache),
    ))
}

/// A static `Content-Type` for the types a dashboard build holds (text
/// types with their charset); anything else is served as binary.
fn content_type_of(essence: &str) -> &'static str {
    match essence {
        "text/html" => "text/html; charset=utf-8",
        "text/css" => "text/css; charset=utf-8",
        "text/javascript" | "application/javascript" => "text/javascript; charset=utf-8",
        "application/json" => "application/json",
        "image/svg+xml" => "image/svg+xml",
        "image/png" => "image/png",
        "image/jpeg" => "image/jpeg",
        "image/gif" => "image/gif",
        "image/webp" => "image/webp",
        "image/x-icon" | "image/vnd.microsoft.icon" => "image/x-icon",
        "font/woff" => "font/woff",
        "font/woff2" => "font/woff2",
        "font/ttf" => "font/ttf",
        "text/plain" => "text/plain; charset=utf-8",
        "application/wasm" => "application/wasm",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_prefixes_are_never_files() {
        for path in [
            "/api/v1/x",
            "/api",
            "/health",
            "/metrics/prometheus",
            "/streams/v1/q",
        ] {
            assert!(reserved(path), "{path}");
        }
        for path in ["/", "/queues", "/assets/app.js", "/apis", "/healthz"] {
            assert!(!reserved(path), "{path}");
        }
    }
}
