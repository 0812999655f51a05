//! The HTTP side of a scrape: one request head in (parsed by `httparse`), one answer out, and
//! the connection closed. Only `GET /metrics` (and `HEAD`) is served.

use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// A request head larger than this is refused (a scraper's is a few hundred bytes).
const MAX_REQUEST_BYTES: usize = 16 << 10;

/// The answer to what has arrived of a request, or None while its head is incomplete. The
/// body is built only for a request that asks for it.
pub fn respond(request: &[u8], body: impl FnOnce() -> String) -> Option<Vec<u8>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut head = httparse::Request::new(&mut headers);
    match head.parse(request) {
        Ok(httparse::Status::Partial) if request.len() < MAX_REQUEST_BYTES => None,
        Ok(httparse::Status::Partial) => Some(plain(431, "request head too large\n")),
        Err(e) => Some(plain(400, &format!("malformed request: {e}\n"))),
        Ok(httparse::Status::Complete(_)) => {
            let path = head.path.unwrap_or("");
            let path = path.split('?').next().unwrap_or(path);
            Some(match (head.method, path) {
                (Some(method @ ("GET" | "HEAD")), "/metrics") => {
                    let body = body();
                    let mut answer = header(200, CONTENT_TYPE, body.len());
                    if method == "GET" {
                        answer.extend_from_slice(body.as_bytes());
                    }
                    answer
                }
                (Some("GET" | "HEAD"), _) => plain(404, "objtier serves its metrics at /metrics\n"),
                _ => plain(405, "only GET /metrics is served\n"),
            })
        }
    }
}

fn header(status: u16, content_type: &str, length: usize) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Request Header Fields Too Large",
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: \
         {length}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes()
}

fn plain(status: u16, text: &str) -> Vec<u8> {
    let mut answer = header(status, "text/plain; charset=utf-8", text.len());
    answer.extend_from_slice(text.as_bytes());
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(request: &str) -> Option<String> {
        respond(request.as_bytes(), || "objtier_up 1\n".into())
            .map(|a| String::from_utf8(a).unwrap())
    }

    #[test]
    fn a_scrape_gets_the_exposition_and_anything_else_a_reason() {
        let ok = answer("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n").unwrap();
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("Content-Type: text/plain; version=0.0.4"));
        assert!(ok.contains("Content-Length: 13\r\n"));
        assert!(ok.ends_with("\r\n\r\nobjtier_up 1\n"));
        let head = answer("HEAD /metrics?x=1 HTTP/1.0\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"));
        // Not all arrived yet: wait for the rest.
        assert_eq!(answer("GET /metrics HTTP/1.1\r\nHost:"), None);
        assert!(answer("GET / HTTP/1.1\r\n\r\n")
            .unwrap()
            .starts_with("HTTP/1.1 404"));
        assert!(answer("POST /metrics HTTP/1.1\r\n\r\n")
            .unwrap()
            .starts_with("HTTP/1.1 405"));
        assert!(answer("\x16\x03\x01 garbage\r\n\r\n")
            .unwrap()
            .starts_with("HTTP/1.1 400"));
        let endless = format!(
            "GET /metrics HTTP/1.1\r\nX: {}",
            "a".repeat(MAX_REQUEST_BYTES)
        );
        assert!(answer(&endless).unwrap().starts_with("HTTP/1.1 431"));
    }
}
