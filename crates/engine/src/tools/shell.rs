//! Shell command lines, parsed for permission rules.
//!
//! A permission rule about the `bash` tool must hold for every spelling of a
//! command: `git status; touch x`, `git status $(touch x)` or a second line
//! must not pass as `git status`. Matching a glob against the raw text cannot
//! promise that, so [`analyze`] parses the line with a real bash grammar
//! (brush-parser) and reports:
//!
//! - `commands`: every simple command the line would run, across `;`, `&&`,
//!   `||`, `&`, `|`, `|&`, newlines, subshells, brace groups, and inside
//!   `$( )`, backticks, `<( )`/`>( )`, also inside double quotes, assignments,
//!   arithmetic, parameter expansions, unquoted here-documents and the
//!   literal string of `eval` or `sh -c`/`bash -c`. Each has
//!   a canonical `text` (words after quote removal, single spaces, a word
//!   quoted again only when it holds a blank or a shell-special character),
//!   so one command has one spelling and a quoted `'git status'` can never
//!   pose as `git status`. Expansions (`$x`, `$(..)`, unquoted globs) are
//!   kept as written, never as literal text.
//! - `writes`: files a command opens for writing by redirection (`>`, `>>`,
//!   `>|`, `<>`, `&>`, `>&file`), except `/dev/null` and fd duplications.
//! - `opaque`: one short reason per thing the analysis cannot vouch for
//!   (parse error, incomplete input, a command name that is not literal,
//!   control flow, functions, arithmetic that reads variables, ...). Any
//!   reason means the caller must ask the user. Commands found inside opaque
//!   constructs are still listed, so deny rules can match them.
//!
//! Nothing in the input can panic or exhaust the caller: input over
//! [`MAX_COMMAND_BYTES`] or with more than [`MAX_NESTING_MARKS`] nesting marks
//! is opaque without parsing, recursion stops at [`MAX_DEPTH`], and the parse
//! runs on its own thread with a fixed stack (a panic there is opaque too).

use brush_parser::ast;
use brush_parser::word::{self, Parameter, ParameterExpr, ParameterTransformOp, WordPiece, WordPieceWithSource};
use brush_parser::{Parser, ParserOptions};

/// Longest command line analyzed; longer ones are opaque.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// Deepest nesting (substitutions, groups, expansions) analyzed.
pub const MAX_DEPTH: usize = 64;
/// Most characters and keywords that can open a nested construct (`(`, `{`,
/// `[`, `` ` ``, `$`, `"`, `!`, `if`, `do`, ...). The parser recurses at most
/// once per mark, so this bounds its stack use (measured under 8 KiB per
/// level; the parse thread gets [`PARSE_STACK_BYTES`]).
pub const MAX_NESTING_MARKS: usize = 1024;
/// Stack of the parse thread: 4x the worst measured need at [`MAX_NESTING_MARKS`].
const PARSE_STACK_BYTES: usize = 32 * 1024 * 1024;
/// Most commands and opaque reasons reported (bounds memory on huge scripts).
const MAX_COMMANDS: usize = 4096;
const MAX_REASONS: usize = 32;

/// What a command line does, as far as permission rules care.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandLine {
    /// Every simple command the line would run, outer commands before the
    /// commands nested in them.
    pub commands: Vec<SimpleCommand>,
    /// Why the analysis cannot vouch for the line; non-empty means ask.
    pub opaque: Vec<String>,
}

impl CommandLine {
    /// True when the analysis understood the whole line.
    pub fn is_understood(&self) -> bool {
        self.opaque.is_empty()
    }

    fn opaque(reason: &str) -> Self {
        Self {
            commands: Vec::new(),
            opaque: vec![reason.to_owned()],
        }
    }
}

/// One simple command: its words in canonical text, and whether it writes files by redirection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimpleCommand {
    /// Leading assignments and words, canonical (see the module doc).
    pub text: String,
    /// Output redirection targets other than /dev/null and fd duplications
    /// like 2>&1 (literal targets after quote removal, others as written).
    /// Includes redirections of an enclosing `( )`/`{ }` group.
    pub writes: Vec<String>,
    /// Input redirection sources (`< file`), same form as `writes`.
    pub reads: Vec<String>,
    /// Inside a $(), ``, <(), >() (or an `eval` / `sh -c` string).
    pub nested: bool,
}

/// Analyzes one `bash` tool command line. Never panics.
pub fn analyze(command: &str) -> CommandLine {
    if command.len() > MAX_COMMAND_BYTES {
        return CommandLine::opaque("the command is longer than 64 KiB");
    }
    if nesting_marks(command) > MAX_NESTING_MARKS {
        return CommandLine::opaque("the command has too many nested constructs to analyze");
    }
    let owned = command.to_owned();
    let spawned = std::thread::Builder::new()
        .name("mia-shell-parse".to_owned())
        .stack_size(PARSE_STACK_BYTES)
        .spawn(move || {
            let mut walker = Walker::default();
            walker.script(&owned, 0, false);
            walker.out
        });
    match spawned {
        Ok(handle) => handle
            .join()
            .unwrap_or_else(|_| CommandLine::opaque("the shell parser failed on this command")),
        Err(_) => CommandLine::opaque("could not start the shell parser"),
    }
}

