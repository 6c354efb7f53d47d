//! Tracepoints: the kernel's raw trace entry, decoded with the layout the kernel
//! publishes.
//!
//! A `tracepoint:CAT:NAME` record carries the entry exactly as the kernel wrote it.
//! Where each field sits comes from tracefs (`events/CAT/NAME/format`); the host reads
//! it and hands it over through the `schema` import. The SDK asks once per
//! subscription and keeps the answer for the life of the plugin.
//!
//! Two ways to read a field:
//!
//! - by name, [`Tracepoint::field`] (or [`u64`](Tracepoint::u64), [`i64`](Tracepoint::i64),
//!   [`str`](Tracepoint::str)): a lookup in the cached schema per call;
//! - by a [`FieldRef`] resolved once ([`Schema::field_ref`]) and kept in the plugin's
//!   state, [`Tracepoint::get`]: a bounds-checked load at a known offset, no lookup.
//!   [`LazyField`] does the resolving on first use.
//!
//! Every read is bounds-checked against the record: a corrupt locator, a field past a
//! truncated entry or a layout that does not fit gives `None`, never a panic.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use wasmtap_abi::{tracepoint, Record};

use crate::{Field, FieldType, FxHashMap, ProbeSchema, Value};

thread_local! {
    /// The host's answer to `schema(sub)`, per subscription; `None` is cached too.
    /// Components are single-threaded: this is one cache per plugin instance.
    static SCHEMAS: RefCell<FxHashMap<u32, Option<Rc<Schema>>>> = RefCell::new(FxHashMap::default());
}

/// The layout of subscription `sub`'s records: tracepoint fields or probe argument
/// names. Asks the host on first use and caches the answer (a host call per
/// subscription, not per event); `None` if `sub` is not one of the plan's
/// subscriptions. Available once the plugin has started.
pub fn schema(sub: u32) -> Option<Rc<Schema>> {
    if let Some(cached) = SCHEMAS.with(|c| c.borrow().get(&sub).cloned()) {
        return cached;
    }
    let fetched = crate::imports::schema(sub).map(|inner| Rc::new(Schema { sub, inner }));
    SCHEMAS.with(|c| c.borrow_mut().insert(sub, fetched.clone()));
    fetched
}

/// Drop every cached schema: a new `start` means a new plan.
pub(crate) fn forget_schemas() {
    SCHEMAS.with(|c| c.borrow_mut().clear());
}

/// What one subscription's records carry beyond the common header, as the host
/// described it. Get it with [`schema`] or [`Event::schema`](crate::Event::schema).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    sub: u32,
    inner: ProbeSchema,
}

impl Schema {
    /// The subscription this layout belongs to.
    pub fn sub(&self) -> u32 {
        self.sub
    }

    /// The probe as subscribed (`tracepoint:signal:signal_generate`).
    pub fn probe(&self) -> &str {
        &self.inner.probe
    }

    /// Tracepoints: every field of the entry, `common_*` fields included, in tracefs order.
    pub fn fields(&self) -> &[Field] {
        &self.inner.fields
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.inner.fields.iter().find(|f| f.name == name)
    }

    /// A handle to read field `name` from this subscription's events without looking
    /// the name up again ([`Tracepoint::get`]).
    pub fn field_ref(&self, name: &str) -> Option<FieldRef> {
        self.field(name).map(|f| FieldRef::new(self.sub, f))
    }

    /// Uprobes and USDT probes: the names of the arguments, in order.
    pub fn args(&self) -> &[String] {
        &self.inner.args
    }

    /// The position of argument `name` ([`UserProbe::arg`](crate::UserProbe::arg)).
    pub fn arg_index(&self, name: &str) -> Option<usize> {
        self.inner.args.iter().position(|a| a == name)
    }
}

/// Where a field of one subscription's tracepoint entries sits and how it is stored:
/// everything needed to read it, resolved once from the [`Schema`].
///
/// A `FieldRef` belongs to the subscription whose schema made it: [`Tracepoint::get`]
/// answers `None` for events of any other subscription rather than read a field at an
/// offset that means something else there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FieldRef {
    sub: u32,
    kind: FieldType,
    offset: u32,
    size: u32,
    count: u32,
    signed: bool,
}

