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

/// Drop the cached schema of `sub`.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn forget_schema(sub: u32) {
    SCHEMAS.with(|c| c.borrow_mut().remove(&sub));
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

/// Any tracepoint (`tracepoint:CAT:NAME`), with the kernel's raw entry. Read its
/// fields by name or through a [`FieldRef`]; see the [module docs](self).
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

    /// Text field `name`.
    pub fn str(&self, name: &str) -> Option<Cow<'a, str>> {
        match self.field(name)? {
            FieldValue::Text(t) => Some(t),
            _ => None,
        }
    }
}
