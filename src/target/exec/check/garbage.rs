//! The checker's last protocol check: input that is not a valid request
//! gets a JSON-RPC error answer, and the plugin keeps serving after it.

use std::time::Instant;

use serde_json::json;

use super::{Checker, Failure, Step};
use crate::target::exec::protocol::{self, Incoming};

impl Checker<'_> {
    /// Sends `line` and expects a JSON-RPC error answer (not a crash).
    fn expect_error(&mut self, check: &'static str, line: &str, codes: &[i64]) -> Step<i64> {
        self.plugin
            .send_line(line)
            .map_err(|e| self.failure(check, e, line))?;
        match self
            .plugin
            .next_reply(Instant::now(), self.timeout, "garbage")
        {
            Ok(Incoming::Response { result: Err(e), .. })
                if codes.is_empty() || codes.contains(&e.code) =>
            {
                Ok(e.code)
            }
            Ok(Incoming::Response { result: Err(e), .. }) => Err(Failure(
                check,
                format!("answered error code {}, expected {codes:?}", e.code),
            )),
            Ok(other) => Err(Failure(
                check,
                format!("answered {other:?}, not a JSON-RPC error"),
            )),
            Err(e) => {
                let f = self.failure(check, e, line);
                Err(Failure(
                    check,
                    format!("{} instead of answering with a JSON-RPC error", f.1),
                ))
            }
        }
    }

    pub(super) fn garbage(&mut self) -> Step<()> {
        let c = "garbage input gets an error";
        self.expect_error(c, "this is not JSON {", &[protocol::PARSE_ERROR])?;
        self.expect_error(
            c,
            r#"{"jsonrpc":"2.0","id":900001,"method":"no_such_method","params":{}}"#,
            &[protocol::METHOD_NOT_FOUND],
        )?;
        self.expect_error(
            c,
            r#"{"jsonrpc":"2.0","id":900002,"method":"observe","params":"nonsense"}"#,
            &[],
        )?;
        self.observe(c, &json!({}))?;
        self.pass(
            c,
            "parse error, unknown method and bad params answered; still serving".into(),
        );
        Ok(())
    }
}
