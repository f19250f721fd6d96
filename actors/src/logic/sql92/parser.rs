//! Recursive-descent parser following the precedence of RocketMQ's `SelectorParser.jj`, lowest
//! first: `OR`; `AND`; `=`, `<>`, `IS [NOT] NULL`; `<`, `<=`, `>`, `>=`, `[NOT] BETWEEN`,
//! `[NOT] IN`, `[NOT] CONTAINS|STARTSWITH|ENDSWITH`; prefix `+`, `-`, `NOT`; literals,
//! properties and parentheses. Each operator is left-associative.
//!
//! The checks Java makes while building its tree (operand types, `BETWEEN` bounds, literal
//! ranges) are made here too, so that the same expressions are refused.

use super::eval::{java_compare, Value};
use super::lexer::{tokenize, Token, TokenKind};
use super::{CompareOp, Expr, Literal, Sql92Error, StringOp, MAX_NESTING, MAX_NODES};

pub(super) fn parse(source: &str) -> Result<Expr, Sql92Error> {
    let tokens = tokenize(source)?;
    let mut parser = Parser {
        tokens,
        pos: 0,
        nodes: 0,
        nesting: 0,
    };
    let root = parser.or_expression()?;
    parser.expect_end()?;
    let column = parser.tokens.first().map_or(1, |t| t.column);
    as_boolean(root, column, "a selector")
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    nodes: usize,
    nesting: usize,
}

/// What Java's `asBooleanExpression` accepts: a boolean-typed node or a bare property (which it
/// casts).
fn as_boolean(expr: Expr, column: usize, operator: &'static str) -> Result<Expr, Sql92Error> {
    if expr.is_boolean() || matches!(expr, Expr::Property(_)) {
        Ok(expr)
    } else {
        Err(Sql92Error::InvalidOperand {
            column,
            operand: expr.to_string(),
            operator,
        })
    }
}

/// Java's `checkEqualOperand` and `checkEqualOperandCompatability`: NULL cannot be compared
/// with `=`, and a TRUE/FALSE literal on the left needs a boolean literal on the right.
fn check_equality(left: &Expr, right: &Expr, column: usize) -> Result<(), Sql92Error> {
    for operand in [left, right] {
        if matches!(operand, Expr::Literal(Literal::Null)) {
            return Err(invalid(operand, column, "= or <> (use IS NULL)"));
        }
    }
    if let (Expr::Literal(l), Expr::Literal(r)) = (left, right) {
        if matches!(l, Literal::Bool(_)) && !matches!(r, Literal::Bool(_) | Literal::Null) {
            return Err(invalid(right, column, "= or <> against a boolean literal"));
        }
    }
    Ok(())
}

/// Java's `checkLessThanOperand`: literals must be numbers, and boolean-typed nodes are refused.
fn check_ordering(operand: &Expr, column: usize, operator: &'static str) -> Result<(), Sql92Error> {
    let refused = match operand {
        Expr::Literal(lit) => {
            !matches!(lit, Literal::Int(_) | Literal::Long(_) | Literal::Double(_))
        }
        other => other.is_boolean(),
    };
    if refused {
        Err(invalid(operand, column, operator))
    } else {
        Ok(())
    }
}

fn invalid(operand: &Expr, column: usize, operator: &'static str) -> Sql92Error {
    Sql92Error::InvalidOperand {
        column,
        operand: operand.to_string(),
        operator,
    }
}

fn literal_value(lit: &Literal) -> Value<'_> {
    match lit {
        Literal::Null => Value::Null,
        Literal::Bool(b) => Value::Bool(*b),
        Literal::Int(v) => Value::Int(*v),
        Literal::Long(v) => Value::Long(*v),
        Literal::Double(v) => Value::Double(*v),
        Literal::Str(s) => Value::Str(s.as_str()),
    }
}

/// Java's `createBetween` check, made only when both bounds are literals: neither may be NULL,
/// and the high bound may not compare below the low one.
fn check_between(low: &Expr, high: &Expr, column: usize) -> Result<(), Sql92Error> {
    let (Expr::Literal(low), Expr::Literal(high)) = (low, high) else {
        return Ok(());
    };
    if matches!(low, Literal::Null) || matches!(high, Literal::Null) {
        return Err(Sql92Error::InvalidBetween {
            column,
            reason: "bounds cannot be NULL".to_owned(),
        });
    }
    match java_compare(&literal_value(high), &literal_value(low)) {
        Ok(ordering) if ordering != std::cmp::Ordering::Less => Ok(()),
        Ok(_) => Err(Sql92Error::InvalidBetween {
            column,
            reason: format!("low bound {low} is greater than high bound {high}"),
        }),
        Err(e) => Err(Sql92Error::InvalidBetween {
            column,
            reason: format!("bounds {low} and {high} do not compare: {e}"),
        }),
    }
}

