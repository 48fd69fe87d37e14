//! `diff -o markdown`: a summary table (action, resource, what changed) and
//! each content diff collapsed in `<details>` with a ```diff block, ready to
//! post as a pull-request comment. Sensitive content is never in it (its
//! diff is the one-line summary `content_diff` gives). Whatever the
//! repository holds cannot break out of a table cell, a code span or a
//! fenced block, and the comment stays under the size forges accept.

use super::count;
use crate::model::Action;

/// GitHub refuses comments over 65,536 characters (GitLab allows more);
/// rows and diffs beyond this are left out, and the comment says so.
pub const BUDGET: usize = 60_000;

/// One changed resource.
pub struct Row {
    pub action: Action,
    pub id: String,
    /// What changed, one item each (`mode 0644 -> 0600`, `content`).
    pub what: Vec<String>,
    /// Its content diff (plain unified diff), or empty.
    pub diff: String,
}

pub struct Report<'a> {
    /// The heading, already Markdown (built with [`code`]).
    pub title: &'a str,
    pub rows: &'a [Row],
    /// Problems of the declaration, shown above the table.
    pub problems: &'a [String],
    /// Other things the reader should know (prunes held, a note on REV).
    pub notes: &'a [String],
}

/// Control characters (a newline in a path) shown escaped, so a value
/// stays on its line.
fn one_line(s: &str) -> String {
    super::quote::escape_controls(s).into_owned()
}

fn longest_run(s: &str, of: char) -> usize {
    let (mut best, mut run) = (0, 0);
    for c in s.chars() {
        run = if c == of { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

/// An inline code span holding `s` literally, whatever backticks it has.
pub fn code(s: &str) -> String {
    let s = one_line(s);
    let fence = "`".repeat(longest_run(&s, '`') + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// A table cell's text: a `|` would end the cell, even inside a code span.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

fn html(s: &str) -> String {
    one_line(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn summary(rows: &[Row]) -> String {
    if rows.is_empty() {
        return "No declared resource changes.".to_string();
    }
    let of = |a: Action| rows.iter().filter(|r| r.action == a).count();
    let parts: Vec<String> = [
        (Action::Create, "created"),
        (Action::Update, "updated"),
        (Action::Delete, "deleted"),
    ]
    .into_iter()
    .filter(|(a, _)| of(*a) > 0)
    .map(|(a, word)| format!("{} {word}", of(a)))
    .collect();
    format!(
        "**{}**: {}.",
        count(rows.len(), "resource changes", "resources change"),
        parts.join(", ")
    )
}

fn details(row: &Row) -> String {
    let fence = "`".repeat(longest_run(&row.diff, '`').max(2) + 1);
    let diff = row.diff.trim_end_matches('\n');
    format!(
        "<details><summary><code>{}</code> ({})</summary>\n\n{fence}diff\n{diff}\n{fence}\n\n</details>\n",
        html(&row.id),
        row.action.as_str()
    )
}

/// The whole comment.
pub fn render(r: &Report) -> String {
    let mut out = format!("### {}\n\n{}\n", r.title, summary(r.rows));
    if !r.problems.is_empty() {
        out.push_str(&format!(
            "\n**{} in the declaration** (nothing is applied from the documents they are in):\n\n",
            count(r.problems.len(), "problem", "problems")
        ));
        for p in r.problems.iter().take(100) {
            out.push_str(&format!("- {}\n", code(p)));
        }
        if r.problems.len() > 100 {
            out.push_str(&format!("- ... and {} more\n", r.problems.len() - 100));
        }
    }
    for n in r.notes {
        out.push_str(&format!("\n{n}\n"));
    }
    if r.rows.is_empty() {
        return out;
    }
    out.push_str("\n| action | resource | what changed |\n|---|---|---|\n");
    let mut shown = 0;
    for row in r.rows {
        let what: Vec<String> = row.what.iter().map(|w| code(w)).collect();
        let line = format!(
            "| {} | {} | {} |\n",
            row.action.as_str(),
            cell(&code(&row.id)),
            cell(&what.join(", "))
        );
        if out.len() + line.len() > BUDGET / 2 {
            break;
        }
        out.push_str(&line);
        shown += 1;
    }
    if shown < r.rows.len() {
        out.push_str(&format!(
            "\n{} more not listed here (too long for a comment); `tend diff` prints them all.\n",
            count(r.rows.len() - shown, "change is", "changes are")
        ));
    }
    let with_diff: Vec<&Row> = r.rows.iter().filter(|r| !r.diff.is_empty()).collect();
    if with_diff.is_empty() {
        return out;
    }
    out.push('\n');
    let mut left = 0;
    for row in &with_diff {
        let block = details(row);
        if left > 0 || out.len() + block.len() > BUDGET {
            left += 1;
            continue;
        }
        out.push_str(&block);
    }
    if left > 0 {
        let what = match left {
            1 => "The diff of 1 more resource is".to_string(),
            n => format!("The diffs of {n} more resources are"),
        };
        out.push_str(&format!(
            "\n{what} left out (too long for a comment); `tend diff` prints them.\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(action: Action, id: &str, diff: &str) -> Row {
        Row {
            action,
            id: id.into(),
            what: vec!["mode 0644 -> 0600".into()],
            diff: diff.into(),
        }
    }

    #[test]
    fn a_table_and_collapsed_diffs() {
        let rows = [
            row(
                Action::Create,
                "files/file/a",
                "--- live/a\n+++ desired/a\n+x\n",
            ),
            row(Action::Delete, "files/file/b", ""),
        ];
        let md = render(&Report {
            title: "t",
            rows: &rows,
            problems: &[],
            notes: &[],
        });
        assert!(
            md.contains("**2 resources change**: 1 created, 1 deleted."),
            "{md}"
        );
        assert!(
            md.contains("| create | `files/file/a` | `mode 0644 -> 0600` |"),
            "{md}"
        );
        assert!(md.contains("<details><summary><code>files/file/a</code> (create)</summary>\n\n```diff\n--- live/a"), "{md}");
        assert_eq!(md.matches("<details>").count(), 1, "{md}");
    }

    #[test]
    fn what_the_repository_holds_cannot_break_out() {
        let rows = [row(
            Action::Update,
            "files/file/a|b`c<i>\nd",
            "+```\n+</details><script>\n",
        )];
        let md = render(&Report {
            title: "t",
            rows: &rows,
            problems: &["x.tend.yaml:1: `bad` | worse".into()],
            notes: &[],
        });
        assert!(
            md.contains("| update | ``files/file/a\\|b`c<i>\\nd`` |"),
            "{md}"
        );
        assert!(
            md.contains("<code>files/file/a|b`c&lt;i&gt;\\nd</code>"),
            "{md}"
        );
        assert!(
            md.contains("````diff\n+```\n+</details><script>\n````"),
            "{md}"
        );
        assert!(md.contains("**1 problem in the declaration**"), "{md}");
        assert!(md.contains("- ``x.tend.yaml:1: `bad` | worse``"), "{md}");
    }

    #[test]
    fn long_reports_stay_under_the_budget() {
        let big = format!("+{}\n", "x".repeat(5000));
        let rows: Vec<Row> = (0..100)
            .map(|i| row(Action::Create, &format!("files/file/{i}"), &big))
            .collect();
        let md = render(&Report {
            title: "t",
            rows: &rows,
            problems: &[],
            notes: &[],
        });
        assert!(md.len() <= BUDGET + 200, "{}", md.len());
        assert!(md.contains("| create | `files/file/99` |"), "{md}");
        assert!(md.contains("left out"), "{md}");
    }
}