impl FieldRef {
    /// The handle for `field` of subscription `sub`.
    pub fn new(sub: u32, field: &Field) -> FieldRef {
        FieldRef {
            sub,
            kind: field.kind,
            offset: field.offset,
            size: field.size,
            count: field.count,
            signed: field.signed,
        }
    }

    /// The subscription it belongs to.
    pub fn sub(&self) -> u32 {
        self.sub
    }

    /// How the field is stored.
    pub fn kind(&self) -> FieldType {
        self.kind
    }

    /// Read the field from `data`, a tracepoint entry ([`Tracepoint::data`]). `None` if
    /// the field, or the bytes a locator points at, lie outside `data`, or the layout
    /// is not one this SDK can read (an integer of 3 bytes, an array of 0 elements).
    pub fn decode<'a>(&self, data: &'a [u8]) -> Option<FieldValue<'a>> {
        match self.kind {
            FieldType::Signed => Some(FieldValue::Signed(int(bytes(data, self.offset, self.size)?, true)? as i64)),
            FieldType::Unsigned => Some(FieldValue::Unsigned(int(bytes(data, self.offset, self.size)?, false)?)),
            FieldType::Text => Some(FieldValue::Text(text(bytes(data, self.offset, self.size)?))),
            FieldType::DynamicText => Some(FieldValue::Text(text(self.located(data)?))),
            FieldType::DynamicBytes => Some(FieldValue::Bytes(self.located(data)?)),
            FieldType::Array => {
                let elem = self.size.checked_div(self.count)?;
                if !matches!(elem, 1 | 2 | 4 | 8) || elem * self.count != self.size {
                    return None;
                }
                let bytes = bytes(data, self.offset, self.size)?;
                Some(FieldValue::Array(IntArray { bytes, elem: elem as usize, signed: self.signed }))
            }
        }
    }

    /// The bytes a `__data_loc` locator (`len << 16 | offset`, from the start of the
    /// entry) points at.
    fn located<'a>(&self, data: &'a [u8]) -> Option<&'a [u8]> {
        let loc = int(bytes(data, self.offset, 4)?, false)? as u32;
        bytes(data, loc & 0xffff, loc >> 16)
    }
}

/// `data[off .. off + len]`, if inside.
fn bytes(data: &[u8], off: u32, len: u32) -> Option<&[u8]> {
    let off = usize::try_from(off).ok()?;
    data.get(off..off.checked_add(usize::try_from(len).ok()?)?)
}

/// A little-endian integer of 1, 2, 4 or 8 bytes, widened to 64 bits (sign-extended
/// if `signed`).
fn int(b: &[u8], signed: bool) -> Option<u64> {
    let mut buf = [0u8; 8];
    buf.get_mut(..b.len())?.copy_from_slice(b);
    let raw = u64::from_le_bytes(buf);
    let bits = match b.len() {
        1 | 2 | 4 | 8 => 8 * b.len() as u32,
        _ => return None,
    };
    let shift = 64 - bits;
    Some(if signed { ((raw << shift) as i64 >> shift) as u64 } else { raw })
}

/// Text up to the first NUL; invalid UTF-8 becomes U+FFFD.
fn text(b: &[u8]) -> Cow<'_, str> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end])
}

/// The value of one tracepoint field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldValue<'a> {
    /// A signed integer (`int`, `long`, `pid_t`), sign-extended.
    Signed(i64),
    /// An unsigned integer or a pointer.
    Unsigned(u64),
    /// A string in place (`char comm[16]`) or located (`__data_loc char[]`), without
    /// its NUL; borrowed unless invalid UTF-8 had to be repaired.
    Text(Cow<'a, str>),
    /// Located bytes (`__data_loc u8[]`).
    Bytes(&'a [u8]),
    /// A fixed array of integers (`unsigned long args[6]`, `__u8 saddr[4]`).
    Array(IntArray<'a>),
}

impl<'a> FieldValue<'a> {
    /// An integer field as `i64`; an unsigned one is reinterpreted (`as i64`).
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            FieldValue::Signed(v) => Some(v),
            FieldValue::Unsigned(v) => Some(v as i64),
            _ => None,
        }
    }

    /// An integer field as `u64`; a signed one is reinterpreted (`as u64`).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            FieldValue::Signed(v) => Some(v as u64),
            FieldValue::Unsigned(v) => Some(v),
            _ => None,
        }
    }

    /// A text field.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FieldValue::Text(t) => Some(t),
            _ => None,
        }
    }
}

