//! Tokens of a SQL92 selector, matched as RocketMQ's JavaCC grammar matches them: longest match
//! wins, a keyword beats an identifier of the same length, keywords are case-insensitive and
//! identifiers keep their case.

use super::Sql92Error;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum TokenKind {
    Not,
    And,
    Or,
    Between,
    In,
    True,
    False,
    Null,
    Is,
    Contains,
    StartsWith,
    EndsWith,
    /// A decimal integer literal as written, without the optional `L` suffix.
    Decimal(String),
    /// A floating-point literal as written.
    Float(String),
    /// A string literal, quotes removed and `''` decoded.
    Str(String),
    Ident(String),
    Eq,
    NotEq,
    Gt,
    Ge,
    Lt,
    Le,
    LParen,
    RParen,
    Comma,
    Plus,
    Minus,
    End,
}

impl TokenKind {
    /// How an error message names the token.
    pub(super) fn describe(&self) -> String {
        match self {
            TokenKind::Decimal(text) | TokenKind::Float(text) => format!("number {text}"),
            TokenKind::Str(text) => format!("string '{text}'"),
            TokenKind::Ident(name) => format!("identifier {name}"),
            TokenKind::End => "end of expression".to_owned(),
            other => format!("'{}'", other.symbol()),
        }
    }

    fn symbol(&self) -> &'static str {
        match self {
            TokenKind::Not => "NOT",
            TokenKind::And => "AND",
            TokenKind::Or => "OR",
            TokenKind::Between => "BETWEEN",
            TokenKind::In => "IN",
            TokenKind::True => "TRUE",
            TokenKind::False => "FALSE",
            TokenKind::Null => "NULL",
            TokenKind::Is => "IS",
            TokenKind::Contains => "CONTAINS",
            TokenKind::StartsWith => "STARTSWITH",
            TokenKind::EndsWith => "ENDSWITH",
            TokenKind::Eq => "=",
            TokenKind::NotEq => "<>",
            TokenKind::Gt => ">",
            TokenKind::Ge => ">=",
            TokenKind::Lt => "<",
            TokenKind::Le => "<=",
            TokenKind::LParen => "(",
            TokenKind::RParen => ")",
            TokenKind::Comma => ",",
            TokenKind::Plus => "+",
            TokenKind::Minus => "-",
            TokenKind::Decimal(_)
            | TokenKind::Float(_)
            | TokenKind::Str(_)
            | TokenKind::Ident(_)
            | TokenKind::End => "",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token {
    pub kind: TokenKind,
    /// 1-based character column where the token starts.
    pub column: usize,
}

fn keyword(word: &str) -> Option<TokenKind> {
    let kind = match word.to_ascii_uppercase().as_str() {
        "NOT" => TokenKind::Not,
        "AND" => TokenKind::And,
        "OR" => TokenKind::Or,
        "BETWEEN" => TokenKind::Between,
        "IN" => TokenKind::In,
        "TRUE" => TokenKind::True,
        "FALSE" => TokenKind::False,
        "NULL" => TokenKind::Null,
        "IS" => TokenKind::Is,
        "CONTAINS" => TokenKind::Contains,
        "STARTSWITH" => TokenKind::StartsWith,
        "ENDSWITH" => TokenKind::EndsWith,
        _ => return None,
    };
    Some(kind)
}

/// Whether `word` would be read back as a keyword rather than an identifier.
#[cfg(test)]
pub(super) fn is_keyword(word: &str) -> bool {
    keyword(word).is_some()
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == '$'
}

fn is_ident_part(c: char) -> bool {
    is_ident_start(c) || c.is_ascii_digit()
}

/// Splits `source` into tokens, ending with [`TokenKind::End`].
pub(super) fn tokenize(source: &str) -> Result<Vec<Token>, Sql92Error> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let column = i + 1;
        if matches!(c, ' ' | '\t' | '\n' | '\r' | '\u{c}') {
            i += 1;
            continue;
        }
        // A line comment needs its line break: at the very end "--" is two minus signs, as in
        // Java's grammar.
        if c == '-' && chars.get(i + 1) == Some(&'-') {
            if let Some(brk) = chars[i + 2..].iter().position(|c| matches!(c, '\n' | '\r')) {
                i += 2 + brk + 1;
                continue;
            }
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            let close = chars[i + 2..].windows(2).position(|w| w == ['*', '/']);
            match close {
                Some(at) => {
                    i += 2 + at + 2;
                    continue;
                }
                None => return Err(Sql92Error::UnterminatedComment { column }),
            }
        }
        let (kind, len) = match c {
            '=' => (TokenKind::Eq, 1),
            '<' if chars.get(i + 1) == Some(&'>') => (TokenKind::NotEq, 2),
            '<' if chars.get(i + 1) == Some(&'=') => (TokenKind::Le, 2),
            '<' => (TokenKind::Lt, 1),
            '>' if chars.get(i + 1) == Some(&'=') => (TokenKind::Ge, 2),
            '>' => (TokenKind::Gt, 1),
            '(' => (TokenKind::LParen, 1),
            ')' => (TokenKind::RParen, 1),
            ',' => (TokenKind::Comma, 1),
            '+' => (TokenKind::Plus, 1),
            '-' => (TokenKind::Minus, 1),
            '\'' => string_literal(&chars, i)?,
            c if c.is_ascii_digit() || c == '.' => number(&chars, i)?,
            c if is_ident_start(c) => {
                let len = chars[i..].iter().take_while(|c| is_ident_part(**c)).count();
                let word: String = chars[i..i + len].iter().collect();
                (keyword(&word).unwrap_or(TokenKind::Ident(word)), len)
            }
            found => return Err(Sql92Error::UnexpectedCharacter { column, found }),
        };
        tokens.push(Token { kind, column });
        i += len;
    }
    tokens.push(Token {
        kind: TokenKind::End,
        column: chars.len() + 1,
    });
    Ok(tokens)
}

