//! Tenant overrides: limits that an operator puts for one exact descriptor through the admin
//! API, kept as data in the store, not in the config tree. The tree stays the policy; an
//! override is its exception for one descriptor (its entries with their exact values): it
//! replaces the limits of the rule that descriptor falls under (all of them, or one by name).
//! `doc` is an override as the API and the store hold it (JSON) and its compilation into
//! limits, with errors that name the field; `index` is what the request path looks them up in;
//! `file` reads a file of them for the tools that run without a store.

mod doc;
mod file;
mod id;
mod index;

pub use doc::{check_descriptor, configured_rule, EntryDoc, OverrideDoc, OverrideError};
pub use file::{index_of, read_file};
pub use id::{
    descriptor_id, descriptor_id_of, domain_of_record, name_of_record, record_id, record_prefix,
};
pub use index::{DescriptorOverrides, OverrideIndex, OverrideLimit};
