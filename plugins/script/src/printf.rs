//! `printf` with bpftrace's verbs (C's): flags `-0+ #`, a width, a precision, the
//! length modifiers `h`, `l`, `ll`, `z`, and `d i u x X o s c p %`.

use crate::eval::Value;

/// One conversion of a format.
#[derive(Debug, Clone)]
struct Spec {
    left: bool,
    zero: bool,
    plus: bool,
    space: bool,
    alt: bool,
    width: usize,
    precision: Option<usize>,
    conv: char,
}

enum Piece<'a> {
    Text(&'a str),
    Conv(Spec),
}

/// A format, parsed once.
#[derive(Debug, Clone)]
pub struct Format(Vec<Part>);

#[derive(Debug, Clone)]
enum Part {
    Text(String),
    Conv(Spec),
}

/// `fmt` parsed, checked to take `args` arguments.
pub fn compile(fmt: &str, args: usize) -> Result<Format, String> {
    check(fmt, args)?;
    let parts = pieces(fmt)?
        .into_iter()
        .map(|p| match p {
            Piece::Text(t) => Part::Text(t.to_string()),
            Piece::Conv(s) => Part::Conv(s),
        })
        .collect();
    Ok(Format(parts))
}

fn pieces(fmt: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let b = fmt.as_bytes();
    let (mut i, mut text) = (0, 0);
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        if text < i {
            out.push(Piece::Text(&fmt[text..i]));
        }
        i += 1;
        if b.get(i) == Some(&b'%') {
            out.push(Piece::Text("%"));
            i += 1;
            text = i;
            continue;
        }
        let mut s = Spec {
            left: false,
            zero: false,
            plus: false,
            space: false,
            alt: false,
            width: 0,
            precision: None,
            conv: 'd',
        };
        while let Some(&f) = b.get(i) {
            match f {
                b'-' => s.left = true,
                b'0' => s.zero = true,
                b'+' => s.plus = true,
                b' ' => s.space = true,
                b'#' => s.alt = true,
                _ => break,
            }
            i += 1;
        }
        while let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) {
            s.width = (s.width * 10 + usize::from(d - b'0')).min(1024);
            i += 1;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            let mut p = 0usize;
            while let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) {
                p = (p * 10 + usize::from(d - b'0')).min(1024);
                i += 1;
            }
            s.precision = Some(p);
        }
        while let Some(b'h' | b'l' | b'z' | b'j' | b't') = b.get(i) {
            i += 1;
        }
        let Some(&c) = b.get(i) else { return Err(format!("printf: the format ends inside a conversion: \"{fmt}\"")) };
        if !b"diuxXoscp".contains(&c) {
            return Err(format!("printf: unknown conversion `%{}` in \"{fmt}\"", c as char));
        }
        s.conv = c as char;
        i += 1;
        text = i;
        out.push(Piece::Conv(s));
    }
    if text < b.len() {
        out.push(Piece::Text(&fmt[text..]));
    }
    Ok(out)
}

