//! CSV import and export (BEHAVIOUR.md §6), on the `csv` crate's RFC 4180 reader and writer.
//!
//! Import turns rows into flat JSON documents (typed by `dynamicTyping`) that then follow the
//! same inference as JSON imports. Export writes `__id`, `__label`, then the property names
//! sorted, with CRLF line ends and quoting only where a cell needs it.

use crate::error::{Error, Result};
use crate::model::{PropValue, Record, Scalar};
use serde_json::{Map, Number, Value};
use std::collections::BTreeSet;

/// `parseConfig` (SPEC.md), validated.
#[derive(Debug, Clone)]
pub struct ParseConfig {
    pub delimiter: u8,
    pub header: bool,
    pub skip_empty_lines: SkipEmpty,
    pub dynamic_typing: bool,
    pub quote: u8,
    pub escape: u8,
    /// None: automatic (`\n`, `\r\n` and `\r` all end a row).
    pub newline: Option<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipEmpty {
    /// Blank rows become records with no properties.
    No,
    /// Rows with no characters are skipped.
    Yes,
    /// Rows whose cells are all blank (whitespace only) are skipped too.
    Greedy,
}

impl Default for ParseConfig {
    fn default() -> Self {
        ParseConfig {
            delimiter: b',',
            header: true,
            skip_empty_lines: SkipEmpty::Yes,
            dynamic_typing: true,
            quote: b'"',
            escape: b'"',
            newline: None,
        }
    }
}

fn one_byte(m: &Map<String, Value>, key: &str, default: u8) -> Result<u8> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::String(s)) if s.len() == 1 && s.is_ascii() => Ok(s.as_bytes()[0]),
        Some(_) => Err(Error::invalid(format!(
            "parseConfig.{key}: must be a single ASCII character"
        ))),
    }
}

fn flag(m: &Map<String, Value>, key: &str, default: bool) -> Result<bool> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(Error::invalid(format!(
            "parseConfig.{key}: must be a boolean"
        ))),
    }
}

impl ParseConfig {
    /// Reads `parseConfig`; every missing option takes its SPEC.md default.
    pub fn from_json(m: Option<&Map<String, Value>>) -> Result<ParseConfig> {
        let d = ParseConfig::default();
        let Some(m) = m else { return Ok(d) };
        let skip_empty_lines = match m.get("skipEmptyLines") {
            None | Some(Value::Null) | Some(Value::Bool(true)) => SkipEmpty::Yes,
            Some(Value::Bool(false)) => SkipEmpty::No,
            Some(Value::String(s)) if s == "greedy" => SkipEmpty::Greedy,
            Some(_) => {
                return Err(Error::invalid(
                    "parseConfig.skipEmptyLines: must be true, false or \"greedy\"",
                ))
            }
        };
        let newline = match m.get("newline") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => match s.as_str() {
                "" | "\r\n" => None,
                "\n" => Some(b'\n'),
                "\r" => Some(b'\r'),
                _ => {
                    return Err(Error::invalid(
                        "parseConfig.newline: must be \"\\n\", \"\\r\\n\" or \"\\r\"",
                    ))
                }
            },
            Some(_) => return Err(Error::invalid("parseConfig.newline: must be a string")),
        };
        let quote = one_byte(m, "quoteChar", d.quote)?;
        let cfg = ParseConfig {
            delimiter: one_byte(m, "delimiter", d.delimiter)?,
            header: flag(m, "header", d.header)?,
            skip_empty_lines,
            dynamic_typing: flag(m, "dynamicTyping", d.dynamic_typing)?,
            quote,
            escape: one_byte(m, "escapeChar", quote)?,
            newline,
        };
        if cfg.delimiter == cfg.quote || matches!(cfg.delimiter, b'\r' | b'\n') {
            return Err(Error::invalid(
                "parseConfig.delimiter: must differ from the quote character and the newline",
            ));
        }
        Ok(cfg)
    }
}

