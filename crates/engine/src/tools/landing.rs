//! Where every edit lands: the built-in file tools and Lua tools that
//! declare an edit hand their proposal (the file before, the file after)
//! here instead of writing it themselves. In order:
//!
//! 1. a file changed on disk since the model last read it is refused;
//! 2. when the call needs review, the user sees the diff (ACP's
//!    `session/request_permission` with a `diff` content) and accepts,
//!    accepts for the file, rejects with a reason, or changes the proposal;
//! 3. the turn's checkpoint keeps the file as it was;
//! 4. the text goes through the buffer that holds the file (one undo step,
//!    saved; a buffer with unsaved changes nobody reviewed asks first) or to
//!    disk atomically;
//! 5. the model gets a typed outcome: accepted, rejected (with the reason)
//!    or modified (with the final content).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use agent_client_protocol_schema::v1 as acp;
use serde_json::{json, Value};

use super::{ToolContext, ToolOutput};
use crate::checkpoint::{Change, TurnCheckpoint};
use crate::session::updates;
use crate::tools::permissions::{remembered_rule, Checked, Remembered, Rule};

/// Most characters of a changed proposal quoted back to the model.
const MODIFIED_QUOTE_CHARS: usize = 8_000;

/// A file's size and time when the model last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    len: u64,
    modified: Option<SystemTime>,
}

fn seen_now(path: &Path) -> Option<Seen> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Seen {
        len: meta.len(),
        modified: meta.modified().ok(),
    })
}

/// What a session knows about the files its model works on: what the model
/// last read or wrote (to catch changes behind its back) and which files
/// the user accepted every edit to for the session.
#[derive(Debug, Default)]
pub struct FileLedger {
    seen: Mutex<HashMap<PathBuf, Option<Seen>>>,
    allowed: Mutex<HashSet<PathBuf>>,
    /// "Allow always" answers given in a review, for the calls still to decide.
    rules: Mutex<Vec<Rule>>,
}