impl Parser {
    fn peek(&self) -> &TokenKind {
        &self.tokens[self.pos.min(self.tokens.len() - 1)].kind
    }

    fn peek_second(&self) -> &TokenKind {
        &self.tokens[(self.pos + 1).min(self.tokens.len() - 1)].kind
    }

    fn column(&self) -> usize {
        self.tokens[self.pos.min(self.tokens.len() - 1)].column
    }

    fn advance(&mut self) -> TokenKind {
        let kind = self.peek().clone();
        if self.pos < self.tokens.len() - 1 {
            self.pos += 1;
        }
        kind
    }

    fn unexpected(&self, expected: &'static str) -> Sql92Error {
        Sql92Error::UnexpectedToken {
            column: self.column(),
            expected,
            found: self.peek().describe(),
        }
    }

    fn expect(&mut self, kind: TokenKind, expected: &'static str) -> Result<(), Sql92Error> {
        if *self.peek() == kind {
            self.advance();
            Ok(())
        } else {
            Err(self.unexpected(expected))
        }
    }

    fn expect_end(&self) -> Result<(), Sql92Error> {
        if *self.peek() == TokenKind::End {
            Ok(())
        } else {
            Err(self.unexpected("an operator or the end of the expression"))
        }
    }

    /// Counts a new node against [`MAX_NODES`].
    fn node(&mut self, expr: Expr) -> Result<Box<Expr>, Sql92Error> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(Sql92Error::TooComplex {
                limit: MAX_NODES,
                what: "nodes",
            });
        }
        Ok(Box::new(expr))
    }

    fn nested<T>(
        &mut self,
        parse: impl FnOnce(&mut Parser) -> Result<T, Sql92Error>,
    ) -> Result<T, Sql92Error> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(Sql92Error::TooComplex {
                limit: MAX_NESTING,
                what: "nested parentheses or prefix operators",
            });
        }
        let result = parse(self);
        self.nesting -= 1;
        result
    }

    fn or_expression(&mut self) -> Result<Expr, Sql92Error> {
        let mut left = self.and_expression()?;
        while *self.peek() == TokenKind::Or {
            let column = self.column();
            self.advance();
            let right = self.and_expression()?;
            let l = self.node(as_boolean(left, column, "OR")?)?;
            let r = self.node(as_boolean(right, column, "OR")?)?;
            left = Expr::Or(l, r);
        }
        Ok(left)
    }

    fn and_expression(&mut self) -> Result<Expr, Sql92Error> {
        let mut left = self.equality_expression()?;
        while *self.peek() == TokenKind::And {
            let column = self.column();
            self.advance();
            let right = self.equality_expression()?;
            let l = self.node(as_boolean(left, column, "AND")?)?;
            let r = self.node(as_boolean(right, column, "AND")?)?;
            left = Expr::And(l, r);
        }
        Ok(left)
    }

    fn equality_expression(&mut self) -> Result<Expr, Sql92Error> {
        let mut left = self.comparison_expression()?;
        loop {
            let column = self.column();
            match self.peek() {
                TokenKind::Eq | TokenKind::NotEq => {
                    let op = if self.advance() == TokenKind::Eq {
                        CompareOp::Eq
                    } else {
                        CompareOp::NotEq
                    };
                    let right = self.comparison_expression()?;
                    check_equality(&left, &right, column)?;
                    left = Expr::Compare {
                        op,
                        left: self.node(left)?,
                        right: self.node(right)?,
                    };
                }
                TokenKind::Is => {
                    self.advance();
                    let negated = *self.peek() == TokenKind::Not;
                    if negated {
                        self.advance();
                    }
                    self.expect(TokenKind::Null, "NULL")?;
                    left = Expr::IsNull {
                        operand: self.node(left)?,
                        negated,
                    };
                }
                _ => return Ok(left),
            }
        }
    }

    fn comparison_expression(&mut self) -> Result<Expr, Sql92Error> {
        let mut left = self.unary_expression()?;
        loop {
            let column = self.column();
            let op = match self.peek() {
                TokenKind::Gt => Some(CompareOp::Gt),
                TokenKind::Ge => Some(CompareOp::Ge),
                TokenKind::Lt => Some(CompareOp::Lt),
                TokenKind::Le => Some(CompareOp::Le),
                _ => None,
            };
            if let Some(op) = op {
                self.advance();
                let right = self.unary_expression()?;
                check_ordering(&left, column, op.symbol())?;
                check_ordering(&right, column, op.symbol())?;
                left = Expr::Compare {
                    op,
                    left: self.node(left)?,
                    right: self.node(right)?,
                };
                continue;
            }
            // NOT continues the comparison only before BETWEEN, IN or a string operator (Java's
            // LOOKAHEAD(2)); anywhere else it ends it.
            let negated = *self.peek() == TokenKind::Not
                && matches!(
                    self.peek_second(),
                    TokenKind::Between
                        | TokenKind::In
                        | TokenKind::Contains
                        | TokenKind::StartsWith
                        | TokenKind::EndsWith
                );
            if negated {
                self.advance();
            }
            left = match self.peek() {
                TokenKind::Contains | TokenKind::StartsWith | TokenKind::EndsWith => {
                    let op = match self.advance() {
                        TokenKind::Contains => StringOp::Contains,
                        TokenKind::StartsWith => StringOp::StartsWith,
                        _ => StringOp::EndsWith,
                    };
                    let pattern = self.string_literal()?;
                    Expr::StringMatch {
                        op,
                        operand: self.node(left)?,
                        pattern,
                        negated,
                    }
                }
                TokenKind::Between => {
                    self.advance();
                    let low = self.unary_expression()?;
                    self.expect(TokenKind::And, "AND")?;
                    let high = self.unary_expression()?;
                    if !negated {
                        check_between(&low, &high, column)?;
                    }
                    let (low_op, high_op) = if negated { ("<", ">") } else { (">=", "<=") };
                    check_ordering(&left, column, low_op)?;
                    check_ordering(&low, column, low_op)?;
                    check_ordering(&high, column, high_op)?;
                    Expr::Between {
                        operand: self.node(left)?,
                        low: self.node(low)?,
                        high: self.node(high)?,
                        negated,
                    }
                }
                TokenKind::In => {
                    self.advance();
                    let Expr::Property(property) = left else {
                        return Err(invalid(&left, column, "IN (a property is required)"));
                    };
                    self.expect(TokenKind::LParen, "'('")?;
                    let mut values = vec![self.string_literal()?];
                    while *self.peek() == TokenKind::Comma {
                        self.advance();
                        values.push(self.string_literal()?);
                    }
                    self.expect(TokenKind::RParen, "',' or ')'")?;
                    self.nodes += values.len();
                    *self.node(Expr::In {
                        property,
                        values,
                        negated,
                    })?
                }
                _ => return Ok(left),
            };
        }
    }

    fn unary_expression(&mut self) -> Result<Expr, Sql92Error> {
        let column = self.column();
        match self.peek() {
            TokenKind::Plus => {
                self.advance();
                self.nested(Parser::unary_expression)
            }
            TokenKind::Minus => {
                self.advance();
                let operand = self.nested(Parser::unary_expression)?;
                Ok(Expr::Negate(self.node(operand)?))
            }
            TokenKind::Not => {
                self.advance();
                let operand = self.nested(Parser::unary_expression)?;
                let operand = as_boolean(operand, column, "NOT")?;
                Ok(Expr::Not(self.node(operand)?))
            }
            _ => self.primary_expression(),
        }
    }

    fn primary_expression(&mut self) -> Result<Expr, Sql92Error> {
        let column = self.column();
        let literal = match self.peek() {
            TokenKind::Str(text) => Literal::Str(text.clone()),
            TokenKind::Decimal(text) => decimal(text, column)?,
            TokenKind::Float(text) => float(text, column)?,
            TokenKind::True => Literal::Bool(true),
            TokenKind::False => Literal::Bool(false),
            TokenKind::Null => Literal::Null,
            TokenKind::Ident(name) => {
                let property = Expr::Property(name.clone());
                self.advance();
                return Ok(property);
            }
            TokenKind::LParen => {
                self.advance();
                let inner = self.nested(Parser::or_expression)?;
                self.expect(TokenKind::RParen, "')'")?;
                return Ok(inner);
            }
            _ => return Err(self.unexpected("a literal, a property or '('")),
        };
        self.advance();
        Ok(Expr::Literal(literal))
    }

    fn string_literal(&mut self) -> Result<String, Sql92Error> {
        match self.peek() {
            TokenKind::Str(text) => {
                let text = text.clone();
                self.advance();
                Ok(text)
            }
            _ => Err(self.unexpected("a string literal")),
        }
    }
}

/// Java's `createFromDecimal`: a `Long`, narrowed to an `Integer` when it fits.
fn decimal(text: &str, column: usize) -> Result<Literal, Sql92Error> {
    let value: i64 = text.parse().map_err(|_| Sql92Error::NumberOutOfRange {
        column,
        text: text.to_owned(),
    })?;
    Ok(match i32::try_from(value) {
        Ok(small) => Literal::Int(small),
        Err(_) => Literal::Long(value),
    })
}

/// Java's `createFloat`: refuses a value above `Double.MAX_VALUE` and, as Java does, one below
/// `Double.MIN_VALUE` (the smallest positive double), which includes `0.0`.
fn float(text: &str, column: usize) -> Result<Literal, Sql92Error> {
    let out_of_range = || Sql92Error::NumberOutOfRange {
        column,
        text: text.to_owned(),
    };
    let value: f64 = text.parse().map_err(|_| out_of_range())?;
    if !value.is_finite() || value < f64::from_bits(1) {
        return Err(out_of_range());
    }
    Ok(Literal::Double(value))
}