/// The format is valid and takes `args` arguments.
pub fn check(fmt: &str, args: usize) -> Result<(), String> {
    let want = pieces(fmt)?.iter().filter(|p| matches!(p, Piece::Conv(_))).count();
    if want != args {
        return Err(format!(
            "printf: the format has {want} conversion{} but {args} argument{} follow",
            plural(want),
            plural(args)
        ));
    }
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `fmt` applied to `args`, appended to `out`.
pub fn format(fmt: &Format, args: &[Value], out: &mut String) {
    let mut args = args.iter();
    for p in &fmt.0 {
        match p {
            Part::Text(t) => out.push_str(t),
            Part::Conv(s) => match args.next() {
                Some(v) => conv(s, v, out),
                None => conv(s, &Value::Int(0), out),
            },
        }
    }
}

fn conv(s: &Spec, v: &Value, out: &mut String) {
    let int = || match v {
        Value::Int(i) | Value::Ptr(i, _) => *i,
        Value::Str(t) => t.trim().parse().unwrap_or(0),
        Value::Stack(_) | Value::Tuple(_) => v.int(),
    };
    let (sign, body) = match s.conv {
        's' => {
            let text = match v {
                Value::Str(t) => t.clone(),
                other => other.show(),
            };
            let text: String = match s.precision {
                Some(p) => text.chars().take(p).collect(),
                None => text,
            };
            return pad(s, "", &text, false, out);
        }
        'c' => return pad(s, "", &char::from(int() as u8).to_string(), false, out),
        'd' | 'i' => {
            let i = int();
            let sign = if i < 0 {
                "-"
            } else if s.plus {
                "+"
            } else if s.space {
                " "
            } else {
                ""
            };
            (sign, i.unsigned_abs().to_string())
        }
        'u' => ("", (int() as u64).to_string()),
        'x' => (if s.alt { "0x" } else { "" }, format!("{:x}", int() as u64)),
        'X' => (if s.alt { "0X" } else { "" }, format!("{:X}", int() as u64)),
        'o' => (if s.alt { "0" } else { "" }, format!("{:o}", int() as u64)),
        _ => ("0x", format!("{:x}", int() as u64)),
    };
    let body = match s.precision {
        Some(p) if body.len() < p => format!("{}{body}", "0".repeat(p - body.len())),
        _ => body,
    };
    pad(s, sign, &body, s.zero && s.precision.is_none(), out);
}

fn pad(s: &Spec, sign: &str, body: &str, zero: bool, out: &mut String) {
    let len = sign.len() + body.chars().count();
    let fill = s.width.saturating_sub(len);
    if s.left {
        out.push_str(sign);
        out.push_str(body);
        out.extend(std::iter::repeat_n(' ', fill));
    } else if zero {
        out.push_str(sign);
        out.extend(std::iter::repeat_n('0', fill));
        out.push_str(body);
    } else {
        out.extend(std::iter::repeat_n(' ', fill));
        out.push_str(sign);
        out.push_str(body);
    }
}

/// `time(FORMAT)`: `secs` (seconds since the epoch, already in local time) as C's
/// `strftime` writes it, for its conversions of dates and times (`%H:%M:%S`, `%Y-%m-%d`,
/// `%a %b %e`, `%T`, `%F`, `%s`…); an unknown conversion is written as it is.
pub fn strftime(fmt: &str, secs: i64, nanos: u32, out: &mut String) {
    const DAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let c = wasmtap_sdk::civil(secs);
    let (h, m, s, d, mon, year, yday) = (c.hour, c.minute, c.second, c.day, c.month, c.year, c.yday);
    let (day_name, month_name) = (DAYS[c.wday as usize], MONTHS[(mon - 1) as usize]);
    let h12 = if h % 12 == 0 { 12 } else { h % 12 };
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(conv) = chars.next() else {
            out.push('%');
            break;
        };
        match conv {
            'H' => out.push_str(&format!("{h:02}")),
            'M' => out.push_str(&format!("{m:02}")),
            'S' => out.push_str(&format!("{s:02}")),
            'I' => out.push_str(&format!("{h12:02}")),
            'p' => out.push_str(if h < 12 { "AM" } else { "PM" }),
            'Y' => out.push_str(&year.to_string()),
            'y' => out.push_str(&format!("{:02}", year.rem_euclid(100))),
            'm' => out.push_str(&format!("{mon:02}")),
            'd' => out.push_str(&format!("{d:02}")),
            'e' => out.push_str(&format!("{d:2}")),
            'j' => out.push_str(&format!("{yday:03}")),
            'a' => out.push_str(&day_name[..3]),
            'A' => out.push_str(day_name),
            'b' | 'h' => out.push_str(&month_name[..3]),
            'B' => out.push_str(month_name),
            'T' => out.push_str(&format!("{h:02}:{m:02}:{s:02}")),
            'R' => out.push_str(&format!("{h:02}:{m:02}")),
            'F' => out.push_str(&format!("{year}-{mon:02}-{d:02}")),
            'D' => out.push_str(&format!("{mon:02}/{d:02}/{:02}", year.rem_euclid(100))),
            's' => out.push_str(&secs.to_string()),
            // bpftrace's: the microseconds of the second.
            'f' => out.push_str(&format!("{:06}", nanos / 1000)),
            'n' => out.push('\n'),
            't' => out.push('\t'),
            '%' => out.push('%'),
            other => {
                out.push('%');
                out.push(other);
            }
        }
    }
}
