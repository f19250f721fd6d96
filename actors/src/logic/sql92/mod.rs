//! SQL92 property filters (RocketMQ `MessageSelector.bySql`, expression type `SQL92`).
//!
//! A selector is a boolean expression over a message's properties (user properties and system
//! ones such as `TAGS`), parsed by [`Selector::parse`] and evaluated by [`Selector::matches`].
//! The grammar and every evaluation rule follow RocketMQ 5's `filter` module, quirks included,
//! because a Java broker and skiff must deliver the same messages for the same selector:
//!
//! - Property values are strings. Compared with a number they are converted to that number's
//!   type (`a > 5` reads `a` as a 32-bit integer, `a > 5.0` as a double); a value that does not
//!   convert makes the whole selector fail, which counts as no match.
//! - A missing property is null. A comparison with null is null (unknown), `AND`/`OR` use
//!   three-valued logic, and only a selector that evaluates to true matches.
//! - `NOT` binds tighter than comparisons: `NOT a = 'x'` is `(NOT a) = 'x'`, which never
//!   matches; write `NOT (a = 'x')`.
//! - `IN` lists hold strings only and need a property on the left; `<`, `<=`, `>`, `>=` and
//!   `BETWEEN` take numbers (or properties), never string or boolean literals.
//! - A property alone in a boolean position is false when present (a string is not a boolean)
//!   and null when absent.
//!
//! There is no arithmetic beyond unary `+` and `-` (the 5.x grammar has none).

mod eval;
mod lexer;
mod parser;

use std::fmt;

pub use eval::Properties;

/// Largest number of nodes a selector may have. Evaluation recurses over the tree, so the
/// bound keeps a hostile expression from exhausting the stack.
pub const MAX_NODES: usize = 1000;
/// Deepest nesting of parentheses and prefix operators the parser follows.
pub const MAX_NESTING: usize = 100;

/// Why an expression is not a valid selector. Columns count characters from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Sql92Error {
    #[error("unexpected character {found:?} at column {column}")]
    UnexpectedCharacter { column: usize, found: char },
    #[error("string literal starting at column {column} is not closed")]
    UnterminatedString { column: usize },
    #[error("comment starting at column {column} is not closed")]
    UnterminatedComment { column: usize },
    #[error("expected {expected} at column {column}, found {found}")]
    UnexpectedToken {
        column: usize,
        expected: &'static str,
        found: String,
    },
    #[error("number {text} at column {column} is out of range")]
    NumberOutOfRange { column: usize, text: String },
    #[error("{operand} at column {column} cannot be used with {operator}")]
    InvalidOperand {
        column: usize,
        operand: String,
        operator: &'static str,
    },
    #[error("BETWEEN at column {column}: {reason}")]
    InvalidBetween { column: usize, reason: String },
    #[error("expression is too complex: more than {limit} {what}")]
    TooComplex { limit: usize, what: &'static str },
}

/// A literal value.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Null,
    Bool(bool),
    /// A decimal literal that fits 32 bits (Java `Integer`).
    Int(i32),
    /// A decimal literal beyond 32 bits (Java `Long`).
    Long(i64),
    /// A floating-point literal (Java `Double`); always finite and positive.
    Double(f64),
    Str(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    Eq,
    NotEq,
    Gt,
    Ge,
    Lt,
    Le,
}

impl CompareOp {
    fn symbol(self) -> &'static str {
        match self {
            CompareOp::Eq => "=",
            CompareOp::NotEq => "<>",
            CompareOp::Gt => ">",
            CompareOp::Ge => ">=",
            CompareOp::Lt => "<",
            CompareOp::Le => "<=",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringOp {
    Contains,
    StartsWith,
    EndsWith,
}

impl StringOp {
    fn keyword(self) -> &'static str {
        match self {
            StringOp::Contains => "CONTAINS",
            StringOp::StartsWith => "STARTSWITH",
            StringOp::EndsWith => "ENDSWITH",
        }
    }
}

/// A parsed selector expression, shaped as written (`BETWEEN` stays `BETWEEN`), so that it
/// prints back to an equivalent source text.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Property(String),
    Literal(Literal),
    Negate(Box<Expr>),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Compare {
        op: CompareOp,
        left: Box<Expr>,
        right: Box<Expr>,
    },
    IsNull {
        operand: Box<Expr>,
        negated: bool,
    },
    Between {
        operand: Box<Expr>,
        low: Box<Expr>,
        high: Box<Expr>,
        negated: bool,
    },
    In {
        property: String,
        values: Vec<String>,
        negated: bool,
    },
    StringMatch {
        op: StringOp,
        operand: Box<Expr>,
        pattern: String,
        negated: bool,
    },
}

