//! Evaluation with the value model of RocketMQ's `filter` expressions: Java `Integer`, `Long`,
//! `Double`, `Boolean`, `String` and null, converted between each other exactly where Java's
//! `ComparisonExpression` converts them.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use super::{CompareOp, Expr, Literal, StringOp};

/// Where a selector reads message properties from.
pub trait Properties {
    fn property(&self, name: &str) -> Option<&str>;
}

/// Properties in their stored wire form (`name\u{1}value\u{2}...`).
impl Properties for str {
    fn property(&self, name: &str) -> Option<&str> {
        skiff_storage::message::property(self, name)
    }
}

impl Properties for HashMap<String, String> {
    fn property(&self, name: &str) -> Option<&str> {
        self.get(name).map(String::as_str)
    }
}

impl Properties for BTreeMap<String, String> {
    fn property(&self, name: &str) -> Option<&str> {
        self.get(name).map(String::as_str)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Value<'a> {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(&'a str),
}

/// What makes Java's evaluation throw; the selector then selects nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum EvalError {
    #[error("{text:?} is not a valid {target}")]
    NotANumber { text: String, target: &'static str },
    /// Java's `Boolean`-to-`String` conversion casts the wrong operand and fails.
    #[error("a boolean cannot be compared with a string")]
    BooleanWithString,
    #[error("operand is not a boolean")]
    NotBoolean,
}

fn not_a_number(text: &str, target: &'static str) -> EvalError {
    EvalError::NotANumber {
        text: text.to_owned(),
        target,
    }
}

fn java_int(text: &str) -> Result<i32, EvalError> {
    // Rust's integer parsing accepts exactly Java's ASCII form: an optional sign and digits.
    text.parse().map_err(|_| not_a_number(text, "integer"))
}

fn java_long(text: &str) -> Result<i64, EvalError> {
    text.parse().map_err(|_| not_a_number(text, "long"))
}

/// Java's `Double.valueOf` for decimal text: surrounding control characters and spaces are
/// ignored, an `f`/`d` type suffix is allowed, `NaN` and `Infinity` are spelled out. Hexadecimal
/// floating-point text is not supported.
fn java_double(text: &str) -> Result<f64, EvalError> {
    let fail = || not_a_number(text, "double");
    let trimmed = text.trim_matches(|c: char| c <= ' ');
    let unsigned = trimmed.trim_start_matches(['+', '-']);
    if trimmed.len() - unsigned.len() > 1 {
        return Err(fail());
    }
    let negative = trimmed.starts_with('-');
    let magnitude = match unsigned {
        "NaN" => f64::NAN,
        "Infinity" => f64::INFINITY,
        _ => {
            let number = unsigned
                .strip_suffix(['f', 'F', 'd', 'D'])
                .unwrap_or(unsigned);
            // Rust would also read "inf" or "nan"; Java reads only digits here.
            let well_formed = !number.is_empty()
                && number
                    .chars()
                    .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
                && number.starts_with(|c: char| c.is_ascii_digit() || c == '.');
            if !well_formed {
                return Err(fail());
            }
            number.parse::<f64>().map_err(|_| fail())?
        }
    };
    Ok(if negative { -magnitude } else { magnitude })
}

/// Java's `Double.compareTo`: every NaN is equal to every other and above everything else, and
/// -0.0 is below 0.0.
fn java_double_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.total_cmp(&b),
    }
}

/// Java's `ComparisonExpression.__compare` with string conversion on (as RocketMQ's parser
/// always sets it): the right operand is converted to the left's numeric type when it is wider
/// or a string, the left one otherwise; pairs it cannot convert (a number and a boolean)
/// compare as "less".
pub(super) fn java_compare(left: &Value<'_>, right: &Value<'_>) -> Result<Ordering, EvalError> {
    use Value::*;
    let ordering = match (*left, *right) {
        (Bool(l), Bool(r)) => l.cmp(&r),
        (Int(l), Int(r)) => l.cmp(&r),
        (Long(l), Long(r)) => l.cmp(&r),
        (Double(l), Double(r)) => java_double_cmp(l, r),
        (Str(l), Str(r)) => l.cmp(r),
        (Bool(_), Str(_)) => return Err(EvalError::BooleanWithString),
        (Int(l), Long(r)) => i64::from(l).cmp(&r),
        (Long(l), Int(r)) => l.cmp(&i64::from(r)),
        (Int(l), Double(r)) => java_double_cmp(f64::from(l), r),
        (Long(l), Double(r)) => java_double_cmp(l as f64, r),
        (Double(l), Int(r)) => java_double_cmp(l, f64::from(r)),
        (Double(l), Long(r)) => java_double_cmp(l, r as f64),
        (Int(l), Str(r)) => l.cmp(&java_int(r)?),
        (Long(l), Str(r)) => l.cmp(&java_long(r)?),
        (Double(l), Str(r)) => java_double_cmp(l, java_double(r)?),
        (Str(l), Bool(r)) => l.eq_ignore_ascii_case("true").cmp(&r),
        (Str(l), Int(r)) => java_int(l)?.cmp(&r),
        (Str(l), Long(r)) => java_long(l)?.cmp(&r),
        (Str(l), Double(r)) => java_double_cmp(java_double(l)?, r),
        _ => Ordering::Less,
    };
    Ok(ordering)
}