/// Upper bound of the parser's recursion: every nested construct starts with
/// one of these characters or keywords, whatever the quoting.
fn nesting_marks(s: &str) -> usize {
    let chars = s
        .bytes()
        .filter(|b| matches!(b, b'(' | b'{' | b'[' | b'`' | b'$' | b'"' | b'!'))
        .count();
    let keywords = s
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| {
            matches!(
                *w,
                "if" | "then"
                    | "else"
                    | "elif"
                    | "while"
                    | "until"
                    | "do"
                    | "for"
                    | "case"
                    | "select"
                    | "coproc"
                    | "function"
            )
        })
        .count();
    chars + keywords
}

/// Characters a literal word may hold and still be written without quotes.
fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ',' | ':' | '@' | '%' | '+' | '=')
}

/// Writes a literal word so that a shell reads it back as exactly one word.
fn quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(is_plain) {
        return s.to_owned();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `2>&1`, `>&-`, `<&3-`: a duplication or a close, not a file.
fn is_fd_duplication(target: &str) -> bool {
    let digits = target.strip_suffix('-').unwrap_or(target);
    target == "-" || (!digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()))
}

/// Backslash processing of old-style command substitution (bash manual:
/// a backslash keeps its meaning except before `$`, `` ` ``, `\`, and `"`
/// when the substitution sits inside double quotes).
fn unescape_backquoted(raw: &str, in_double_quotes: bool) -> String {
    let inner = raw.strip_prefix('`').unwrap_or(raw);
    let inner = inner.strip_suffix('`').unwrap_or(inner);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(&next) = chars.peek() {
                if matches!(next, '$' | '`' | '\\') || (in_double_quotes && next == '"') {
                    out.push(next);
                    chars.next();
                    continue;
                }
            }
        }
        out.push(c);
    }
    out
}

/// A word as rendered for canonical text.
struct Rendered {
    text: String,
    /// The word's value when it is literal (no expansion, no glob).
    literal: Option<String>,
}

enum Segment {
    Literal(String),
    Expansion(String),
}

#[derive(Default)]
struct WordBuilder {
    segments: Vec<Segment>,
}

impl WordBuilder {
    fn literal(&mut self, s: &str) {
        if let Some(Segment::Literal(last)) = self.segments.last_mut() {
            last.push_str(s);
        } else {
            self.segments.push(Segment::Literal(s.to_owned()));
        }
    }

    fn expansion(&mut self, s: String) {
        self.segments.push(Segment::Expansion(s));
    }

    fn finish(self) -> Rendered {
        if self.segments.iter().all(|s| matches!(s, Segment::Literal(_))) {
            let value: String = self
                .segments
                .iter()
                .map(|s| match s {
                    Segment::Literal(l) | Segment::Expansion(l) => l.as_str(),
                })
                .collect();
            return Rendered {
                text: quote(&value),
                literal: Some(value),
            };
        }
        let mut text = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(l) if l.is_empty() => {}
                Segment::Literal(l) => text.push_str(&quote(l)),
                Segment::Expansion(e) => text.push_str(e),
            }
        }
        Rendered { text, literal: None }
    }
}

#[derive(Default)]
struct Walker {
    out: CommandLine,
    options: ParserOptions,
}

impl Walker {
    fn reason(&mut self, reason: &str) {
        if self.out.opaque.len() < MAX_REASONS && !self.out.opaque.iter().any(|r| r == reason) {
            self.out.opaque.push(reason.to_owned());
        }
    }