/// Header normalisation: trimmed; characters outside `[A-Za-z0-9_]` become `_`; an empty
/// header is `column_N` (1-based position); repeats get `_2`, `_3`, ... A header that only
/// comes to start with `__` by this (`名前`, `--x`) keeps one leading `_` (`_`, `_x`): the
/// columns skipped as system columns are those written with `__`.
pub fn normalize_headers(raw: &[&str]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    raw.iter()
        .enumerate()
        .map(|(i, h)| {
            let trimmed = h.trim();
            let system = trimmed.starts_with("__");
            // A name this column did not write with `__` never comes to start with it.
            let keep = |s: String| match s.starts_with("__") && !system {
                true => format!("_{}", s.trim_start_matches('_')),
                false => s,
            };
            let h: String = trimmed
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let base = if h.is_empty() {
                format!("column_{}", i + 1)
            } else {
                keep(h)
            };
            let mut name = base.clone();
            let mut n = 2;
            while !seen.insert(name.clone()) {
                name = keep(format!("{base}_{n}"));
                n += 1;
            }
            name
        })
        .collect()
}

/// PapaParse's `dynamicTyping` for one cell: booleans, numbers, else the text.
fn typed_cell(cell: &str) -> Value {
    match cell {
        "true" | "TRUE" => return Value::Bool(true),
        "false" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    let t = cell.trim();
    if looks_numeric(t) {
        if let Ok(i) = t.parse::<i64>() {
            return Value::Number(i.into());
        }
        if let Ok(f) = t.parse::<f64>() {
            // Integral values are integers, as for JSON input (BEHAVIOUR.md §1).
            match crate::model::infer::float_scalar(f) {
                Scalar::Int(i) => return Value::Number(i.into()),
                _ => {
                    if let Some(n) = Number::from_f64(f) {
                        return Value::Number(n);
                    }
                }
            }
        }
    }
    Value::String(cell.to_string())
}

/// `-?(\d+\.?|\.\d+|\d+\.\d+)([eE][-+]?\d+)?`
fn looks_numeric(t: &str) -> bool {
    let b = t.strip_prefix('-').unwrap_or(t).as_bytes();
    let digits = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
    let int = digits(b);
    let mut i = int;
    let mut frac = 0;
    if b.get(i) == Some(&b'.') {
        frac = digits(&b[i + 1..]);
        i += 1 + frac;
    }
    if int == 0 && frac == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let e = digits(&b[j.min(b.len())..]);
        if e == 0 {
            return false;
        }
        i = j + e;
    }
    i == b.len()
}

/// 1-based line of a byte offset (any of `\r\n`, `\n`, `\r` ends a line).
fn line_of(data: &[u8], byte: usize) -> usize {
    let s = &data[..byte.min(data.len())];
    let mut line = 1;
    for (i, &c) in s.iter().enumerate() {
        if c == b'\n' || (c == b'\r' && s.get(i + 1) != Some(&b'\n')) {
            line += 1;
        }
    }
    line
}

/// The 1-based line a CSV record starts on, from the byte position the `csv` reader reports
/// for it (the reader's own line count misses `\r` line ends). The CLI loader names lines
/// with it as the server does.
pub fn record_line(data: &[u8], position: usize) -> usize {
    line_of(data, skip_blank_lines(data, position).1)
}

/// A record's reported start is where the reader resumed: after the previous row's first
/// terminator byte, before any empty lines it skipped. Returns (empty lines, content start).
fn skip_blank_lines(data: &[u8], mut at: usize) -> (usize, usize) {
    if at > 0 && data.get(at - 1) == Some(&b'\r') && data.get(at) == Some(&b'\n') {
        at += 1; // the rest of the previous row's CRLF
    }
    let mut blank = 0;
    loop {
        match (data.get(at), data.get(at + 1)) {
            (Some(b'\r'), Some(b'\n')) => at += 2,
            (Some(b'\n' | b'\r'), _) => at += 1,
            _ => return (blank, at),
        }
        blank += 1;
    }
}

/// The line a quoted field starts on when it is still open at the end of `data` (a file
/// read with `delimiter` and the default quote and escape): the CLI loader refuses such a
/// file as the server refuses such a body, rather than sending the rest of the file as one
/// value.
pub fn unclosed_quote(data: &[u8], delimiter: u8) -> Option<usize> {
    let cfg = ParseConfig {
        delimiter,
        ..ParseConfig::default()
    };
    open_quote(data, &cfg).map(|at| line_of(data, at))
}

/// Whether the text of the last record leaves a quoted field open (the reader would
/// otherwise take the rest of the input as that field).
fn ends_inside_quotes(tail: &[u8], cfg: &ParseConfig) -> bool {
    open_quote(tail, cfg).is_some()
}

