//! Per-endpoint computed data: facts about a local workload endpoint that
//! other graph nodes derive (Istio ambient membership, live-migration
//! role) and that the policy resolver attaches to the endpoint's next
//! `WorkloadEndpointUpdate` (upstream's `EndpointComputedData`).
//!
//! Invariants:
//! * One value per kind per endpoint; setting a kind to its neutral value
//!   (not ambient, no role) is the same as removing it, so the stored map
//!   only holds endpoints with something to say.
//! * The data is owned by the policy resolver and dropped with the
//!   endpoint; the producing node re-sends it if the endpoint comes back.

use felix_proto as pb;

/// Role of a workload in a live migration (proto `LiveMigrationRole`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LiveMigrationRole {
    #[default]
    /// Not part of a live migration.
    NoRole,
    /// The workload is being migrated away.
    Source,
    /// The workload is the migration's destination.
    Target,
}

impl LiveMigrationRole {
    /// The proto enum value.
    pub fn to_proto(self) -> pb::LiveMigrationRole {
        match self {
            LiveMigrationRole::NoRole => pb::LiveMigrationRole::NoRole,
            LiveMigrationRole::Source => pb::LiveMigrationRole::Source,
            LiveMigrationRole::Target => pb::LiveMigrationRole::Target,
        }
    }
}

/// Everything computed about one endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointComputed {
    /// The endpoint is in the Istio ambient mesh.
    pub istio_ambient: bool,
    /// Live-migration role and the UID of the `LiveMigration` that gave it
    /// (empty UID when that resource has none).
    pub live_migration_role: LiveMigrationRole,
    /// UID of the `LiveMigration` that gave the role.
    pub live_migration_uid: String,
}

impl EndpointComputed {
    /// Whether nothing is set (the endpoint needs no entry).
    pub fn is_empty(&self) -> bool {
        *self == EndpointComputed::default()
    }

    /// Applies one kind's update.
    pub fn apply(&mut self, update: &ComputedUpdate) {
        match update {
            ComputedUpdate::IstioAmbient(b) => self.istio_ambient = *b,
            ComputedUpdate::LiveMigration { role, uid } => {
                self.live_migration_role = *role;
                self.live_migration_uid = if *role == LiveMigrationRole::NoRole {
                    String::new()
                } else {
                    uid.clone()
                };
            }
        }
    }

    /// Writes the computed fields into an outgoing endpoint.
    pub fn apply_to(&self, wep: &mut pb::WorkloadEndpoint) {
        wep.is_istio_ambient = self.istio_ambient;
        wep.live_migration_role = self.live_migration_role.to_proto() as i32;
        wep.live_migration_uid = self.live_migration_uid.clone();
    }
}

/// A new value for one kind of computed data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComputedUpdate {
    /// Whether the endpoint is in Istio ambient mode.
    IstioAmbient(bool),
    /// The endpoint's live-migration role.
    LiveMigration {
        /// The role.
        role: LiveMigrationRole,
        /// UID of the `LiveMigration` that gave it.
        uid: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neutral_values_leave_the_entry_empty() {
        let mut c = EndpointComputed::default();
        c.apply(&ComputedUpdate::IstioAmbient(true));
        c.apply(&ComputedUpdate::LiveMigration {
            role: LiveMigrationRole::Target,
            uid: "u1".into(),
        });
        assert!(!c.is_empty());
        let mut wep = pb::WorkloadEndpoint::default();
        c.apply_to(&mut wep);
        assert!(wep.is_istio_ambient);
        assert_eq!(
            wep.live_migration_role,
            pb::LiveMigrationRole::Target as i32
        );
        assert_eq!(wep.live_migration_uid, "u1");
        c.apply(&ComputedUpdate::IstioAmbient(false));
        c.apply(&ComputedUpdate::LiveMigration {
            role: LiveMigrationRole::NoRole,
            uid: "stale".into(),
        });
        assert!(c.is_empty());
    }
}