type Outcome<'a> = Result<Value<'a>, EvalError>;

fn from_bool(value: Option<bool>) -> Value<'static> {
    value.map_or(Value::Null, Value::Bool)
}

/// The selector's truth value: `Some(true)` selects the message.
pub(super) fn evaluate<'a, P: Properties + ?Sized>(
    expr: &'a Expr,
    properties: &'a P,
) -> Result<Option<bool>, EvalError> {
    Evaluator { properties }.boolean(expr)
}

struct Evaluator<'a, P: ?Sized> {
    properties: &'a P,
}

impl<'a, P: Properties + ?Sized> Evaluator<'a, P> {
    /// An operand in a boolean position. A bare property is cast as Java's `BooleanCast` does:
    /// null stays null, and any other value (a property is always a string) is false.
    fn boolean(&self, expr: &'a Expr) -> Result<Option<bool>, EvalError> {
        if let Expr::Property(name) = expr {
            return Ok(self.properties.property(name).map(|_| false));
        }
        match self.value(expr)? {
            Value::Null => Ok(None),
            Value::Bool(b) => Ok(Some(b)),
            _ => Err(EvalError::NotBoolean),
        }
    }

    fn value(&self, expr: &'a Expr) -> Outcome<'a> {
        match expr {
            Expr::Property(name) => Ok(self
                .properties
                .property(name)
                .map_or(Value::Null, Value::Str)),
            Expr::Literal(lit) => Ok(match lit {
                Literal::Null => Value::Null,
                Literal::Bool(b) => Value::Bool(*b),
                Literal::Int(v) => Value::Int(*v),
                Literal::Long(v) => Value::Long(*v),
                Literal::Double(v) => Value::Double(*v),
                Literal::Str(s) => Value::Str(s),
            }),
            Expr::Negate(operand) => Ok(match self.value(operand)? {
                Value::Int(v) => Value::Int(v.wrapping_neg()),
                Value::Long(v) => Value::Long(v.wrapping_neg()),
                Value::Double(v) => Value::Double(-v),
                _ => Value::Null,
            }),
            Expr::Not(operand) => Ok(from_bool(self.boolean(operand)?.map(|b| !b))),
            Expr::And(l, r) => self.and(|| self.boolean(l), || self.boolean(r)),
            Expr::Or(l, r) => self.or(|| self.boolean(l), || self.boolean(r)),
            Expr::Compare { op, left, right } => self.compare(*op, left, right),
            Expr::IsNull { operand, negated } => {
                let is_null = self.value(operand)? == Value::Null;
                Ok(Value::Bool(is_null != *negated))
            }
            Expr::Between {
                operand,
                low,
                high,
                negated: false,
            } => self.and(
                || self.ordering(CompareOp::Ge, operand, low),
                || self.ordering(CompareOp::Le, operand, high),
            ),
            Expr::Between {
                operand,
                low,
                high,
                negated: true,
            } => self.or(
                || self.ordering(CompareOp::Lt, operand, low),
                || self.ordering(CompareOp::Gt, operand, high),
            ),
            Expr::In {
                property,
                values,
                negated,
            } => Ok(match self.properties.property(property) {
                None => Value::Null,
                Some(v) => Value::Bool(values.iter().any(|candidate| candidate == v) != *negated),
            }),
            Expr::StringMatch {
                op,
                operand,
                pattern,
                negated,
            } => {
                // Java answers false, never null, for an empty pattern or a missing or
                // non-string value, negated or not.
                if pattern.is_empty() {
                    return Ok(Value::Bool(false));
                }
                let Value::Str(text) = self.value(operand)? else {
                    return Ok(Value::Bool(false));
                };
                let found = match op {
                    StringOp::Contains => text.contains(pattern.as_str()),
                    StringOp::StartsWith => text.starts_with(pattern.as_str()),
                    StringOp::EndsWith => text.ends_with(pattern.as_str()),
                };
                Ok(Value::Bool(found != *negated))
            }
        }
    }

    /// Three-valued AND; a false left side skips the right one.
    fn and(
        &self,
        left: impl FnOnce() -> Result<Option<bool>, EvalError>,
        right: impl FnOnce() -> Result<Option<bool>, EvalError>,
    ) -> Outcome<'a> {
        let l = left()?;
        if l == Some(false) {
            return Ok(Value::Bool(false));
        }
        let r = right()?;
        if r == Some(false) {
            return Ok(Value::Bool(false));
        }
        Ok(from_bool(l.and(r)))
    }

