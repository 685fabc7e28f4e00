//! `mia-acp`: mia's agent for any Agent Client Protocol client (Zed, other
//! editors), over stdio. See `:h mia-acp` (doc/mia.txt).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use mia_engine::acp::server::{serve, AcpConfig};

const HELP: &str = "\
mia-acp: mia's coding agent over the Agent Client Protocol (ACP) on stdio

Usage: mia-acp [--config FILE]

Start it from an ACP client (Zed: agent_servers in settings.json); it speaks
JSON-RPC on stdin/stdout and logs to a file, never to stdout.

Options:
  --config FILE   mia's setup() options as JSON (model, providers with base_url
                  and api_key_env, data_dir, permissions, modes, costs, pricing,
                  tools, log_file, log_level); keys come from the environment
  --help          this text
  --version       the version

Without --config: the defaults, and the usual key variables
(ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY).
";

fn main() -> ExitCode {
    // mia-acp is also the sandbox's supervisor (`--sandbox-run`) and probe
    // (`--sandbox-probe`): one binary to ship beside the library.
    if let Some(code) = mia_sandbox::main_if_helper() {
        return ExitCode::from(u8::try_from(code).unwrap_or(125));
    }
    let mut args = std::env::args().skip(1);
    let mut config_file: Option<PathBuf> = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--help" | "-h" => {
                print!("{HELP}");
                return ExitCode::SUCCESS;
            }
            "--version" | "-V" => {
                println!("mia-acp {}", mia_log::version::VERSION);
                return ExitCode::SUCCESS;
            }
            "--config" => match args.next() {
                Some(f) => config_file = Some(PathBuf::from(f)),
                None => {
                    eprintln!("mia-acp: --config needs a file (mia-acp --config FILE); see mia-acp --help");
                    return ExitCode::from(2);
                }
            },
            other => match other.strip_prefix("--config=") {
                Some(f) => config_file = Some(PathBuf::from(f)),
                None => {
                    eprintln!("mia-acp: unknown argument `{other}`; see mia-acp --help");
                    return ExitCode::from(2);
                }
            },
        }
    }
    let config = match config_file {
        Some(f) => AcpConfig::from_file(&f),
        None => AcpConfig::defaults(),
    };
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(file) = &config.log_file {
        mia_log::init(file, &config.log_level);
    }
    let app = mia_engine::app::App::new();
    app.configure(config.core.clone());
    app.configure_agent(config.agent.clone());
    let rt = match app.handle() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mia-acp: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(serve(app.clone(), config));
    app.shutdown(Duration::from_millis(100), Duration::from_millis(100));
    mia_log::flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mia-acp: the connection ended with an error: {e}");
            ExitCode::FAILURE
        }
    }
}
