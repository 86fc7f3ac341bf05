//! Every unsigned integer of a record, found by serializing it into a serializer that writes
//! nothing: the serde derive of the record types is the one description of the schema, so a
//! field added to them is checked without a list to keep.
//!
//! The walk runs twice only on failure: the first pass keeps no path and stops at the first
//! value past the bound; the second finds that value again and names its field
//! (`devices[0].busy_ns`), so a valid row costs no allocation.

use serde::ser::{self, Serialize};

/// A value past the bound and the path of its field.
#[derive(Debug)]
pub(super) struct Found {
    pub(super) path: String,
    pub(super) value: u64,
}

/// The first unsigned value of `record` above `bound`, with its field's path.
pub(super) fn first_above<T: Serialize>(record: &T, bound: u64) -> Option<Found> {
    let mut quick = Walker {
        bound,
        path: None,
        found: None,
    };
    if record.serialize(&mut quick).is_ok() {
        return None;
    }
    let mut named = Walker {
        bound,
        path: Some(Vec::new()),
        found: None,
    };
    let _ = record.serialize(&mut named);
    named.found
}

/// One step of a path: a field, an index, or a map's key.
enum Step {
    Field(&'static str),
    Index(usize),
    Key(String),
}

struct Walker {
    bound: u64,
    /// The path so far, kept on the second pass only.
    path: Option<Vec<Step>>,
    found: Option<Found>,
}

/// Stops the walk: the error carries nothing, the walker keeps what it found.
#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a value past the bound")
    }
}

impl std::error::Error for Stop {}

impl ser::Error for Stop {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Stop
    }
}

impl Walker {
    fn check(&mut self, value: u64) -> Result<(), Stop> {
        if value <= self.bound {
            return Ok(());
        }
        if let Some(path) = &self.path {
            self.found = Some(Found {
                path: render(path),
                value,
            });
        }
        Err(Stop)
    }

    fn push(&mut self, step: impl FnOnce() -> Step) {
        if let Some(path) = &mut self.path {
            path.push(step());
        }
    }

    fn pop(&mut self) {
        if let Some(path) = &mut self.path {
            path.pop();
        }
    }

    /// Walks `value` under `step`.
    fn under<T: Serialize + ?Sized>(
        &mut self,
        step: impl FnOnce() -> Step,
        value: &T,
    ) -> Result<(), Stop> {
        self.push(step);
        let r = value.serialize(&mut *self);
        self.pop();
        r
    }
}

/// `devices[0].busy_ns` from its steps.
fn render(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Field(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
            // A struct with a flattened field is written as a map, so its fields arrive as keys:
            // a key that reads as a field name is shown as one.
            Step::Key(k) if is_name(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Key(k) => out.push_str(&format!("[{k:?}]")),
        }
    }
    out
}

/// Whether a key reads as a field name (`busy_ns`, `long_scoreboard`).
fn is_name(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A map key as text (ledger maps are keyed by strings).
fn key_text<K: Serialize + ?Sized>(key: &K) -> String {
    serde_json::to_value(key)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

impl<'a> ser::Serializer for &'a mut Walker {
    type Ok = ();
    type Error = Stop;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Seq<'a>;
    type SerializeMap = Map<'a>;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn serialize_u64(self, v: u64) -> Result<(), Stop> {
        self.check(v)
    }
    fn serialize_u128(self, v: u128) -> Result<(), Stop> {
        self.check(u64::try_from(v).unwrap_or(u64::MAX))
    }
    fn serialize_bool(self, _: bool) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_f32(self, _: f32) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_f64(self, _: f64) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_char(self, _: char) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Stop> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        self.under(|| Step::Field(variant), value)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'a>, Stop> {
        Ok(Seq { w: self, index: 0 })
    }
    fn serialize_tuple(self, _: usize) -> Result<Seq<'a>, Stop> {
        Ok(Seq { w: self, index: 0 })
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Seq<'a>, Stop> {
        Ok(Seq { w: self, index: 0 })
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Seq<'a>, Stop> {
        Ok(Seq { w: self, index: 0 })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Map<'a>, Stop> {
        Ok(Map { w: self, key: None })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Stop> {
        Ok(self)
    }
}

impl ser::SerializeStruct for &mut Walker {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        self.under(|| Step::Field(key), value)
    }
    fn end(self) -> Result<(), Stop> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for &mut Walker {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        self.under(|| Step::Field(key), value)
    }
    fn end(self) -> Result<(), Stop> {
        Ok(())
    }
}

/// A sequence or tuple: its elements by index.
struct Seq<'a> {
    w: &'a mut Walker,
    index: usize,
}

impl Seq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        let i = self.index;
        self.index += 1;
        self.w.under(|| Step::Index(i), value)
    }
}

impl ser::SerializeSeq for Seq<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        self.element(value)
    }
    fn end(self) -> Result<(), Stop> {
        Ok(())
    }
}

impl ser::SerializeTuple for Seq<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        self.element(value)
    }
    fn end(self) -> Result<(), Stop> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Seq<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        self.element(value)
    }
    fn end(self) -> Result<(), Stop> {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Seq<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        self.element(value)
    }
    fn end(self) -> Result<(), Stop> {
        Ok(())
    }
}

/// A map (or a struct with a flattened field, which serde writes as a map): values by key.
struct Map<'a> {
    w: &'a mut Walker,
    /// The last key, as text, on the second pass only.
    key: Option<String>,
}

impl ser::SerializeMap for Map<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Stop> {
        if self.w.path.is_some() {
            self.key = Some(key_text(key));
        }
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        let key = self.key.take().unwrap_or_default();
        self.w.under(|| Step::Key(key), value)
    }
    fn end(self) -> Result<(), Stop> {
        Ok(())
    }
}