impl FileLedger {
    /// The model read or wrote `path` (as it is now on disk).
    pub fn saw(&self, path: &Path) {
        let now = seen_now(path);
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path.to_path_buf(), now);
    }

    /// True when `path` changed on disk since the model last saw it.
    pub fn changed_since_seen(&self, path: &Path) -> bool {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        match seen.get(path) {
            Some(then) => *then != seen_now(path),
            None => false,
        }
    }

    pub fn allow(&self, path: &Path) {
        self.allowed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path.to_path_buf());
    }

    /// Rules the user added in reviews since the last call (drained).
    pub fn take_rules(&self) -> Vec<Rule> {
        std::mem::take(&mut *self.rules.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// True when the user accepted every edit to `path` for the session.
    pub fn allowed(&self, path: &Path) -> bool {
        self.allowed.lock().unwrap_or_else(|p| p.into_inner()).contains(path)
    }
}

/// What an agent turn gives its edits: the session's ledger, the turn's
/// checkpoint, and where "allow always" is remembered.
pub struct EditScope {
    pub ledger: Arc<FileLedger>,
    pub checkpoint: Option<Arc<TurnCheckpoint>>,
    pub data_dir: Option<PathBuf>,
    /// How long a review may wait for the user.
    pub ask_timeout: Duration,
}

/// One proposed change to one file.
pub struct Proposal {
    /// The file (physical path).
    pub path: PathBuf,
    /// How it is shown (relative to the project).
    pub name: String,
    /// Its content now (`None`: it does not exist).
    pub before: Option<Vec<u8>>,
    /// Its proposed content.
    pub after: Vec<u8>,
}

/// The user's verdict on a proposal.
enum Verdict {
    Accept { content: Option<String> },
    Reject { reason: Option<String> },
}

/// Lands `p`; `accepted` is what the model is told when it lands as proposed.
pub async fn land(ctx: &ToolContext, tool: &str, p: Proposal, accepted: ToolOutput) -> ToolOutput {
    let scope = ctx.edits.clone();
    if let Some(scope) = &scope {
        if scope.ledger.changed_since_seen(&p.path) {
            return ToolOutput::error(format!(
                "`{}` changed on disk since you last read it (the user or another program edited it); read it \
                 again and redo the change on its current content",
                p.name
            ))
            .with_summary(format!("⚠ {tool}: {} changed on disk", p.name));
        }
    }
    if let Some(links) = shared_links(&p.path) {
        return ToolOutput::error(format!(
            "`{}` is not changed: it is a hard link ({links} names share its content), and another name may lie \
             outside the project, where an edit would land too; ask the user to make it a file of its own (`cp \
             {name} {name}.new && mv {name}.new {name}`) first",
            p.name,
            name = p.name
        ))
        .with_summary(format!("⚠ {tool}: {} is a hard link", p.name));
    }
    let mut after = p.after.clone();
    let mut modified = false;
    if ctx.review {
        match review(ctx, tool, &p).await {
            Verdict::Accept { content: Some(c) } if c.as_bytes() != p.after.as_slice() => {
                after = c.into_bytes();
                modified = true;
            }
            Verdict::Accept { .. } => {}
            Verdict::Reject { reason } => {
                ctx.telemetry
                    .edit_decision(Some(&ctx.session_id), tool, false, "user", 0, 0);
                return rejected(tool, &p.name, reason);
            }
        }
        if let Some(accepted) = &ctx.on_accepted {
            accepted();
        }
    }
    if let Some(cp) = scope.as_ref().and_then(|s| s.checkpoint.clone()) {
        let change = if p.before.is_some() {
            Change::Modified
        } else {
            Change::Created
        };
        let (path, by) = (p.path.clone(), tool.to_string());
        let kept = tokio::task::spawn_blocking(move || cp.before_change(&path, &by, change)).await;
        let problem = match kept {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(e.to_string()),
        };
        if let Some(problem) = problem {
            return ToolOutput::error(format!(
                "`{}` was not changed: its checkpoint could not be kept ({problem})",
                p.name
            ));
        }
    }
    let text = String::from_utf8_lossy(&after).into_owned();
    let base = p.before.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
    match super::builtin::write_through_editor(ctx, &p.path, &text, base.as_deref(), ctx.review, &p.name).await {
        Ok(EditorWrite::Written) => {}
        Ok(EditorWrite::Rejected(reason)) => {
            ctx.telemetry
                .edit_decision(Some(&ctx.session_id), tool, false, "user", 0, 0);
            return rejected(tool, &p.name, Some(reason));
        }
        Ok(EditorWrite::NoBuffer) => {
            let path = p.path.clone();
            let bytes = after.clone();
            let written = tokio::task::spawn_blocking(move || super::atomic_write(&path, &bytes)).await;
            let problem = match written {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(e) => Some(e.to_string()),
            };
            if let Some(problem) = problem {
                return ToolOutput::error(format!("`{}` could not be written ({problem})", p.name));
            }
        }
        Err(e) => {
            return ToolOutput::error(format!("`{}` could not be written in the editor ({e})", p.name));
        }
    }
    if let Some(scope) = &scope {
        scope.ledger.saw(&p.path);
    }
    if ctx.telemetry.enabled() {
        let (added, removed) = line_changes(base.as_deref().unwrap_or(""), &text);
        let source = if ctx.review { "user" } else { "config" };
        ctx.telemetry
            .edit_decision(Some(&ctx.session_id), tool, true, source, added, removed);
    }
    if modified {
        let mut quoted: String = text.chars().take(MODIFIED_QUOTE_CHARS).collect();
        if quoted.len() < text.len() {
            quoted.push_str("\n[… cut; read the file for the rest]");
        }
        return ToolOutput::ok(format!(
            "The user changed your proposal before accepting it. `{}` now contains exactly:\n{quoted}",
            p.name
        ))
        .with_summary(format!("✏ {tool}: {} (changed by you)", p.name))
        .with_review("modified");
    }
    if ctx.review {
        return accepted.with_review("accepted");
    }
    accepted
}

/// How many names a regular file at `path` has, when more than one: its
/// other names cannot be found, so any may be outside the project, and
/// Neovim saves such a file in place (`'backupcopy'` "auto"), writing there.
fn shared_links(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    (meta.is_file() && meta.nlink() > 1).then_some(meta.nlink())
}

/// Lines added and removed from `before` to `after` (for the telemetry's
/// `mia.lines_of_code.count`).
fn line_changes(before: &str, after: &str) -> (u64, u64) {
    let diff = similar::TextDiff::from_lines(before, after);
    let (mut added, mut removed) = (0, 0);
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => added += 1,
            similar::ChangeTag::Delete => removed += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    (added, removed)
}

/// How a rejected edit reaches the model and the chat.
fn rejected(tool: &str, name: &str, reason: Option<String>) -> ToolOutput {
    let reason = reason.map(|r| r.trim().to_string()).filter(|r| !r.is_empty());
    let content = match &reason {
        Some(r) => format!("The user rejected this edit to `{name}`; the file is unchanged. Their reason: {r}"),
        None => format!("The user rejected this edit to `{name}`; the file is unchanged. Ask what they want instead."),
    };
    ToolOutput::error(content)
        .with_summary(format!("✗ {tool}: edit to {name} rejected"))
        .with_review("rejected")
}

/// What the buffer side of a landing did.
pub enum EditorWrite {
    /// A buffer held the file: it has the text and is saved.
    Written,
    /// No buffer holds the file: write the disk.
    NoBuffer,
    /// The buffer had unsaved changes and the user kept them.
    Rejected(String),
}

/// The review question: ACP's permission request whose tool call carries
/// the diff; mia's details in `_meta.mia`.
fn review_request(ctx: &ToolContext, tool: &str, p: &Proposal) -> acp::RequestPermissionRequest {
    let old = p.before.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
    let new = String::from_utf8_lossy(&p.after).into_owned();
    let diff = acp::ToolCallContent::Diff(acp::Diff::new(p.path.clone(), new).old_text(old));
    let tool_call = acp::ToolCallUpdate::new(
        ctx.call_id.clone(),
        acp::ToolCallUpdateFields::new()
            .title(tool.to_string())
            .kind(updates::tool_kind(tool))
            .status(acp::ToolCallStatus::Pending)
            .content(vec![diff]),
    );
    let mut meta = acp::Meta::new();
    meta.insert(
        "mia".into(),
        json!({
            "tool": tool,
            "subject": p.name,
            "effect": "write",
            "because": "edits are reviewed before they land",
            "root": ctx.root.display().to_string(),
            "review": true,
        }),
    );
    acp::RequestPermissionRequest::new(
        ctx.session_id.clone(),
        tool_call,
        vec![
            acp::PermissionOption::new("allow_once", "Accept", acp::PermissionOptionKind::AllowOnce),
            acp::PermissionOption::new(
                "allow_file",
                "Accept edits to this file for this session",
                acp::PermissionOptionKind::AllowAlways,
            ),
            acp::PermissionOption::new(
                "allow_always",
                "Allow always for this project",
                acp::PermissionOptionKind::AllowAlways,
            ),
            acp::PermissionOption::new("reject_once", "Reject", acp::PermissionOptionKind::RejectOnce),
        ],
    )
    .meta(meta)
}

/// Shows the proposal and waits for the user's verdict (a dismissed or
/// unanswerable review is a rejection).
async fn review(ctx: &ToolContext, tool: &str, p: &Proposal) -> Verdict {
    let payload = serde_json::to_value(review_request(ctx, tool, p)).unwrap_or(Value::Null);
    let timeout = ctx
        .edits
        .as_ref()
        .map(|s| s.ask_timeout)
        .unwrap_or(Duration::from_secs(600));
    let answer = match ctx
        .lua
        .call_for::<mia_proto::reply::PermissionReply>(
            ctx.stream,
            mia_proto::EditorCall::Permission(payload),
            timeout,
            &ctx.abort,
        )
        .await
    {
        Ok(Ok(reply)) => reply,
        _ => return Verdict::Reject { reason: None },
    };
    let mia_proto::reply::PermissionReply {
        option,
        content,
        reason,
    } = answer;
    match option.as_deref() {
        Some("allow_once") => Verdict::Accept { content },
        Some("allow_file") => {
            if let Some(scope) = &ctx.edits {
                scope.ledger.allow(&p.path);
            }
            Verdict::Accept { content }
        }
        Some("allow_always") => {
            if let (Some(scope), Ok(checked)) = (&ctx.edits, Checked::new(&ctx.root, Some(&path_subject(&p.path)))) {
                let rule = remembered_rule(tool, &checked);
                if let Some(dir) = &scope.data_dir {
                    Remembered::save(dir, &ctx.root, rule.clone()).await;
                }
                scope.ledger.rules.lock().unwrap_or_else(|p| p.into_inner()).push(rule);
            }
            Verdict::Accept { content }
        }
        _ => Verdict::Reject { reason },
    }
}

fn path_subject(path: &Path) -> super::ToolSubject {
    super::ToolSubject::Path(path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::LuaBridge;
    use crate::checkpoint::{CheckpointSettings, Checkpoints};
    use crate::events::{Event, EventQueue};
    use crate::tools::AgentInfo;

    struct Fixture {
        _data: tempfile::TempDir,
        project: tempfile::TempDir,
        ctx: ToolContext,
        store: Checkpoints,
    }

    fn fixture(review: bool) -> Fixture {
        let data = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let store = Checkpoints::new(data.path(), CheckpointSettings::default());
        let cp = TurnCheckpoint::new(store.clone(), "s1", "t1", "fix it", Arc::default());
        let agent = AgentInfo {
            name: "mia".into(),
            mode: "ask".into(),
        };
        let lua = LuaBridge::new(Arc::new(EventQueue::new().unwrap()), Arc::default());
        let ctx = ToolContext {
            session_id: "s1".into(),
            message_id: "m".into(),
            call_id: "call-1".into(),
            edits: Some(Arc::new(EditScope {
                ledger: Arc::default(),
                checkpoint: Some(Arc::new(cp)),
                data_dir: None,
                ask_timeout: Duration::from_secs(10),
            })),
            review,
            ..ToolContext::new(77, project.path().to_path_buf(), agent, lua)
        };
        Fixture {
            _data: data,
            project,
            ctx,
            store,
        }
    }

    /// A stand-in for Neovim: answers the review with `answer` and hands back the request.
    fn answer_review(ctx: &ToolContext, answer: Value) -> std::thread::JoinHandle<Value> {
        let (queue, calls) = (ctx.lua.queue.clone(), ctx.lua.calls.clone());
        std::thread::spawn(move || loop {
            for e in queue.drain() {
                if let Event::Call { call, request, .. } = e {
                    let mia_proto::EditorCall::Permission(payload) = *request else {
                        panic!("not a review: {request:?}");
                    };
                    calls.answer(call, Ok(answer));
                    return payload;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        })
    }

    fn proposal(f: &Fixture, before: Option<&str>, after: &str) -> Proposal {
        let path = f.project.path().join("a.txt");
        if let Some(b) = before {
            std::fs::write(&path, b).unwrap();
        }
        Proposal {
            path,
            name: "a.txt".into(),
            before: before.map(|b| b.as_bytes().to_vec()),
            after: after.as_bytes().to_vec(),
        }
    }

    fn run(f: &Fixture, p: Proposal) -> ToolOutput {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(land(&f.ctx, "write_file", p, ToolOutput::ok("Overwrote `a.txt`.")))
    }

    #[test]
    fn the_review_carries_the_diff_and_a_rejection_leaves_the_file_byte_identical_with_the_reason() {
        let f = fixture(true);
        let user = answer_review(
            &f.ctx,
            json!({ "outcome": { "outcome": "selected", "optionId": "reject_once" },
                    "_meta": { "mia": { "reason": "keep the old greeting" } } }),
        );
        let out = run(&f, proposal(&f, Some("hello\r\nworld\n"), "hi\nworld\n"));
        let request = user.join().unwrap();
        let diff = &request["toolCall"]["content"][0];
        assert_eq!(diff["type"], "diff");
        assert_eq!(diff["oldText"], "hello\r\nworld\n");
        assert_eq!(diff["newText"], "hi\nworld\n");
        assert!(out.is_error);
        assert_eq!(
            out.content,
            "The user rejected this edit to `a.txt`; the file is unchanged. Their reason: keep the old greeting"
        );
        assert_eq!(out.metadata["review"], "rejected");
        assert_eq!(
            std::fs::read(f.project.path().join("a.txt")).unwrap(),
            b"hello\r\nworld\n"
        );
        assert!(
            f.store.list("s1", f.project.path()).unwrap().is_empty(),
            "nothing changed, nothing kept"
        );
    }

    #[test]
    fn a_changed_proposal_lands_as_the_user_left_it_and_the_model_is_told_so() {
        let f = fixture(true);
        let user = answer_review(
            &f.ctx,
            json!({ "outcome": { "outcome": "selected", "optionId": "allow_once" },
                    "_meta": { "mia": { "content": "hi there\n" } } }),
        );
        let out = run(&f, proposal(&f, Some("hello\n"), "hi\n"));
        user.join().unwrap();
        assert!(!out.is_error, "{}", out.content);
        assert_eq!(out.metadata["review"], "modified");
        assert!(
            out.content.ends_with("now contains exactly:\nhi there\n"),
            "{}",
            out.content
        );
        assert_eq!(
            std::fs::read_to_string(f.project.path().join("a.txt")).unwrap(),
            "hi there\n"
        );
        // The turn's checkpoint has the file as it was.
        f.store.undo("s1").unwrap();
        assert_eq!(
            std::fs::read_to_string(f.project.path().join("a.txt")).unwrap(),
            "hello\n"
        );
    }

    #[test]
    fn accepting_for_the_file_is_remembered_for_the_session() {
        let f = fixture(true);
        let user = answer_review(
            &f.ctx,
            json!({ "outcome": { "outcome": "selected", "optionId": "allow_file" } }),
        );
        let out = run(&f, proposal(&f, None, "new\n"));
        user.join().unwrap();
        assert_eq!(out.metadata["review"], "accepted");
        let path = f.project.path().join("a.txt");
        assert!(f.ctx.edits.as_ref().unwrap().ledger.allowed(&path));
        assert!(!f
            .ctx
            .edits
            .as_ref()
            .unwrap()
            .ledger
            .allowed(&f.project.path().join("b.txt")));
    }

    #[test]
    fn a_dismissed_review_is_a_rejection_without_a_reason() {
        let f = fixture(true);
        let user = answer_review(&f.ctx, json!({ "outcome": { "outcome": "cancelled" } }));
        let out = run(&f, proposal(&f, Some("x\n"), "y\n"));
        user.join().unwrap();
        assert!(out.content.ends_with("Ask what they want instead."), "{}", out.content);
        assert_eq!(std::fs::read_to_string(f.project.path().join("a.txt")).unwrap(), "x\n");
    }

    #[test]
    fn a_file_changed_on_disk_since_the_model_read_it_is_refused_before_anything_is_asked() {
        let f = fixture(true);
        let p = proposal(&f, Some("v1\n"), "v2\n");
        f.ctx.edits.as_ref().unwrap().ledger.saw(&p.path);
        std::fs::write(&p.path, "v1 and the user's change\n").unwrap();
        let out = run(&f, p);
        assert!(out.is_error);
        assert!(
            out.content.contains("changed on disk since you last read it"),
            "{}",
            out.content
        );
        assert_eq!(
            std::fs::read_to_string(f.project.path().join("a.txt")).unwrap(),
            "v1 and the user's change\n"
        );
        assert!(f.ctx.lua.queue.drain().is_empty(), "no review was shown");
    }
}