    fn too_deep(&mut self, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            self.reason("the command is nested deeper than 64 levels");
            return true;
        }
        false
    }

    /// A whole script (the line, or the inside of a substitution).
    fn script(&mut self, src: &str, depth: usize, nested: bool) {
        if self.too_deep(depth) {
            return;
        }
        match Parser::new(src.as_bytes(), &self.options).parse_program() {
            Ok(program) => {
                for list in &program.complete_commands {
                    self.list(list, depth, nested, &[]);
                }
            }
            Err(e) => self.reason(&format!("cannot parse the command: {e}")),
        }
    }

    fn list(&mut self, list: &ast::CompoundList, depth: usize, nested: bool, inherited: &[String]) {
        for item in &list.0 {
            let and_or = &item.0;
            self.pipeline(&and_or.first, depth, nested, inherited);
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p, depth, nested, inherited),
                }
            }
        }
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline, depth: usize, nested: bool, inherited: &[String]) {
        for command in &pipeline.seq {
            self.command(command, depth, nested, inherited);
        }
    }

    fn command(&mut self, command: &ast::Command, depth: usize, nested: bool, inherited: &[String]) {
        if self.too_deep(depth) {
            return;
        }
        match command {
            ast::Command::Simple(simple) => self.simple(simple, depth, nested, inherited),
            ast::Command::Compound(compound, redirects) => {
                let writes = self.group_redirects(redirects.as_ref(), depth, inherited);
                self.compound(compound, depth + 1, nested, &writes);
            }
            ast::Command::Function(function) => {
                self.reason("it defines a shell function");
                let writes = self.group_redirects(function.body.1.as_ref(), depth, inherited);
                self.compound(&function.body.0, depth + 1, nested, &writes);
            }
            ast::Command::ExtendedTest(test, redirects) => {
                self.reason("it uses a [[ ]] test");
                let _ = self.group_redirects(redirects.as_ref(), depth, inherited);
                self.test_expr(&test.expr, depth + 1);
            }
        }
    }

    /// Redirections on a `( )`, `{ }` or control-flow group apply to every command inside.
    fn group_redirects(
        &mut self,
        redirects: Option<&ast::RedirectList>,
        depth: usize,
        inherited: &[String],
    ) -> Vec<String> {
        let mut writes = inherited.to_vec();
        let mut reads = Vec::new();
        if let Some(list) = redirects {
            for redirect in &list.0 {
                self.redirect(redirect, depth, &mut writes, &mut reads);
            }
        }
        writes
    }

    fn test_expr(&mut self, expr: &ast::ExtendedTestExpr, depth: usize) {
        if self.too_deep(depth) {
            return;
        }
        match expr {
            ast::ExtendedTestExpr::And(a, b) | ast::ExtendedTestExpr::Or(a, b) => {
                self.test_expr(a, depth + 1);
                self.test_expr(b, depth + 1);
            }
            ast::ExtendedTestExpr::Not(a) | ast::ExtendedTestExpr::Parenthesized(a) => self.test_expr(a, depth + 1),
            ast::ExtendedTestExpr::UnaryTest(_, w) => {
                let _ = self.word(&w.value, depth);
            }
            ast::ExtendedTestExpr::BinaryTest(_, a, b) => {
                let _ = self.word(&a.value, depth);
                let _ = self.word(&b.value, depth);
            }
        }
    }

    fn compound(&mut self, compound: &ast::CompoundCommand, depth: usize, nested: bool, writes: &[String]) {
        if self.too_deep(depth) {
            return;
        }
        match compound {
            ast::CompoundCommand::BraceGroup(group) => self.list(&group.list, depth, nested, writes),
            ast::CompoundCommand::Subshell(subshell) => self.list(&subshell.list, depth, nested, writes),
            ast::CompoundCommand::Arithmetic(arithmetic) => {
                self.reason("it uses an arithmetic command (( ))");
                self.arithmetic(&arithmetic.expr.value, depth);
            }
            ast::CompoundCommand::ArithmeticForClause(clause) => {
                self.reason("it uses a for (( )) loop");
                for expr in [&clause.initializer, &clause.condition, &clause.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&expr.value, depth);
                }
                self.list(&clause.body.list, depth, nested, writes);
            }
            ast::CompoundCommand::ForClause(clause) => {
                self.reason("it uses a for loop");
                for value in clause.values.iter().flatten() {
                    let _ = self.word(&value.value, depth);
                }
                self.list(&clause.body.list, depth, nested, writes);
            }
            ast::CompoundCommand::CaseClause(clause) => {
                self.reason("it uses a case statement");
                let _ = self.word(&clause.value.value, depth);
                for item in &clause.cases {
                    for pattern in &item.patterns {
                        let _ = self.word(&pattern.value, depth);
                    }
                    if let Some(list) = &item.cmd {
                        self.list(list, depth, nested, writes);
                    }
                }
            }
            ast::CompoundCommand::IfClause(clause) => {
                self.reason("it uses an if statement");
                self.list(&clause.condition, depth, nested, writes);
                self.list(&clause.then, depth, nested, writes);
                for other in clause.elses.iter().flatten() {
                    if let Some(condition) = &other.condition {
                        self.list(condition, depth, nested, writes);
                    }
                    self.list(&other.body, depth, nested, writes);
                }
            }
            ast::CompoundCommand::WhileClause(clause) | ast::CompoundCommand::UntilClause(clause) => {
                self.reason("it uses a while or until loop");
                self.list(&clause.0, depth, nested, writes);
                self.list(&clause.1.list, depth, nested, writes);
            }
            ast::CompoundCommand::Coprocess(coprocess) => {
                self.reason("it starts a coprocess");
                self.command(&coprocess.body, depth, nested, writes);
            }
        }
    }

    fn simple(&mut self, simple: &ast::SimpleCommand, depth: usize, nested: bool, inherited: &[String]) {
        // The outer command goes before the commands nested in its words.
        let index = self.out.commands.len();
        let mut words: Vec<String> = Vec::new();
        let mut writes = inherited.to_vec();
        let mut reads = Vec::new();
        let mut name: Option<String> = None;
        let mut arguments: Vec<Option<String>> = Vec::new();

        for item in simple.prefix.iter().flat_map(|p| p.0.iter()) {
            match item {
                ast::CommandPrefixOrSuffixItem::AssignmentWord(assignment, raw) => {
                    let text = self.assignment(assignment, raw, depth);
                    words.push(text);
                }
                other => self.item(other, depth, &mut words, &mut writes, &mut reads, &mut arguments),
            }
        }
        if let Some(command_word) = &simple.word_or_name {
            let rendered = self.word(&command_word.value, depth);
            match &rendered.literal {
                // A literal name holding `=` would read back as an assignment.
                Some(literal) if literal.contains('=') => words.push(format!("'{}'", literal.replace('\'', "'\\''"))),
                Some(_) => words.push(rendered.text.clone()),
                None => {
                    self.reason("the command name is not a literal word");
                    words.push(rendered.text.clone());
                }
            }
            name = rendered.literal;
        }
        for item in simple.suffix.iter().flat_map(|s| s.0.iter()) {
            self.item(item, depth, &mut words, &mut writes, &mut reads, &mut arguments);
        }

        match name.as_deref().map(|n| n.rsplit('/').next().unwrap_or(n)) {
            Some("eval") => {
                let literal: Option<Vec<String>> = arguments.into_iter().collect();
                match literal {
                    Some(args) => self.script(&args.join(" "), depth + 1, true),
                    None => self.reason("it evals a string that is not literal"),
                }
            }
            // `sh -c 'script'`, `bash -lc 'script'`: the script's commands are listed too.
            Some("sh" | "bash" | "dash" | "zsh" | "ksh") => {
                let flag = arguments.iter().position(|a| {
                    a.as_deref().is_some_and(|a| {
                        a.len() > 1
                            && a.starts_with('-')
                            && a.contains('c')
                            && a.chars().skip(1).all(|c| c.is_ascii_alphabetic())
                    })
                });
                if let Some(flag) = flag {
                    match arguments.get(flag + 1) {
                        Some(Some(script)) => self.script(script, depth + 1, true),
                        Some(None) => self.reason("it runs a shell on a string that is not literal"),
                        None => {}
                    }
                }
            }
            _ => {}
        }

        let command = SimpleCommand {
            text: words.join(" "),
            writes,
            reads,
            nested,
        };
        if self.out.commands.len() >= MAX_COMMANDS {
            self.reason("the command runs too many commands to list");
            return;
        }
        let index = index.min(self.out.commands.len());
        self.out.commands.insert(index, command);
    }

    /// A prefix or suffix item other than a leading assignment.
    fn item(
        &mut self,
        item: &ast::CommandPrefixOrSuffixItem,
        depth: usize,
        words: &mut Vec<String>,
        writes: &mut Vec<String>,
        reads: &mut Vec<String>,
        arguments: &mut Vec<Option<String>>,
    ) {
        match item {
            ast::CommandPrefixOrSuffixItem::IoRedirect(redirect) => self.redirect(redirect, depth, writes, reads),
            ast::CommandPrefixOrSuffixItem::Word(w) | ast::CommandPrefixOrSuffixItem::AssignmentWord(_, w) => {
                let rendered = self.word(&w.value, depth);
                words.push(rendered.text);
                arguments.push(rendered.literal);
            }
            ast::CommandPrefixOrSuffixItem::ProcessSubstitution(kind, subshell) => {
                self.list(&subshell.list, depth + 1, true, &[]);
                words.push(format!("{kind}{subshell}"));
                arguments.push(None);
            }
        }
    }

    fn assignment(&mut self, assignment: &ast::Assignment, raw: &ast::Word, depth: usize) -> String {
        let name = match &assignment.name {
            ast::AssignmentName::VariableName(name) => name.clone(),
            ast::AssignmentName::ArrayElementName(name, index) => {
                self.arithmetic(index, depth + 1);
                format!("{name}[{index}]")
            }
        };
        let operator = if assignment.append { "+=" } else { "=" };
        match &assignment.value {
            ast::AssignmentValue::Scalar(value) => {
                let rendered = self.word(&value.value, depth);
                format!("{name}{operator}{}", rendered.text)
            }
            ast::AssignmentValue::Array(elements) => {
                self.reason("it assigns an array");
                for (key, value) in elements {
                    if let Some(key) = key {
                        let _ = self.word(&key.value, depth);
                    }
                    let _ = self.word(&value.value, depth);
                }
                raw.value.clone()
            }
        }
    }

    fn redirect(
        &mut self,
        redirect: &ast::IoRedirect,
        depth: usize,
        writes: &mut Vec<String>,
        reads: &mut Vec<String>,
    ) {
        match redirect {
            ast::IoRedirect::File(_, kind, target) => match target {
                ast::IoFileRedirectTarget::Filename(w) => {
                    let rendered = self.word(&w.value, depth);
                    let is_null = rendered.literal.as_deref() == Some("/dev/null");
                    let path = rendered.literal.unwrap_or(rendered.text);
                    match kind {
                        ast::IoFileRedirectKind::Read | ast::IoFileRedirectKind::DuplicateInput => reads.push(path),
                        ast::IoFileRedirectKind::Write
                        | ast::IoFileRedirectKind::Append
                        | ast::IoFileRedirectKind::Clobber
                        | ast::IoFileRedirectKind::ReadAndWrite
                        | ast::IoFileRedirectKind::DuplicateOutput => {
                            if !is_null {
                                writes.push(path);
                            }
                        }
                    }
                }
                ast::IoFileRedirectTarget::Fd(_) => {}
                ast::IoFileRedirectTarget::ProcessSubstitution(_, subshell) => {
                    self.list(&subshell.list, depth + 1, true, &[]);
                }
                ast::IoFileRedirectTarget::Duplicate(w) => {
                    let rendered = self.word(&w.value, depth);
                    let is_duplication = rendered.literal.as_deref().is_some_and(is_fd_duplication);
                    // `>&file` (not a number) sends stdout and stderr to the file.
                    if !is_duplication
                        && matches!(kind, ast::IoFileRedirectKind::DuplicateOutput)
                        && rendered.literal.as_deref() != Some("/dev/null")
                    {
                        writes.push(rendered.literal.unwrap_or(rendered.text));
                    }
                }
            },
            ast::IoRedirect::OutputAndError(w, _) => {
                let rendered = self.word(&w.value, depth);
                if rendered.literal.as_deref() != Some("/dev/null") {
                    writes.push(rendered.literal.unwrap_or(rendered.text));
                }
            }
            ast::IoRedirect::HereString(_, w) => {
                let _ = self.word(&w.value, depth);
            }
            ast::IoRedirect::HereDocument(_, doc) => {
                if doc.requires_expansion {
                    match word::parse_heredoc(&doc.doc.value, &self.options) {
                        Ok(pieces) => {
                            let mut ignored = WordBuilder::default();
                            self.pieces(&pieces, &doc.doc.value, true, depth + 1, &mut ignored);
                        }
                        Err(_) => self.reason("cannot parse a here-document"),
                    }
                }
            }
        }
    }

    /// Renders one word and collects the commands and reasons inside it.
    fn word(&mut self, raw: &str, depth: usize) -> Rendered {
        if self.too_deep(depth) {
            return Rendered {
                text: raw.to_owned(),
                literal: None,
            };
        }
        match word::parse(raw, &self.options) {
            Ok(pieces) => {
                let mut builder = WordBuilder::default();
                self.pieces(&pieces, raw, false, depth, &mut builder);
                builder.finish()
            }
            Err(_) => {
                self.reason("cannot parse a word of the command");
                Rendered {
                    text: raw.to_owned(),
                    literal: None,
                }
            }
        }
    }

    fn pieces(
        &mut self,
        pieces: &[WordPieceWithSource],
        src: &str,
        in_quotes: bool,
        depth: usize,
        out: &mut WordBuilder,
    ) {
        if self.too_deep(depth) {
            return;
        }
        for piece in pieces {
            let raw = src.get(piece.start_index..piece.end_index).unwrap_or_default();
            let as_written = |raw: &str| {
                if in_quotes {
                    format!("\"{raw}\"")
                } else {
                    raw.to_owned()
                }
            };
            match &piece.piece {
                WordPiece::Text(text) => {
                    // Unquoted globs, brace and extglob patterns expand: not literal.
                    if !in_quotes && text.contains(['*', '?', '[', '{', '(']) {
                        out.expansion(text.clone());
                    } else {
                        out.literal(text);
                    }
                }
                WordPiece::SingleQuotedText(text) => out.literal(text),
                WordPiece::DoubleQuotedSequence(inner) => {
                    out.literal("");
                    self.pieces(inner, src, true, depth + 1, out);
                }
                WordPiece::GettextDoubleQuotedSequence(inner) => {
                    let mut ignored = WordBuilder::default();
                    self.pieces(inner, src, true, depth + 1, &mut ignored);
                    out.expansion(raw.to_owned());
                }
                WordPiece::AnsiCQuotedText(_) | WordPiece::TildeExpansion(_) => out.expansion(as_written(raw)),
                WordPiece::ParameterExpansion(expr) => {
                    self.parameter_expr(expr, depth + 1);
                    out.expansion(as_written(raw));
                }
                WordPiece::CommandSubstitution(inner) => {
                    self.script(inner, depth + 1, true);
                    out.expansion(as_written(raw));
                }
                WordPiece::BackquotedCommandSubstitution(_) => {
                    let inner = unescape_backquoted(raw, in_quotes);
                    self.script(&inner, depth + 1, true);
                    out.expansion(as_written(raw));
                }
                WordPiece::EscapeSequence(escape) => {
                    let mut chars = escape.chars();
                    let _backslash = chars.next();
                    match chars.next() {
                        // Line continuation.
                        Some('\n') => {}
                        Some(c) => out.literal(c.encode_utf8(&mut [0; 4])),
                        None => out.literal("\\"),
                    }
                }
                WordPiece::ArithmeticExpression(expr) => {
                    self.arithmetic(&expr.value, depth + 1);
                    out.expansion(as_written(raw));
                }
            }
        }
    }

    /// Arithmetic text: bash evaluates variable values (and array subscripts
    /// in them, which can hold `$(...)`), so only numbers and operators are understood.
    fn arithmetic(&mut self, text: &str, depth: usize) {
        if self.too_deep(depth) {
            return;
        }
        match word::parse(text, &self.options) {
            Ok(pieces) => {
                let mut builder = WordBuilder::default();
                self.pieces(&pieces, text, true, depth, &mut builder);
                let only_numbers = builder.segments.iter().all(|s| match s {
                    Segment::Literal(l) => !l.chars().any(|c| c.is_ascii_alphabetic() || c == '_'),
                    Segment::Expansion(_) => false,
                });
                if !only_numbers {
                    self.reason("it uses arithmetic on variables or command output");
                }
            }
            Err(_) => self.reason("cannot parse an arithmetic expression"),
        }
    }

    fn parameter(&mut self, parameter: &Parameter, indirect: bool, depth: usize) {
        if indirect {
            self.reason("it uses an indirect expansion ${!name}");
        }
        if let Parameter::NamedWithIndex { index, .. } = parameter {
            self.arithmetic(index, depth + 1);
        }
    }

    fn parameter_word(&mut self, text: Option<&String>, depth: usize) {
        if let Some(text) = text {
            let _ = self.word(text, depth + 1);
        }
    }

    fn parameter_expr(&mut self, expr: &ParameterExpr, depth: usize) {
        if self.too_deep(depth) {
            return;
        }
        match expr {
            ParameterExpr::Parameter { parameter, indirect }
            | ParameterExpr::ParameterLength { parameter, indirect } => self.parameter(parameter, *indirect, depth),
            ParameterExpr::UseDefaultValues {
                parameter,
                indirect,
                default_value: value,
                ..
            }
            | ParameterExpr::AssignDefaultValues {
                parameter,
                indirect,
                default_value: value,
                ..
            }
            | ParameterExpr::IndicateErrorIfNullOrUnset {
                parameter,
                indirect,
                error_message: value,
                ..
            }
            | ParameterExpr::UseAlternativeValue {
                parameter,
                indirect,
                alternative_value: value,
                ..
            }
            | ParameterExpr::RemoveSmallestSuffixPattern {
                parameter,
                indirect,
                pattern: value,
            }
            | ParameterExpr::RemoveLargestSuffixPattern {
                parameter,
                indirect,
                pattern: value,
            }
            | ParameterExpr::RemoveSmallestPrefixPattern {
                parameter,
                indirect,
                pattern: value,
            }
            | ParameterExpr::RemoveLargestPrefixPattern {
                parameter,
                indirect,
                pattern: value,
            }
            | ParameterExpr::UppercaseFirstChar {
                parameter,
                indirect,
                pattern: value,
            }
            | ParameterExpr::UppercasePattern {
                parameter,
                indirect,
                pattern: value,
            }
            | ParameterExpr::LowercaseFirstChar {
                parameter,
                indirect,
                pattern: value,
            }
            | ParameterExpr::LowercasePattern {
                parameter,
                indirect,
                pattern: value,
            } => {
                self.parameter(parameter, *indirect, depth);
                self.parameter_word(value.as_ref(), depth);
            }
            ParameterExpr::Substring {
                parameter,
                indirect,
                offset,
                length,
            } => {
                self.parameter(parameter, *indirect, depth);
                self.arithmetic(&offset.value, depth + 1);
                if let Some(length) = length {
                    self.arithmetic(&length.value, depth + 1);
                }
            }
            ParameterExpr::Transform {
                parameter,
                indirect,
                op,
            } => {
                self.parameter(parameter, *indirect, depth);
                if matches!(op, ParameterTransformOp::PromptExpand) {
                    // ${x@P} runs command substitutions held in x's value.
                    self.reason("it uses a prompt expansion ${name@P}");
                }
            }
            ParameterExpr::ReplaceSubstring {
                parameter,
                indirect,
                pattern,
                replacement,
                ..
            } => {
                self.parameter(parameter, *indirect, depth);
                self.parameter_word(Some(pattern), depth);
                self.parameter_word(replacement.as_ref(), depth);
            }
            ParameterExpr::VariableNames { .. } | ParameterExpr::MemberKeys { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn texts(line: &str) -> Vec<String> {
        analyze(line).commands.into_iter().map(|c| c.text).collect()
    }

    fn nested_texts(line: &str) -> Vec<String> {
        analyze(line)
            .commands
            .into_iter()
            .filter(|c| c.nested)
            .map(|c| c.text)
            .collect()
    }

    fn writes(line: &str) -> Vec<String> {
        analyze(line).commands.into_iter().flat_map(|c| c.writes).collect()
    }

    fn understood(line: &str) -> bool {
        analyze(line).is_understood()
    }

    #[test]
    fn semicolon_does_not_hide_a_second_command() {
        assert_eq!(texts("git status; touch x"), ["git status", "touch x"]);
        assert!(understood("git status; touch x"));
    }

    #[test]
    fn pipe_does_not_hide_a_second_command() {
        assert_eq!(texts("git status | tee x"), ["git status", "tee x"]);
    }

    #[test]
    fn command_substitution_argument_is_a_nested_command() {
        let line = analyze("git status $(touch x)");
        let found: Vec<(&str, bool)> = line.commands.iter().map(|c| (c.text.as_str(), c.nested)).collect();
        assert_eq!(found, [("git status $(touch x)", false), ("touch x", true)]);
    }

    #[test]
    fn newline_does_not_hide_a_second_command() {
        assert_eq!(texts("git status\ntouch x"), ["git status", "touch x"]);
    }

    #[test]
    fn backquoted_argument_is_a_nested_command() {
        assert_eq!(texts("git status `touch x`"), ["git status `touch x`", "touch x"]);
        assert_eq!(nested_texts("git status `touch x`"), ["touch x"]);
    }

    #[test]
    fn output_redirection_is_a_write() {
        let line = analyze("git status > x");
        assert_eq!(line.commands.len(), 1);
        assert_eq!(line.commands[0].text, "git status");
        assert_eq!(line.commands[0].writes, ["x"]);
    }

    #[test]
    fn and_or_background_and_pipe_stderr_list_every_command() {
        assert_eq!(texts("a && b || c & d |& e"), ["a", "b", "c", "d", "e"]);
        assert!(writes("d |& e").is_empty());
        assert!(understood("a && b || c & d |& e"));
    }

    #[test]
    fn case_is_opaque_but_its_commands_are_listed() {
        let line = analyze("case $1 in a) touch y; esac");
        assert!(!line.opaque.is_empty());
        assert!(line.commands.iter().any(|c| c.text == "touch y"));
    }

    #[test]
    fn control_flow_and_functions_are_opaque() {
        for line in [
            "if true; then touch y; fi",
            "for f in a b; do touch $f; done",
            "while true; do touch y; done",
            "until false; do touch y; done",
            "f() { touch y; }; f",
            "[[ -f x ]] && touch y",
            "(( 1 + 1 ))",
        ] {
            assert!(!understood(line), "{line}");
        }
        assert!(texts("if true; then touch y; fi").contains(&"touch y".to_owned()));
    }

    #[test]
    fn process_substitutions_are_nested_commands() {
        assert_eq!(nested_texts("diff <(touch a) <(touch b)"), ["touch a", "touch b"]);
        let line = analyze("git status > >(touch c)");
        assert_eq!(nested_texts("git status > >(touch c)"), ["touch c"]);
        assert!(line.commands.iter().all(|c| c.writes.is_empty()));
    }

    #[test]
    fn substitutions_inside_double_quotes_are_nested_commands() {
        assert_eq!(nested_texts("echo \"`touch x`\""), ["touch x"]);
        assert_eq!(nested_texts("echo \"a $(touch x) b\""), ["touch x"]);
        assert_eq!(texts("echo \"a $(touch x) b\"")[0], "echo 'a '\"$(touch x)\"' b'");
    }

    #[test]
    fn substitutions_inside_expansions_and_assignments_are_nested_commands() {
        assert_eq!(nested_texts("echo ${x:-$(touch y)}"), ["touch y"]);
        assert_eq!(nested_texts("FOO=$(touch x) git status"), ["touch x"]);
        assert_eq!(nested_texts("x=`touch y`"), ["touch y"]);
    }

    #[test]
    fn arithmetic_substitution_is_a_nested_command_and_opaque() {
        let line = analyze("echo $(( $(touch x) ))");
        assert!(line.commands.iter().any(|c| c.nested && c.text == "touch x"));
        assert!(!line.is_understood());
        assert!(understood("echo $((1 + 2))"));
        assert!(!understood("echo $((x + 1))"));
    }

    #[test]
    fn backquote_escapes_follow_bash() {
        // Inside backquotes `\$` is `$`: bash runs the inner substitution.
        assert!(nested_texts("echo `echo \\$(touch x)`").contains(&"touch x".to_owned()));
    }

    #[test]
    fn eval_of_a_literal_string_is_analyzed() {
        assert_eq!(nested_texts("eval 'touch x; rm y'"), ["touch x", "rm y"]);
        assert!(!understood("eval \"$CMD\""));
    }

    #[test]
    fn shell_dash_c_script_is_analyzed() {
        assert_eq!(
            nested_texts("bash -c 'git status; rm -rf x'"),
            ["git status", "rm -rf x"]
        );
        assert_eq!(nested_texts("/bin/sh -ec 'touch y'"), ["touch y"]);
        assert_eq!(texts("bash -c 'touch y'")[0], "bash -c 'touch y'");
        assert!(!understood("sh -c \"$SCRIPT\""));
        assert!(nested_texts("bash script.sh").is_empty());
    }

    #[test]
    fn every_output_redirection_is_a_write() {
        for (line, target) in [
            ("echo a >> log", "log"),
            ("echo a >| log", "log"),
            ("echo a &> log", "log"),
            ("echo a &>> log", "log"),
            ("echo a 2>err.log", "err.log"),
            ("echo a 3<> log", "log"),
            ("echo a >&log", "log"),
            ("echo a > 'my file'", "my file"),
        ] {
            assert_eq!(writes(line), [target], "{line}");
        }
    }

    #[test]
    fn fd_duplication_and_dev_null_are_not_writes() {
        for line in [
            "git status 2>&1",
            "git status >/dev/null",
            "git status &>/dev/null",
            "git status 2>/dev/null >&2",
            "git status 3>&-",
            "git status < input",
        ] {
            assert!(writes(line).is_empty(), "{line}");
        }
        assert_eq!(analyze("wc -l < input").commands[0].reads, ["input"]);
    }

    #[test]
    fn redirection_of_a_group_applies_to_its_commands() {
        assert_eq!(writes("{ git status; } > out"), ["out"]);
        assert_eq!(writes("(git status) >> out"), ["out"]);
        assert_eq!(texts("(cd src && git status)"), ["cd src", "git status"]);
        assert!(understood("(cd src && git status)"));
    }

    #[test]
    fn here_document_is_understood() {
        let line = analyze("cat <<EOF\nhello $HOME\nEOF");
        assert_eq!(line.commands.len(), 1);
        assert_eq!(line.commands[0].text, "cat");
        assert!(line.is_understood(), "{:?}", line.opaque);
        assert!(line.commands[0].writes.is_empty());
    }

    #[test]
    fn here_document_substitution_runs_only_when_unquoted() {
        assert_eq!(nested_texts("cat <<EOF\n$(touch x)\nEOF"), ["touch x"]);
        assert!(nested_texts("cat <<'EOF'\n$(touch x)\nEOF").is_empty());
    }

    #[test]
    fn command_name_that_is_not_literal_is_opaque() {
        for line in ["$CMD x", "$(echo rm) x", "*", "~/bin/tool", "g?t status", "{rm,x}"] {
            assert!(!understood(line), "{line}");
        }
        assert_eq!(nested_texts("$(echo rm) x"), ["echo rm"]);
    }

    #[test]
    fn quoting_is_canonical() {
        assert_eq!(texts("'git' \"status\""), ["git status"]);
        assert_eq!(texts("git   status"), ["git status"]);
        assert_eq!(texts("g\\it status"), ["git status"]);
        assert_eq!(texts("'git status' x"), ["'git status' x"]);
        assert_eq!(texts("git commit -m \"it's\""), ["git commit -m 'it'\\''s'"]);
        assert_eq!(texts("echo ''"), ["echo ''"]);
    }

    #[test]
    fn quoted_and_unquoted_globs_stay_distinct() {
        assert_eq!(texts("rm '*'"), ["rm '*'"]);
        assert_eq!(texts("rm *"), ["rm *"]);
        assert_eq!(texts("echo $HOME \"$HOME\""), ["echo $HOME \"$HOME\""]);
        assert_eq!(texts("echo '$HOME'"), ["echo '$HOME'"]);
    }

    #[test]
    fn leading_assignments_stay_in_the_text() {
        assert_eq!(texts("FOO=1 git status"), ["FOO=1 git status"]);
        assert_eq!(texts("GIT_PAGER='less -R' git log"), ["GIT_PAGER='less -R' git log"]);
        // A quoted `FOO=1` is a command name, not an assignment.
        assert_eq!(texts("'FOO=1' git"), ["'FOO=1' git"]);
    }

    #[test]
    fn comments_are_not_commands() {
        assert_eq!(texts("git status # rm -rf /"), ["git status"]);
        assert!(understood("git status # rm -rf /"));
    }

    #[test]
    fn line_continuation_joins_words() {
        assert_eq!(texts("git \\\nstatus"), ["git status"]);
    }

    #[test]
    fn empty_command_runs_nothing() {
        for line in ["", "   ", "\n\n", "# just a comment"] {
            let result = analyze(line);
            assert!(result.commands.is_empty(), "{line:?}");
            assert!(result.is_understood(), "{line:?}");
        }
    }

    #[test]
    fn incomplete_input_is_opaque() {
        for line in [
            "echo 'abc",
            "echo \"abc",
            "echo $(touch x",
            "echo `touch x",
            "cat <<EOF\nabc",
            "git status &&",
            "git status |",
            "(git status",
        ] {
            assert!(!understood(line), "{line:?}");
        }
    }

    #[test]
    fn oversized_or_deeply_nested_input_is_opaque() {
        let long = format!("echo {}", "a".repeat(MAX_COMMAND_BYTES));
        assert!(!understood(&long));
        let deep = format!("echo {}x{}", "$(echo ".repeat(100), ")".repeat(100));
        let result = analyze(&deep);
        assert!(!result.is_understood());
        let many = format!("{}x{}", "(".repeat(5000), ")".repeat(5000));
        assert!(!understood(&many));
    }

    #[test]
    fn nesting_up_to_the_mark_limit_parses_without_overflowing_the_stack() {
        // The constructs that needed the most stack per level when measured.
        let n = MAX_NESTING_MARKS;
        let cases = [
            format!("{}x{}", "{ ".repeat(n), "; }".repeat(n)),
            format!("cat {}x{}", "<(cat ".repeat(n), ")".repeat(n)),
            format!("{}true{}", "if ".repeat(n / 2), "; then :; fi".repeat(n / 2)),
            format!("echo {}x{}", "$(echo ".repeat(n / 2), ")".repeat(n / 2)),
            format!("{}x{}", "(".repeat(n), ")".repeat(n)),
            format!("echo $(({}1{}))", "(".repeat(n - 4), ")".repeat(n - 4)),
        ];
        for line in &cases {
            assert!(nesting_marks(line) <= MAX_NESTING_MARKS);
            // An overflow would abort the test binary; a result means it held.
            let result = analyze(line);
            assert!(!result.commands.is_empty() || !result.opaque.is_empty());
        }
    }

    #[test]
    fn inputs_that_overflow_the_parser_numbers_do_not_panic() {
        // brush-parser 0.4 panics on these two (integer overflow); the panic is contained.
        for line in ["ls ~99999999999999999999999", "echo 99999999999999999999999>x"] {
            assert!(!understood(line), "{line}");
        }
        for line in ["echo {1..99999999999999999999999}", "echo ${x:99999999999999999999999}"] {
            let _ = analyze(line);
        }
    }

    proptest! {
        #[test]
        fn analyze_never_panics_on_arbitrary_text(line in any::<String>()) {
            let _ = analyze(&line);
        }

        #[test]
        fn analyze_never_panics_on_shell_like_text(parts in prop::collection::vec(prop::sample::select(vec![
            "git", " ", "status", ";", "&&", "||", "|", "&", "|&", "\n", "(", ")", "{", "}", "$(", "`", "'", "\"",
            "$", "${", "x", ":-", "<(", ">(", ">", ">>", "2>&1", "<<", "EOF", "\\", "#", "*", "~", "=", "((", "))",
            "[[", "]]", "if", "then", "fi", "case", "in", "esac", ";;", "!", "@P", "[", "]", "$((", "1", "$'",
        ]), 0..40)) {
            let line: String = parts.concat();
            let _ = analyze(&line);
        }
    }
}