/// `'...'` with `''` standing for one quote; any other character, line breaks included, is
/// taken as is.
fn string_literal(chars: &[char], start: usize) -> Result<(TokenKind, usize), Sql92Error> {
    let mut text = String::new();
    let mut i = start + 1;
    loop {
        match chars.get(i) {
            None => return Err(Sql92Error::UnterminatedString { column: start + 1 }),
            Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                text.push('\'');
                i += 2;
            }
            Some('\'') => return Ok((TokenKind::Str(text), i + 1 - start)),
            Some(c) => {
                text.push(*c);
                i += 1;
            }
        }
    }
}

fn digits(chars: &[char], from: usize) -> usize {
    chars.get(from..).map_or(0, |rest| {
        rest.iter().take_while(|c| c.is_ascii_digit()).count()
    })
}

/// Length of an exponent (`E`, optional sign, at least one digit) at `from`, or 0.
fn exponent(chars: &[char], from: usize) -> usize {
    if !matches!(chars.get(from), Some('e' | 'E')) {
        return 0;
    }
    let sign = usize::from(matches!(chars.get(from + 1), Some('+' | '-')));
    match digits(chars, from + 1 + sign) {
        0 => 0,
        n => 1 + sign + n,
    }
}

/// The longest of the decimal and the floating-point literal at `start`. A decimal is `0` or a
/// digit run without leading zero, with an optional `L`; so `007` is three tokens, as in Java.
fn number(chars: &[char], start: usize) -> Result<(TokenKind, usize), Sql92Error> {
    let int_digits = digits(chars, start);
    let float_len = if int_digits > 0 {
        if chars.get(start + int_digits) == Some(&'.') {
            let frac = digits(chars, start + int_digits + 1);
            let end = start + int_digits + 1 + frac;
            int_digits + 1 + frac + exponent(chars, end)
        } else {
            match exponent(chars, start + int_digits) {
                0 => 0,
                e => int_digits + e,
            }
        }
    } else {
        // A leading '.': at least one digit must follow.
        match digits(chars, start + 1) {
            0 => 0,
            frac => 1 + frac + exponent(chars, start + 1 + frac),
        }
    };
    let decimal_len = match chars.get(start) {
        Some('0') => 1,
        Some(c) if c.is_ascii_digit() => {
            int_digits + usize::from(matches!(chars.get(start + int_digits), Some('l' | 'L')))
        }
        _ => 0,
    };
    if float_len == 0 && decimal_len == 0 {
        return Err(Sql92Error::UnexpectedCharacter {
            column: start + 1,
            found: chars[start],
        });
    }
    if float_len > decimal_len {
        let text: String = chars[start..start + float_len].iter().collect();
        Ok((TokenKind::Float(text), float_len))
    } else {
        let text: String = chars[start..start + decimal_len]
            .iter()
            .filter(|c| !matches!(c, 'l' | 'L'))
            .collect();
        Ok((TokenKind::Decimal(text), decimal_len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(source: &str) -> Vec<TokenKind> {
        tokenize(source)
            .unwrap_or_else(|e| panic!("{source:?}: {e}"))
            .into_iter()
            .map(|t| t.kind)
            .collect()
    }

    #[test]
    fn keywords_ignore_case_identifiers_keep_it() {
        assert_eq!(
            kinds("aNd Color not_x"),
            [
                TokenKind::And,
                TokenKind::Ident("Color".into()),
                TokenKind::Ident("not_x".into()),
                TokenKind::End
            ]
        );
    }

    #[test]
    fn numbers_follow_the_java_literal_rules() {
        assert_eq!(
            kinds("5L 0.5 5. .5 1e3 2.5E-2"),
            [
                TokenKind::Decimal("5".into()),
                TokenKind::Float("0.5".into()),
                TokenKind::Float("5.".into()),
                TokenKind::Float(".5".into()),
                TokenKind::Float("1e3".into()),
                TokenKind::Float("2.5E-2".into()),
                TokenKind::End
            ]
        );
        // No leading zeros: "007" is three decimals.
        assert_eq!(kinds("007").len(), 4);
        // An exponent without digits is not part of the number.
        assert_eq!(
            kinds("5e"),
            [
                TokenKind::Decimal("5".into()),
                TokenKind::Ident("e".into()),
                TokenKind::End
            ]
        );
    }

    #[test]
    fn strings_decode_doubled_quotes() {
        assert_eq!(
            kinds("'it''s' ''"),
            [
                TokenKind::Str("it's".into()),
                TokenKind::Str(String::new()),
                TokenKind::End
            ]
        );
        assert_eq!(
            tokenize("a = 'open"),
            Err(Sql92Error::UnterminatedString { column: 5 })
        );
    }

    #[test]
    fn comments_are_skipped_but_a_line_comment_needs_its_line_break() {
        assert_eq!(kinds("a /* x */ -- y\n"), kinds("a"));
        assert_eq!(
            kinds("a --"),
            [
                TokenKind::Ident("a".into()),
                TokenKind::Minus,
                TokenKind::Minus,
                TokenKind::End
            ]
        );
        assert_eq!(
            tokenize("a /* x"),
            Err(Sql92Error::UnterminatedComment { column: 3 })
        );
    }

    #[test]
    fn unknown_characters_are_errors_with_their_column() {
        assert_eq!(
            tokenize("a != 1"),
            Err(Sql92Error::UnexpectedCharacter {
                column: 3,
                found: '!'
            })
        );
        assert_eq!(
            tokenize("a.b"),
            Err(Sql92Error::UnexpectedCharacter {
                column: 2,
                found: '.'
            })
        );
    }
}
