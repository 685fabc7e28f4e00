//! `bash`: runs a shell command in the project root.
//!
//! The command runs as `bash -c` in a process group of its own, with stdout
//! and stderr sharing one pipe (so their order is kept) and stdin closed. A
//! timeout or the user's stop ends the whole group: SIGTERM first, SIGKILL
//! after `kill_grace_ms`, so grandchildren (`cmd &`, test runners, servers)
//! do not outlive the call. When the command exits on its own, anything it
//! left running in the background is left alone, unless the command ran in
//! the sandbox (`crate::sandbox`, issue 48): there mia-acp supervises it and
//! nothing it started outlives it.

use std::io;
use std::os::fd::OwnedFd;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::output::CappedOutput;
use super::process_group::ProcessGroup;
use super::{command_subject, object_schema, optional_u64, prop, required_str, shorten, with_error_summary};
use crate::tools::{Tool, ToolContext, ToolEffect, ToolOutput};

/// Runs `bash -c command` in the project root.
pub struct Bash;

const NAME: &str = "bash";
/// Longest timeout a call may ask for, unless the configured default is longer.
const MAX_TIMEOUT_MS: u64 = 600_000;
/// How long output is still collected after the command exits, for
/// background processes that keep the pipe open.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(250);
/// How often a stopping process group is checked.
const POLL: Duration = Duration::from_millis(20);
/// How long to wait for killed processes to die after SIGKILL.
const SETTLE_AFTER_KILL: Duration = Duration::from_millis(500);

impl Tool for Bash {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Run a shell command with `bash -c` in the project root and return its combined stdout and stderr and its \
         exit code. There is no input (stdin is closed), so avoid interactive commands. Long output keeps its \
         beginning and end. The command and everything it starts are stopped at the timeout."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "command": prop("string", "The command line, run by bash in the project root."),
                "outside_sandbox": {
                    "type": "boolean",
                    "description": "Run the command outside mia's sandbox. Only after the same command failed because \
                        of the sandbox (its result says so); the user is always asked first.",
                },
                "timeout_ms": {
                    "type": "integer", "minimum": 1,
                    "description": "Stop the command after this many milliseconds. Defaults to 120000 (2 minutes); at most 600000.",
                },
            }),
            &["command"],
        )
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Execute
    }

    fn subject(&self, args: &Value) -> Option<crate::tools::ToolSubject> {
        command_subject(args, "command")
    }

    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            // The project's files are kept before the command and compared
            // after it, so the turn's checkpoint covers what the command changed.
            let checkpoint = ctx.edits.as_ref().and_then(|s| s.checkpoint.clone());
            let before = match &checkpoint {
                Some(cp) => {
                    let (cp, root, abort) = (cp.clone(), ctx.root.clone(), ctx.abort.clone());
                    // The scan stops at the user's cancel: the call then ends without running.
                    tokio::task::spawn_blocking(move || cp.scan(&root, &|| abort.is_cancelled()))
                        .await
                        .ok()
                }
                None => None,
            };
            let mut out = match run(&args, &ctx).await {
                Ok(out) | Err(out) => out,
            };
            // A scan cut short by a cancel: the command did not run, nothing to compare.
            if let (Some(cp), Some(before)) = (checkpoint, before.filter(|b| !b.cancelled)) {
                let root = ctx.root.clone();
                let after = tokio::task::spawn_blocking(move || cp.after_scan(&root, &before, NAME)).await;
                match after {
                    Ok(Ok(after)) if !after.uncovered.is_empty() => out.content.push_str(&format!(
                        "\n(mia's checkpoint of this command, which :Mia undo restores, does not cover: {})",
                        after.uncovered.join("; ")
                    )),
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => out
                        .content
                        .push_str(&format!("\n(mia could not record a checkpoint: {e})")),
                    Err(e) => out
                        .content
                        .push_str(&format!("\n(mia could not record a checkpoint: {e})")),
                }
            }
            with_error_summary(NAME, out)
        })
    }
}

/// How the command ended.
enum End {
    Exited(ExitStatus),
    TimedOut(u64),
    Cancelled,
}

