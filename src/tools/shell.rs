//! TEMPORARY stub (replaced by the real parser from the shell-parse branch).
#[derive(Debug, Clone, Default)]
pub struct CommandLine {
    pub commands: Vec<SimpleCommand>,
    pub opaque: Vec<String>,
}
#[derive(Debug, Clone, Default)]
pub struct SimpleCommand {
    pub text: String,
    pub writes: Vec<String>,
    pub nested: bool,
}
pub fn analyze(command: &str) -> CommandLine {
    if command.chars().all(|c| c.is_alphanumeric() || " -_./*".contains(c)) {
        CommandLine {
            commands: vec![SimpleCommand {
                text: command.split_whitespace().collect::<Vec<_>>().join(" "),
                ..Default::default()
            }],
            opaque: vec![],
        }
    } else {
        CommandLine {
            commands: vec![],
            opaque: vec!["stub".into()],
        }
    }
}
