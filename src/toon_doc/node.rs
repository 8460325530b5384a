//! The document tree the writer walks, and the serde serializer that builds it straight
//! from a struct: field names stay the `&'static str` serde hands over and fields stay in
//! a `Vec`, where a `serde_json::Value` allocates and hashes a `String` key per field.
//! A value outside the writer's shapes (a float, bytes, an enum carrying data) is an
//! error here, so the caller falls back to the general encoder, as for `Value`.

use std::borrow::Cow;

use serde::ser::{self, Serialize};
use serde_json::Value;

/// A document value of the shapes [`super::encode`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    Str(String),
    Seq(Vec<Node>),
    Map(Fields),
}

/// An object's fields in their order.
pub type Fields = Vec<(Cow<'static, str>, Node)>;

/// The value of `key` in `fields`.
pub(super) fn get<'a>(fields: &'a Fields, key: &str) -> Option<&'a Node> {
    fields.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

impl Node {
    pub(super) fn is_primitive(&self) -> bool {
        !matches!(self, Node::Seq(_) | Node::Map(_))
    }

    /// `value` as a tree, or `None` when it holds a float.
    pub fn from_value(value: &Value) -> Option<Node> {
        Some(match value {
            Value::Null => Node::Null,
            Value::Bool(b) => Node::Bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Node::U64(u),
                (None, Some(i)) => Node::I64(i),
                (None, None) => return None,
            },
            Value::String(s) => Node::Str(s.clone()),
            Value::Array(items) => {
                Node::Seq(items.iter().map(Node::from_value).collect::<Option<_>>()?)
            }
            Value::Object(map) => Node::Map(
                map.iter()
                    .map(|(k, v)| Some((Cow::Owned(k.clone()), Node::from_value(v)?)))
                    .collect::<Option<_>>()?,
            ),
        })
    }
}

/// Why a value has no [`Node`]: the caller then uses the general encoder.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(String);

impl ser::Error for Unsupported {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Unsupported(msg.to_string())
    }
}

fn unsupported<T>(what: &str) -> Result<T, Unsupported> {
    Err(Unsupported(format!(
        "{what} has no TOON document shape here"
    )))
}

/// Builds a [`Node`] as `serde_json::to_value` builds a `Value`: `None` and `()` are null,
/// a unit variant is its name, a newtype struct is its content.
pub struct NodeSerializer;

impl ser::Serializer for NodeSerializer {
    type Ok = Node;
    type Error = Unsupported;
    type SerializeSeq = SeqNode;
    type SerializeTuple = SeqNode;
    type SerializeTupleStruct = SeqNode;
    type SerializeTupleVariant = ser::Impossible<Node, Unsupported>;
    type SerializeMap = MapNode;
    type SerializeStruct = MapNode;
    type SerializeStructVariant = ser::Impossible<Node, Unsupported>;

    fn serialize_bool(self, v: bool) -> Result<Node, Unsupported> {
        Ok(Node::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Node, Unsupported> {
        self.serialize_i64(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<Node, Unsupported> {
        self.serialize_i64(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<Node, Unsupported> {
        self.serialize_i64(v.into())
    }
    fn serialize_i64(self, v: i64) -> Result<Node, Unsupported> {
        // As `serde_json`: a non-negative integer is the same number either way.
        Ok(u64::try_from(v).map_or(Node::I64(v), Node::U64))
    }
    fn serialize_u8(self, v: u8) -> Result<Node, Unsupported> {
        self.serialize_u64(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<Node, Unsupported> {
        self.serialize_u64(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<Node, Unsupported> {
        self.serialize_u64(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<Node, Unsupported> {
        Ok(Node::U64(v))
    }
    fn serialize_f32(self, _: f32) -> Result<Node, Unsupported> {
        unsupported("a float")
    }
    fn serialize_f64(self, _: f64) -> Result<Node, Unsupported> {
        unsupported("a float")
    }
    fn serialize_char(self, v: char) -> Result<Node, Unsupported> {
        Ok(Node::Str(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Node, Unsupported> {
        Ok(Node::Str(v.to_string()))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<Node, Unsupported> {
        unsupported("bytes")
    }
    fn serialize_none(self) -> Result<Node, Unsupported> {
        Ok(Node::Null)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<Node, Unsupported> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Node, Unsupported> {
        Ok(Node::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Node, Unsupported> {
        Ok(Node::Null)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Node, Unsupported> {
        Ok(Node::Str(variant.to_string()))
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<Node, Unsupported> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Node, Unsupported> {
        unsupported("an enum variant with data")
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<SeqNode, Unsupported> {
        Ok(SeqNode(Vec::with_capacity(len.unwrap_or(0))))
    }
    fn serialize_tuple(self, len: usize) -> Result<SeqNode, Unsupported> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<SeqNode, Unsupported> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Unsupported> {
        unsupported("an enum variant with data")
    }
    fn serialize_map(self, len: Option<usize>) -> Result<MapNode, Unsupported> {
        Ok(MapNode {
            fields: Vec::with_capacity(len.unwrap_or(0)),
            key: None,
        })
    }
    fn serialize_struct(self, _: &'static str, len: usize) -> Result<MapNode, Unsupported> {
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Unsupported> {
        unsupported("an enum variant with data")
    }
}

pub struct SeqNode(Vec<Node>);

impl ser::SerializeSeq for SeqNode {
    type Ok = Node;
    type Error = Unsupported;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Unsupported> {
        self.0.push(value.serialize(NodeSerializer)?);
        Ok(())
    }
    fn end(self) -> Result<Node, Unsupported> {
        Ok(Node::Seq(self.0))
    }
}

impl ser::SerializeTuple for SeqNode {
    type Ok = Node;
    type Error = Unsupported;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Unsupported> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<Node, Unsupported> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleStruct for SeqNode {
    type Ok = Node;
    type Error = Unsupported;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Unsupported> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<Node, Unsupported> {
        ser::SerializeSeq::end(self)
    }
}

pub struct MapNode {
    fields: Fields,
    key: Option<String>,
}

impl MapNode {
    /// A key seen again takes the new value in the old place, as `serde_json`'s ordered map.
    fn put(&mut self, key: Cow<'static, str>, value: Node) {
        match self.fields.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.fields.push((key, value)),
        }
    }
}

impl ser::SerializeMap for MapNode {
    type Ok = Node;
    type Error = Unsupported;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Unsupported> {
        match key.serialize(NodeSerializer)? {
            Node::Str(s) => self.key = Some(s),
            // `serde_json` writes integer keys as their text.
            Node::I64(n) => self.key = Some(n.to_string()),
            Node::U64(n) => self.key = Some(n.to_string()),
            _ => return unsupported("a map key that is not a string"),
        }
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Unsupported> {
        let Some(key) = self.key.take() else {
            return unsupported("a map value without its key");
        };
        let value = value.serialize(NodeSerializer)?;
        self.put(Cow::Owned(key), value);
        Ok(())
    }
    fn end(self) -> Result<Node, Unsupported> {
        Ok(Node::Map(self.fields))
    }
}

impl ser::SerializeStruct for MapNode {
    type Ok = Node;
    type Error = Unsupported;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Unsupported> {
        // A struct's field names are unique: no lookup.
        let value = value.serialize(NodeSerializer)?;
        self.fields.push((Cow::Borrowed(key), value));
        Ok(())
    }
    fn end(self) -> Result<Node, Unsupported> {
        Ok(Node::Map(self.fields))
    }
}