async fn run(args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
    let command = required_str(NAME, args, "command")?;
    let max_timeout = MAX_TIMEOUT_MS.max(ctx.limits.bash_timeout_ms);
    let timeout_ms = optional_u64(args, "timeout_ms")
        .unwrap_or(ctx.limits.bash_timeout_ms)
        .clamp(1, max_timeout);
    if !ctx.root.is_dir() {
        return Err(ToolOutput::error(format!(
            "the project root {} is not a directory, so commands cannot run in it; restart mia from the project",
            ctx.root.display()
        )));
    }

    let shown_command = shorten(command.lines().next().unwrap_or(""), 60);
    if ctx.abort.is_cancelled() {
        return Ok(ToolOutput::ok("(cancelled before the command started)")
            .with_summary(format!("⚙ `{shown_command}` cancelled")));
    }
    let outside = args.get("outside_sandbox") == Some(&Value::Bool(true));
    let grace_ms = ctx.limits.kill_grace_ms / 2;
    // The plan walks the denied paths (and, for deny rules' globs, the
    // project): off the runtime's workers.
    let plan = match &ctx.sandbox {
        Some(setup) if !outside => {
            let (setup, root) = (setup.clone(), ctx.root.clone());
            tokio::task::spawn_blocking(move || crate::sandbox::plan(&setup, &root, grace_ms))
                .await
                .unwrap_or_else(|e| crate::sandbox::Plan::Refused(format!("mia did not run this command: {e}")))
        }
        _ => crate::sandbox::Plan::Unconfined { note: None },
    };
    if let crate::sandbox::Plan::Refused(why) = &plan {
        return Err(ToolOutput::error(why.clone()).with_summary(format!("⚙ `{shown_command}` refused: no sandbox")));
    }
    let (mut child, reader) = spawn(command, ctx, &plan).map_err(|e| {
        ToolOutput::error(format!(
            "bash could not be started ({e}); check that bash is installed and on PATH"
        ))
    })?;
    let mut group = ProcessGroup::of(&child);
    let mut reader = Reader::new(reader, ctx.limits.output_cap_bytes);

    let deadline = tokio::time::sleep(Duration::from_millis(timeout_ms));
    tokio::pin!(deadline);
    let end = loop {
        tokio::select! {
            status = child.wait() => match status {
                Ok(status) => break End::Exited(status),
                Err(e) => return Err(ToolOutput::error(format!("waiting for the command failed ({e})"))),
            },
            _ = reader.read_some(), if reader.open => {}
            _ = &mut deadline => break End::TimedOut(timeout_ms),
            _ = ctx.abort.cancelled() => break End::Cancelled,
        }
    };

    let status = match end {
        End::Exited(status) => {
            group.disarm();
            reader.drain_for(DRAIN_AFTER_EXIT).await;
            Some(status)
        }
        End::TimedOut(_) | End::Cancelled => {
            let grace = Duration::from_millis(ctx.limits.kill_grace_ms);
            let status = stop_group(&group, &mut child, &mut reader, grace).await;
            group.disarm();
            status
        }
    };

    let mut content = reader.output.finish();
    if content.is_empty() {
        content.push_str("(no output)");
    }
    let out = match end {
        End::Exited(_) => {
            let how = describe_status(status);
            content.push_str(&format!("\n({how})"));
            if let crate::sandbox::Plan::Confined { policy, .. } = &plan {
                let failed = status.is_none_or(|s| !s.success());
                if let Some(note) = failed.then(|| crate::sandbox::refusal_note(&content, policy)).flatten() {
                    content.push('\n');
                    content.push_str(&note);
                }
            }
            ToolOutput::ok(content).with_summary(format!("⚙ ran `{shown_command}` ({how})"))
        }
        End::TimedOut(ms) => {
            content.push_str(&format!(
                "\n(timed out after {ms} ms; the command and the processes it started were stopped)"
            ));
            ToolOutput::error(content).with_summary(format!("⚙ `{shown_command}` timed out after {ms} ms"))
        }
        End::Cancelled => {
            content.push_str("\n(cancelled)");
            ToolOutput::ok(content).with_summary(format!("⚙ `{shown_command}` cancelled"))
        }
    };
    Ok(out)
}

