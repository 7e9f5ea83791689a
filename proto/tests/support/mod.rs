//! A tiny protobuf wire writer, independent of prost, used to build golden
//! byte strings straight from field numbers and wire types.
#![allow(
    dead_code,
    reason = "each test binary uses a different part of the writer"
)]

/// Wire type 0: varint.
pub const VARINT: u8 = 0;
/// Wire type 1: 64-bit little-endian.
pub const I64: u8 = 1;
/// Wire type 2: length-delimited.
pub const LEN: u8 = 2;
/// Wire type 5: 32-bit little-endian.
pub const I32: u8 = 5;

/// Base-128 varint, least significant group first.
pub fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let low = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(low);
            return out;
        }
        out.push(low | 0x80);
    }
}

/// Field key: `(field_number << 3) | wire_type`, as a varint.
pub fn key(field: u32, wire_type: u8) -> Vec<u8> {
    varint((u64::from(field) << 3) | u64::from(wire_type))
}

/// A varint-typed field (uint64, int32, bool, enum).
pub fn f_varint(field: u32, v: u64) -> Vec<u8> {
    [key(field, VARINT), varint(v)].concat()
}

/// A length-delimited field (string, bytes, sub-message, map entry).
pub fn f_len(field: u32, data: &[u8]) -> Vec<u8> {
    [key(field, LEN), varint(data.len() as u64), data.to_vec()].concat()
}

pub fn f_str(field: u32, s: &str) -> Vec<u8> {
    f_len(field, s.as_bytes())
}

/// A 64-bit fixed field (double, fixed64).
pub fn f_i64(field: u32, bits: u64) -> Vec<u8> {
    [key(field, I64), bits.to_le_bytes().to_vec()].concat()
}

/// A 32-bit fixed field (float, fixed32).
pub fn f_i32(field: u32, bits: u32) -> Vec<u8> {
    [key(field, I32), bits.to_le_bytes().to_vec()].concat()
}

/// Concatenates encoded fields into one message body.
pub fn msg(fields: &[Vec<u8>]) -> Vec<u8> {
    fields.concat()
}