    /// Three-valued OR; a true left side skips the right one.
    fn or(
        &self,
        left: impl FnOnce() -> Result<Option<bool>, EvalError>,
        right: impl FnOnce() -> Result<Option<bool>, EvalError>,
    ) -> Outcome<'a> {
        let l = left()?;
        if l == Some(true) {
            return Ok(Value::Bool(true));
        }
        let r = right()?;
        if r == Some(true) {
            return Ok(Value::Bool(true));
        }
        Ok(from_bool(l.and(r)))
    }

    fn compare(&self, op: CompareOp, left: &'a Expr, right: &'a Expr) -> Outcome<'a> {
        match op {
            CompareOp::Eq | CompareOp::NotEq => {
                let equal = self.equal(left, right)?;
                Ok(from_bool(if op == CompareOp::Eq {
                    equal
                } else {
                    equal.map(|e| !e)
                }))
            }
            _ => Ok(from_bool(self.ordering(op, left, right)?)),
        }
    }

    /// Java's equality: both sides are evaluated; null on the left is unknown, null only on the
    /// right is false, null on both is true.
    fn equal(&self, left: &'a Expr, right: &'a Expr) -> Result<Option<bool>, EvalError> {
        let l = self.value(left)?;
        let r = self.value(right)?;
        match (l, r) {
            (Value::Null, Value::Null) => Ok(Some(true)),
            (Value::Null, _) => Ok(None),
            (_, Value::Null) => Ok(Some(false)),
            _ => Ok(Some(java_compare(&l, &r)? == Ordering::Equal)),
        }
    }

    /// `<`, `<=`, `>`, `>=`: null on either side is unknown (the right side is not evaluated
    /// when the left is null); two strings are compared as doubles or not at all.
    fn ordering(
        &self,
        op: CompareOp,
        left: &'a Expr,
        right: &'a Expr,
    ) -> Result<Option<bool>, EvalError> {
        let l = self.value(left)?;
        if l == Value::Null {
            return Ok(None);
        }
        let r = self.value(right)?;
        if r == Value::Null {
            return Ok(None);
        }
        let ordering = match (l, r) {
            (Value::Str(a), Value::Str(b)) => java_double_cmp(java_double(a)?, java_double(b)?),
            _ => java_compare(&l, &r)?,
        };
        Ok(Some(match op {
            CompareOp::Gt => ordering == Ordering::Greater,
            CompareOp::Ge => ordering != Ordering::Less,
            CompareOp::Lt => ordering == Ordering::Less,
            CompareOp::Le => ordering != Ordering::Greater,
            CompareOp::Eq => ordering == Ordering::Equal,
            CompareOp::NotEq => ordering != Ordering::Equal,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_double_reads_what_java_reads() {
        assert_eq!(java_double(" 1.5 "), Ok(1.5));
        assert_eq!(java_double("-2e3"), Ok(-2000.0));
        assert_eq!(java_double("3f"), Ok(3.0));
        assert_eq!(java_double(".5"), Ok(0.5));
        assert!(java_double("NaN").is_ok_and(f64::is_nan));
        assert_eq!(java_double("-Infinity"), Ok(f64::NEG_INFINITY));
        for bad in ["", "inf", "nan", "1.2.3x", "--1", "abc", "1,5"] {
            assert!(java_double(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn compare_converts_like_java() {
        use Value::*;
        assert_eq!(java_compare(&Str("7"), &Int(5)), Ok(Ordering::Greater));
        assert!(
            java_compare(&Str("7.5"), &Int(5)).is_err(),
            "Integer.valueOf(\"7.5\") fails"
        );
        assert_eq!(
            java_compare(&Str("7.5"), &Double(5.0)),
            Ok(Ordering::Greater)
        );
        assert!(java_compare(&Str("3000000000"), &Int(5)).is_err());
        assert_eq!(
            java_compare(&Str("3000000000"), &Long(3_000_000_000)),
            Ok(Ordering::Equal)
        );
        assert_eq!(java_compare(&Int(5), &Double(5.0)), Ok(Ordering::Equal));
        assert_eq!(java_compare(&Str("TRUE"), &Bool(true)), Ok(Ordering::Equal));
        assert_eq!(
            java_compare(&Bool(true), &Str("true")),
            Err(EvalError::BooleanWithString)
        );
        assert_eq!(java_compare(&Int(5), &Bool(true)), Ok(Ordering::Less));
        assert_eq!(
            java_compare(&Double(f64::NAN), &Double(f64::NAN)),
            Ok(Ordering::Equal)
        );
        assert_eq!(
            java_compare(&Double(-0.0), &Double(0.0)),
            Ok(Ordering::Less)
        );
    }
}
