//! PostgreSQL's array text format (`array_out`), parsed into a tree of text elements.
//!
//! ```text
//! [1:2][0:1]={{1,2},{"a \"b\"",NULL}}
//! └ optional bounds ┘ └ braces per dimension; elements quoted when they hold braces, the
//!                       delimiter, quotes, backslashes or space, or spell NULL
//! ```
//!
//! Lenient like `array_in` about whitespace around elements; unquoted `NULL` (any case) is
//! SQL NULL, quoted `"NULL"` the text. Nesting is bounded by PostgreSQL's `MAXDIM`.

/// PostgreSQL's `MAXDIM`.
const MAX_DEPTH: usize = 6;

/// One element of a parsed array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Element {
    Null,
    Text(String),
    Array(Vec<Element>),
}

/// Why an array literal did not parse (the caller keeps the text as it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed;

/// Parses an array literal whose elements are separated by `delimiter` (`,` for every
/// built-in type but `box`).
pub(crate) fn parse(text: &str, delimiter: char) -> Result<Vec<Element>, Malformed> {
    let mut text = text.trim_start();
    if text.starts_with('[') {
        // Dimension decoration for arrays not based at 1: no place for it in JSON.
        let (_, rest) = text.split_once('=').ok_or(Malformed)?;
        text = rest.trim_start();
    }
    let mut parser = Parser {
        rest: text,
        delimiter,
    };
    let elements = parser.array(1)?;
    if !parser.rest.trim().is_empty() {
        return Err(Malformed);
    }
    Ok(elements)
}

struct Parser<'a> {
    rest: &'a str,
    delimiter: char,
}

impl Parser<'_> {
    fn next_char(&mut self) -> Option<char> {
        let mut chars = self.rest.chars();
        let c = chars.next()?;
        self.rest = chars.as_str();
        Some(c)
    }

    fn skip_space(&mut self) {
        self.rest = self.rest.trim_start();
    }

    /// `{ element (delim element)* }` or `{}`; `self.rest` starts at the `{`.
    fn array(&mut self, depth: usize) -> Result<Vec<Element>, Malformed> {
        if depth > MAX_DEPTH || self.next_char() != Some('{') {
            return Err(Malformed);
        }
        let mut elements = Vec::new();
        self.skip_space();
        if let Some(rest) = self.rest.strip_prefix('}') {
            self.rest = rest;
            return Ok(elements);
        }
        loop {
            self.skip_space();
            let element = if self.rest.starts_with('{') {
                Element::Array(self.array(depth + 1)?)
            } else if self.rest.starts_with('"') {
                self.next_char();
                Element::Text(self.quoted()?)
            } else {
                self.unquoted()?
            };
            elements.push(element);
            self.skip_space();
            match self.next_char() {
                Some('}') => return Ok(elements),
                Some(c) if c == self.delimiter => {}
                _ => return Err(Malformed),
            }
        }
    }

    /// The inside of a quoted element, after its opening quote; consumes the closing one.
    fn quoted(&mut self) -> Result<String, Malformed> {
        let mut out = String::new();
        loop {
            match self.next_char().ok_or(Malformed)? {
                '"' => return Ok(out),
                '\\' => out.push(self.next_char().ok_or(Malformed)?),
                c => out.push(c),
            }
        }
    }

    /// An unquoted element up to the delimiter or `}`, trailing space dropped, backslash
    /// escapes resolved.
    fn unquoted(&mut self) -> Result<Element, Malformed> {
        let mut out = String::new();
        let mut escaped_len = 0;
        loop {
            let Some(c) = self.rest.chars().next() else {
                return Err(Malformed);
            };
            if c == '}' || c == self.delimiter {
                break;
            }
            if c == '{' || c == '"' {
                return Err(Malformed);
            }
            self.next_char();
            if c == '\\' {
                out.push(self.next_char().ok_or(Malformed)?);
                escaped_len = out.len();
            } else {
                out.push(c);
            }
        }
        // Trailing whitespace is not part of the element, unless it was escaped.
        let keep = out.trim_end().len().max(escaped_len);
        out.truncate(keep);
        if out.is_empty() {
            return Err(Malformed);
        }
        if escaped_len == 0 && out.eq_ignore_ascii_case("NULL") {
            return Ok(Element::Null);
        }
        Ok(Element::Text(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Element {
        Element::Text(s.to_owned())
    }

    #[test]
    fn parses_flat_arrays() {
        assert_eq!(parse("{}", ','), Ok(vec![]));
        assert_eq!(parse("{1,2,3}", ','), Ok(vec![t("1"), t("2"), t("3")]));
        assert_eq!(
            parse("{1,NULL,null,\"NULL\"}", ','),
            Ok(vec![t("1"), Element::Null, Element::Null, t("NULL")])
        );
        assert_eq!(parse("{\"\"}", ','), Ok(vec![t("")]));
        assert_eq!(parse("{a;b}", ';'), Ok(vec![t("a"), t("b")]));
    }

    #[test]
    fn resolves_quotes_and_escapes() {
        assert_eq!(
            parse(r#"{"a,b","c\"d","e\\f","{x}"," sp "}"#, ','),
            Ok(vec![t("a,b"), t("c\"d"), t("e\\f"), t("{x}"), t(" sp ")])
        );
        assert_eq!(parse(r"{a\,b,N\ULL}", ','), Ok(vec![t("a,b"), t("NULL")]));
        assert_eq!(parse("{é,日本}", ','), Ok(vec![t("é"), t("日本")]));
        assert_eq!(parse(r"{a\ }", ','), Ok(vec![t("a ")]));
    }

    #[test]
    fn parses_nested_arrays_and_bounds() {
        assert_eq!(
            parse("{{1,2},{3,NULL}}", ','),
            Ok(vec![
                Element::Array(vec![t("1"), t("2")]),
                Element::Array(vec![t("3"), Element::Null]),
            ])
        );
        assert_eq!(parse("[0:1]={7,8}", ','), Ok(vec![t("7"), t("8")]));
        assert_eq!(
            parse(" { { a } , { b } } ", ','),
            Ok(vec![
                Element::Array(vec![t("a")]),
                Element::Array(vec![t("b")])
            ])
        );
        assert!(parse("{{{{{{1}}}}}}", ',').is_ok());
        assert_eq!(parse("{{{{{{{1}}}}}}}", ','), Err(Malformed));
    }

    #[test]
    fn refuses_malformed_text() {
        for bad in [
            "",
            "1",
            "{",
            "}",
            "{1",
            "{1,",
            "{1,}",
            "{,1}",
            "{\"a}",
            "{\"a\\",
            "{a\\",
            "{1}x",
            "{1}}",
            "{{1}",
            "[1:2]{1,2}",
            "{a\"b}",
            "{a{b}",
            "{\"a\"b}",
        ] {
            assert_eq!(parse(bad, ','), Err(Malformed), "{bad:?}");
        }
        // Deep nesting is refused without recursing far.
        let deep = "{".repeat(100_000);
        assert_eq!(parse(&deep, ','), Err(Malformed));
    }
}