impl fmt::Display for FieldValue<'_> {
    /// Integers in decimal, text as is, bytes like bpftrace's `buf()` (`ab\x00\x01`),
    /// arrays as `[1,2,3]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldValue::Signed(v) => write!(f, "{v}"),
            FieldValue::Unsigned(v) => write!(f, "{v}"),
            FieldValue::Text(t) => f.write_str(t),
            FieldValue::Bytes(b) => b.iter().try_for_each(|&c| match c {
                b' '..=b'~' if c != b'\\' => write!(f, "{}", c as char),
                _ => write!(f, "\\x{c:02x}"),
            }),
            FieldValue::Array(a) => {
                f.write_str("[")?;
                for i in 0..a.len() {
                    let sep = if i > 0 { "," } else { "" };
                    match a.signed {
                        true => write!(f, "{sep}{}", a.get_i64(i).unwrap_or(0))?,
                        false => write!(f, "{sep}{}", a.get(i).unwrap_or(0))?,
                    }
                }
                f.write_str("]")
            }
        }
    }
}

impl From<FieldValue<'_>> for Value {
    /// Integers stay integers (unsigned past `i64::MAX` saturate); everything else
    /// becomes its [`Display`](fmt::Display) text.
    fn from(v: FieldValue<'_>) -> Value {
        match v {
            FieldValue::Signed(v) => Value::Int(v),
            FieldValue::Unsigned(v) => Value::from(v),
            FieldValue::Text(t) => Value::Text(t.into_owned()),
            other => Value::Text(other.to_string()),
        }
    }
}

/// A fixed array of integers inside a tracepoint entry, read in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntArray<'a> {
    bytes: &'a [u8],
    elem: usize,
    signed: bool,
}

impl<'a> IntArray<'a> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / self.elem
    }

    /// No elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes per element: 1, 2, 4 or 8.
    pub fn elem_size(&self) -> usize {
        self.elem
    }

    /// The elements are signed.
    pub fn is_signed(&self) -> bool {
        self.signed
    }

    /// Element `i` widened to 64 bits (sign-extended if the elements are signed).
    pub fn get(&self, i: usize) -> Option<u64> {
        let at = i.checked_mul(self.elem)?;
        int(self.bytes.get(at..at.checked_add(self.elem)?)?, self.signed)
    }

    /// Element `i` as `i64`.
    pub fn get_i64(&self, i: usize) -> Option<i64> {
        self.get(i).map(|v| v as i64)
    }

    /// The elements, widened like [`get`](Self::get).
    pub fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        let (elem, signed) = (self.elem, self.signed);
        self.bytes.chunks_exact(elem).map(move |c| int(c, signed).unwrap_or(0))
    }

    /// The raw bytes (for `u8` arrays such as an IPv4 address).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// A field named in code, resolved to a [`FieldRef`] on the first event that needs it
/// and read at its offset afterwards. Keep one per field in the plugin's state.
///
/// If events of several subscriptions come through it, it resolves again whenever the
/// subscription changes, so each is read with its own layout.
#[derive(Clone, Debug)]
pub struct LazyField {
    name: Cow<'static, str>,
    resolved: Option<(u32, Option<FieldRef>)>,
}

impl LazyField {
    /// The field called `name`.
    pub fn new(name: impl Into<Cow<'static, str>>) -> LazyField {
        LazyField { name: name.into(), resolved: None }
    }

    /// The field's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The field's value in `tp`; `None` if `tp`'s subscription has no such field.
    pub fn get<'a>(&mut self, tp: &Tracepoint<'a>) -> Option<FieldValue<'a>> {
        let sub = u32::from(tp.0.sub());
        let field = match self.resolved {
            Some((s, field)) if s == sub => field,
            _ => {
                let field = schema(sub).and_then(|s| s.field_ref(&self.name));
                self.resolved = Some((sub, field));
                field
            }
        };
        tp.get(&field?)
    }
}