impl Expr {
    /// Whether Java types this node as a `BooleanExpression` (what `AND`, `OR`, `NOT` accept
    /// besides a bare property, and what `<`/`>`/`BETWEEN` refuse).
    fn is_boolean(&self) -> bool {
        match self {
            Expr::Literal(lit) => matches!(lit, Literal::Null | Literal::Bool(_)),
            Expr::Property(_) | Expr::Negate(_) => false,
            Expr::Not(_)
            | Expr::And(..)
            | Expr::Or(..)
            | Expr::Compare { .. }
            | Expr::IsNull { .. }
            | Expr::Between { .. }
            | Expr::In { .. }
            | Expr::StringMatch { .. } => true,
        }
    }
}

fn write_string(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    write!(f, "'{}'", text.replace('\'', "''"))
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Null => f.write_str("NULL"),
            Literal::Bool(true) => f.write_str("TRUE"),
            Literal::Bool(false) => f.write_str("FALSE"),
            Literal::Int(v) => write!(f, "{v}"),
            Literal::Long(v) => write!(f, "{v}"),
            // Debug gives the shortest text that reads back to the same double, always with a
            // '.' or an exponent, so it lexes as a floating-point literal again.
            Literal::Double(v) => write!(f, "{v:?}"),
            Literal::Str(text) => write_string(f, text),
        }
    }
}

/// Prints every compound node in parentheses: the text parses back to the same tree.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Property(name) => f.write_str(name),
            Expr::Literal(lit) => write!(f, "{lit}"),
            Expr::Negate(operand) => write!(f, "(-{operand})"),
            Expr::Not(operand) => write!(f, "(NOT {operand})"),
            Expr::And(l, r) => write!(f, "({l} AND {r})"),
            Expr::Or(l, r) => write!(f, "({l} OR {r})"),
            Expr::Compare { op, left, right } => write!(f, "({left} {} {right})", op.symbol()),
            Expr::IsNull { operand, negated } => {
                let not = if *negated { "NOT " } else { "" };
                write!(f, "({operand} IS {not}NULL)")
            }
            Expr::Between {
                operand,
                low,
                high,
                negated,
            } => {
                let not = if *negated { "NOT " } else { "" };
                write!(f, "({operand} {not}BETWEEN {low} AND {high})")
            }
            Expr::In {
                property,
                values,
                negated,
            } => {
                let not = if *negated { "NOT " } else { "" };
                write!(f, "({property} {not}IN (")?;
                for (i, value) in values.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write_string(f, value)?;
                }
                f.write_str("))")
            }
            Expr::StringMatch {
                op,
                operand,
                pattern,
                negated,
            } => {
                let not = if *negated { "NOT " } else { "" };
                write!(f, "({operand} {not}{} ", op.keyword())?;
                write_string(f, pattern)?;
                f.write_str(")")
            }
        }
    }
}

/// A compiled SQL92 selector.
#[derive(Debug, Clone, PartialEq)]
pub struct Selector {
    root: Expr,
}

impl Selector {
    /// Parses `source`, applying the checks Java's parser applies while it builds the tree.
    pub fn parse(source: &str) -> Result<Selector, Sql92Error> {
        parser::parse(source).map(|root| Selector { root })
    }

    pub fn expression(&self) -> &Expr {
        &self.root
    }

    /// Whether a message with these properties is selected: the expression must evaluate to
    /// true; null (unknown) and any evaluation failure (a property that does not convert to the
    /// number it is compared with) select nothing, as on RocketMQ's broker.
    pub fn matches<P: Properties + ?Sized>(&self, properties: &P) -> bool {
        eval::evaluate(&self.root, properties) == Ok(Some(true))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.root)
    }
}

#[cfg(test)]
mod tests;
