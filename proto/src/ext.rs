//! Small helpers over the generated types, for logging, metrics and the
//! route-type bitmap. Kept free of any calc-graph or dataplane policy.

use crate::{from_dataplane, to_dataplane, RouteType, RouteUpdate};

/// The `.proto` message name of a [`to_dataplane::Payload`] (e.g.
/// `"IPSetUpdate"`, `"VXLANTunnelEndpointUpdate"`), spelled exactly as in
/// `felixbackend.proto` so that log lines match upstream Felix's type names.
pub fn payload_name(payload: &to_dataplane::Payload) -> &'static str {
    use to_dataplane::Payload as P;
    match payload {
        P::InSync(_) => "InSync",
        P::IpsetUpdate(_) => "IPSetUpdate",
        P::IpsetDeltaUpdate(_) => "IPSetDeltaUpdate",
        P::IpsetRemove(_) => "IPSetRemove",
        P::ActiveProfileUpdate(_) => "ActiveProfileUpdate",
        P::ActiveProfileRemove(_) => "ActiveProfileRemove",
        P::ActivePolicyUpdate(_) => "ActivePolicyUpdate",
        P::ActivePolicyRemove(_) => "ActivePolicyRemove",
        P::HostEndpointUpdate(_) => "HostEndpointUpdate",
        P::HostEndpointRemove(_) => "HostEndpointRemove",
        P::WorkloadEndpointUpdate(_) => "WorkloadEndpointUpdate",
        P::WorkloadEndpointRemove(_) => "WorkloadEndpointRemove",
        P::ConfigUpdate(_) => "ConfigUpdate",
        P::HostMetadataUpdate(_) => "HostMetadataUpdate",
        P::HostMetadataRemove(_) => "HostMetadataRemove",
        P::IpamPoolUpdate(_) => "IPAMPoolUpdate",
        P::IpamPoolRemove(_) => "IPAMPoolRemove",
        P::ServiceAccountUpdate(_) => "ServiceAccountUpdate",
        P::ServiceAccountRemove(_) => "ServiceAccountRemove",
        P::NamespaceUpdate(_) => "NamespaceUpdate",
        P::NamespaceRemove(_) => "NamespaceRemove",
        P::RouteUpdate(_) => "RouteUpdate",
        P::RouteRemove(_) => "RouteRemove",
        P::VtepUpdate(_) => "VXLANTunnelEndpointUpdate",
        P::VtepRemove(_) => "VXLANTunnelEndpointRemove",
        P::WireguardEndpointUpdate(_) => "WireguardEndpointUpdate",
        P::WireguardEndpointRemove(_) => "WireguardEndpointRemove",
        P::GlobalBgpConfigUpdate(_) => "GlobalBGPConfigUpdate",
        P::Encapsulation(_) => "Encapsulation",
        P::ServiceUpdate(_) => "ServiceUpdate",
        P::ServiceRemove(_) => "ServiceRemove",
        P::WireguardEndpointV6Update(_) => "WireguardEndpointV6Update",
        P::WireguardEndpointV6Remove(_) => "WireguardEndpointV6Remove",
    }
}

/// The `.proto` message name of a [`from_dataplane::Payload`].
pub fn from_dataplane_payload_name(payload: &from_dataplane::Payload) -> &'static str {
    use from_dataplane::Payload as P;
    match payload {
        P::ProcessStatusUpdate(_) => "ProcessStatusUpdate",
        P::HostEndpointStatusUpdate(_) => "HostEndpointStatusUpdate",
        P::HostEndpointStatusRemove(_) => "HostEndpointStatusRemove",
        P::WorkloadEndpointStatusUpdate(_) => "WorkloadEndpointStatusUpdate",
        P::WorkloadEndpointStatusRemove(_) => "WorkloadEndpointStatusRemove",
        P::WireguardStatusUpdate(_) => "WireguardStatusUpdate",
        P::DataplaneInSync(_) => "DataplaneInSync",
    }
}

impl RouteUpdate {
    /// Whether the `types` bitmap includes `t`.
    ///
    /// `types` is a bitwise OR of [`RouteType`] values, so the generated
    /// `types()` getter (which maps any combined value to the default,
    /// `CIDR_INFO`) must not be used to test membership. `CIDR_INFO` is zero
    /// and therefore "included" only when no bit is set.
    pub fn has_type(&self, t: RouteType) -> bool {
        let bit = t as i32;
        if bit == 0 {
            self.types == 0
        } else {
            self.types & bit == bit
        }
    }

    /// Adds `t` to the `types` bitmap.
    pub fn add_type(&mut self, t: RouteType) {
        self.types |= t as i32;
    }
}