/// Any tracepoint (`tracepoint:CAT:NAME`), with the kernel's raw entry.
///
/// Where each field sits comes from tracefs (`events/CAT/NAME/format`), which the host
/// hands over as the subscription's [`Schema`]. Two ways to read a field:
///
/// - by name, [`field`](Self::field) (or [`u64`](Self::u64), [`i64`](Self::i64),
///   [`str`](Self::str)): a lookup in the cached schema per call;
/// - through a [`FieldRef`] resolved once ([`Schema::field_ref`]) and kept in the
///   plugin's state, [`get`](Self::get): a bounds-checked load at a known offset, no
///   lookup. [`LazyField`] does the resolving on first use.
///
/// A corrupt locator, a field past a truncated entry or a layout that does not fit
/// reads as `None`, never a panic.
///
/// ```
/// use wasmtap_sdk::{Event, LazyField};
///
/// struct Kills {
///     sig: LazyField,
/// }
///
/// impl Kills {
///     fn on_event(&mut self, ev: &Event<'_>) -> Option<i64> {
///         let Event::Tracepoint(tp) = ev else { return None };
///         self.sig.get(tp)?.as_i64()
///     }
/// }
/// let _ = Kills { sig: LazyField::new("sig") };
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Tracepoint<'a>(pub(crate) Record<'a>);

impl<'a> Tracepoint<'a> {
    /// The tracefs event id (`events/CAT/NAME/id`).
    pub fn event_id(&self) -> u32 {
        self.0.u32_at(tracepoint::EVENT_ID).unwrap_or(0)
    }

    /// The entry was longer than the collector keeps (4032 bytes): fields past the cut
    /// read as `None`.
    pub fn truncated(&self) -> bool {
        self.0.flags() & tracepoint::FLAG_TRUNCATED != 0
    }

