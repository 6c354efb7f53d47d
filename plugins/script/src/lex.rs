//! Tokens of bpftrace's language, each with the byte offset it starts at.

/// One token.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Ident(String),
    Int(i64),
    Str(String),
    /// `@name`; `@` alone is the anonymous map, an empty name.
    Map(String),
    /// `$name`.
    Var(String),
    /// `$1`…: a positional parameter.
    Pos(u32),
    /// `$#`: the number of positional parameters.
    PosCount,
    Punct(&'static str),
    Eof,
}

/// Punctuation, longest first.
const PUNCT: &[&str] = &[
    "<<=", ">>=", "->", "++", "--", "==", "!=", "<=", ">=", "&&", "||", "<<", ">>", "+=", "-=", "*=", "/=", "%=", "&=",
    "|=", "^=", "{", "}", "(", ")", "[", "]", ",", ";", ":", "/", "?", "=", "+", "-", "*", "%", "<", ">", "!", "~",
    "&", "|", "^", "..", ".",
];

/// A syntax error at byte `at`.
#[derive(Debug, PartialEq)]
pub struct SyntaxError {
    pub at: usize,
    pub msg: String,
}

pub fn err<T>(at: usize, msg: impl Into<String>) -> Result<T, SyntaxError> {
    Err(SyntaxError { at, msg: msg.into() })
}

/// Whether only blanks stand between the line's start and `i`.
fn at_line_start(b: &[u8], i: usize) -> bool {
    b[..i].iter().rev().take_while(|&&c| c != b'\n').all(|c| *c == b' ' || *c == b'\t')
}

/// Where the next token starts at or after `i`: whitespace and comments skipped.
pub fn skip(src: &str, mut i: usize) -> Result<usize, SyntaxError> {
    let b = src.as_bytes();
    loop {
        if i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        } else if src[i..].starts_with("//") || (b.get(i) == Some(&b'#') && at_line_start(b, i)) {
            // `#!` and the C preprocessor's lines (`#include <linux/sched.h>`, `#ifndef`):
            // what bpftrace takes from kernel headers is built in (its constants).
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if src[i..].starts_with("/*") {
            let Some(end) = src[i + 2..].find("*/") else { return err(i, "unterminated comment") };
            i += end + 4;
        } else {
            return Ok(i);
        }
    }
}

/// The token at or after `i`, where it starts, and where it ends.
pub fn token(src: &str, i: usize) -> Result<(Tok, usize, usize), SyntaxError> {
    let b = src.as_bytes();
    let mut i = skip(src, i)?;
    let start = i;
    let Some(&c) = b.get(i) else { return Ok((Tok::Eof, i, i)) };
    let tok = if c.is_ascii_digit() {
        let (radix, from) =
            if src[i..].starts_with("0x") || src[i..].starts_with("0X") { (16, i + 2) } else { (10, i) };
        i = from;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        let digits: String = src[from..i].chars().filter(|c| *c != '_').collect();
        let v = match digits.split_once(['e', 'E']) {
            // bpftrace's scientific integers: `1e6` is 1000000.
            Some((m, e)) if radix == 10 && !m.is_empty() && !e.is_empty() => {
                let (m, e) = (m.parse::<u64>().ok(), e.parse::<u32>().ok());
                m.zip(e).and_then(|(m, e)| 10u64.checked_pow(e).and_then(|p| m.checked_mul(p)))
            }
            _ => u64::from_str_radix(&digits, radix).ok(),
        };
        let Some(v) = v else {
            return err(start, format!("invalid integer `{}`", &src[start..i]));
        };
        Tok::Int(v as i64)
    } else if c.is_ascii_alphabetic() || c == b'_' {
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        Tok::Ident(src[start..i].to_string())
    } else if c == b'@' || c == b'$' {
        i += 1;
        if c == b'$' && b.get(i) == Some(&b'#') {
            return Ok((Tok::PosCount, start, i + 1));
        }
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        let name = &src[start + 1..i];
        match (c, name.parse::<u32>()) {
            (b'@', _) => Tok::Map(name.to_string()),
            (_, Ok(n)) => Tok::Pos(n),
            _ if name.is_empty() => return err(start, "a variable needs a name after `$`"),
            _ => Tok::Var(name.to_string()),
        }
    } else if c == b'"' {
        i += 1;
        let mut s = String::new();
        loop {
            let Some(&ch) = b.get(i) else { return err(start, "unterminated string") };
            match ch {
                b'"' => break,
                b'\\' => {
                    let esc = b.get(i + 1).copied().unwrap_or(b'\\');
                    s.push(match esc {
                        b'n' => '\n',
                        b't' => '\t',
                        b'r' => '\r',
                        b'0' => '\0',
                        b'"' => '"',
                        b'\\' => '\\',
                        _ => return err(i, format!("unknown escape `\\{}`", esc as char)),
                    });
                    i += 2;
                }
                _ => {
                    let ch = src[i..].chars().next().unwrap_or('?');
                    s.push(ch);
                    i += ch.len_utf8();
                }
            }
        }
        i += 1;
        Tok::Str(s)
    } else if let Some(p) = PUNCT.iter().find(|p| src[i..].starts_with(**p)) {
        i += p.len();
        Tok::Punct(p)
    } else {
        let ch = src[i..].chars().next().unwrap_or('?');
        return err(i, format!("unexpected character `{ch}`"));
    };
    Ok((tok, start, i))
}
