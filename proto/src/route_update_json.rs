//! Hand-written proto3 JSON mapping for [`RouteUpdate`].
//!
//! `RouteUpdate.types` is declared as the enum `RouteType`, but its value is a
//! bitwise OR of `RouteType` values (e.g. `REMOTE_WORKLOAD | REMOTE_TUNNEL`
//! = 17). The generated pbjson code refuses to serialize a value that has no
//! enum name, so this message is excluded from pbjson (see `build.rs`) and
//! mapped here instead, following the proto3 JSON rules:
//! - a value with a name is written as the name, any other value as a JSON
//!   integer (what Go's protojson does for unnamed enum values); the same
//!   applies to `ip_pool_type`;
//! - the parser takes a name or an integer;
//! - every other field behaves like the generated code: lowerCamelCase
//!   names, the snake_case proto names also accepted, default values omitted
//!   on output, unknown fields rejected, duplicates rejected.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{IpPoolType, RouteType, RouteUpdate, TunnelType};

/// Serde mirror of [`RouteUpdate`] with proto3 JSON field names.
#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct RouteUpdateJson {
    #[serde(skip_serializing_if = "is_zero", with = "route_type_bits")]
    types: i32,
    #[serde(
        alias = "ip_pool_type",
        skip_serializing_if = "is_zero",
        with = "pool_type"
    )]
    ip_pool_type: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    dst: String,
    #[serde(alias = "dst_node_name", skip_serializing_if = "String::is_empty")]
    dst_node_name: String,
    #[serde(alias = "dst_node_ip", skip_serializing_if = "String::is_empty")]
    dst_node_ip: String,
    #[serde(alias = "same_subnet", skip_serializing_if = "is_false")]
    same_subnet: bool,
    #[serde(alias = "nat_outgoing", skip_serializing_if = "is_false")]
    nat_outgoing: bool,
    #[serde(alias = "local_workload", skip_serializing_if = "is_false")]
    local_workload: bool,
    #[serde(alias = "tunnel_type", skip_serializing_if = "Option::is_none")]
    tunnel_type: Option<TunnelType>,
    #[serde(skip_serializing_if = "is_false")]
    borrowed: bool,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}

/// Defines a serde `with` module for an `i32` field holding a prost enum:
/// written as the value's name when it has one and as an integer otherwise;
/// parsed from either form.
macro_rules! open_enum_field {
    ($module:ident, $enum:ident) => {
        mod $module {
            use super::*;

            pub(super) fn serialize<S: Serializer>(v: &i32, s: S) -> Result<S::Ok, S::Error> {
                match $enum::try_from(*v) {
                    Ok(named) => s.serialize_str(named.as_str_name()),
                    Err(_) => s.serialize_i32(*v),
                }
            }

            pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
                match NameOrNumber::deserialize(d)? {
                    NameOrNumber::Number(n) => Ok(n),
                    NameOrNumber::Name(name) => $enum::from_str_name(&name)
                        .map(|t| t as i32)
                        .ok_or_else(|| {
                            serde::de::Error::custom(format!(
                                concat!("unknown ", stringify!($enum), " name {:?}"),
                                name
                            ))
                        }),
                }
            }
        }
    };
}

/// proto3 JSON accepts an enum as its name or as its number.
#[derive(Deserialize)]
#[serde(untagged)]
enum NameOrNumber {
    Number(i32),
    Name(String),
}

open_enum_field!(route_type_bits, RouteType);
open_enum_field!(pool_type, IpPoolType);

impl From<&RouteUpdate> for RouteUpdateJson {
    fn from(r: &RouteUpdate) -> Self {
        RouteUpdateJson {
            types: r.types,
            ip_pool_type: r.ip_pool_type,
            dst: r.dst.clone(),
            dst_node_name: r.dst_node_name.clone(),
            dst_node_ip: r.dst_node_ip.clone(),
            same_subnet: r.same_subnet,
            nat_outgoing: r.nat_outgoing,
            local_workload: r.local_workload,
            tunnel_type: r.tunnel_type,
            borrowed: r.borrowed,
        }
    }
}

impl From<RouteUpdateJson> for RouteUpdate {
    fn from(j: RouteUpdateJson) -> Self {
        RouteUpdate {
            types: j.types,
            ip_pool_type: j.ip_pool_type,
            dst: j.dst,
            dst_node_name: j.dst_node_name,
            dst_node_ip: j.dst_node_ip,
            same_subnet: j.same_subnet,
            nat_outgoing: j.nat_outgoing,
            local_workload: j.local_workload,
            tunnel_type: j.tunnel_type,
            borrowed: j.borrowed,
        }
    }
}

impl Serialize for RouteUpdate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RouteUpdateJson::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for RouteUpdate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        RouteUpdateJson::deserialize(d).map(RouteUpdate::from)
    }
}