    /// The entry's bytes, as the kernel wrote them; field offsets are relative to its
    /// start. Never longer than the record allows, whatever its length field says.
    pub fn data(&self) -> &'a [u8] {
        let len = (self.0.u32_at(tracepoint::DATA_LEN).unwrap_or(0) as usize).min(tracepoint::DATA_MAX);
        let avail = crate::event::body_end(&self.0).saturating_sub(tracepoint::DATA);
        self.0.slice(tracepoint::DATA, len.min(avail)).unwrap_or(&[])
    }

    /// The layout of this event's subscription.
    pub fn schema(&self) -> Option<Rc<Schema>> {
        schema(u32::from(self.0.sub()))
    }

    /// Field `name`, looked up in the schema. In a hot loop prefer [`get`](Self::get)
    /// with a [`FieldRef`] resolved once, or a [`LazyField`].
    pub fn field(&self, name: &str) -> Option<FieldValue<'a>> {
        self.schema()?.field_ref(name)?.decode(self.data())
    }

    /// The field `field` points at; `None` if it belongs to another subscription.
    pub fn get(&self, field: &FieldRef) -> Option<FieldValue<'a>> {
        if field.sub != u32::from(self.0.sub()) {
            return None;
        }
        field.decode(self.data())
    }

    /// Integer field `name` as `u64` (a signed one reinterpreted).
    pub fn u64(&self, name: &str) -> Option<u64> {
        self.field(name)?.as_u64()
    }

    /// Integer field `name` as `i64` (an unsigned one reinterpreted).
    pub fn i64(&self, name: &str) -> Option<i64> {
        self.field(name)?.as_i64()
    }

    /// The string that pointer field `name` points to in the traced process, as the
    /// kernel read it when the probe fired: for subscriptions whose plugin asked for it
    /// with [`user_strings`](crate::user_strings). `None` if the record carries no
    /// string of `name`; `Some(None)` if the kernel could not read it (a bad pointer, a
    /// page not in memory); otherwise its bytes before the NUL (at most 255).
    pub fn user_string(&self, name: &str) -> Option<Option<&'a [u8]>> {
        // Most records carry none: say so before looking the field up.
        if self.0.flags() & wasmtap_abi::strings::FLAG == 0 {
            return None;
        }
        let offset = self.schema()?.field(name)?.offset;
        self.user_string_at(offset)
    }

    /// [`user_string`](Self::user_string) of the pointer field at `offset` in the entry.
    pub fn user_string_at(&self, offset: u32) -> Option<Option<&'a [u8]>> {
        self.0.string(u16::try_from(offset).ok()?)
    }

    /// Text field `name`.
    pub fn str(&self, name: &str) -> Option<Cow<'a, str>> {
        match self.field(name)? {
            FieldValue::Text(t) => Some(t),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::imports::testing;
    use crate::test_records::{self as t, put};
    use crate::Event;
    use wasmtap_abi::Records;

    fn field(name: &str, kind: FieldType, offset: u32, size: u32, count: u32, signed: bool) -> Field {
        Field { name: name.into(), c_type: String::new(), kind, offset, size, count, signed }
    }

    /// A made-up entry with one field of every kind; located data starts at 56.
    fn layout() -> Vec<Field> {
        vec![
            field("common_type", FieldType::Unsigned, 0, 2, 1, false),
            field("common_pid", FieldType::Signed, 4, 4, 1, true),
            field("errno", FieldType::Signed, 8, 4, 1, true),
            field("comm", FieldType::Text, 12, 16, 1, false),
            field("filename", FieldType::DynamicText, 28, 4, 1, false),
            field("args", FieldType::Array, 32, 16, 2, false),
            field("delta", FieldType::Signed, 48, 1, 1, true),
            field("flags", FieldType::Unsigned, 49, 1, 1, false),
            field("payload", FieldType::DynamicBytes, 52, 4, 1, false),
        ]
    }

    fn loc(offset: u32, len: u32) -> [u8; 4] {
        (len << 16 | offset).to_le_bytes()
    }

    fn entry() -> Vec<u8> {
        let mut d = vec![0u8; 56];
        put(&mut d, 0, &0x1234u16.to_le_bytes());
        put(&mut d, 4, &4242i32.to_le_bytes());
        put(&mut d, 8, &(-13i32).to_le_bytes());
        put(&mut d, 12, b"bash\0\0\0\0\0\0\0\0\0\0\0\0");
        put(&mut d, 28, &loc(56, 9));
        put(&mut d, 32, &7u64.to_le_bytes());
        put(&mut d, 40, &u64::MAX.to_le_bytes());
        put(&mut d, 48, &[0xfd, 0xfd]);
        put(&mut d, 52, &loc(65, 3));
        d.extend_from_slice(b"/bin/ls\0\0");
        d.extend_from_slice(&[0, 1, 0xff]);
        d
    }

    fn install(sub: u32) {
        let probe = "tracepoint:test:every_kind".to_string();
        testing::set_schema(sub, ProbeSchema { probe, fields: layout(), args: vec![] });
    }

    fn tp(batch: &[u8]) -> Tracepoint<'_> {
        match Records::new(batch).next().and_then(Event::new) {
            Some(Event::Tracepoint(tp)) => tp,
            other => panic!("not a tracepoint: {other:?}"),
        }
    }

    #[test]
    fn every_field_kind_decodes_by_name() {
        install(0);
        let b = t::tracepoint(7, 0, 301, &entry());
        let tp = tp(&b);
        assert_eq!((tp.event_id(), tp.truncated(), tp.data().len()), (301, false, 68));
        assert_eq!(tp.field("common_type"), Some(FieldValue::Unsigned(0x1234)));
        assert_eq!(tp.i64("common_pid"), Some(4242));
        assert_eq!(tp.field("errno"), Some(FieldValue::Signed(-13)));
        assert_eq!(tp.u64("errno"), Some(-13i64 as u64));
        assert_eq!(tp.i64("delta"), Some(-3));
        assert_eq!(tp.u64("flags"), Some(0xfd));
        assert_eq!(tp.str("comm").as_deref(), Some("bash"));
        assert_eq!(tp.str("filename").as_deref(), Some("/bin/ls"));
        assert_eq!(tp.field("payload"), Some(FieldValue::Bytes(&[0, 1, 0xff])));
        let Some(FieldValue::Array(args)) = tp.field("args") else { panic!() };
        assert_eq!((args.len(), args.elem_size(), args.is_signed()), (2, 8, false));
        assert_eq!(args.iter().collect::<Vec<_>>(), [7, u64::MAX]);
        assert_eq!(args.get(2), None);
        assert_eq!(tp.field("nosuch"), None);
        assert_eq!(tp.str("errno"), None, "an integer is not text");
        assert_eq!(tp.u64("comm"), None, "text is not an integer");
    }

    #[test]
    fn strings_read_in_the_kernel_are_found_by_their_field_beside_stacks_and_bounded() {
        install(0);
        // `args` (offset 32) and `errno` (offset 8) as pointers whose strings came along.
        let b = t::with_strings(t::tracepoint(7, 0, 301, &entry()), &[(32, Some(b"/etc/hosts")), (8, None)]);
        let b = t::with_stacks(b, &[0xffff_ffff_8100_0000], &[0x401000, 0x401100]);
        let got = tp(&b);
        assert_eq!(got.user_string("args"), Some(Some(&b"/etc/hosts"[..])));
        assert_eq!(got.user_string("errno"), Some(None), "unreadable: marked so");
        assert_eq!(got.user_string("comm"), None, "no string of a field not asked for");
        assert_eq!(got.data().len(), 68, "the entry is unchanged");
        let ev = Event::new(Record::new(&b)).unwrap();
        let (k, u) = ev.stacks().unwrap();
        assert_eq!((k.len(), u.len(), u.get(1)), (1, 2, Some(0x401100)), "stacks still found from the end");

        // A record without the flag carries none; a length past the record is none.
        let plain = t::tracepoint(7, 0, 301, &entry());
        assert_eq!(tp(&plain).user_string("args"), None);
        let mut cut = t::with_strings(t::tracepoint(7, 0, 301, &entry()), &[(32, Some(b"/etc/hosts"))]);
        let at = (tracepoint::DATA + 68).next_multiple_of(8);
        put(&mut cut, at + 12, &200u16.to_le_bytes());
        assert_eq!(tp(&cut).user_string("args"), None);
        put(&mut cut, at, &9u16.to_le_bytes());
        put(&mut cut, at + 12, &10u16.to_le_bytes());
        assert_eq!(tp(&cut).user_string("args"), Some(Some(&b"/etc/hosts"[..])), "a count past 4 reads 4");
    }

    #[test]
    fn field_values_display_and_become_row_values() {
        install(0);
        let b = t::tracepoint(7, 0, 301, &entry());
        let tp = tp(&b);
        let shown = |name| tp.field(name).unwrap().to_string();
        assert_eq!(
            [shown("errno"), shown("comm"), shown("payload"), shown("args")],
            ["-13", "bash", "\\x00\\x01\\xff", "[7,18446744073709551615]"]
        );
        assert_eq!(Value::from(tp.field("errno").unwrap()), Value::Int(-13));
        assert_eq!(Value::from(tp.field("filename").unwrap()), Value::Text("/bin/ls".into()));
        let signed = IntArray { bytes: &[0xff, 0x01], elem: 1, signed: true };
        assert_eq!(FieldValue::Array(signed).to_string(), "[-1,1]");
    }

    #[test]
    fn corrupt_locators_and_cut_entries_read_as_none() {
        install(0);
        for bad in [loc(56, 200), loc(0xffff, 1), loc(60, 9), u32::MAX.to_le_bytes()] {
            let mut d = entry();
            put(&mut d, 28, &bad);
            let b = t::tracepoint(7, 0, 301, &d);
            assert_eq!(tp(&b).field("filename"), None, "locator {bad:?}");
            assert_eq!(tp(&b).i64("errno"), Some(-13), "other fields still read");
        }
        // An entry cut after 40 bytes: fields past the cut and located data are gone.
        let b = t::tracepoint(7, 0, 301, &entry()[..40]);
        let tp = tp(&b);
        assert_eq!(tp.str("comm").as_deref(), Some("bash"));
        assert_eq!((tp.field("args"), tp.field("delta"), tp.field("filename")), (None, None, None));
    }

    #[test]
    fn lengths_that_lie_stay_inside_the_record() {
        install(0);
        let mut b = t::tracepoint(7, 0, 301, &entry());
        put(&mut b, tracepoint::DATA_LEN, &u32::MAX.to_le_bytes());
        assert_eq!(tp(&b).data().len(), b.len() - tracepoint::DATA);
        let b = t::with_stacks(t::tracepoint(7, 0, 301, &entry()), &[1, 2], &[3]);
        assert_eq!(tp(&b).data(), &entry()[..], "the stack trailer is not data");
        assert_eq!(tp(&b).str("filename").as_deref(), Some("/bin/ls"));
    }

    #[test]
    fn layouts_this_sdk_cannot_read_give_none() {
        let data = [0xaau8; 32];
        for f in [
            field("odd", FieldType::Signed, 0, 3, 1, true),
            field("huge", FieldType::Unsigned, 0, 16, 1, false),
            field("zero", FieldType::Array, 0, 8, 0, false),
            field("ragged", FieldType::Array, 0, 9, 3, false),
            field("wide", FieldType::Array, 0, 32, 2, false),
            field("far", FieldType::Unsigned, u32::MAX, 8, 1, false),
            field("dyn", FieldType::DynamicText, u32::MAX - 1, 4, 1, false),
        ] {
            assert_eq!(FieldRef::new(0, &f).decode(&data), None, "{}", f.name);
        }
    }

    #[test]
    fn random_entries_never_panic() {
        let refs: Vec<FieldRef> = layout().iter().map(|f| FieldRef::new(0, f)).collect();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as u8
        };
        for round in 0..3000 {
            let mut d = entry();
            for _ in 0..1 + round % 6 {
                let i = usize::from(next()) % d.len();
                d[i] = next();
            }
            d.truncate(d.len() - usize::from(next()) % d.len());
            for r in &refs {
                if let Some(v) = r.decode(&d) {
                    let _ = v.to_string();
                }
            }
        }
    }

    #[test]
    fn schemas_are_fetched_once_per_subscription() {
        install(0);
        install(1);
        let before = testing::schema_calls();
        let batch: Vec<u8> = [0u16, 1, 0, 1, 5, 5].iter().flat_map(|&sub| t::tracepoint(7, sub, 1, &entry())).collect();
        for rec in Records::new(&batch) {
            let Some(Event::Tracepoint(tp)) = Event::new(rec) else { panic!() };
            let _ = (tp.field("comm"), tp.field("errno"));
        }
        assert_eq!(testing::schema_calls() - before, 3, "subs 0, 1 and the unknown 5");
        assert!(schema(5).is_none());
        assert_eq!(schema(1).unwrap().probe(), "tracepoint:test:every_kind");
    }

    #[test]
    fn field_refs_read_only_their_own_subscription() {
        install(0);
        let mut other = layout();
        other[2].offset = 4; // `errno` elsewhere in sub 1's entries
        testing::set_schema(1, ProbeSchema { probe: "tracepoint:test:other".into(), fields: other, args: vec![] });
        let (b0, b1) = (t::tracepoint(7, 0, 1, &entry()), t::tracepoint(7, 1, 1, &entry()));
        let errno = schema(0).unwrap().field_ref("errno").unwrap();
        assert_eq!((errno.sub(), errno.kind()), (0, FieldType::Signed));
        assert_eq!(tp(&b0).get(&errno), Some(FieldValue::Signed(-13)));
        assert_eq!(tp(&b1).get(&errno), None);

        let mut lazy = LazyField::new("errno");
        assert_eq!(lazy.name(), "errno");
        assert_eq!(lazy.get(&tp(&b0)).and_then(|v| v.as_i64()), Some(-13));
        assert_eq!(lazy.get(&tp(&b1)).and_then(|v| v.as_i64()), Some(4242), "sub 1's layout");
        assert_eq!(lazy.get(&tp(&b0)).and_then(|v| v.as_i64()), Some(-13));
        assert_eq!(LazyField::new(String::from("nosuch")).get(&tp(&b0)), None);
    }

    #[test]
    fn without_a_schema_fields_are_none_but_data_is_there() {
        let b = t::tracepoint(7, 3, 1, &entry());
        assert_eq!(tp(&b).field("errno"), None);
        assert!(tp(&b).schema().is_none());
        assert_eq!(tp(&b).data(), &entry()[..]);
    }
}