/// Starts `bash -c command` in its own process group, stdout and stderr both
/// writing to one pipe whose read end is returned; confined, it starts the
/// supervisor with the policy and `bash -c command` after it.
fn spawn(command: &str, ctx: &ToolContext, plan: &crate::sandbox::Plan) -> io::Result<(Child, pipe::Receiver)> {
    let (read_end, write_end) = io::pipe()?;
    let receiver = pipe::Receiver::from_owned_fd(OwnedFd::from(read_end))?;
    let mut cmd = match plan {
        crate::sandbox::Plan::Confined { helper, policy, tmp } => {
            let (program, args) = policy.command_line(helper, "bash".as_ref(), &["-c".into(), command.into()]);
            let mut cmd = Command::new(program);
            cmd.args(args).env("TMPDIR", tmp);
            cmd
        }
        _ => {
            let mut cmd = Command::new("bash");
            cmd.arg("-c").arg(command);
            cmd
        }
    };
    cmd.current_dir(&ctx.root)
        .stdin(Stdio::null())
        .stdout(write_end.try_clone()?)
        .stderr(write_end)
        .process_group(0);
    // The model must not read a provider key from the environment (mia_llm::secret_env).
    for name in mia_llm::secret_env::names() {
        cmd.env_remove(name);
    }
    let child = cmd.spawn()?;
    // The command holds our copies of the write end; without dropping it the
    // pipe would never report end of file.
    drop(cmd);
    Ok((child, receiver))
}

/// "exit code 0", "killed by signal 9".
fn describe_status(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => "exit status unknown".to_string(),
        },
        None => "exit status unknown".to_string(),
    }
}

/// The read end of the output pipe and what came through it.
struct Reader {
    pipe: pipe::Receiver,
    output: CappedOutput,
    /// False after end of file or a read error.
    open: bool,
    buf: Vec<u8>,
}

impl Reader {
    fn new(pipe: pipe::Receiver, cap: usize) -> Self {
        Reader {
            pipe,
            output: CappedOutput::new(cap),
            open: true,
            buf: vec![0; 16 * 1024],
        }
    }

    /// Reads what the pipe has (waiting for something); cancel-safe.
    async fn read_some(&mut self) {
        match self.pipe.read(&mut self.buf).await {
            Ok(0) | Err(_) => self.open = false,
            Ok(n) => self.output.push(&self.buf[..n]),
        }
    }

    /// Reads until end of file or until `limit` has passed.
    async fn drain_for(&mut self, limit: Duration) {
        let until = Instant::now() + limit;
        while self.open {
            tokio::select! {
                biased;
                _ = self.read_some() => {}
                _ = tokio::time::sleep_until(until) => break,
            }
        }
    }
}

/// SIGTERM to the command's process group, then SIGKILL once `grace` has
/// passed while any member still runs; output is collected meanwhile.
/// Returns the shell's exit status.
async fn stop_group(
    group: &ProcessGroup,
    child: &mut Child,
    reader: &mut Reader,
    grace: Duration,
) -> Option<ExitStatus> {
    group.signal(libc::SIGTERM);
    let kill_at = Instant::now() + grace;
    let mut status = None;
    loop {
        if status.is_none() {
            status = child.try_wait().ok().flatten();
        }
        if status.is_some() && !group.has_live_members() {
            return status;
        }
        if Instant::now() >= kill_at {
            break;
        }
        tokio::select! {
            _ = reader.read_some(), if reader.open => {}
            _ = tokio::time::sleep(POLL) => {}
        }
    }
    group.signal(libc::SIGKILL);
    if status.is_none() {
        status = child.wait().await.ok();
    }
    // SIGKILL cannot be ignored, but death takes a moment to become visible.
    let give_up = Instant::now() + SETTLE_AFTER_KILL;
    while group.has_live_members() && Instant::now() < give_up {
        tokio::time::sleep(POLL).await;
    }
    reader.drain_for(Duration::ZERO).await;
    status
}