/// Where the quoted field still open at the end of `tail` starts (its opening quote).
fn open_quote(tail: &[u8], cfg: &ParseConfig) -> Option<usize> {
    let (mut quoted, mut field_start, mut opened) = (false, true, 0);
    let mut i = 0;
    while i < tail.len() {
        let c = tail[i];
        if quoted {
            if c == cfg.escape && cfg.escape != cfg.quote && tail.get(i + 1).is_some() {
                i += 2;
                continue;
            }
            if c == cfg.quote {
                if cfg.escape == cfg.quote && tail.get(i + 1) == Some(&cfg.quote) {
                    i += 2;
                    continue;
                }
                quoted = false;
            }
        } else if field_start && c == cfg.quote {
            quoted = true;
            opened = i;
        }
        field_start = !quoted && (c == cfg.delimiter || c == b'\n' || c == b'\r');
        i += 1;
    }
    quoted.then_some(opened)
}

/// Rows as flat documents, in file order. `__`-prefixed columns (an export's system columns)
/// are skipped. A malformed CSV is a 400 naming its line.
pub fn parse(data: &str, cfg: &ParseConfig) -> Result<Vec<Map<String, Value>>> {
    let bytes = data.as_bytes();
    let mut b = csv::ReaderBuilder::new();
    b.has_headers(false)
        .flexible(true)
        .delimiter(cfg.delimiter)
        .quote(cfg.quote)
        .double_quote(cfg.escape == cfg.quote)
        .escape((cfg.escape != cfg.quote).then_some(cfg.escape))
        .terminator(match cfg.newline {
            None => csv::Terminator::CRLF,
            Some(c) => csv::Terminator::Any(c),
        });
    let mut reader = b.from_reader(bytes);
    let mut header: Option<Vec<String>> = None;
    let mut out = Vec::new();
    let mut row = csv::StringRecord::new();
    let mut last_start = 0usize;
    loop {
        let more = reader.read_record(&mut row).map_err(|e| {
            let line = e
                .position()
                .map(|p| line_of(bytes, p.byte() as usize))
                .unwrap_or(0);
            Error::invalid(format!("malformed CSV at line {line}: {e}"))
        })?;
        if !more {
            break;
        }
        let at = row.position().map(|p| p.byte() as usize).unwrap_or(0);
        let (blank, start) = skip_blank_lines(bytes, at);
        last_start = start;
        if cfg.skip_empty_lines == SkipEmpty::No && header.is_some() {
            // The reader drops empty lines; without skipEmptyLines each is a record.
            out.extend((0..blank).map(|_| Map::new()));
        }
        let cells: Vec<&str> = row.iter().collect();
        if cfg.skip_empty_lines == SkipEmpty::Greedy && cells.iter().all(|c| c.trim().is_empty()) {
            continue;
        }
        let Some(names) = &header else {
            header = Some(if cfg.header {
                normalize_headers(&cells)
            } else {
                Vec::new()
            });
            if cfg.header {
                continue;
            }
            // Without a header, the first row is data, with positional names.
            out.push(document(&cells, None, cfg));
            continue;
        };
        if cfg.header && cells.len() > names.len() {
            return Err(Error::invalid(format!(
                "malformed CSV at line {}: the row has {} fields, the header {}",
                line_of(bytes, start),
                cells.len(),
                names.len()
            )));
        }
        out.push(document(&cells, cfg.header.then_some(names), cfg));
    }
    if ends_inside_quotes(&bytes[last_start.min(bytes.len())..], cfg) {
        return Err(Error::invalid(format!(
            "malformed CSV at line {}: a quoted field is not closed",
            line_of(bytes, last_start)
        )));
    }
    Ok(out)
}

fn document(cells: &[&str], names: Option<&Vec<String>>, cfg: &ParseConfig) -> Map<String, Value> {
    let mut doc = Map::new();
    for (i, cell) in cells.iter().enumerate() {
        let name = match names {
            Some(n) => n[i].clone(),
            None => format!("column_{}", i + 1),
        };
        if name.starts_with("__") {
            continue;
        }
        let value = if !cfg.dynamic_typing {
            Value::String(cell.to_string())
        } else if cell.is_empty() {
            continue;
        } else {
            typed_cell(cell)
        };
        doc.insert(name, value);
    }
    doc
}

fn cell(v: &PropValue) -> String {
    if v.array {
        return v.to_json().to_string();
    }
    match v.items.first() {
        Some(Scalar::Str(s)) => s.clone(),
        Some(other) => other.to_json().to_string(),
        None => String::new(),
    }
}

