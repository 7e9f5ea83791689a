//! Calico v3 resources: serde types, validation, conversion to [`crate::model`].