/// Records as CSV text: `__id,__label`, then every property name of the records, sorted.
pub fn render(records: &[Record]) -> Result<String> {
    let names: BTreeSet<&str> = records
        .iter()
        .flat_map(|r| r.props.keys().map(String::as_str))
        .collect();
    let mut w = csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .quote_style(csv::QuoteStyle::Necessary)
        .from_writer(Vec::new());
    let fail = |e: csv::Error| Error::internal(format!("CSV export: {e}"));
    let mut head = vec!["__id", "__label"];
    head.extend(names.iter().copied());
    w.write_record(&head).map_err(fail)?;
    for r in records {
        let mut row = vec![r.id.to_string(), r.label.clone()];
        row.extend(
            names
                .iter()
                .map(|n| r.props.get(*n).map(cell).unwrap_or_default()),
        );
        w.write_record(&row).map_err(fail)?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| Error::internal(format!("CSV export: {e}")))?;
    String::from_utf8(bytes).map_err(|e| Error::internal(format!("CSV export: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rows(data: &str, cfg: Value) -> Result<Vec<Value>> {
        let cfg = ParseConfig::from_json(cfg.as_object())?;
        Ok(parse(data, &cfg)?.into_iter().map(Value::Object).collect())
    }

    #[test]
    fn defaults_type_cells_and_skip_blank_lines() {
        let r = rows(
            "name, Age ,ok,x\r\nA,30,true,\r\n\r\n\"B, b\",1.5e2,FALSE,\"q\"\"\"\r\n",
            json!({}),
        )
        .unwrap();
        assert_eq!(
            r,
            vec![
                json!({"name": "A", "Age": 30, "ok": true}),
                json!({"name": "B, b", "Age": 150, "ok": false, "x": "q\""})
            ]
        );
    }

    #[test]
    fn options_change_parsing() {
        let r = rows(
            "a;b\n1;\n",
            json!({"delimiter": ";", "dynamicTyping": false}),
        )
        .unwrap();
        assert_eq!(r, vec![json!({"a": "1", "b": ""})]);
        let r = rows("1,2\n3,4\n", json!({"header": false})).unwrap();
        assert_eq!(r[1], json!({"column_1": 3, "column_2": 4}));
        let r = rows("a\n1\n\n2\n", json!({"skipEmptyLines": false})).unwrap();
        assert_eq!(r, vec![json!({"a": 1}), json!({}), json!({"a": 2})]);
        let r = rows("a,b\n1,2\n , \n", json!({"skipEmptyLines": "greedy"})).unwrap();
        assert_eq!(r.len(), 1);
        let r = rows("a,b\n'x,y',2\n", json!({"quoteChar": "'"})).unwrap();
        assert_eq!(r[0]["a"], json!("x,y"));
        let r = rows("a\n\"x\\\"y\"\n", json!({"escapeChar": "\\"})).unwrap();
        assert_eq!(r[0]["a"], json!("x\"y"));
        let r = rows("a|1|2|", json!({"newline": "|"}));
        assert!(r.is_err());
        let r = rows("a\r1\r2\r", json!({"newline": "\r"})).unwrap();
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn malformed_rows_name_their_line() {
        let e = rows("a,b\n1,2\n1,2,3\n", json!({})).unwrap_err();
        assert!(e.message.contains("line 3"), "{}", e.message);
        let e = rows("a,b\r\n1,2\r\n3,\"open\r\nx\r\n", json!({})).unwrap_err();
        assert!(e.message.contains("line 3"), "{}", e.message);
    }

    #[test]
    fn headers_are_normalised() {
        assert_eq!(
            normalize_headers(&[" first name ", "", "a-b", "a_b", "a_b"]),
            ["first_name", "column_2", "a_b", "a_b_2", "a_b_3"]
        );
        // Only headers written with `__` become system columns (skipped on import).
        assert_eq!(
            normalize_headers(&["名前", "--x", "é", "__id", "_-y"]),
            ["_", "_x", "_2", "__id", "_y"]
        );
    }

    #[test]
    fn numeric_text() {
        for t in ["1", "-1", "1.", ".5", "1.5", "1e3", "-2.5E-2"] {
            assert!(looks_numeric(t), "{t}");
        }
        for t in ["", "-", ".", "1e", "1.2.3", "0x1", "1 2", "e5"] {
            assert!(!looks_numeric(t), "{t}");
        }
    }
}
